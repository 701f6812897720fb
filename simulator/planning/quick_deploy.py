"""The winner of a flags-only ``specsim plan``, written to deploy and to re-check.

* ``vllm-serve.yaml``: ``vllm serve --config vllm-serve.yaml`` (the CLI's names with dashes;
  ``speculative-config`` in its CLI form, a JSON string).  ``specsim run scenario.yaml
  --vllm-args vllm-serve.yaml`` reads the same file back into the simulation the plan ran.
* ``serve.sh``: the same deployment as one ``vllm serve`` command line and as SGLang's
  ``launch_server`` flags (SGLang's names: ``--tp-size``, ``--dp-size``, ``--ep-size``,
  ``--speculative-algorithm`` EAGLE/EAGLE3/STANDALONE with ``--speculative-num-steps``,
  ``--speculative-eagle-topk 1`` and ``--speculative-num-draft-tokens`` = steps + 1, a
  chain as vLLM drafts it; docs.sglang.io, advanced_features/speculative_decoding).  The
  simulation followed vLLM's scheduler; SGLang's is close but not the same.
* ``scenario.yaml``: the traffic and the SLO of the question, so the check above runs.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any, Mapping

import yaml

from simulator.planning.quick_plan import Candidate, Question

# the first bytes of every file the plan writes (output_paths: what specsim may replace)
MARK = "# written by specsim plan"


def _vllm_value(key: str, value: Any) -> Any:
    return json.dumps(value, separators=(", ", ": ")) if key == "speculative_config" \
        else value


def served_model(model) -> str:
    """What the engines are to load: ``model`` itself, or where it is the user's own specsim
    model file (``plan --target my-model.yaml``) a placeholder that cannot run by accident."""
    text = str(model)
    if text.endswith((".yaml", ".yml")):
        return f"<checkpoint of {Path(text).stem}>"
    return text


def _own_model_note(c: Candidate) -> str:
    """A comment line where ``c``'s model is the user's own specsim model file."""
    model = str(c.engine_args["model"])
    if served_model(model) == model:
        return ""
    return (f"# {served_model(model)}: put the model's Hugging Face id or checkpoint folder "
            f"there ({Path(model).name} is specsim's description of it, not weights)\n")


def vllm_config_text(c: Candidate, header: str) -> str:
    """The ``vllm serve --config`` YAML of ``c``; where the model is the user's own model file,
    that file's path (``specsim run --vllm-args`` reads it back) and a comment to replace it
    with the checkpoint before vLLM reads it."""
    data = {k.replace("_", "-"): _vllm_value(k, v) for k, v in c.engine_args.items()}
    model = str(c.engine_args["model"])
    note = "" if served_model(model) == model else (
        "# model: specsim's file (specsim run --vllm-args reads it back); for vllm serve put "
        "the model's Hugging Face id or checkpoint folder there\n")
    return f"{MARK}: {header}\n{note}" + yaml.safe_dump(data, sort_keys=False, width=1000)


def vllm_command(c: Candidate) -> str:
    """``vllm serve MODEL --flag value ...`` (booleans as bare flags when true)."""
    args = dict(c.engine_args)
    words = ["vllm", "serve", served_model(args.pop("model"))]
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            words.append(flag)
        elif value is not False:
            words += [flag, str(_vllm_value(key, value))]
    return " ".join(shlex.quote(w) for w in words)


def sglang_command(c: Candidate) -> str:
    """The same deployment as SGLang ``launch_server`` flags."""
    from simulator.scenario import Batching
    args, b = c.engine_args, Batching()
    words = ["python", "-m", "sglang.launch_server", "--model-path", served_model(args["model"]),
             "--tp-size", str(c.shape.gpus)]
    dp = c.shape.data_parallel
    if dp > 1:  # SGLang: --tp is the GPUs, --dp the attention ranks
        words += ["--dp-size", str(dp), "--enable-dp-attention"]
    if c.expert_parallel:
        words += ["--ep-size", str(c.shape.gpus)]
    if dp == 1 and "data_parallel_size" in args:
        words += ["--dp-size", str(c.replicas)]
    # SGLang divides these among its attention ranks (server_args.py
    # _handle_data_parallelism); vLLM's are per rank: the replica's is dp x vLLM's
    words += ["--max-running-requests", str(b.max_num_seqs * dp), "--chunked-prefill-size",
              str(b.max_num_batched_tokens * dp), "--mem-fraction-static",
              str(b.gpu_memory_utilization)]
    spec: Mapping[str, Any] | None = args.get("speculative_config")
    if spec is not None:
        algorithm = {"eagle3": "EAGLE3", "eagle": "EAGLE", "mtp": "EAGLE",
                     "draft_model": "STANDALONE"}[c.method]
        words += ["--speculative-algorithm", algorithm]
        if "model" in spec:
            words += ["--speculative-draft-model-path", str(spec["model"])]
        words += ["--speculative-num-steps", str(c.gamma), "--speculative-eagle-topk", "1",
                  "--speculative-num-draft-tokens", str(c.gamma + 1)]
    return " ".join(shlex.quote(w) for w in words)


def scenario_text(q: Question, c: Candidate, header: str) -> str:
    """The scenario the deployment was simulated in, less what vllm-serve.yaml sets."""
    keep = ("name", "seed", "hardware", "workload", "slo", "replicas")
    data = {k: c.payload[k] for k in keep if k in c.payload}
    wl = dict(data["workload"])
    if "trace" in wl and wl["trace"] != "default":  # the folder moves: keep the trace found
        wl["trace"] = str(Path(wl["trace"]).resolve())
    data["workload"] = wl
    how = ("# check it: specsim run scenario.yaml --vllm-args vllm-serve.yaml "
           "(the plan's simulation of this deployment)")
    return f"{MARK}: {header}\n{how}\n" + yaml.safe_dump(data, sort_keys=False, width=1000)


def serve_text(c: Candidate, header: str, verdict: str) -> str:
    """``serve.sh``: the vLLM command, then SGLang's, each runnable as it is (once a user's own
    model file's placeholder is replaced by its checkpoint: the note says so)."""
    note = "" if c.method != "mtp" else (
        "# SGLang drafts with the target's MTP (NextN) module under --speculative-algorithm "
        "EAGLE\n")
    together = "data_parallel_size" in c.engine_args and c.shape.data_parallel == 1
    apart = "" if c.replicas == 1 or together else (
        f"# {c.replicas} replicas: run this on each of {c.replicas} groups of "
        f"{c.shape.gpus} GPUs, behind a load balancer\n")
    return (f"#!/bin/sh\n{MARK}: {header}\n# {verdict}\n{_own_model_note(c)}"
            f"# vLLM (the engine specsim "
            f"simulated):\n{apart}{vllm_command(c)}\n\n# or SGLang, the same deployment "
            f"in its flags:\n{note}# {sglang_command(c)}\n")


def disagg_serve_text(c: Candidate, header: str, verdict: str) -> str:
    """``serve.sh`` of a disaggregated winner: the prefill and the decode instances' ``vllm
    serve`` commands, each with a NIXL KV connector (vLLM's docs, NixlConnector usage:
    ``--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'``), and
    SGLang's ``--disaggregation-mode`` for the same pools."""
    kv = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                    separators=(",", ":"))
    pre = dataclasses.replace(c, shape=c.prefill_shape, replicas=c.prefill_replicas,
                              engine_args=c.prefill_engine_args)
    lines = [f"#!/bin/sh\n{MARK}: {header}\n# {verdict}\n# vLLM (the engine specsim "
             "simulated), behind a router that sends each prompt to a prefill instance and "
             "its decode to a decode instance (vLLM's disaggregated-prefill proxy, llm-d, "
             "Dynamo):"]
    for side, inst, n in (("prefill", pre, c.prefill_replicas), ("decode", c, c.replicas)):
        lines.append(f"# {side}: {n} instance(s) of {inst.shape.gpus} GPUs\n"
                     f"{vllm_command(inst)} --kv-transfer-config {shlex.quote(kv)}")
    lines.append("# or SGLang, the same pools in its flags:")
    for side, inst in (("prefill", pre), ("decode", c)):
        lines.append(f"# {sglang_command(inst)} --disaggregation-mode {side}")
    return "\n".join(lines) + "\n"


def disagg_scenario_text(c: Candidate, header: str) -> str:
    """The whole scenario a disaggregated winner was simulated in (no --vllm-args form:
    one ``vllm serve`` configuration is one instance, not two pools)."""
    data = copy.deepcopy(dict(c.payload))
    wl = data["workload"]
    if "trace" in wl and wl["trace"] != "default":
        wl["trace"] = str(Path(wl["trace"]).resolve())
    how = "# check it: specsim run scenario.yaml (the plan's simulation of this deployment)"
    return f"{MARK}: {header}\n{how}\n" + yaml.safe_dump(data, sort_keys=False, width=1000)


def files(q: Question, c: Candidate, header: str, verdict: str) -> dict[str, str]:
    """File name -> text of everything the plan writes for its winner."""
    if c.disaggregated:
        return {"serve.sh": disagg_serve_text(c, header, verdict),
                "scenario.yaml": disagg_scenario_text(c, header)}
    return {"vllm-serve.yaml": vllm_config_text(c, header),
            "serve.sh": serve_text(c, header, verdict),
            "scenario.yaml": scenario_text(q, c, header)}
