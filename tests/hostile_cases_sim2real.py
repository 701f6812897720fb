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
       "  stages: [{rate: 1, duration: 2}]\nserver: {ignore_eos: true}\n")
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
