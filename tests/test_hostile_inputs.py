"""Hostile inputs: every bad input is one clear line on stderr, exit code 2, nothing written.

Each :class:`Case` runs ``python -m simulator.cli ARGV`` in a fresh temporary folder (its
``files`` written there first), with stdin closed, a wall-clock timeout and an
address-space limit (``RLIMIT_AS``), and must:

- exit with status 2, within the timeout and the memory limit;
- write exactly one non-empty line to stderr, starting ``specsim: error:``, containing the
  case's ``expect`` text (the field or flag it names), no longer than MAX_LINE characters;
- print no traceback on either stream;
- leave the folder as it found it (names, sizes and mtimes; no new files).

The table is data: append a ``Case`` to ``CASES`` to add one.  The cases run in parallel
(one subprocess per core) the first time a test of this module needs a result.

Summary for a closing note (counts of cases, clean errors, tracebacks, hangs, files
changed)::

    python tests/test_hostile_inputs.py
"""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
GIB = 2**30
DEFAULT_MEMORY_GIB = 2      # numpy, pandas and simpy import well within this
TORCH_MEMORY_GIB = 4        # importing torch maps more (calibrate, validate)
DEFAULT_TIMEOUT_S = 60
MAX_LINE = 2000             # an error line longer than this echoes too much


@dataclass(frozen=True)
class Case:
    """One hostile command line: ``files`` (name -> text or bytes; a name ending in / is a
    folder) are written into an empty folder that is the command's working directory."""

    id: str
    argv: tuple[str, ...]
    expect: str                          # text the error line must contain (field or flag)
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    memory_gib: float = DEFAULT_MEMORY_GIB
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass
class Outcome:
    """What one case did."""

    case: Case
    returncode: int | None
    stdout: str
    stderr: str
    changed: list[str]
    hung: bool

    @property
    def lines(self) -> list[str]:
        return self.stderr.splitlines()

    @property
    def traceback(self) -> bool:
        return "Traceback" in self.stderr or "Traceback" in self.stdout

    def problems(self) -> list[str]:
        """Why this outcome is not a clean error (empty when it is)."""
        out = []
        if self.hung:
            out.append(f"no answer within {self.case.timeout_s:g} s")
        elif self.returncode != 2:
            out.append(f"exit code {self.returncode}, expected 2")
        if self.traceback:
            out.append("a traceback")
        if len(self.lines) != 1 or not self.lines[0].strip():
            out.append(f"{len(self.lines)} stderr lines, expected 1")
        elif not self.lines[0].startswith("specsim: error: "):
            out.append("the stderr line does not start with 'specsim: error: '")
        elif len(self.lines[0]) > MAX_LINE:
            out.append(f"the stderr line has {len(self.lines[0])} characters (> {MAX_LINE})")
        if self.lines and self.case.expect.lower() not in self.stderr.lower():
            out.append(f"stderr does not mention {self.case.expect!r}")
        if self.changed:
            out.append("files changed: " + ", ".join(self.changed[:5]))
        return out


# ---------------------------------------------------------------- valid bases to break

def _read(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


PROFILE = _read(REPO / "hardware" / "profiles" / "a100-40gb.yaml")
MODEL = _read(REPO / "simulator" / "models" / "opt-125m.yaml")
SCENARIO = {"name": "hostile", "seed": 0, "hardware": "a100-40gb", "target": "opt-13b",
            "draft": "opt-125m", "parallelism": {"tensor_parallel": 1},
            "policy": {"name": "chain", "num_speculative_tokens": 4},
            "acceptance": {"model": "iid", "alpha": 0.8},
            "batching": {"max_num_seqs": 16, "max_num_batched_tokens": 2048,
                         "enable_chunked_prefill": True, "block_size": 16,
                         "gpu_memory_utilization": 0.9},
            "workload": {"trace": "default", "max_requests": 10},
            "slo": {"ttft_ms": 1000, "tpot_ms": 60}, "replicas": 1, "router": "round_robin",
            "overheads": True}
SYNTHETIC = {"num_requests": 10, "arrival": {"process": "poisson", "rate_per_s": 2},
             "prompt": {"dist": "fixed", "tokens": 100},
             "output": {"dist": "fixed", "tokens": 20}}
PLAN = {"name": "hostile", "scenario": "default", "fixed": {"workload.max_requests": 10},
        "slo": {"p99_ttft_ms": 1000, "p99_tpot_ms": 40},
        "search": {"min_rate_per_s": 0.5, "max_rate_per_s": 8, "rel_tol": 0.2},
        "candidates": [{"name": "a100", "hardware": "a100-40gb", "policy": "none"}]}
ANALYTIC = {"name": "hostile", "mode": "analytic",
            "fixed": {"hardware": "a100-40gb", "target": "opt-13b", "draft": "opt-125m"},
            "grid": {"batch": [1, 2], "gamma": [1, 2]}}


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml: 10 MB values in ms


def _dump(data) -> str:
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=False, width=10**9)


def _with(base: dict, path: str, value, *, delete: bool = False) -> dict:
    """A deep copy of ``base`` with the dotted ``path`` set to ``value`` (or removed)."""
    import copy
    data = copy.deepcopy(base)
    keys = path.split(".")
    node = data
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    if delete:
        node.pop(keys[-1], None)
    else:
        node[keys[-1]] = value
    return data


def scenario(path: str | None = None, value=None, *, delete: bool = False) -> str:
    """The base scenario as YAML, with one field changed."""
    return _dump(SCENARIO if path is None else _with(SCENARIO, path, value, delete=delete))


def synthetic(path: str, value) -> str:
    """The base scenario on a synthetic workload with one of its fields changed."""
    return scenario("workload", {"synthetic": _with(SYNTHETIC, path, value)})


def profile(path: str, value, *, delete: bool = False) -> str:
    return _dump(_with(PROFILE, path, value, delete=delete))


def model(path: str, value) -> str:
    return _dump(_with(MODEL, path, value))


def plan(path: str, value) -> str:
    return _dump(_with(PLAN, path, value))


def analytic(path: str, value) -> str:
    return _dump(_with(ANALYTIC, path, value))


def billion_laughs(key: str = "lol") -> str:
    rows = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, cur in zip("abcdefgh", "bcdefghi"):
        rows.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]")
    rows.append(f"{key}: [" + ", ".join(["*i"] * 10) + "]")
    return "\n".join(rows) + "\n"


DEEP_LISTS = "seed: " + "[" * 10_000 + "]" * 10_000 + "\n"
DEEP_MAPS = "seed: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n"
DEEP_BLOCK = "".join("  " * i + "a:\n" for i in range(200)) + "  " * 200 + "1\n"
TEN_MB = "x" * 10_000_000
SCRIPT = "<script>alert('x')</script>"
TRACE_HEADER = "arrival_s,prompt_tokens,output_tokens\n"


def trace_scenario(text: str) -> dict[str, str]:
    return {"s.yaml": scenario("workload", {"trace": "t.csv"}), "t.csv": text}


def run(*args: str) -> tuple[str, ...]:
    return ("run", *args, "--no-progress")


EST = ("estimate",)
GMAP = ("gamma-map", "--batch", "1,2", "--context", "128", "--gamma", "0-2")

CASES: list[Case] = [
    # ---- YAML itself (through run's scenario file) ----
    Case("yaml-malformed", run("s.yaml"), "malformed YAML", {"s.yaml": "name: [unclosed\n"}),
    Case("yaml-bad-indent", run("s.yaml"), "line 3", {"s.yaml": "a:\n  - 1\n b: 2\n"}),
    Case("yaml-tab-indent", run("s.yaml"), "tab",
         {"s.yaml": "name: x\nbatching:\n\tmax_num_seqs: 4\n"}),
    Case("yaml-tab-after-value", run("s.yaml"), "tab", {"s.yaml": "seed: 1\n\tname: x\n"}),
    Case("yaml-empty-file", run("s.yaml"), "empty", {"s.yaml": ""}),
    Case("yaml-comments-only", run("s.yaml"), "empty", {"s.yaml": "# nothing here\n"}),
    Case("yaml-top-list", run("s.yaml"), "list", {"s.yaml": "- seed\n- 1\n"}),
    Case("yaml-top-scalar", run("s.yaml"), "mapping", {"s.yaml": "hello\n"}),
    Case("yaml-top-number", run("s.yaml"), "mapping", {"s.yaml": "42\n"}),
    Case("yaml-duplicate-top-key", run("s.yaml"), "duplicate key 'seed'",
         {"s.yaml": "seed: 1\nname: x\nseed: 2\n"}),
    Case("yaml-duplicate-nested-key", run("s.yaml"), "duplicate key 'block_size'",
         {"s.yaml": "batching:\n  block_size: 16\n  max_num_seqs: 4\n  block_size: 32\n"}),
    Case("yaml-duplicate-deep-key", run("s.yaml"), "line 4",
         {"s.yaml": "workload:\n  synthetic:\n    num_requests: 5\n    num_requests: 6\n"}),
    Case("yaml-billion-laughs", run("s.yaml"), "1,000,000", {"s.yaml": billion_laughs()}),
    Case("yaml-alias-flood", run("s.yaml"), "alias",
         {"s.yaml": "a: &a 1\nb: [" + "*a, " * 20_000 + "*a]\n"}),
    Case("yaml-recursive-alias", run("s.yaml"), "recursive",
         {"s.yaml": "policy: &p {name: chain, again: *p}\n"}),
    Case("yaml-undefined-alias", run("s.yaml"), "alias", {"s.yaml": "seed: *nowhere\n"}),
    Case("yaml-deep-lists", run("s.yaml"), "nest", {"s.yaml": DEEP_LISTS}),
    Case("yaml-deep-mappings", run("s.yaml"), "nested deeper", {"s.yaml": DEEP_MAPS}),
    Case("yaml-deep-block", run("s.yaml"), "nested deeper", {"s.yaml": DEEP_BLOCK}),
    Case("yaml-python-tag", run("s.yaml"), "constructor",
         {"s.yaml": "seed: !!python/object/apply:os.system ['touch pwned']\n"}),
    Case("yaml-huge-integer", run("s.yaml"), "digits",
         {"s.yaml": "seed: " + "9" * 5000 + "\n"}),
    Case("yaml-bad-date", run("s.yaml"), "month", {"s.yaml": "seed: 2023-13-45\n"}),
    Case("yaml-nul-byte", run("s.yaml"), "malformed YAML", {"s.yaml": "name: a\x00b\n"}),
    Case("yaml-not-utf8", run("s.yaml"), "UTF-8", {"s.yaml": b"name: caf\xe9\xff\n"}),
    Case("yaml-two-documents", run("s.yaml"), "single document",
         {"s.yaml": "seed: 1\n---\nseed: 2\n"}),
    Case("yaml-17-mib-file", run("s.yaml"), "16 MiB",
         {"s.yaml": "# " + "x" * (17 * 2**20) + "\n"}),
    Case("yaml-10mb-value", run("s.yaml"), "hardware",
         {"s.yaml": scenario("hardware", TEN_MB)}),
    Case("yaml-10mb-key", run("s.yaml"), "unknown key",
         {"s.yaml": "? " + TEN_MB + "\n: 1\n"}),
    Case("yaml-missing-file", run("nothere.yaml"), "file not found"),
    Case("yaml-directory", run("d"), "not a regular file", {"d/": ""}),
    Case("yaml-dev-zero", run("/dev/zero"), "not a regular file"),
    Case("yaml-non-string-key", run("s.yaml"), "not a string", {"s.yaml": "1: a\nseed: 0\n"}),
    # ---- scenario: top-level keys ----
    Case("scenario-unknown-key", run("s.yaml"), "colour", {"s.yaml": scenario("colour", "red")}),
    Case("scenario-seed-negative", run("s.yaml"), "seed", {"s.yaml": scenario("seed", -1)}),
    Case("scenario-seed-nan", run("s.yaml"), "seed", {"s.yaml": "seed: .nan\n"}),
    Case("scenario-seed-string", run("s.yaml"), "seed", {"s.yaml": scenario("seed", "abc")}),
    Case("scenario-seed-huge", run("s.yaml"), "seed", {"s.yaml": "seed: 1.0e+300\n"}),
    Case("scenario-name-list", run("s.yaml"), "name", {"s.yaml": scenario("name", [1, 2])}),
    Case("scenario-replicas-zero", run("s.yaml"), "replicas",
         {"s.yaml": scenario("replicas", 0)}),
    Case("scenario-replicas-huge", run("s.yaml"), "replicas",
         {"s.yaml": scenario("replicas", 10**9)}),
    Case("scenario-router-unknown", run("s.yaml"), "router",
         {"s.yaml": scenario("router", "random")}),
    Case("scenario-overheads-string", run("s.yaml"), "overheads",
         {"s.yaml": scenario("overheads", "yes please")}),
    Case("scenario-hardware-unknown", run("s.yaml"), "unknown hardware",
         {"s.yaml": scenario("hardware", "warp-core-9000")}),
    Case("scenario-hardware-script", run("s.yaml"), "hardware",
         {"s.yaml": scenario("hardware", SCRIPT)}),
    Case("scenario-hardware-inf", run("s.yaml"), "hardware",
         {"s.yaml": "hardware: .inf\n"}),
    Case("scenario-target-unknown", run("s.yaml"), "unknown model",
         {"s.yaml": scenario("target", "gpt-17")}),
    Case("scenario-target-html", run("s.yaml"), "model",
         {"s.yaml": scenario("target", "<img src=x onerror=alert(1)>\nsecond line")}),
    Case("scenario-draft-unknown", run("s.yaml"), "unknown model",
         {"s.yaml": scenario("draft", "opt-0b")}),
    Case("scenario-hardware-dir-missing", run("s.yaml"), "not a directory",
         {"s.yaml": scenario("hardware_dir", "nowhere")}),
    # ---- hardware (inline, files, --hardware-dir) ----
    Case("hardware-inline-nan", run("s.yaml"), "memory_gib",
         {"s.yaml": scenario("hardware", _with(PROFILE, "memory_gib.value", float("nan")))}),
    Case("hardware-inline-missing-key", run("s.yaml"), "defaults",
         {"s.yaml": scenario("hardware", _with(PROFILE, "defaults", None, delete=True))}),
    Case("hardware-inline-negative-peak", run("s.yaml"), "peak_tflops.fp16",
         {"s.yaml": scenario("hardware", _with(PROFILE, "peak_tflops.fp16.value", -1))}),
    Case("hardware-file-dup-key", ("hardware", "show", "hw/a100-40gb.yaml"), "duplicate key",
         {"hw/a100-40gb.yaml": _dump(PROFILE) + "name: again\n"}),
    Case("hardware-file-huge-bandwidth", ("hardware", "show", "p.yaml"),
         "memory_bandwidth_gb_per_s", {"p.yaml": profile("memory_bandwidth_gb_per_s.value",
                                                         1e300)}),
    Case("hardware-file-efficiency-string", ("hardware", "show", "p.yaml"),
         "defaults.compute_efficiency", {"p.yaml": profile("defaults.compute_efficiency.value",
                                                           "high")}),
    Case("hardware-file-unknown-dtype", ("hardware", "show", "p.yaml"), "peak_tflops.fp4",
         {"p.yaml": profile("peak_tflops.fp4", {"value": 1, "source": "x"})}),
    Case("hardware-file-calibration-deep", ("hardware", "show", "p.yaml"), "nested deeper",
         {"p.yaml": _dump(PROFILE) + "calibration:\n  compute_efficiency_curve: "
          + "[" * 100 + "]" * 100 + "\n"}),
    Case("hardware-dir-tab", ("hardware", "show", "bad", "--hardware-dir", "hw"), "tab",
         {"hw/bad.yaml": "name: bad\ndefaults:\n\tx: 1\n"}),
    Case("hardware-dir-laughs", ("hardware", "list", "--hardware-dir", "hw"), "1,000,000",
         {"hw/bomb.yaml": billion_laughs()}),
    Case("hardware-dir-not-dir", ("hardware", "list", "--hardware-dir", "nowhere"),
         "--hardware-dir"),
    Case("hardware-show-unknown", ("hardware", "show", "nope"), "unknown hardware"),
    Case("hardware-show-no-name", ("hardware", "show"), "name"),
    Case("hardware-bad-action", ("hardware", "frobnicate"), "invalid choice"),
    # ---- models ----
    Case("models-show-unknown", ("models", "show", "gpt-17"), "unknown model"),
    Case("models-show-script", ("models", "show", SCRIPT), "unknown model"),
    Case("models-file-dup-key", ("models", "show", "m.yaml"), "duplicate key 'num_layers'",
         {"m.yaml": _dump(MODEL) + "num_layers: 13\n"}),
    Case("models-file-huge-hidden", ("models", "show", "m.yaml"), "hidden_size",
         {"m.yaml": model("hidden_size", 10**12)}),
    Case("models-file-nan-params", ("models", "show", "m.yaml"), "published_params.value",
         {"m.yaml": model("published_params.value", float("nan"))}),
    Case("models-file-unknown-key", ("models", "show", "m.yaml"), "hiden_size",
         {"m.yaml": model("hiden_size", 5)}),
    Case("estimate-target-file-empty", (*EST, "--target", "m.yaml"), "empty",
         {"m.yaml": ""}),
    # ---- parallelism ----
    Case("parallelism-tp-zero", run("s.yaml"), "parallelism.tensor_parallel",
         {"s.yaml": scenario("parallelism.tensor_parallel", 0)}),
    Case("parallelism-tp-huge", run("s.yaml"), "parallelism.tensor_parallel",
         {"s.yaml": scenario("parallelism.tensor_parallel", 10**9)}),
    Case("parallelism-offload-two", run("s.yaml"), "parallelism.offload_fraction",
         {"s.yaml": scenario("parallelism.offload_fraction", 2)}),
    Case("parallelism-list", run("s.yaml"), "parallelism",
         {"s.yaml": scenario("parallelism", [1, 2])}),
    Case("parallelism-unknown-key", run("s.yaml"), "parallelism.data_parallel",
         {"s.yaml": scenario("parallelism.data_parallel", 2)}),
    # ---- policy ----
    Case("policy-unknown", run("s.yaml"), "policy.name",
         {"s.yaml": scenario("policy", "warp-drive")}),
    Case("policy-gamma-huge", run("s.yaml"), "num_speculative_tokens",
         {"s.yaml": scenario("policy.num_speculative_tokens", 10**9)}),
    Case("policy-gamma-nan", run("s.yaml"), "num_speculative_tokens",
         {"s.yaml": scenario("policy.num_speculative_tokens", float("nan"))}),
    Case("policy-unknown-param", run("s.yaml"), "policy.bogus",
         {"s.yaml": scenario("policy.bogus", 1)}),
    Case("policy-expansion-huge", run("s.yaml"), "expansion",
         {"s.yaml": scenario("policy", {"name": "specinfer", "expansion": [10**9, 10**9]})}),
    Case("policy-number", run("s.yaml"), "policy", {"s.yaml": scenario("policy", 42)}),
    # ---- acceptance ----
    Case("acceptance-unknown-model", run("s.yaml"), "magic",
         {"s.yaml": scenario("acceptance", {"model": "magic"})}),
    Case("acceptance-alpha-above-one", run("s.yaml"), "alpha",
         {"s.yaml": scenario("acceptance.alpha", 1.5)}),
    Case("acceptance-alpha-nan", run("s.yaml"), "alpha",
         {"s.yaml": scenario("acceptance.alpha", float("nan"))}),
    Case("acceptance-unknown-key", run("s.yaml"), "extra",
         {"s.yaml": scenario("acceptance.extra", 1)}),
    # ---- batching ----
    Case("batching-seqs-zero", run("s.yaml"), "batching.max_num_seqs",
         {"s.yaml": scenario("batching.max_num_seqs", 0)}),
    Case("batching-seqs-huge", run("s.yaml"), "batching.max_num_seqs",
         {"s.yaml": scenario("batching.max_num_seqs", 10**12)}),
    Case("batching-block-string", run("s.yaml"), "batching.block_size",
         {"s.yaml": scenario("batching.block_size", "16")}),
    Case("batching-memory-above-one", run("s.yaml"), "batching.gpu_memory_utilization",
         {"s.yaml": scenario("batching.gpu_memory_utilization", 1.5)}),
    Case("batching-chunked-number", run("s.yaml"), "batching.enable_chunked_prefill",
         {"s.yaml": scenario("batching.enable_chunked_prefill", 3)}),
    # ---- workload ----
    Case("workload-trace-missing", run("s.yaml"), "file not found",
         {"s.yaml": scenario("workload", {"trace": "nothere.csv"})}),
    Case("workload-two-sources", run("s.yaml"), "exactly one",
         {"s.yaml": scenario("workload", {"trace": "default", "synthetic": SYNTHETIC})}),
    Case("workload-num-requests-1e9", run("s.yaml"), "num_requests",
         {"s.yaml": synthetic("num_requests", 1e9)}),
    Case("workload-num-requests-negative", run("s.yaml"), "num_requests",
         {"s.yaml": synthetic("num_requests", -5)}),
    Case("workload-tokens-num-requests-1e9", run("s.yaml"), "num_requests",
         {"s.yaml": scenario("workload", {"tokens": {
             "kind": "code_edit", "num_requests": 10**9,
             "arrival": {"process": "poisson", "rate_per_s": 1}}})}),
    Case("workload-tokens-code-huge", run("s.yaml"), "code",
         {"s.yaml": scenario("workload", {"tokens": {
             "kind": "code_edit", "num_requests": 1000,
             "arrival": {"process": "poisson", "rate_per_s": 1},
             "code": {"dist": "fixed", "tokens": 10**9}}})}),
    Case("workload-lognormal-mean-huge", run("s.yaml"), "mean_tokens",
         {"s.yaml": synthetic("prompt", {"dist": "lognormal", "mean_tokens": 1e300,
                                         "median_tokens": 10})}),
    Case("workload-uniform-max-huge", run("s.yaml"), "max_tokens",
         {"s.yaml": synthetic("output", {"dist": "uniform", "min_tokens": 1,
                                         "max_tokens": 10**12})}),
    Case("workload-fixed-tokens-huge", run("s.yaml"), "tokens",
         {"s.yaml": synthetic("prompt", {"dist": "fixed", "tokens": 10**12})}),
    Case("workload-empirical-empty", run("s.yaml"), "values",
         {"s.yaml": synthetic("prompt", {"dist": "empirical", "values": []})}),
    Case("workload-unknown-dist", run("s.yaml"), "dist",
         {"s.yaml": synthetic("prompt", {"dist": "pareto"})}),
    Case("workload-rate-nan", run("s.yaml"), "rate_per_s",
         {"s.yaml": synthetic("arrival.rate_per_s", float("nan"))}),
    Case("workload-rate-tiny", run("s.yaml"), "arrival",
         {"s.yaml": synthetic("arrival.rate_per_s", 1e-12)}),
    Case("workload-rescale-tiny", run("s.yaml"), "rate_per_s",
         {"s.yaml": scenario("workload", {"trace": "default", "rate_per_s": 1e-300})}),
    Case("workload-max-requests-zero", run("s.yaml"), "max_requests",
         {"s.yaml": scenario("workload.max_requests", 0)}),
    Case("workload-unknown-key", run("s.yaml"), "workload.speed",
         {"s.yaml": scenario("workload.speed", 3)}),
    Case("trace-arrival-1e17", run("s.yaml"), "arrival_s",
         trace_scenario(TRACE_HEADER + "0,10,10\n1e17,10,10\n")),
    Case("trace-arrival-nan", run("s.yaml"), "arrival_s",
         trace_scenario(TRACE_HEADER + "0,10,10\nnan,10,10\n")),
    Case("trace-empty", run("s.yaml"), "empty", trace_scenario("")),
    Case("trace-unsorted", run("s.yaml"), "sort",
         trace_scenario(TRACE_HEADER + "5,10,10\n1,10,10\n")),
    Case("trace-huge-prompt", run("s.yaml"), "prompt_tokens",
         trace_scenario(TRACE_HEADER + "0,1e15,10\n")),
    Case("trace-ragged-row", run("s.yaml"), "CSV",
         trace_scenario(TRACE_HEADER + "0,10,10\n1,10,10,7,8\n")),
    Case("trace-binary", run("s.yaml"), "t.csv",
         {"s.yaml": scenario("workload", {"trace": "t.csv", "format": "specsim"}),
          "t.csv": b"arrival_s,prompt_tokens,output_tokens\n\x00\xff\xfe,1,1\n"}),
    Case("trace-header-only", run("s.yaml"), "no requests", trace_scenario(TRACE_HEADER)),
    Case("trace-10mb-cell", run("s.yaml"), "prompt_tokens",
         trace_scenario(TRACE_HEADER + "0," + TEN_MB + ",10\n")),
    Case("trace-10mb-column-name", run("s.yaml"), "unknown column",
         {"s.yaml": scenario("workload", {"trace": "t.csv", "format": "specsim"}),
          "t.csv": TRACE_HEADER.strip() + "," + TEN_MB + "\n0,10,10,1\n"}),
    Case("trace-10mb-header-auto", run("s.yaml"), "format",
         trace_scenario(TRACE_HEADER.strip() + "," + TEN_MB + "\n0,10,10,1\n")),
    Case("trace-mooncake-late", run("s.yaml"), "timestamp",
         {"s.yaml": scenario("workload", {"trace": "t.jsonl"}),
          "t.jsonl": '{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
                     '{"timestamp": 1e30, "input_length": 10, "output_length": 5}\n'}),
    Case("trace-mooncake-bad-json", run("s.yaml"), "JSON",
         {"s.yaml": scenario("workload", {"trace": "t.jsonl", "format": "mooncake"}),
          "t.jsonl": '{"timestamp": 0, "input_length": 10\n'}),
    Case("trace-mooncake-huge-string", run("s.yaml"), "input_length",
         {"s.yaml": scenario("workload", {"trace": "t.jsonl"}),
          "t.jsonl": '{"timestamp": 0, "input_length": "' + TEN_MB + '", "output_length": 5}\n'}),
    Case("trace-format-unknown", run("s.yaml"), "workload.format",
         {"s.yaml": scenario("workload", {"trace": "default", "format": "parquet"})}),
    # ---- slo ----
    Case("slo-negative", run("s.yaml"), "slo.ttft_ms", {"s.yaml": scenario("slo.ttft_ms", -1)}),
    Case("slo-inf", run("s.yaml"), "slo.tpot_ms", {"s.yaml": "slo: {tpot_ms: .inf}\n"}),
    Case("slo-unknown-key", run("s.yaml"), "slo.p99", {"s.yaml": scenario("slo.p99", 3)}),
    # ---- run flags ----
    Case("run-set-string-seed", run("--set", "seed=abc"), "seed"),
    Case("run-set-deep", run("--set", "seed=" + "[" * 5000 + "]" * 5000), "nest"),
    Case("run-set-no-equals", run("--set", "seed"), "--set"),
    Case("run-set-long-no-equals", run("--set", "x" * 100_000), "--set"),
    Case("run-set-not-mapping", run("--set", "seed.x=1"), "--set"),
    Case("run-compare-long", run("--compare", "chain:" + "y" * 100_000), "--compare"),
    Case("run-set-laughs", run("--set", "name=" + billion_laughs("x").replace("\n", ", ")
                               .join("{}")), "malformed YAML"),
    Case("run-compare-unknown", run("--compare", "warp"), "policy.name"),
    Case("run-compare-gamma-huge", run("--compare", "chain:num_speculative_tokens=1e9"),
         "num_speculative_tokens"),
    Case("run-bad-results-format", run("--results-format", "xlsx"), "invalid choice"),
    # ---- estimate ----
    Case("estimate-gamma-huge-range", (*EST, "--gamma", "0-999999999"), "--gamma"),
    Case("estimate-gamma-backwards", (*EST, "--gamma", "5-2"), "--gamma"),
    Case("estimate-gamma-negative", (*EST, "--gamma", "-3"), "--gamma"),
    Case("estimate-batch-1e12", (*EST, "--batch", "1e12"), "--batch"),
    Case("estimate-batch-range", (*EST, "--batch", "1-999999999"), "--batch"),
    Case("estimate-batch-huge", (*EST, "--batch", "999999999"), "--batch"),
    Case("estimate-batch-zero", (*EST, "--batch", "0"), "--batch"),
    Case("estimate-context-1e308", (*EST, "--context", "1e308"), "--context"),
    Case("estimate-context-nan", (*EST, "--context", "nan"), "--context"),
    Case("estimate-context-inf", (*EST, "--context", "inf"), "--context"),
    Case("estimate-context-negative", (*EST, "--context", "-1"), "--context"),
    Case("estimate-alpha-nan", (*EST, "--alpha", "nan"), "--alpha"),
    Case("estimate-alpha-two", (*EST, "--alpha", "2"), "--alpha"),
    Case("estimate-tp-huge", (*EST, "--tensor-parallel", "999999999"), "--tensor-parallel"),
    Case("estimate-hardware-unknown", (*EST, "--hardware", "nope"), "unknown hardware"),
    Case("estimate-target-script", (*EST, "--target", SCRIPT), "unknown model"),
    Case("estimate-draft-unknown", (*EST, "--draft", "opt-0b"), "unknown model"),
    Case("estimate-hardware-dir-dup", (*EST, "--hardware", "bad", "--hardware-dir", "hw"),
         "duplicate key", {"hw/bad.yaml": "name: bad\nname: bad\n"}),
    Case("estimate-hardware-file-nan", (*EST, "--hardware", "p.yaml"), "memory_gib",
         {"p.yaml": profile("memory_gib.value", float("nan"))}),
    Case("estimate-target-file-laughs", (*EST, "--target", "m.yaml"), "1,000,000",
         {"m.yaml": billion_laughs()}),
    Case("estimate-unknown-flag", (*EST, "--bogus"), "--bogus"),
    Case("estimate-missing-value", (*EST, "--batch"), "--batch"),
    Case("estimate-bad-format", (*EST, "--format", "xml"), "--format"),
    # ---- gamma ----
    Case("gamma-max-gamma-1e9", ("gamma", "--alpha", "0.8", "--c", "0.05", "--max-gamma",
                                 "1e9"), "--max-gamma"),
    Case("gamma-max-gamma-huge", ("gamma", "--c", "0.05", "--max-gamma", "999999999"),
         "--max-gamma"),
    Case("gamma-c-nan", ("gamma", "--c", "nan"), "--c"),
    Case("gamma-c-negative", ("gamma", "--c", "-1"), "--c"),
    Case("gamma-c-huge", ("gamma", "--c", "1e308"), "--c"),
    Case("gamma-alpha-inf", ("gamma", "--c", "0.1", "--alpha", "inf"), "--alpha"),
    Case("gamma-missing-c", ("gamma",), "--c"),
    # ---- gamma-map ----
    Case("gamma-map-gamma-huge-range", ("gamma-map", "--gamma", "0-999999999"), "--gamma"),
    Case("gamma-map-batch-huge-range", ("gamma-map", "--batch", "1-999999999"), "--batch"),
    Case("gamma-map-batch-1e12", ("gamma-map", "--batch", "1e12"), "--batch"),
    Case("gamma-map-context-1e308", (*GMAP, "--context", "1e308"), "--context"),
    Case("gamma-map-context-nan", (*GMAP, "--context", "nan"), "--context"),
    Case("gamma-map-max-batch-huge", (*GMAP, "--max-batch", "999999999"), "--max-batch"),
    Case("gamma-map-tree-width-range", (*GMAP, "--tree-width", "0-999999"), "--tree-width"),
    Case("gamma-map-tree-no-rates", (*GMAP, "--policy", "tree"), "--tree-rates"),
    Case("gamma-map-tree-rates-nan", (*GMAP, "--policy", "tree", "--tree-rates", "nan,0.1"),
         "rates"),
    Case("gamma-map-alpha-nan", (*GMAP, "--alpha", "nan"), "--alpha"),
    Case("gamma-map-policy-unknown", (*GMAP, "--policy", "warp"), "--policy"),
    Case("gamma-map-too-many-points", ("gamma-map", "--batch", "1-5000", "--context",
                                       ",".join(str(c) for c in range(1, 200)),
                                       "--gamma", "0-64"), "points"),
    Case("gamma-map-hardware-unknown", (*GMAP, "--hardware", "nope"), "unknown hardware"),
    # ---- sweep ----
    Case("sweep-grid-1e9-points", ("sweep", "w.yaml", "--no-progress"), "points",
         {"w.yaml": analytic("grid", {"batch": list(range(1, 1001)),
                                      "context": list(range(1, 1001)),
                                      "gamma": list(range(1000))})}),
    Case("sweep-analytic-1e6-unconfirmed", ("sweep", "w.yaml", "--no-progress"),
         "--allow-large", {"w.yaml": analytic("grid", {"batch": list(range(1, 1001)),
                                                       "context": list(range(1, 1001))})}),
    Case("sweep-simulated-1e6-points", ("sweep", "w.yaml", "--allow-large", "--no-progress"),
         "simulated", {"w.yaml": _dump({"mode": "simulated", "grid": {
             "seed": list(range(1000)), "workload.max_requests": list(range(1, 1001))}})}),
    Case("sweep-mode-missing", ("sweep", "w.yaml"), "mode",
         {"w.yaml": _dump({"grid": {"gamma": [1]}})}),
    Case("sweep-mode-unknown", ("sweep", "w.yaml"), "mode", {"w.yaml": analytic("mode", "fast")}),
    Case("sweep-axis-not-list", ("sweep", "w.yaml"), "grid.gamma",
         {"w.yaml": analytic("grid", {"gamma": 4})}),
    Case("sweep-axis-empty", ("sweep", "w.yaml"), "grid.gamma",
         {"w.yaml": analytic("grid", {"gamma": []})}),
    Case("sweep-unknown-field", ("sweep", "w.yaml"), "colour",
         {"w.yaml": analytic("grid", {"colour": [1]})}),
    Case("sweep-batch-huge", ("sweep", "w.yaml"), "batch",
         {"w.yaml": analytic("grid", {"batch": [10**12]})}),
    Case("sweep-10mb-field", ("sweep", "w.yaml"), "unknown field",
         {"w.yaml": "mode: analytic\ngrid:\n  ? " + TEN_MB + "\n  : [1]\n"}),
    Case("sweep-axis-huge-mapping", ("sweep", "w.yaml"), "grid.gamma",
         {"w.yaml": analytic("grid", {"gamma": {f"k{i}": "v" * 1000 for i in range(1000)}})}),
    Case("sweep-simulated-10mb-value", ("sweep", "w.yaml"), "hardware",
         {"w.yaml": _dump({"mode": "simulated", "grid": {"hardware": [TEN_MB]}})}),
    Case("sweep-grid-dup-key", ("sweep", "w.yaml"), "duplicate key 'gamma'",
         {"w.yaml": "mode: analytic\ngrid:\n  gamma: [1]\n  gamma: [2]\n"}),
    Case("sweep-laughs", ("sweep", "w.yaml"), "1,000,000", {"w.yaml": billion_laughs("grid")}),
    Case("sweep-empty-file", ("sweep", "w.yaml"), "empty", {"w.yaml": ""}),
    Case("sweep-points-not-list", ("sweep", "w.yaml"), "points",
         {"w.yaml": analytic("points", 5)}),
    Case("sweep-workers-huge", ("sweep", "w.yaml", "--workers", "999999999"), "--workers",
         {"w.yaml": _dump(ANALYTIC)}),
    Case("sweep-scenario-missing", ("sweep", "w.yaml"), "file not found",
         {"w.yaml": _dump({"mode": "simulated", "scenario": "nothere.yaml",
                           "grid": {"seed": [1]}})}),
    Case("sweep-simulated-bad-point", ("sweep", "w.yaml"), "batching.max_num_seqs",
         {"w.yaml": _dump({"mode": "simulated", "grid": {"max_num_seqs": [0]}})}),
    # ---- plan ----
    Case("plan-empty-file", ("plan", "p.yaml"), "empty", {"p.yaml": ""}),
    Case("plan-slo-empty", ("plan", "p.yaml"), "slo", {"p.yaml": plan("slo", {})}),
    Case("plan-candidates-empty", ("plan", "p.yaml"), "candidates",
         {"p.yaml": plan("candidates", [])}),
    Case("plan-candidates-too-many", ("plan", "p.yaml"), "candidates",
         {"p.yaml": plan("candidates", [{"seed": i} for i in range(20_000)])}),
    Case("plan-min-rate-tiny", ("plan", "p.yaml"), "search.min_rate_per_s",
         {"p.yaml": plan("search.min_rate_per_s", 1e-300)}),
    Case("plan-max-rate-huge", ("plan", "p.yaml"), "search.max_rate_per_s",
         {"p.yaml": plan("search.max_rate_per_s", 1e300)}),
    Case("plan-max-replicas-huge", ("plan", "p.yaml"), "max_replicas",
         {"p.yaml": plan("max_replicas", 10**9)}),
    Case("plan-target-negative", ("plan", "p.yaml"), "target_rate_per_s",
         {"p.yaml": plan("target_rate_per_s", -1)}),
    Case("plan-prices-missing", ("plan", "p.yaml"), "file not found",
         {"p.yaml": plan("prices", "nothere.yaml")}),
    Case("plan-prices-nan", ("plan", "p.yaml"), "a100-40gb",
         {"p.yaml": plan("prices", {"a100-40gb": float("nan")})}),
    Case("plan-candidate-hardware-unknown", ("plan", "p.yaml"), "unknown hardware",
         {"p.yaml": plan("candidates", [{"hardware": "nope"}])}),
    Case("plan-dup-key", ("plan", "p.yaml"), "duplicate key 'slo'",
         {"p.yaml": _dump(PLAN) + "slo: {p99_ttft_ms: 5}\n"}),
    Case("plan-tab", ("plan", "p.yaml"), "tab", {"p.yaml": "slo:\n\tp99_ttft_ms: 5\n"}),
    # ---- calibrate / validate / report ----
    Case("calibrate-no-device", ("calibrate",), "--device"),
    Case("calibrate-reps-zero", ("calibrate", "--device", "cpu", "--reps", "0"), "--reps"),
    Case("calibrate-device-unknown", ("calibrate", "--device", "tpu", "--quick"), "--device",
         memory_gib=TORCH_MEMORY_GIB),
    Case("validate-profile-missing", ("validate", "--device", "cpu", "--profile",
                                      "nothere.yaml"), "file not found",
         memory_gib=TORCH_MEMORY_GIB),
    Case("validate-profile-dup-key", ("validate", "--device", "cpu", "--profile", "c.yaml"),
         "duplicate key", {"c.yaml": _dump(PROFILE) + "name: again\n"},
         memory_gib=TORCH_MEMORY_GIB),
    Case("report-missing-dir", ("report", "nowhere"), "RESULTS_DIR"),
    # ---- argparse ----
    Case("cli-no-command", (), "command"),
    Case("cli-unknown-command", ("frobnicate",), "invalid choice"),
    Case("cli-huge-argument", ("estimate", "--format", TEN_MB[:100_000]), "--format"),
    # ---- output paths (the OS's errors and specsim's own rules: nothing lost) ----
    Case("out-dot", ("run", "--no-progress", "--out", "."), "current folder",
         {"keep.txt": "mine"}),
    Case("out-foreign-folder", ("run", "--no-progress", "--out", "data"), "holds a.csv",
         {"data/": "", "data/a.csv": "x\n1\n"}),
    Case("out-is-a-file", ("run", "--no-progress", "--out", "notes.txt"), "not a folder",
         {"notes.txt": "mine"}),
    Case("out-in-proc", ("run", "--no-progress", "--out", "/proc/specsim-out"), "--out"),
    Case("out-missing-parent", ("run", "--no-progress", "--out", "no/such/dir"),
         "does not exist"),
    Case("out-forged-manifest", ("run", "--no-progress", "--out", "res"), "res",
         {"res/": "", "res/manifest.json": '{"policies": [{"label": "none"}]}'}),
    Case("report-is-a-folder", ("run", "--no-progress", "--out", "r", "--report", "sub"),
         "is a folder", {"sub/": ""}),
    Case("report-foreign-file", ("run", "--no-progress", "--out", "r", "--report",
                                 "page.html"), "not written by specsim",
         {"page.html": "<html>my page</html>"}),
    Case("report-in-proc", ("run", "--no-progress", "--out", "r", "--report",
                            "/proc/r.html"), "--report"),
    Case("report-missing-parent", ("run", "--no-progress", "--out", "r", "--report",
                                   "no/where/r.html"), "does not exist"),
    Case("report-deep-in-out", ("run", "--no-progress", "--report", "specsim-out/a/r.html"),
         "sub-folder"),
    Case("report-dir-is-a-file", ("report", "notes.txt"), "RESULTS_DIR", {"notes.txt": "x"}),
    Case("report-output-folder", ("report", "nowhere", "-o", "sub"), "--output",
         {"sub/": ""}),
    Case("sweep-out-unrelated-csv", ("sweep", "k.yaml", "--out", "mydata.csv"),
         "not a specsim sweep file",
         {"k.yaml": "name: k\nmode: analytic\ngrid: {alpha: [0.8], c: [0.1], gamma: [1]}\n",
          "mydata.csv": "name,value\nalice,1\n"}),
    Case("sweep-restart-unrelated-csv", ("sweep", "k.yaml", "--out", "mydata.csv",
                                         "--restart"), "not a specsim sweep file",
         {"k.yaml": "name: k\nmode: analytic\ngrid: {alpha: [0.8], c: [0.1], gamma: [1]}\n",
          "mydata.csv": "name,value\nalice,1\n"}),
    Case("sweep-restart-folder-no-suffix", ("sweep", "k.yaml", "--out", "mydata",
                                            "--restart"), "cannot tell the format",
         {"k.yaml": "name: k\nmode: analytic\ngrid: {alpha: [0.8], c: [0.1], gamma: [1]}\n",
          "mydata/": "", "mydata/keep.txt": "keep"}),
    Case("sweep-out-parquet-foreign", ("sweep", "k.yaml", "--out", "d.parquet", "--restart"),
         "did not write",
         {"k.yaml": "name: k\nmode: analytic\ngrid: {alpha: [0.8], c: [0.1], gamma: [1]}\n",
          "d.parquet/": "", "d.parquet/notes.txt": "keep"}),
    Case("sweep-out-in-proc", ("sweep", "k.yaml", "--out", "/proc/x.csv"), "--out",
         {"k.yaml": "name: k\nmode: analytic\ngrid: {alpha: [0.8], c: [0.1], gamma: [1]}\n"}),
    Case("plan-out-foreign", ("plan", str(REPO / "workloads/scenarios/plan_default.yaml"),
                              "--out", "table.csv"), "not written by specsim",
         {"table.csv": "my,own\n1,2\n"}),
    Case("plan-out-folder", ("plan", str(REPO / "workloads/scenarios/plan_default.yaml"),
                             "--out", "sub"), "is a folder", {"sub/": ""}),
    Case("scenario-is-a-folder", ("run", "sub"), "sub", {"sub/": ""}),
    # ---- speculation preconditions on the analytic commands ----
    Case("estimate-vocab-mismatch", ("estimate", "--target", "llama-3.1-8b", "--draft",
                                     "opt-125m"), "vocab_size"),
    Case("gamma-map-vocab-mismatch", ("gamma-map", "--target", "llama-3.1-8b", "--draft",
                                      "opt-125m"), "vocab_size"),
    # ---- calibrate / validate bounds, checked before any benchmark ----
    Case("calibrate-reps-huge", ("calibrate", "--device", "cpu", "--reps", "99999999"),
         "--reps"),
    Case("calibrate-seed-negative", ("calibrate", "--device", "cpu", "--seed", "-1"),
         "--seed"),
    Case("calibrate-threads-huge", ("calibrate", "--device", "cpu", "--threads", "100000"),
         "--threads"),
    Case("validate-alpha-above-one", ("validate", "--device", "cpu", "--profile", "c.yaml",
                                      "--alpha", "2"), "--alpha"),
]


# ---------------------------------------------------------------- running a case

def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def _write_files(root: Path, files: Mapping[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def run_case(case: Case, root: Path | None = None) -> Outcome:
    """Run one case in a fresh folder (under ``root``, else the system temp folder)."""
    work = Path(tempfile.mkdtemp(prefix=f"hostile-{case.id[:40]}-", dir=root))
    try:
        _write_files(work, case.files)
        before = _snapshot(work)
        limit = int(case.memory_gib * GIB)

        def preexec() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]]
                                                            if env.get("PYTHONPATH") else []))
        env.pop("PYTHONWARNINGS", None)
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"  # BLAS thread buffers would count against RLIMIT_AS on big hosts
        try:
            proc = subprocess.run([sys.executable, "-m", "simulator.cli", *case.argv],
                                  cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=case.timeout_s, preexec_fn=preexec, env=env)
            rc, out, err, hung = proc.returncode, proc.stdout, proc.stderr, False
        except subprocess.TimeoutExpired as exc:
            rc, out, err, hung = None, exc.stdout or b"", exc.stderr or b"", True
        after = _snapshot(work)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        return Outcome(case, rc, out.decode("utf-8", "replace"),
                       err.decode("utf-8", "replace"), changed, hung)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_cases(cases: list[Case], workers: int | None = None,
              root: Path | None = None) -> dict[str, Outcome]:
    """Run ``cases`` concurrently, one subprocess per core by default."""
    workers = workers or max(1, os.cpu_count() or 1)
    with ThreadPoolExecutor(workers) as pool:
        outcomes = list(pool.map(lambda c: run_case(c, root), cases))
    return {o.case.id: o for o in outcomes}


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    assert len(CASES) >= 90


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory) -> dict[str, Outcome]:
    """Every selected case's outcome, computed once, in parallel."""
    wanted = {item.callspec.id for item in request.session.items
              if getattr(item, "originalname", None) == "test_hostile_input"
              and hasattr(item, "callspec")}
    cases = [c for c in CASES if c.id in wanted] or CASES
    return run_cases(cases, root=tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input(case: Case, outcomes: dict[str, Outcome]):
    outcome = outcomes[case.id]
    problems = outcome.problems()
    assert not problems, f"{case.id}: {'; '.join(problems)}\nstderr: {outcome.stderr[-2000:]}"


def test_guards_keep_safe_load_semantics():
    """Valid documents (anchors, merge keys, timestamps, big lists) load as safe_load does."""
    from simulator.yaml_io import parse_yaml_text
    docs = ["base: &b {x: 1, y: [1, 2]}\nm:\n  <<: *b\n  x: 3\nl: [*b, *b]\n",
            "t: 2001-12-14\nf: 1.5e+3\ns: '1e9'\nn: null\nb: yes\n",
            "v: [" + ", ".join(str(i) for i in range(50_000)) + "]\n",
            "a: " + "[" * 60 + "]" * 60 + "\n",      # 61 levels: within MAX_YAML_DEPTH
            "'1': a\n1: b\n"]                          # a string and an int: two keys
    for text in docs:
        assert parse_yaml_text(text, source="t") == yaml.safe_load(text)


def test_allow_large_confirms_but_the_hard_limit_holds():
    from simulator.errors import SpecsimError
    from simulator.sweep import CONFIRM_POINTS, MAX_POINTS, check_sweep_size
    for mode in ("analytic", "simulated"):
        check_sweep_size(CONFIRM_POINTS[mode], mode=mode)
        with pytest.raises(SpecsimError, match="--allow-large"):
            check_sweep_size(CONFIRM_POINTS[mode] + 1, mode=mode)
        check_sweep_size(MAX_POINTS[mode], mode=mode, allow_large=True)
        with pytest.raises(SpecsimError, match="even with --allow-large"):
            check_sweep_size(MAX_POINTS[mode] + 1, mode=mode, allow_large=True)


def test_number_lists_check_a_range_before_expanding_it():
    from simulator.cli_sweep import MAX_LIST_VALUES, parse_number_list
    from simulator.errors import SpecsimError
    assert parse_number_list("0-3,8", field="--gamma", maximum=64) == [0, 1, 2, 3, 8]
    assert len(parse_number_list(f"1-{MAX_LIST_VALUES}", field="--batch")) == MAX_LIST_VALUES
    with pytest.raises(SpecsimError, match="limit is 10,000"):
        parse_number_list("0-999999999999999999", field="--batch")  # no 10^18-item set
    with pytest.raises(SpecsimError, match="above the limit of 64"):
        parse_number_list("0-999999999", field="--gamma", maximum=64)


def summary(outcomes: dict[str, Outcome]) -> dict[str, int]:
    """Counts for a closing note."""
    values = list(outcomes.values())
    return {"cases": len(values),
            "clean errors": sum(not o.problems() for o in values),
            "tracebacks": sum(o.traceback for o in values),
            "hangs": sum(o.hung for o in values),
            "files changed": sum(bool(o.changed) for o in values)}


def main() -> int:
    import argparse
    import time
    parser = argparse.ArgumentParser(description="run the hostile-input cases, print counts")
    parser.add_argument("-k", default="", help="only the cases whose id contains this")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--show", action="store_true", help="print every case's error line")
    args = parser.parse_args()
    start = time.monotonic()
    results = run_cases([c for c in CASES if args.k in c.id], workers=args.workers)
    for outcome in results.values():
        problems = outcome.problems()
        if args.show:
            print(f"{outcome.case.id}: {outcome.stderr.strip()[:400]}")
        if problems:
            print(f"FAIL {outcome.case.id}: {'; '.join(problems)}")
            print("     " + (outcome.stderr.strip().splitlines() or [""])[-1][:300])
    counts = summary(results)
    print(", ".join(f"{k}: {v}" for k, v in counts.items())
          + f" ({time.monotonic() - start:.0f} s)")
    return 0 if counts["clean errors"] == counts["cases"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
