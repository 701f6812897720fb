"""The engines' catalog (engines.yaml): its keys, and each entry loaded and checked into a
``SpecHost`` (spec_work.py) with the source of every value."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from simulator.cost.spec_work import SpecHost
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import (
    as_bool,
    as_number,
    as_str,
    check_keys,
    load_yaml_file,
    require_mapping,
)

CATALOG = Path(__file__).with_name("engines.yaml")
COUNTS = ("verify_kernels", "draft_prep_kernels", "draft_step_kernels", "tree_level_kernels",
          "rerank_kernels", "rerank_node_ops", "vocab_map_kernels", "feature_kernels",
          "fuse_kernels", "tree_verify_kernels", "syncs", "rerank_syncs", "host_steps",
          "draft_build_kernels", "draft_syncs", "draft_host_steps", "draft_step_syncs",
          "draft_step_host_steps", "tree_verify_syncs")
# Launches per decoder layer a DeepSeek-class model's decode runs beyond the cost model's
# generic MoE/MLA families, by kind (simulator/cost/engine_kernels.py); 0 where not read
DECODE_COUNTS = ("mla_pointwise_kernels", "mla_other_kernels", "moe_pointwise_kernels",
                 "moe_other_kernels", "deepep_pointwise_kernels", "eplb_map_kernels",
                 "allreduce_norm_fusion_tokens")
# The kernels an engine runs its block-FP8 linears and experts with: triton (a serial K loop
# per program, engine_kernels.py's floor), or default (DeepGEMM / CUTLASS: no floor)
FP8_GEMMS = ("default", "triton", "deepgemm")
# An eager engine's launches per decoder layer beyond the generic layer's (eager_stream.py)
LAYER_COUNTS = ("norm_kernels", "layer_kernels_before_attention",
                "layer_kernels_after_attention", "layer_host_ops")
BOOLS = ("overlap", "split_qkv_a", "draft_extend_eager", "tree_cascade", "mixed_chunk",
         "shared_experts_fusion", "absorbed_uv_o", "mem_fraction_static", "vllm_fused_moe",
         "mla_disables_chunked_prefill", "unchunked_prefill_apart", "deepgemm_decode_floor",
         "vllm_mla_module", "one_block_moe_align", "no_dp_attention",
         "piecewise_graphs", "global_mem_moe_align", "vllm_fp8_linear", "vllm_router_gemm")
MAX_COUNT = 10_000
PER_SEQ = ("sync_output_per_seq_us",)  # host us a drafting sequence adds, an iteration
# SGLang's admission-time KV reservation (simulator/engine/reserve.py): new_token_ratio's
# default start, floor factor and decay steps, schedule_conservativeness, the clip on a
# request's reserved tokens and the retraction's headroom; 0 (absent): not modelled
RESERVE = ("init_new_token_ratio", "min_new_token_ratio_factor", "new_token_ratio_decay_steps",
           "schedule_conservativeness", "clip_max_new_tokens", "retract_decode_steps")
# The prefill attention kernel an engine runs where the GPU has it (``prefill_attention``):
# fa3, FlashAttention-3 on Hopper (the profile's ``kernels.attention_prefill_fa3``); fa2, the
# FlashAttention-2-class kernel every profile prices (``kernels.attention_prefill``).  A GPU
# without an fa3 entry runs the fa2 entry whatever the engine asks.
PREFILL_KERNELS = ("fa2", "fa3")
# The methods (policy names) whose proposer an engine's code may run with its own syncs
# (``method_syncs``): vLLM V1 runs eagle, eagle3 and DeepSeek MTP through one EagleProposer
# whose branches differ, n-gram matching (prompt_lookup) on the host, Medusa its own way
SYNC_METHODS = ("eagle", "eagle3", "mtp", "prompt_lookup", "medusa")


def engine_names() -> tuple[str, ...]:
    """The engines of the catalog."""
    return tuple(_catalog())


def load_engine(name: str, *, source: str = "scenario",
                field_name: str = "execution.engine") -> SpecHost:
    """The catalog's engine ``name``."""
    catalog = _catalog()
    if name not in catalog:
        raise SpecsimError(f"unknown engine {name!r}", source=source, field=field_name,
                           fix="use one of: " + ", ".join(catalog))
    return catalog[name]


@lru_cache(maxsize=1)
def _catalog() -> dict[str, SpecHost]:
    src = str(CATALOG.name)
    data = require_mapping(load_yaml_file(CATALOG), source=src)
    return {str(k): _entry(str(k), v, src) for k, v in data.items()}


def _entry(name: str, data: Any, src: str) -> SpecHost:
    data = require_mapping(data, source=src, field=name)
    check_keys(data, allowed=("version", "prefill_attention", "fp8_gemm", "method_syncs",
                              *BOOLS, *COUNTS, *DECODE_COUNTS, *LAYER_COUNTS, *RESERVE,
                              *PER_SEQ), required=("version",), source=src, prefix=f"{name}.")
    out: dict[str, Any] = {"name": name, "version": as_str(
        data["version"], source=src, field=f"{name}.version")}
    sources = []
    if "prefill_attention" in data:
        item = require_mapping(data["prefill_attention"], source=src,
                               field=f"{name}.prefill_attention")
        check_keys(item, allowed=("value", "source"), required=("value", "source"),
                   source=src, prefix=f"{name}.prefill_attention.")
        kernel = as_str(item["value"], source=src, field=f"{name}.prefill_attention.value")
        if kernel not in PREFILL_KERNELS:
            raise SpecsimError(f"unknown prefill attention kernel {kernel!r}", source=src,
                               field=f"{name}.prefill_attention.value",
                               fix="use one of: " + ", ".join(PREFILL_KERNELS))
        out["prefill_attention"] = kernel
        sources.append("prefill_attention: " + as_str(
            item["source"], source=src, field=f"{name}.prefill_attention.source"))
    if "fp8_gemm" in data:
        item = require_mapping(data["fp8_gemm"], source=src, field=f"{name}.fp8_gemm")
        check_keys(item, allowed=("value", "source"), required=("value", "source"),
                   source=src, prefix=f"{name}.fp8_gemm.")
        out["fp8_gemm"] = as_str(item["value"], source=src, field=f"{name}.fp8_gemm.value",
                                 choices=FP8_GEMMS)
        sources.append("fp8_gemm: " + as_str(item["source"], source=src,
                                             field=f"{name}.fp8_gemm.source"))
    for key in (*BOOLS, *COUNTS, *DECODE_COUNTS, *LAYER_COUNTS, *RESERVE, *PER_SEQ):
        if key not in data:
            continue
        item = require_mapping(data[key], source=src, field=f"{name}.{key}")
        check_keys(item, allowed=("value", "source"), required=("value", "source"),
                   source=src, prefix=f"{name}.{key}.")
        where = f"{name}.{key}.value"
        out[key] = as_bool(item["value"], source=src, field=where) if key in BOOLS \
            else float(as_number(item["value"], source=src, field=where, minimum=0,
                                 maximum=MAX_COUNT)) if key in RESERVE + PER_SEQ \
            else int(as_number(item["value"], source=src, field=where, integer=True,
                               minimum=0, maximum=MAX_COUNT))
        sources.append(f"{key}: " + as_str(item["source"], source=src,
                                           field=f"{name}.{key}.source"))
    if "method_syncs" in data:
        out["method_syncs"] = _method_syncs(data["method_syncs"], name, src, sources)
    _check_reserve(out, name, src)
    if out.get("vllm_fp8_linear") and out.get("fp8_gemm") != "deepgemm":
        # the floor is charged in the DeepGEMM branch of engine_kernels.dense_floor only
        raise SpecsimError("vllm_fp8_linear prices vLLM's block-FP8 linear where it runs on "
                           "DeepGEMM", source=src, field=f"{name}.vllm_fp8_linear",
                           fix="set fp8_gemm: deepgemm beside it, or drop vllm_fp8_linear")
    return SpecHost(**out, sources=tuple(sources))


def _method_syncs(data: Any, name: str, src: str, sources: list[str]) -> tuple:
    """An entry's ``method_syncs``: {method: {value, source}} for methods of SYNC_METHODS,
    each count with its source (appended to ``sources``)."""
    data = require_mapping(data, source=src, field=f"{name}.method_syncs")
    out = []
    for method, item in data.items():
        where = f"{name}.method_syncs.{method}"
        if method not in SYNC_METHODS:
            raise SpecsimError(f"unknown method {method!r}", source=src, field=where,
                               fix="use one of: " + ", ".join(SYNC_METHODS))
        item = require_mapping(item, source=src, field=where)
        check_keys(item, allowed=("value", "source"), required=("value", "source"),
                   source=src, prefix=f"{where}.")
        out.append((method, int(as_number(item["value"], source=src, field=f"{where}.value",
                                          integer=True, minimum=0, maximum=MAX_COUNT))))
        sources.append(f"method_syncs.{method}: " + as_str(item["source"], source=src,
                                                           field=f"{where}.source"))
    return tuple(out)


def _check_reserve(out: dict[str, Any], name: str, src: str) -> None:
    """An engine's reservation keys come all together, with a decay over some steps."""
    given = [k for k in RESERVE if k in out]
    if not given:
        return
    missing = [k for k in RESERVE if k not in out]
    if missing or out["new_token_ratio_decay_steps"] <= 0:
        key = missing[0] if missing else "new_token_ratio_decay_steps"
        raise SpecsimError("an engine's KV reservation needs all of its keys and at least one "
                           "decay step", source=src, field=f"{name}.{key}",
                           fix="give " + ", ".join(RESERVE) + " (new_token_ratio_decay_steps "
                               "above 0), or none of them")
