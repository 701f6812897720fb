"""The ``workload:`` section of a scenario: YAML mapping in, Workload out.

Exactly one source, then optional shaping applied in this order: ``max_requests`` (keep
the first N), ``rate_per_s`` (rescale the arrival times of what is left),
``max_duration_s`` (keep the requests arriving within that many seconds of the first),
``shared_prefix`` (a prefix every prompt of a group starts with: workloads/shared_prefix.py)
and ``max_concurrency`` (a closed-loop client, as ``vllm bench serve --max-concurrency``: at
most that many requests in flight, each sent at its arrival or when a slot frees)::

    workload: {trace: default}
    workload: {trace: traces/azure_conv.csv, format: azure, rate_per_s: 5, max_requests: 1000}
    workload:
      synthetic:
        num_requests: 500
        arrival: {process: gamma, rate_per_s: 4, cv: 2.0}
        prompt: {dist: lognormal, mean_tokens: 600, median_tokens: 400, max_tokens: 1800}
        output: {dist: empirical, trace: default}
    workload:
      tokens: {kind: code_edit, num_requests: 50, arrival: {process: poisson, rate_per_s: 1}}

Length keys are the fields of the classes in :mod:`workloads.lengths`; ``empirical``
takes ``trace`` (and optionally ``format`` and ``column``) or an inline ``values`` list.
Token kinds take the fields of the classes in :mod:`workloads.token_streams`.  Relative
paths resolve against ``base_dir``; ``default`` names the shipped default trace.  Errors
name ``source`` and the field's path from ``workload.``.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number, as_str, check_keys, require_mapping
from workloads.arrivals import ARRIVAL_PROCESSES
from workloads.lengths import LENGTH_DISTRIBUTIONS, EmpiricalLength, check_count
from workloads.shared_prefix import shared_prefix_arrays
from workloads.token_streams import TOKEN_WORKLOADS, token_workload
from workloads.traces import DEFAULT_TRACE_PATH, TRACE_READERS, read_trace
from workloads.workload import MAX_REQUESTS, MAX_TOKENS_PER_REQUEST, Workload

SOURCES = ("trace", "synthetic", "tokens")
SHAPING = ("rate_per_s", "max_requests", "max_duration_s", "shared_prefix", "max_concurrency")
TRACE_FORMATS = ("auto",) + tuple(TRACE_READERS)
EMPIRICAL_KEYS = ("dist", "trace", "format", "column", "values", "max_tokens")
EMPIRICAL_COLUMNS = ("prompt_tokens", "output_tokens")


def synthetic_workload(num_requests: int, arrivals, prompt, output,
                       rng: np.random.Generator, name: str = "synthetic") -> Workload:
    """Draw arrivals, then prompt lengths, then output lengths, in that order, from ``rng``."""
    n = check_count(num_requests, "num_requests", maximum=MAX_REQUESTS)
    return Workload(name=name, arrival_s=arrivals.sample(n, rng),
                    prompt_tokens=prompt.sample(n, rng), output_tokens=output.sample(n, rng))


def _construct(cls: type, kwargs: dict[str, Any], *, source: str, prefix: str):
    """Call ``cls(**kwargs)``, re-raising its validation error with the YAML field path."""
    try:
        return cls(**kwargs)
    except SpecsimError as exc:
        raise exc.relocated(source=source, prefix=prefix) from None


def _fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def resolve_trace_path(value: Any, *, base_dir: Path, source: str, field: str) -> Path:
    """Return the shipped trace for ``default``, else ``value`` resolved against ``base_dir``."""
    text = as_str(value, source=source, field=field)
    if text == "default":
        return DEFAULT_TRACE_PATH
    path = Path(text).expanduser()
    return path if path.is_absolute() else base_dir / path


def _choice(data: Mapping[str, Any], key: str, choices, *, source: str, prefix: str) -> str:
    if key not in data:
        raise SpecsimError("missing required key", source=source, field=prefix + key,
                           fix=f"add '{key}:' with one of: " + ", ".join(choices))
    return as_str(data[key], source=source, field=prefix + key, choices=choices)


def _length(data: Any, *, which: str, base_dir: Path, source: str, prefix: str):
    data = require_mapping(data, source=source, field=prefix.rstrip("."))
    dist = _choice(data, "dist", LENGTH_DISTRIBUTIONS, source=source, prefix=prefix)
    cls = LENGTH_DISTRIBUTIONS[dist]
    if cls is not EmpiricalLength:
        check_keys(data, allowed=["dist"] + _fields(cls), source=source, prefix=prefix)
        kwargs = {k: v for k, v in data.items() if k != "dist"}
        return _construct(cls, kwargs, source=source, prefix=prefix)
    check_keys(data, allowed=EMPIRICAL_KEYS, source=source, prefix=prefix)
    if ("trace" in data) == ("values" in data):
        raise SpecsimError("give exactly one of 'trace' or 'values'", source=source,
                           field=prefix + "dist", fix="trace: default, or values: [120, 300]")
    if "values" in data:
        if "format" in data or "column" in data:
            raise SpecsimError("'format' and 'column' only go with 'trace'", source=source,
                               field=prefix + ("format" if "format" in data else "column"))
        values = data["values"]
        if not isinstance(values, list):
            raise SpecsimError("expected a list of token counts", source=source,
                               field=prefix + "values")
        values = [as_number(v, source=source, field=f"{prefix}values[{i}]", minimum=1,
                            maximum=MAX_TOKENS_PER_REQUEST, integer=True)
                  for i, v in enumerate(values)]
    else:
        path = resolve_trace_path(data["trace"], base_dir=base_dir, source=source,
                                  field=prefix + "trace")
        fmt = as_str(data.get("format", "auto"), source=source, field=prefix + "format",
                     choices=TRACE_FORMATS)
        column = as_str(data.get("column", which), source=source, field=prefix + "column",
                        choices=EMPIRICAL_COLUMNS)
        values = getattr(_read_trace_once(path, fmt), column).copy()
    kwargs = {"values": np.asarray(values), "max_tokens": data.get("max_tokens")}
    return _construct(EmpiricalLength, kwargs, source=source, prefix=prefix)


_TRACE_MEMO: dict[tuple, Any] = {}


def _read_trace_once(path: Path, fmt: str):
    """``read_trace``, read once when a workload takes its prompt and its output lengths
    from the same unchanged file (kept for the last file read)."""
    try:
        stat = path.stat()
    except OSError:  # read_trace says what is wrong with the path
        return read_trace(path, fmt)
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, fmt)
    if key not in _TRACE_MEMO:
        _TRACE_MEMO.clear()
        _TRACE_MEMO[key] = read_trace(path, fmt)
    return _TRACE_MEMO[key]


def _arrivals(data: Any, *, source: str, prefix: str):
    data = require_mapping(data, source=source, field=prefix.rstrip("."))
    process = _choice(data, "process", ARRIVAL_PROCESSES, source=source, prefix=prefix)
    cls = ARRIVAL_PROCESSES[process]
    check_keys(data, allowed=["process"] + _fields(cls), source=source, prefix=prefix)
    kwargs = {k: v for k, v in data.items() if k != "process"}
    return _construct(cls, kwargs, source=source, prefix=prefix)


def _num_requests(data: Mapping[str, Any], *, source: str, prefix: str) -> int:
    return as_number(data["num_requests"], source=source, field=prefix + "num_requests",
                     minimum=1, maximum=MAX_REQUESTS, integer=True,
                     fix=f"give 1 to {MAX_REQUESTS:,} requests (docs/limits.md)")


def _synthetic(data: Any, *, rng, base_dir: Path, source: str) -> Workload:
    prefix = "workload.synthetic."
    data = require_mapping(data, source=source, field="workload.synthetic")
    keys = ("num_requests", "arrival", "prompt", "output")
    check_keys(data, allowed=keys, required=keys, source=source, prefix=prefix)
    arrivals = _arrivals(data["arrival"], source=source, prefix=prefix + "arrival.")
    prompt = _length(data["prompt"], which="prompt_tokens", base_dir=base_dir, source=source,
                     prefix=prefix + "prompt.")
    output = _length(data["output"], which="output_tokens", base_dir=base_dir, source=source,
                     prefix=prefix + "output.")
    n = _num_requests(data, source=source, prefix=prefix)
    try:
        return synthetic_workload(n, arrivals, prompt, output, rng)
    except SpecsimError as exc:  # e.g. arrival times past MAX_ARRIVAL_S: name the block
        raise exc.relocated(source=source, prefix=prefix) from None


def _tokens(data: Any, *, rng, base_dir: Path, source: str) -> Workload:
    prefix = "workload.tokens."
    data = require_mapping(data, source=source, field="workload.tokens")
    kind = _choice(data, "kind", TOKEN_WORKLOADS, source=source, prefix=prefix)
    cls = TOKEN_WORKLOADS[kind]
    check_keys(data, allowed=["kind", "num_requests", "arrival"] + _fields(cls),
               required=("kind", "num_requests", "arrival"), source=source, prefix=prefix)
    arrivals = _arrivals(data["arrival"], source=source, prefix=prefix + "arrival.")
    kwargs = {}
    for key, value in data.items():
        if key in ("kind", "num_requests", "arrival"):
            continue
        if key in cls.length_fields:
            value = _length(value, which="prompt_tokens" if key != "output" else "output_tokens",
                            base_dir=base_dir, source=source, prefix=f"{prefix}{key}.")
        kwargs[key] = value
    spec = _construct(cls, kwargs, source=source, prefix=prefix)
    n = _num_requests(data, source=source, prefix=prefix)
    try:
        return token_workload(spec, n, arrivals, rng)
    except SpecsimError as exc:  # the token budget: name the field from workload.
        raise exc.relocated(source=source, prefix=prefix) from None


def workload_from_config(cfg: Mapping, *, rng: np.random.Generator, base_dir: Path,
                         source: str = "workload") -> Workload:
    """Build the Workload described by a ``workload:`` mapping (see the module docstring)."""
    base_dir = Path(base_dir)
    data = require_mapping(cfg, source=source, field="workload")
    check_keys(data, allowed=SOURCES + ("format",) + SHAPING, source=source, prefix="workload.")
    given = [key for key in SOURCES if key in data]
    if len(given) != 1:
        raise SpecsimError(f"give exactly one workload source, got {len(given)}"
                           + (f" ({', '.join(given)})" if given else ""), source=source,
                           field="workload", fix="use one of: " + ", ".join(SOURCES))
    if "format" in data and given[0] != "trace":
        raise SpecsimError("'format' only applies to a trace", source=source,
                           field="workload.format", fix="remove it")
    if given[0] == "trace":
        path = resolve_trace_path(data["trace"], base_dir=base_dir, source=source,
                                  field="workload.trace")
        fmt = as_str(data.get("format", "auto"), source=source, field="workload.format",
                     choices=TRACE_FORMATS)
        workload = read_trace(path, fmt)
        if data["trace"] == "default":
            workload = dataclasses.replace(workload, name="default")
    elif given[0] == "synthetic":
        workload = _synthetic(data["synthetic"], rng=rng, base_dir=base_dir, source=source)
    else:
        workload = _tokens(data["tokens"], rng=rng, base_dir=base_dir, source=source)
    return _shape(workload, data, source)


def _shape(workload: Workload, data: Mapping[str, Any], source: str) -> Workload:
    """The shaping keys, in the module docstring's order."""
    if "max_requests" in data:
        workload = workload.truncate(max_requests=as_number(
            data["max_requests"], source=source, field="workload.max_requests", minimum=1,
            integer=True))
    if "rate_per_s" in data:
        rate = as_number(data["rate_per_s"], source=source, field="workload.rate_per_s",
                         strictly_positive=True)
        try:
            workload = workload.rescale_rate(rate)
        except SpecsimError as exc:
            raise exc.relocated(source=source, field="workload.rate_per_s") from None
    if "max_duration_s" in data:
        workload = workload.truncate(max_duration_s=as_number(
            data["max_duration_s"], source=source, field="workload.max_duration_s",
            strictly_positive=True))
    if "shared_prefix" in data:
        group, shared = shared_prefix_arrays(data["shared_prefix"], workload.prompt_tokens,
                                             source=source)
        try:
            workload = dataclasses.replace(workload, prefix_group=group,
                                           shared_prefix_tokens=shared)
        except SpecsimError as exc:
            raise exc.relocated(source=source, field="workload.shared_prefix") from None
    if "max_concurrency" in data:
        cap = as_number(data["max_concurrency"], source=source,
                        field="workload.max_concurrency", minimum=1, maximum=MAX_REQUESTS,
                        integer=True)
        workload = dataclasses.replace(workload, max_concurrency=int(cap))
    return workload
