"""The hostile-input cases of tests/test_hostile_inputs.py, as data.

Each :class:`Case` is one command line and the files written into its empty working folder;
the valid bases below (a scenario, a profile, a model, a plan, a sweep) are broken one field
at a time.  Append a ``Case`` to ``CASES`` to add one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import yaml

from tests.helpers import REPO

DEFAULT_MEMORY_GIB = 2      # numpy, pandas and simpy import well within this
TORCH_MEMORY_GIB = 4        # importing torch maps more (calibrate, validate)
DEFAULT_TIMEOUT_S = 60

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


def dump_yaml(data) -> str:
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
    return dump_yaml(SCENARIO if path is None else _with(SCENARIO, path, value, delete=delete))


def synthetic(path: str, value) -> str:
    """The base scenario on a synthetic workload with one of its fields changed."""
    return scenario("workload", {"synthetic": _with(SYNTHETIC, path, value)})


def profile(path: str, value, *, delete: bool = False) -> str:
    return dump_yaml(_with(PROFILE, path, value, delete=delete))


def model(path: str, value) -> str:
    return dump_yaml(_with(MODEL, path, value))


def plan(path: str, value) -> str:
    return dump_yaml(_with(PLAN, path, value))


def analytic(path: str, value) -> str:
    return dump_yaml(_with(ANALYTIC, path, value))


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

SCENARIO_CASES: list[Case] = [
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
    Case("scenario-engine-not-a-mapping", run("s.yaml"), "engine",
         {"s.yaml": scenario("engine", 5)}),
    Case("scenario-engine-unknown-key", run("s.yaml"), "engine.fastforward",
         {"s.yaml": scenario("engine", {"fastforward": True})}),
    Case("scenario-engine-fast-forward-string", run("s.yaml"), "engine.fast_forward",
         {"s.yaml": scenario("engine", {"fast_forward": "sometimes"})}),
    Case("scenario-engine-steps-table-unknown", run("s.yaml"), "engine.steps_table",
         {"s.yaml": scenario("engine", {"steps_table": "every_other"})}),
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
         {"hw/a100-40gb.yaml": dump_yaml(PROFILE) + "name: again\n"}),
    Case("hardware-file-huge-bandwidth", ("hardware", "show", "p.yaml"),
         "memory_bandwidth_gb_per_s", {"p.yaml": profile("memory_bandwidth_gb_per_s.value",
                                                         1e300)}),
    Case("hardware-file-efficiency-string", ("hardware", "show", "p.yaml"),
         "defaults.compute_efficiency", {"p.yaml": profile("defaults.compute_efficiency.value",
                                                           "high")}),
    Case("hardware-file-unknown-dtype", ("hardware", "show", "p.yaml"), "peak_tflops.fp2",
         {"p.yaml": profile("peak_tflops.fp2", {"value": 1, "source": "x"})}),
    Case("hardware-file-calibration-deep", ("hardware", "show", "p.yaml"), "nested deeper",
         {"p.yaml": dump_yaml(PROFILE) + "calibration:\n  compute_efficiency_curve: "
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
         {"m.yaml": dump_yaml(MODEL) + "num_layers: 13\n"}),
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
    # the base is OPT-13B, dense: data-parallel attention shares a MoE model's experts
    Case("parallelism-dp-attention-dense", run("s.yaml"), "data_parallel_attention",
         {"s.yaml": scenario("parallelism", {"data_parallel_attention": 2,
                                             "expert_parallel": True})}),
    Case("parallelism-dp-attention-with-tp", run("s.yaml"), "data_parallel_attention",
         {"s.yaml": scenario("parallelism", {"tensor_parallel": 2,
                                             "data_parallel_attention": 2})}),
    Case("parallelism-dp-attention-word", run("s.yaml"), "data_parallel_attention",
         {"s.yaml": scenario("parallelism.data_parallel_attention", "eight")}),
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
]
