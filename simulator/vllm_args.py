"""``specsim run --vllm-args FILE``: a ``vllm serve`` engine-arguments file written over a
scenario.  The mapping follows vLLM 0.11.0's ``EngineArgs`` (vllm/engine/arg_utils.py) and
its OpenAI server's arguments (vllm/entrypoints/openai/cli_args.py): the engine's knobs map
to the scenario's fields (``ENGINE_ARGS``); keys that only change how the server is reached,
logged or loaded are read and ignored (``SERVING_ONLY``, listed by ``serving_only_keys``);
any other key is an error that lists the supported ones.  ``speculative_config`` is mapped
by simulator/vllm_config.py.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import (
    as_bool,
    as_number,
    as_str,
    check_keys,
    clip,
    load_yaml_file,
    parse_yaml_text,
    require_mapping,
    short,
)
from simulator.vllm_config import spec_mapping, resolve_model

VLLM_VERSION = "0.11.0"

# vLLM engine argument -> (scenario section or "" for top level, specsim key, value kind)
ENGINE_ARGS: dict[str, tuple[str, str, str]] = {
    "model": ("", "target", "model"),
    "max_num_seqs": ("batching", "max_num_seqs", "int"),
    "max_num_batched_tokens": ("batching", "max_num_batched_tokens", "int"),
    "enable_chunked_prefill": ("batching", "enable_chunked_prefill", "bool"),
    "enable_prefix_caching": ("batching", "enable_prefix_caching", "bool"),
    "gpu_memory_utilization": ("batching", "gpu_memory_utilization", "fraction"),
    "block_size": ("batching", "block_size", "int"),
    "tensor_parallel_size": ("parallelism", "tensor_parallel", "int"),
    "pipeline_parallel_size": ("parallelism", "pipeline_parallel", "int"),
    "enable_expert_parallel": ("parallelism", "expert_parallel", "bool"),
    "quantization": ("", "quantization", "str"),
    "kv_cache_dtype": ("", "kv_cache_dtype", "str"),
    "enforce_eager": ("execution", "enforce_eager", "bool"),
    "async_scheduling": ("execution", "async_scheduling", "bool"),
    "max_cudagraph_capture_size": ("execution", "max_cudagraph_capture_size", "int"),
    "disable_custom_all_reduce": ("execution", "disable_custom_all_reduce", "bool"),
    "max_model_len": ("batching", "max_model_len", "int"),
    # independent engine replicas behind one API server (vLLM's data parallel deployment of
    # a dense model; docs/serving/data_parallel_deployment.md), simulated as replicas; with
    # enable_expert_parallel, data-parallel attention (apply_vllm_args)
    "data_parallel_size": ("", "replicas", "int"),
    "dtype": ("", "quantization", "dtype"),  # the weights' 16-bit type, unless quantization
    "speculative_config": ("", "speculative_config", "any"),
    # vLLM's MoE knobs (vllm/config/parallel.py ParallelConfig, vllm/engine/arg_utils.py of
    # the 0.11 line): dual-batch overlap is the project's two-batch overlap with vLLM's
    # thresholds (simulator/cost/tbo.py overlap_applies); EPLB's redundant experts come in
    # eplb_config (or the deprecated --num-redundant-experts, "removed in v0.12.0"); the
    # all-to-all backend (the VLLM_ALL2ALL_BACKEND environment variable before it) is the
    # MoE dispatch (VLLM_A2A)
    "enable_dbo": ("parallelism", "enable_two_batch_overlap", "bool"),
    "dbo_decode_token_threshold": ("parallelism", "tbo_decode_token_threshold", "count"),
    "dbo_prefill_token_threshold": ("parallelism", "tbo_prefill_token_threshold", "count"),
    "enable_eplb": ("parallelism", "enable_eplb", "bool"),
    "eplb_config": ("parallelism", "ep_num_redundant_experts", "eplb"),
    "num_redundant_experts": ("parallelism", "ep_num_redundant_experts", "count"),
    "all2all_backend": ("parallelism", "moe_dispatch", "a2a"),
}
# vLLM's ParallelConfig defaults when --enable-dbo is given without them
DBO_DEFAULTS = {"dbo_decode_token_threshold": 32, "dbo_prefill_token_threshold": 512}
# vLLM's all2all backends -> the scenario's moe_dispatch (simulator/cost/dp_attention.py)
VLLM_A2A = {"allgather_reducescatter": "all_gather", "deepep_low_latency": "all_to_all",
            "deepep_high_throughput": "deepep_normal"}
# EPLBConfig's fields in vLLM 0.11: only the redundant experts change a step's price (the
# placement is computed once from the expected loads, rank_load.busiest_rank_share; how
# often vLLM re-places them and whether it logs balance do not move the steady state)
EPLB_KEYS = ("num_redundant_experts", "window_size", "step_interval", "log_balancedness")
# vLLM's --dtype (vllm/config/model.py, _STR_DTYPE_TO_TORCH_DTYPE) -> specsim's weight types;
# "auto" keeps the model file's (its config.json torch_dtype)
VLLM_DTYPES = {"auto": None, "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
# vLLM's spellings of specsim's values: "fp8 (=fp8_e4m3) and fp8_e5m2" (vllm/config/cache.py,
# cache_dtype; a byte per element either way); NVFP4 is --quantization modelopt_fp4 (ModelOpt)
VLLM_VALUES = {"kv_cache_dtype": {"fp8_e4m3": "fp8", "fp8_e5m2": "fp8"},
               "quantization": {"modelopt_fp4": "nvfp4"}}
# Keys of `vllm serve` that change how it is reached, logged, loaded or what it answers, not
# how fast it serves (vllm/entrypoints/openai/cli_args.py, vllm/engine/arg_utils.py): read,
# listed by serving_only_keys, and ignored.
SERVING_ONLY = ("host", "port", "served_model_name", "trust_remote_code", "revision",
                "code_revision", "tokenizer", "tokenizer_revision", "tokenizer_mode",
                "download_dir", "load_format", "config_format", "api_key", "seed",
                "disable_log_stats", "disable_log_requests", "enable_log_requests",
                "max_log_len", "uvicorn_log_level", "disable_uvicorn_access_log",
                "allowed_origins", "allowed_methods", "allowed_headers", "allow_credentials",
                "ssl_keyfile", "ssl_certfile", "ssl_ca_certs", "root_path", "middleware",
                "chat_template", "response_role", "enable_auto_tool_choice",
                "tool_call_parser", "reasoning_parser", "otlp_traces_endpoint",
                "collect_detailed_traces", "disable_frontend_multiprocessing",
                "enable_prompt_tokens_details", "enable_server_load_tracking")


def _engine_value(key: str, value: Any, source: str) -> Any:
    kind = ENGINE_ARGS[key][2]
    if kind == "int":
        return as_number(value, source=source, field=key, integer=True, minimum=1,
                         maximum=10_000_000)
    if kind == "bool":
        return as_bool(value, source=source, field=key)
    if kind == "dtype":
        return VLLM_DTYPES[as_str(value, source=source, field=key, choices=VLLM_DTYPES)]
    if kind == "count":
        return as_number(value, source=source, field=key, integer=True, minimum=0,
                         maximum=10_000_000)
    if kind == "a2a":
        return VLLM_A2A[as_str(value, source=source, field=key, choices=VLLM_A2A)]
    if kind == "eplb":
        return _eplb_redundant(value, source)
    if kind == "fraction":
        return float(as_number(value, source=source, field=key, strictly_positive=True,
                               maximum=1.0))
    if kind in ("str", "model"):
        from simulator.cost.precision import KV_CACHE_DTYPES, QUANTIZATIONS
        choices = {"quantization": QUANTIZATIONS, "kv_cache_dtype": KV_CACHE_DTYPES}.get(key)
        value = VLLM_VALUES.get(key, {}).get(value, value) if isinstance(value, str) else value
        value = as_str(value, source=source, field=key, choices=choices)
        if kind == "model" and not value.endswith((".yaml", ".yml")):
            value = resolve_model(value, method="draft_model", base_dir=".", source=source,
                                  field=key)[0]
        return value
    return spec_mapping(value, source, key)  # speculative_config, checked now


def _eplb_redundant(value: Any, source: str) -> int:
    """vLLM's ``eplb_config`` (a mapping, or the CLI's JSON string) -> its redundant experts."""
    if isinstance(value, str):
        value = parse_yaml_text(value, source=f"{source}: eplb_config")
    data = require_mapping(value, source=source, field="eplb_config")
    check_keys(data, allowed=EPLB_KEYS, source=source, prefix="eplb_config.")
    return as_number(data.get("num_redundant_experts", 0), source=source, integer=True,
                     field="eplb_config.num_redundant_experts", minimum=0, maximum=4096)


def _args_file(path: str | Path) -> tuple[str, Mapping[str, Any]]:
    source = clip(str(path), 200)
    return source, require_mapping(load_yaml_file(path), source=source)


def serving_only_keys(path: str | Path) -> list[str]:
    """The keys of a vLLM engine-arguments file that are read and ignored (SERVING_ONLY)."""
    _, data = _args_file(path)
    return [str(k) for k in data if str(k).replace("-", "_") in SERVING_ONLY]


def load_vllm_args(path: str | Path) -> dict[str, Any]:
    """A vLLM engine-arguments file (YAML or JSON, the CLI names with dashes or underscores)
    -> validated values by underscore name; serving-only keys are skipped.  Every problem in
    the file is reported at once, in one error."""
    source, data = _args_file(path)
    return vllm_args_from_mapping(data, source=source)


def vllm_args_from_mapping(data: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    """``load_vllm_args`` on a parsed mapping (``source`` names it in errors)."""
    out: dict[str, Any] = {}
    problems: list[SpecsimError] = []
    for raw_key, value in data.items():
        key = str(raw_key).replace("-", "_")
        if key in SERVING_ONLY:
            continue
        try:
            check_keys({key: value}, allowed=ENGINE_ARGS, source=source)
            if key in out:
                raise SpecsimError(f"{short(raw_key)} given twice (with dashes and "
                                   "underscores)", source=source, field=key, fix="keep one")
            out[key] = _engine_value(key, value, source)
        except SpecsimError as exc:
            problems.append(exc)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise SpecsimError(f"{len(problems)} problems: " + "; ".join(
            f"{p.field}: {p.message}" + (f" (fix: {p.fix})" if p.fix else "")
            for p in problems), source=source)
    if "quantization" in out or out.get("dtype", 0) is None:  # dtype: the activations then
        out.pop("dtype", None)
    if out.get("data_parallel_size", 1) > 1 and out.get("enable_expert_parallel"):
        _check_dp_expert_parallel(out, source)
    _check_moe_knobs(out, data, source)
    return out


def _check_moe_knobs(out: dict[str, Any], data: Mapping[str, Any], source: str) -> None:
    """vLLM's own rules for EPLB and DBO (vllm/config/parallel.py, docs/design/dbo.md), and
    vLLM's threshold defaults written in when DBO is on."""
    given = {str(k).replace("-", "_") for k in data}
    if {"eplb_config", "num_redundant_experts"} <= given:
        raise SpecsimError("the redundant experts given twice (eplb_config and the "
                           "deprecated num_redundant_experts)", source=source,
                           field="num_redundant_experts", fix="keep eplb_config only")
    if out.get("enable_eplb") and not out.get("enable_expert_parallel"):
        raise SpecsimError("EPLB places experts over an expert-parallel group",
                           source=source, field="enable_eplb",
                           fix="add enable_expert_parallel: true (vLLM requires it too)")
    if out.get("eplb_config", out.get("num_redundant_experts", 0)) and \
            not out.get("enable_eplb"):
        field = "eplb_config" if "eplb_config" in out else "num_redundant_experts"
        raise SpecsimError("redundant experts without EPLB", source=source,
                           field=field + (".num_redundant_experts" if field == "eplb_config"
                                          else ""),
                           fix="add enable_eplb: true (vLLM requires it too) or remove them")
    dbo = out.get("enable_dbo", False)
    for key, default in DBO_DEFAULTS.items():
        if key in out and not dbo:
            raise SpecsimError("a dual-batch-overlap threshold without enable_dbo",
                               source=source, field=key,
                               fix="add enable_dbo: true or remove it")
        if dbo:
            out.setdefault(key, default)
    if dbo and not (out.get("data_parallel_size", 1) > 1 and
                    out.get("enable_expert_parallel")):
        raise SpecsimError("dual-batch overlap runs under data parallelism with expert "
                           "parallelism only", source=source, field="enable_dbo",
                           fix="add data_parallel_size: N (N > 1) and "
                               "enable_expert_parallel: true, or remove enable_dbo")


def _check_dp_expert_parallel(out: Mapping[str, Any], source: str) -> None:
    """vLLM's ``--data-parallel-size N --enable-expert-parallel`` is data-parallel attention
    (each rank its own requests, the experts over all N GPUs: the scenario's
    ``parallelism.data_parallel_attention``), modelled with one GPU per attention rank; its
    scheduler limits are per rank (each DP rank runs its own engine core), so both are
    needed to size the replica's."""
    dp = out["data_parallel_size"]
    if out.get("tensor_parallel_size", 1) != 1:
        raise SpecsimError(f"data_parallel_size {dp} with tensor_parallel_size "
                           f"{out['tensor_parallel_size']} and enable_expert_parallel: "
                           "attention TP inside a data-parallel rank is not modelled",
                           source=source, field="tensor_parallel_size",
                           fix="use tensor_parallel_size: 1 (one GPU per attention rank)")
    missing = [k for k in ("max_num_seqs", "max_num_batched_tokens") if k not in out]
    if missing:
        raise SpecsimError(f"data_parallel_size {dp} with enable_expert_parallel: "
                           f"{', '.join(missing)} not given; each data-parallel rank runs "
                           "its own scheduler with these limits", source=source,
                           field=missing[0], fix="write the per-rank values vLLM runs with "
                                                 "(e.g. max_num_seqs: 128)")


def _data_parallel_attention(data: dict[str, Any], dp: int) -> None:
    """``data_parallel_size`` with ``enable_expert_parallel`` written over a raw scenario:
    DP attention over ``dp`` GPUs, the replica's limits ``dp`` x the per-rank ones."""
    par = dict(data.get("parallelism") or {})
    par.update(tensor_parallel=1, data_parallel_attention=dp, expert_parallel=True)
    data["parallelism"] = par
    b = data["batching"]
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        b[key] = b[key] * dp


def _check_data_parallel(data: Mapping[str, Any]) -> None:
    """vLLM's data-parallel ranks are independent replicas only for a dense model: it
    shards a MoE model's experts over all ranks (vllm/model_executor/layers/fused_moe,
    FusedMoEParallelConfig: the experts' TP group is DP x TP without expert parallelism),
    so the ranks step together."""
    from simulator.models.spec import list_models, load_model
    target = data.get("target")
    if isinstance(target, str) and target in list_models() and load_model(target).is_moe:
        raise SpecsimError(f"data_parallel_size on {target}, a mixture of experts: vLLM "
                           "shards its experts over every data-parallel rank, so the ranks "
                           "are not independent replicas", field="data_parallel_size",
                           fix="drop data_parallel_size and set the scenario's replicas "
                               "(separate servers), or write parallelism: {tensor_parallel: "
                               "1, data_parallel_attention: N, expert_parallel: true}")


def apply_vllm_args(data: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """A raw scenario with the engine arguments written over its fields; a
    ``speculative_config`` replaces the scenario's policy, draft and draft TP."""
    data = copy.deepcopy(dict(data))
    dp_attention = args.get("data_parallel_size", 1) > 1 and bool(
        args.get("enable_expert_parallel"))
    if args.get("data_parallel_size", 1) > 1 and not dp_attention:
        _check_data_parallel({**data, **({"target": args["model"]} if "model" in args
                                         else {})})
    for key, value in args.items():
        section, name, _ = ENGINE_ARGS[key]
        if dp_attention and key == "data_parallel_size":
            continue  # the DP ranks are one replica (below), not replicas
        if key == "speculative_config":
            data.pop("policy", None)
            data.pop("draft", None)
            if isinstance(data.get("parallelism"), Mapping):
                data["parallelism"] = {k: v for k, v in data["parallelism"].items()
                                       if k != "draft_tensor_parallel_size"}
        if section:
            data[section] = dict(data[section]) if isinstance(data.get(section), Mapping) else {}
        node = data[section] if section else data
        node[name] = copy.deepcopy(dict(value) if isinstance(value, Mapping) else value)
    if dp_attention:
        _data_parallel_attention(data, int(args["data_parallel_size"]))
    if args.get("enable_dbo"):
        data["parallelism"]["tbo_schedule"] = "vllm"
    if args.get("enable_dbo") and data["parallelism"].get("moe_dispatch",
                                                          "all_gather") == "all_gather":
        raise SpecsimError("vLLM's dual-batch overlap runs with DeepEP's all-to-all only "
                           "(docs/design/dbo.md)", field="enable_dbo",
                           fix="add all2all_backend: deepep_low_latency (decode) or "
                               "deepep_high_throughput (prefill), or set the scenario's "
                               "parallelism.moe_dispatch")
    return data
