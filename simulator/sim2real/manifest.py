"""Runs described by a small YAML manifest (``*.run.yaml``), for measurements that do not carry
their deployment: a ``vllm bench serve --save-result`` file (detailed or not), or a published
aggregate (a blog's or a paper's table).  Keys::

    kind: vllm_bench_serve          # or: published
    result: result.json             # vllm_bench_serve: the --save-result file, beside this one
    model: meta-llama/Llama-2-7b-hf # a catalog name or a catalogued Hugging Face id
    hardware: h100-sxm              # a profile name (default: validate-serving --profile)
    tensor_parallel: 1
    engine: vLLM 0.11.0             # engine and version, as measured
    batching: {max_num_seqs: 256, max_num_batched_tokens: 8192}   # vLLM's knobs (defaults: vLLM's)
    shared_prefix: {tokens: 0}      # optional, as in a scenario's workload
    load: {num_prompts: 500, input_len: 1024, output_len: 128, request_rate: 4}  # published
    measured: {mean_ttft_ms: 41.2, mean_tpot_ms: 7.9, output_throughput: 980}    # published
    source: "where it was measured (URL)"
    measured_at: client             # or: server (default client: a load generator measured it)

A bench file's requests are read as ``compare-measured`` reads them (bench_result.py: its
``start_times`` or its rate, its ``max_concurrency``); a detailed file gives per-request TTFT
and ITL (E2E = TTFT + the sum of its ITLs), a default one is compared on the aggregates it
holds, labelled as such.  A published aggregate's requests arrive as ``vllm bench serve``
sends them (Poisson at ``load.request_rate``, from ``seed``).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from simulator.inputs import json_text
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number, as_str, check_keys, load_yaml_file, \
    require_mapping
from simulator.sim2real.measured_run import VLLM_BATCHING, MeasuredRun
from workloads.shared_prefix import shared_prefix_arrays
from simulator.sim2real.bench_result import result_requests
from workloads.workload import MAX_REQUESTS, Workload

SUFFIX = ".run.yaml"
KINDS = ("vllm_bench_serve", "published")
KEYS = ("kind", "result", "model", "hardware", "tensor_parallel", "engine", "batching",
        "shared_prefix", "load", "measured", "source", "seed", "measured_at")
LOAD_KEYS = ("num_prompts", "input_len", "output_len", "request_rate")
BATCHING_KEYS = ("max_num_seqs", "max_num_batched_tokens", "block_size",
                 "gpu_memory_utilization", "enable_chunked_prefill", "enable_prefix_caching")
# vllm bench serve's aggregate keys -> latency_metrics' names
AGGREGATES = {f"{v}_{m}_ms": f"{m2}_{s}_ms" for m, m2 in (("ttft", "ttft"), ("tpot", "tpot"),
                                                         ("itl", "itl"), ("e2el", "e2e"))
              for v, s in (("mean", "mean"), ("median", "p50"), ("p90", "p90"),
                           ("p99", "p99"))}
AGGREGATES["output_throughput"] = "output_throughput"
MAX_RESULT_BYTES = 512 * 2 ** 20


def _aggregates(data: Mapping, src: str) -> dict[str, float]:
    out = {}
    for key, name in AGGREGATES.items():
        if key in data:
            out[name] = float(as_number(data[key], source=src, field=key, minimum=0))
    return out


def _read_json(path: Path) -> dict:
    if not path.is_file() or path.stat().st_size > MAX_RESULT_BYTES:
        raise SpecsimError(f"{str(path)!r} is not a file of at most 512 MiB", field="result")
    try:
        data = json_text.loads(path.read_text(encoding="utf-8"), source=str(path),
                               field="result")
    except SpecsimError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise SpecsimError(f"{str(path)!r} is not JSON ({type(exc).__name__})",
                           field="result", fix="give the vllm bench serve result") from None
    return require_mapping(data, source=str(path))


def _arrivals(n: int, rate: float, seed: int) -> np.ndarray:
    """Poisson arrivals at ``rate`` (all at once at ``inf``), as vllm bench serve sends."""
    from workloads.arrivals import GammaArrivals
    if math.isinf(rate):
        return np.zeros(n)
    return GammaArrivals(rate, 1.0).sample(n, np.random.default_rng(seed))


def _bench_requests(data: dict, src: str, seed: int):
    """(workload, ttft_s, e2e_s, itl_s) of a bench file; the per-request latencies are None
    unless the file is detailed (per-request ``ttfts`` and ``itls``)."""
    try:
        wl, kept = result_requests(data, np.random.default_rng(seed))
    except SpecsimError as exc:
        raise exc.relocated(source=src) from None
    ttfts, itls = data.get("ttfts"), data.get("itls")
    n = len(data["input_lens"])
    if not (isinstance(ttfts, list) and isinstance(itls, list) and len(ttfts) == n
            and len(itls) == n):
        return wl, None, None, None
    try:
        gaps = [np.asarray(itls[i], np.float64) for i in kept.tolist()]
        ttft = np.asarray(ttfts, np.float64)[kept]
    except (TypeError, ValueError):
        raise SpecsimError("ttfts and itls must hold numbers", source=src,
                           field="ttfts") from None
    e2e = ttft + np.array([g.sum() for g in gaps])
    return wl, ttft, e2e, np.concatenate(gaps) if gaps else np.zeros(0)


def _batching(value: Any, src: str) -> dict:
    data = require_mapping(value or {}, source=src, field="batching")
    check_keys(data, allowed=BATCHING_KEYS, source=src, prefix="batching.")
    return {**VLLM_BATCHING, **data}


def _published(m: Mapping, src: str, seed: int):
    load = require_mapping(m.get("load"), source=src, field="load")
    check_keys(load, allowed=LOAD_KEYS, required=LOAD_KEYS, source=src, prefix="load.")
    n = int(as_number(load["num_prompts"], source=src, field="load.num_prompts", minimum=1,
                      maximum=MAX_REQUESTS, integer=True))
    lens = [int(as_number(load[k], source=src, field=f"load.{k}", minimum=1,
                          maximum=10_000_000, integer=True)) for k in ("input_len", "output_len")]
    rate = load["request_rate"]
    rate = math.inf if rate == "inf" else float(as_number(rate, source=src,
                                                          field="load.request_rate",
                                                          strictly_positive=True))
    measured = _aggregates(require_mapping(m.get("measured"), source=src, field="measured"),
                           src)
    if not measured:
        raise SpecsimError("no metric given", source=src, field="measured",
                           fix="give vllm bench serve's keys: " + ", ".join(AGGREGATES))
    wl = Workload(name="published", arrival_s=_arrivals(n, rate, seed),
                  prompt_tokens=np.full(n, lens[0]), output_tokens=np.full(n, lens[1]))
    return (wl, None, None, None), measured


def read_manifest(path: str | Path) -> MeasuredRun:
    """The run a ``*.run.yaml`` manifest describes (see the module docstring); the
    manifest's own fields are checked before its result file is read."""
    path = Path(path)
    src = str(path)
    m = require_mapping(load_yaml_file(path), source=src)
    check_keys(m, allowed=KEYS, required=("kind", "model", "tensor_parallel", "engine"),
               source=src)
    kind = as_str(m["kind"], source=src, field="kind", choices=KINDS)
    seed = int(as_number(m.get("seed", 0), source=src, field="seed", minimum=0, integer=True))
    fields = dict(
        model=as_str(m["model"], source=src, field="model"),
        hardware=as_str(m["hardware"], source=src, field="hardware") if "hardware" in m
        else None,
        tensor_parallel=int(as_number(m["tensor_parallel"], source=src,
                                      field="tensor_parallel", minimum=1, integer=True)),
        batching=_batching(m.get("batching"), src),
        engine=as_str(m["engine"], source=src, field="engine"),
        source=as_str(m.get("source", src), source=src, field="source"),
        measured_at=as_str(m.get("measured_at", "client"), source=src, field="measured_at",
                           choices=("client", "server")))
    if kind == "published":
        requests, aggregates = _published(m, src, seed)
    else:
        result = path.parent / as_str(m.get("result"), source=src, field="result")
        data = _read_json(result)
        requests = _bench_requests(data, str(result), seed)
        aggregates = _aggregates(data, str(result)) if requests[1] is None else None
    wl, ttft, e2e, itl = requests
    wl = dataclasses.replace(wl, name=path.name[:-len(SUFFIX)])
    if "shared_prefix" in m:
        group, shared = shared_prefix_arrays(m["shared_prefix"], wl.prompt_tokens,
                                             source=src, field="shared_prefix")
        wl = dataclasses.replace(wl, prefix_group=group, shared_prefix_tokens=shared)
    note = "compared on the published aggregates" if kind == "published" else \
        "compared on the file's aggregates (not --save-detailed)" if aggregates else \
        "per request (--save-detailed)"
    return MeasuredRun(name=wl.name, workload=wl, ttft_s=ttft, e2e_s=e2e, itl_s=itl,
                       aggregates=aggregates, notes=(note,), **fields)
