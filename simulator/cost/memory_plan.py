"""Memory plan: weights + activation headroom + KV cache against device capacity.

As vLLM does it: ``usable = capacity * gpu_memory_utilization``; the weights of every model
on the device (target shard, draft, heads; at their storage dtype: fp8 and fp4 weights hold
their bytes) and an activation headroom are subtracted; what is left is the KV cache (at its
``kv_cache_dtype``; MLA's latent whole on every TP rank), cut into blocks of ``block_size``
tokens.  A deployment that does not
fit is an error that says by how much it misses and what would fix it.

Under data-parallel attention (``data_parallel_attention`` N > 1) every GPU is one attention
rank: it holds the attention, dense layers, embedding and LM head whole (replicated, as vLLM
places them at attention TP 1) and 1/N of each MoE layer's routed experts (EP over the N
GPUs; a shared expert and the router are dense, replicated), and the KV of its own requests
only.  The replica's KV pool is the N ranks' blocks together (``kv_blocks``): the engine
admits against the pool, an approximation of the engines' per-rank admission (a rank whose
requests are long fills before the others).

As SGLang does it (``mem_fraction_static``): the pool is what is free after the weights less
``(1 - mem_fraction_static)`` of the GPU (model_executor/model_runner.py
``profile_max_num_token``: ``rest_memory = available_gpu_memory - total_gpu_memory * (1 -
mem_fraction_static)``, available measured after loading the weights), so the budget is
``capacity * mem_fraction_static - weights``; activations and CUDA graphs live in the rest,
which SGLang sizes by a heuristic (``sglang_mem_fraction_static``), not by a profiling run.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

from hardware.profile import GIB, HardwareProfile
from simulator.cost.parallelism import Parallelism
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import ModelSpec

MIB = float(1 << 20)
# SGLang's reserve for a speculative method's draft and its graphs (MiB; server_args.py)
SGLANG_SPEC_RESERVE_MIB = {"none": 0.0, "ngram": 0.0, "eagle": 2048.0, "standalone": 6144.0}


@dataclass(frozen=True)
class MemoryPlan:
    """Where one device's memory goes (bytes), and the KV tokens and blocks that fit."""

    capacity_bytes: float
    usable_bytes: float
    weight_bytes: float
    activation_bytes: float
    kv_budget_bytes: float
    kv_bytes_per_token: float  # per device, all models whose KV grows with the request
    block_size: int
    kv_blocks: int            # the replica's: every DP attention rank's blocks together
    kv_ranks: int = 1         # DP attention ranks, each holding kv_blocks / kv_ranks

    @property
    def kv_tokens(self) -> int:
        return self.kv_blocks * self.block_size


def activation_bytes(model: ModelSpec, parallel: Parallelism, max_batched_tokens: int,
                     logits_tokens: int | None = None) -> float:
    """Peak activation headroom of one forward of ``max_batched_tokens`` tokens.

    Hidden states and MLP intermediates of the widest layer (bf16/fp16) for every token, plus
    fp32 logits of the tokens that are sampled (``logits_tokens``; vLLM computes logits only
    for the last token of each prefill and the decode/verify tokens), per device.  A
    conservative stand-in for vLLM's profiling run.
    """
    dp = parallel.data_parallel_attention
    if dp > 1:
        return _dp_rank_activation_bytes(model, parallel, max_batched_tokens, logits_tokens)
    tp = parallel.tensor_parallel
    width = model.ffn_size
    if model.is_moe:  # a MoE layer's k routed and shared experts' intermediates
        moe = (model.experts_per_token + model.shared_experts) * model.expert_ffn_size
        width = max(moe, width if model.dense_layers else 0)
    hidden = (4 * model.hidden_size + 2 * (2 if model.gated_mlp else 1) * width / tp) \
        * model.activation_bytes
    logits = max_batched_tokens if logits_tokens is None else min(logits_tokens,
                                                                   max_batched_tokens)
    return float(max_batched_tokens) * hidden + float(logits) * 4.0 * model.vocab_size / tp


def _dp_rank_activation_bytes(model: ModelSpec, parallel: Parallelism,
                              max_batched_tokens: int, logits_tokens: int | None) -> float:
    """One DP attention rank's activations: its share of the replica's token budget (SGLang
    gives each DP rank ``chunked_prefill_size // dp_size`` and ``max_running_requests //
    dp_size``, server_args.py ``_handle_data_parallelism``; a vLLM DP rank has its own
    budget), plus, under the all-gather dispatch, the gathered 16-bit hidden states of every
    rank's tokens that the MoE layer holds (simulator/cost/dp_attention.py)."""
    dp = parallel.data_parallel_attention
    rank = dataclasses.replace(parallel, data_parallel_attention=1, expert_parallel=1)
    share = -(-int(max_batched_tokens) // dp)
    logits = None if logits_tokens is None else -(-int(logits_tokens) // dp)
    act = activation_bytes(model, rank, share, logits)
    if parallel.moe_dispatch == "all_gather":
        act += float(max_batched_tokens) * model.hidden_size * model.activation_bytes
    return act


def kv_bytes_per_device(model: ModelSpec, tp: int, pp: int = 1) -> float:
    """KV-cache bytes per token of context on one device: K and V split over the TP ranks by
    heads (and over pipeline stages by layers); MLA's latent is NOT split over TP: every TP
    rank holds the whole latent, as vLLM's MLA backends do."""
    return model.kv_bytes_per_token() / (pp if model.is_mla else tp * pp)


def replicated_bytes(model: ModelSpec) -> tuple[float, float]:
    """(bytes ``weight_bytes`` counts, bytes each TP rank holds) of the weights that are not
    split over tensor-parallel ranks: MLA's latent down-projections (q_a_proj and
    kv_a_proj_with_mqa, ReplicatedLinear in SGLang 0.5.3's models/deepseek_v2.py and in vLLM's
    fused_qkv_a_proj with disable_tp: simulator/cost/mla.py) at the weights' dtype, and a MoE
    layer's router at 16 bits (both engines keep the gate unquantised, whole on every rank:
    layer_ops.linear_ops prices it so).  A decoder's only (heads and EAGLE layers: none)."""
    if model.kind != "decoder":
        return 0.0, 0.0
    latent = model.num_layers * model.hidden_size * (
        model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim) if model.is_mla else 0
    router = model.moe_layers * model.hidden_size * model.num_experts
    counted = (latent + router) * model.dtype_bytes
    return float(counted), float(latent * model.dtype_bytes + router * 2.0)


def weights_per_device(model: ModelSpec, parallel: Parallelism, tp: int | None = None) -> float:
    """Bytes of ``model``'s weights on one device: sharded over the devices (TP x PP) but for
    the TP-replicated ones (``replicated_bytes``, split over the PP stages only), or under DP
    attention replicated but for the routed experts, spread over the N ranks (``tp``: the
    model's own TP degree, for a draft)."""
    dp = parallel.data_parallel_attention
    if dp == 1:
        counted, held = replicated_bytes(model)
        n = parallel.devices if tp is None else tp
        stages = 1 if tp is not None else parallel.pipeline_parallel
        return (model.weight_bytes() - counted) / n + held / stages
    expert = float(model.moe_layers * model.expert_params() * model.dtype_bytes)
    dense = model.weight_bytes() - expert * model.num_experts
    # the busiest GPU's experts: ceil(E / N) where N does not divide E
    return dense / (tp or parallel.tensor_parallel) + expert * -(-model.num_experts // dp)


def _fit_fix(target: ModelSpec, parallel: Parallelism, rest: float, usable: float) -> str:
    """What would make ``target`` fit beside ``rest`` bytes: a wider TP group (doubling), or
    under DP attention more ranks (the experts spread wider; the dense weights stay whole)."""
    dp = parallel.data_parallel_attention
    if dp > 1:
        need = dp
        while need < 64 and weights_per_device(target, dataclasses.replace(
                parallel, data_parallel_attention=need + 1, expert_parallel=need + 1)) \
                + rest > usable:
            need += 1
        return (f"use data_parallel_attention >= {need + 1} (with expert_parallel), a device "
                "with more memory, or a smaller max_num_batched_tokens")
    need_tp = parallel.devices
    counted, held = replicated_bytes(target)
    while need_tp < 64 and (target.weight_bytes() - counted) / need_tp + held + rest > usable:
        need_tp *= 2
    return (f"use tensor_parallel >= {need_tp}, a device with more memory, offloading "
            "(offload_fraction), or a smaller max_num_batched_tokens")


def sglang_cuda_graph_max_bs(capacity_mib: float, tp: int) -> int:
    """SGLang 0.5.3's default ``cuda_graph_max_bs`` by GPU memory (MiB, as nvidia-smi
    reports it) and TP size (python/sglang/srt/server_args.py ``_handle_gpu_memory_settings``:
    8 under 20 GiB; 16 / 80 under 35; 32 / 160 under 60; 256 / 512 under 160, tp < 4 / else;
    512 above)."""
    small = tp < 4
    for below, pair in ((20, (8, 8)), (35, (16, 80)), (60, (32, 160)), (160, (256, 512))):
        if capacity_mib < below * 1024:
            return pair[0] if small else pair[1]
    return 512


def sglang_mem_fraction_static(capacity_bytes: float, *, chunked_prefill_size: int, tp: int,
                               pp: int = 1, dp_attention: bool = False, dp_size: int = 1,
                               speculative: str = "none") -> float:
    """SGLang 0.5.3's default ``mem_fraction_static`` (server_args.py
    ``_handle_gpu_memory_settings``, read in the PyPI sglang==0.5.3 wheel): a reserve in MiB
    of 512 + 1.5 per token of ``max(chunked_prefill_size, 2048)`` (activations) + 2 per
    ``cuda_graph_max_bs`` + 1024 per 8 GPUs of tp x pp; with ``--enable-dp-attention``
    3 x cuda_graph_max_bs x dp_size more, and 1.5 x that product again above 300; at least
    10 GiB on a GPU over 60 GiB; 2 GiB more for an EAGLE-type draft, 6 GiB for a separate
    draft model (``speculative``: SGLANG_SPEC_RESERVE_MIB).  The fraction is ``(capacity -
    reserve) / capacity`` rounded to 3 places.  It runs before ``_handle_data_parallelism``,
    which turns DP attention off where dp_size is 1: the flag's reserve is taken even then."""
    if speculative not in SGLANG_SPEC_RESERVE_MIB:
        raise SpecsimError(f"unknown speculative kind {speculative!r}", field="speculative",
                           fix="use one of: " + ", ".join(SGLANG_SPEC_RESERVE_MIB))
    mib = capacity_bytes / MIB
    bs = sglang_cuda_graph_max_bs(mib, tp)
    reserve = 512.0 + max(int(chunked_prefill_size), 2048) * 1.5 + bs * 2 + tp * pp / 8 * 1024
    if dp_attention:
        reserve += bs * dp_size * 3
        if bs > 300:
            reserve += bs * dp_size * 1.5
    if mib > 60 * 1024:
        reserve = max(reserve, 10 * 1024.0)
    reserve += SGLANG_SPEC_RESERVE_MIB[speculative]
    return round((mib - reserve) / mib, 3)


def plan_memory(hardware: HardwareProfile, target: ModelSpec, parallel: Parallelism,
                *, extra_models: Sequence[ModelSpec] = (), kv_models: Sequence[ModelSpec] = (),
                gpu_memory_utilization: float = 0.9, block_size: int = 16,
                max_batched_tokens: int = 2048, logits_tokens: int | None = None,
                mem_fraction_static: float | None = None) -> MemoryPlan:
    """Plan one device's memory for ``target`` sharded by ``parallel`` plus co-located drafts.

    With ``mem_fraction_static`` the KV budget is SGLang's, ``capacity * fraction - weights``
    (no activation headroom subtracted: SGLang's reserve holds it); else vLLM's.

    ``extra_models`` live beside the target (a draft model, Medusa heads, an EAGLE layer),
    sharded over ``parallel.draft_tp`` ranks (vLLM's ``draft_tensor_parallel_size``; 1:
    replicated on each device); ``kv_models`` are the extra models that keep their own KV
    cache (a draft model, an EAGLE layer), sharded alike.
    """
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise SpecsimError(f"must be in (0, 1], got {gpu_memory_utilization!r}",
                           field="gpu_memory_utilization")
    if block_size < 1:
        raise SpecsimError("must be >= 1", field="block_size")
    devices = parallel.devices
    capacity = hardware.memory_bytes
    fraction = gpu_memory_utilization if mem_fraction_static is None else mem_fraction_static
    if not 0.0 < fraction <= 1.0:
        raise SpecsimError(f"must be in (0, 1], got {fraction!r}", field="mem_fraction_static")
    usable = capacity * fraction
    target_w = weights_per_device(target, parallel) * (1.0 - parallel.offload_fraction)
    dtp = parallel.draft_tp
    weights = target_w + sum(weights_per_device(m, parallel, dtp) for m in extra_models)
    act = activation_bytes(target, parallel, max_batched_tokens, logits_tokens) \
        if mem_fraction_static is None else 0.0
    kv_per_token = kv_bytes_per_device(target, parallel.tensor_parallel,
                                       parallel.pipeline_parallel) + \
        sum(kv_bytes_per_device(m, dtp) for m in kv_models)
    budget = usable - weights - act
    min_kv = kv_per_token * block_size
    if budget < min_kv:
        missing = min_kv - budget
        raise SpecsimError(
            f"{target.name} on {hardware.name} x{devices} does not fit: weights "
            f"{weights / GIB:.2f} GiB + activations {act / GIB:.2f} GiB + one KV block "
            f"{min_kv / GIB:.4f} GiB exceed the usable {usable / GIB:.2f} GiB "
            f"({fraction:.0%} of {capacity / GIB:.1f} GiB) by "
            f"{missing / GIB:.2f} GiB",
            field="parallelism",
            fix=_fit_fix(target, parallel, weights - target_w + act + min_kv, usable))
    ranks = parallel.data_parallel_attention
    blocks = int(math.floor(budget / min_kv)) * ranks
    return MemoryPlan(capacity_bytes=capacity, usable_bytes=usable, weight_bytes=weights,
                      activation_bytes=act, kv_budget_bytes=budget,
                      kv_bytes_per_token=kv_per_token, block_size=block_size, kv_blocks=blocks,
                      kv_ranks=ranks)
