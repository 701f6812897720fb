"""Hostile cases of ``specsim validate-serving`` (issue 35, part 1): missing and empty run
folders, span files that are not vLLM's OpenTelemetry export, a run's configuration broken,
``*.run.yaml`` manifests with a bad kind or a missing result, and inference-perf
experiments with an unknown load type, a non-boolean ``async_scheduling`` or a missing or
malformed stage file.  The bases
and helpers are hostile_cases.py's."""
from __future__ import annotations

import json

from tests.hostile_cases import Case

CONFIG = "model: meta-llama/Llama-2-7b-hf\ntensor_parallelism: 1\nmax_num_seqs: 8\n" \
         "max_num_batched_tokens: 512\n"
SPAN = {"resourceSpans": [{"scopeSpans": [{"spans": [{
    "name": "llm_request", "startTimeUnixNano": "1000000000", "attributes": [
        {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "100"}},
        {"key": "gen_ai.usage.completion_tokens", "value": {"intValue": "20"}},
        {"key": "gen_ai.latency.time_to_first_token", "value": {"doubleValue": 0.05}},
        {"key": "gen_ai.latency.e2e", "value": {"doubleValue": 0.3}}]}]}]}]}
GOOD_SPANS = json.dumps(SPAN) + "\n"
NO_ATTRIBUTES = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
    {"name": "llm_request", "startTimeUnixNano": "1", "attributes": []}]}]}]}) + "\n"
VS = ("validate-serving", "run", "--profile", "h100-sxm")
MANIFEST = "kind: vllm_bench_serve\nresult: gone.json\nmodel: llama-2-7b\n" \
           "tensor_parallel: 1\nengine: vLLM 0.11.0\n"

VALIDATE_CASES: list[Case] = [
    Case("vs-uncertainty-huge", ("validate-serving", "nope", "--profile", "h100-sxm",
                                 "--uncertainty", "99999999"), "--uncertainty"),
    Case("vs-missing-path", ("validate-serving", "nope", "--profile", "h100-sxm"),
         "does not exist"),
    Case("vs-folder-without-runs", ("validate-serving", "d", "--profile", "h100-sxm"),
         "holds no measured run", {"d/": "", "d/notes.txt": "x"}),
    Case("vs-spans-not-json", VS, "line 1 is not an OpenTelemetry",
         {"run/exp-config.yaml": CONFIG, "run/traces.json": "{not json\n"}),
    Case("vs-spans-nested-too-deep", VS, "JSON nested too deeply",
         {"run/exp-config.yaml": CONFIG, "run/traces.json": "[" * 100_000 + "]" * 100_000}),
    Case("vs-span-without-attributes", VS, "line 1 is not an OpenTelemetry",
         {"run/exp-config.yaml": CONFIG, "run/traces.json": NO_ATTRIBUTES}),
    Case("vs-spans-empty", VS, "holds no llm_request span",
         {"run/exp-config.yaml": CONFIG, "run/traces.json": "\n"}),
    Case("vs-config-without-model", VS, "model",
         {"run/exp-config.yaml": "tensor_parallelism: 1\n", "run/traces.json": GOOD_SPANS}),
    Case("vs-config-unknown-model", VS, "neither a catalog name",
         {"run/exp-config.yaml": CONFIG.replace("meta-llama/Llama-2-7b-hf", "acme/nope-7b"),
          "run/traces.json": GOOD_SPANS}),
    Case("vs-config-negative-tp", VS, "tensor_parallelism",
         {"run/exp-config.yaml": CONFIG.replace("tensor_parallelism: 1",
                                                "tensor_parallelism: -2"),
          "run/traces.json": GOOD_SPANS}),
    Case("vs-profile-negative-prefix", VS, "data.prefix_tokens",
         {"run/exp-config.yaml": CONFIG, "run/traces.json": GOOD_SPANS,
          "run/profile.yaml": "data: {prefix_tokens: -5}\n"}),
    Case("vs-run-without-profile", ("validate-serving", "run"), "--profile",
         {"run/exp-config.yaml": CONFIG, "run/traces.json": GOOD_SPANS}),
    Case("vs-manifest-bad-kind", ("validate-serving", "x.run.yaml"), "kind",
         {"x.run.yaml": MANIFEST.replace("vllm_bench_serve", "tgi")}),
    Case("vs-manifest-missing-result", ("validate-serving", "x.run.yaml"), "gone.json",
         {"x.run.yaml": MANIFEST}),
    Case("vs-manifest-unknown-key", ("validate-serving", "x.run.yaml"), "colour",
         {"x.run.yaml": MANIFEST + "colour: red\n"}),
    Case("vs-manifest-bad-measured-at", ("validate-serving", "x.run.yaml"), "measured_at",
         {"x.run.yaml": MANIFEST + "measured_at: proxy\n"}),
]

IPF = ("data:\n  type: shared_prefix\n  shared_prefix: {num_groups: 2, num_prompts_per_group: 2, "
       "system_prompt_len: 16, question_len: 32, output_len: 4}\nload:\n  type: poisson\n"
       "  stages: [{rate: 1, duration: 2}]\nserver: {type: vllm, ignore_eos: true}\n"
       "api: {streaming: true}\n")
VALIDATE_CASES += [  # inference-perf experiments (simulator/sim2real/inference_perf.py)
    Case("vs-inference-perf-poisson", VS, "load.type",
         {"run/exp-config.yaml": CONFIG, "run/results/config.yaml": IPF}),
    Case("vs-inference-perf-async-not-bool", VS, "async_scheduling",
         {"run/exp-config.yaml": CONFIG + "async_scheduling: sometimes\n",
          "run/results/config.yaml": IPF.replace("poisson", "constant")}),
    Case("vs-inference-perf-no-stage-file", VS, "stage 0's metrics are missing",
         {"run/exp-config.yaml": CONFIG,
          "run/results/config.yaml": IPF.replace("poisson", "constant")}),
    Case("vs-inference-perf-stage-not-json", VS, "not JSON",
         {"run/exp-config.yaml": CONFIG, "run/results/config.yaml":
          IPF.replace("poisson", "constant"),
          "run/results/stage_0_lifecycle_metrics.json": "{oops"}),
]

IPF_OK = IPF.replace("poisson", "constant")
QS = ("min", "p0.1", "p1", "p5", "p10", "p25", "median", "p75", "p90", "p95", "p99", "p99.9",
      "max")


def _stage(prompt: float = 100, **changes: object) -> str:
    """A stage's lifecycle metrics (every percentile ``prompt`` tokens), ``changes``
    replacing ``successes.prompt_len``'s or ``failures``' entries (``key=value``)."""
    dist = {"mean": 0.1, **{k: 0.1 for k in QS}}
    prompt_len = {"mean": prompt, **{k: prompt for k in QS}}
    failures: dict = {"count": 0}
    for key, value in changes.items():
        (failures if key == "failures_count" else prompt_len)[
            "count" if key == "failures_count" else key.replace("_", ".")] = value
    return json.dumps({"successes": {"count": 2, "prompt_len": prompt_len, "latency": {
        "time_to_first_token": dist, "request_latency": dist}}, "failures": failures})


def _ipf(case: str, expect: str, exp: str = CONFIG, config: str = IPF_OK,
         stage: str | None = None) -> Case:
    files = {"run/exp-config.yaml": exp, "run/results/config.yaml": config,
             "run/results/stage_0_lifecycle_metrics.json": stage or _stage()}
    return Case(f"vs-inference-perf-{case}", VS, expect, files)


VALIDATE_CASES += [  # the review's cases: each exits 2 naming the field
    _ipf("stage-nested-too-deep", "JSON nested too deeply", stage="[" * 100_000),
    _ipf("failures-count-word", "failures.count", stage=_stage(failures_count="many")),
    _ipf("prompt-median-huge", "successes.prompt_len.median", stage=_stage(median=1e9)),
    _ipf("prompt-p90-below-p75", "successes.prompt_len.p90", stage=_stage(p90=50)),
    _ipf("prompt-above-limit", "successes.prompt_len.min", stage=_stage(2 ** 20 + 1)),
    _ipf("too-many-block-ids", "successes.prompt_len",
         config=IPF_OK.replace("num_groups: 2", "num_groups: 1000").replace(
             "num_prompts_per_group: 2", "num_prompts_per_group: 1000"),
         stage=_stage(2 ** 20)),
    _ipf("too-many-prompts", "data.shared_prefix.num_groups",
         config=IPF_OK.replace("num_groups: 2", "num_groups: 2000000")),
    _ipf("sglang-server", "server.type", config=IPF_OK.replace("vllm", "sglang")),
    _ipf("not-streamed", "api.streaming",
         config=IPF_OK.replace("streaming: true", "streaming: false")),
    _ipf("exp-unknown-key", "colour", exp=CONFIG + "colour: red\n"),
    _ipf("config-unknown-key", "colour", config=IPF_OK + "colour: red\n"),
    _ipf("block-size-32", "block_size", exp=CONFIG + "block_size: 32\n"),
    _ipf("no-prefix-caching-not-bool", "enable_prefix_caching",
         exp=CONFIG + "enable_prefix_caching: maybe\n"),
]
