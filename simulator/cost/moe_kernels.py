"""What a MoE or MLA layer launches beside its weight GEMMs, and the grouped expert GEMM at
the rows each expert really gets.

Small kernels.  Under CUDA graphs a kernel costs its GPU time however little it does (the
profile's per-kernel latency and floor, hardware/kernels.py), and DeepSeek-class layers launch
many.  Per layer, beside what ``token_terms`` already prices (the linears, 2 norms, 2 residual
adds, the activation, rope, attention, the collectives):

- ``moe_routing`` (every MoE layer; vLLM's ``fused_experts``, vllm/model_executor/layers/
  fused_moe/fused_moe.py): the routing kernel (``topk_softmax``, or DeepSeek's biased
  ``grouped_topk``), ``moe_align_block_size`` (the routed rows sorted by expert and padded to
  the GEMM's BLOCK_M), ``moe_sum`` (the k weighted rows of each token added), under FP8/FP4
  weights the two activation quantisations of the routed GEMMs' inputs
  (``per_token_group_quant_fp8`` of the hidden states and of the activated intermediate);
  behind DeepEP's low-latency dispatch only the routing kernel and the second quantisation
  (DeepEP casts, lays out and sums the rows itself: engine_kernels.py), with the engine's
  own launches around DeepEP and EPLB's expert map;
- ``moe_shared_add`` (MoE layers with shared experts): the routed output scaled by
  ``routed_scaling_factor`` and the shared output added, two in-place elementwise kernels
  (vLLM's ``DeepseekV2MoE.forward``); none where the engine fuses the shared experts into
  the routed ones (moe.py, "Fused shared experts"), nor their ``fp8_quant_shared``;
- ``mla_kernels`` (every MLA layer; vLLM's MLA attention with FlashMLA): the two latent
  RMSNorms (``q_a_layernorm``, ``kv_a_layernorm``), ``concat_and_cache_mla`` (the latent and
  rope key written to the cache), the split-KV combine of ``flash_mla_with_kvcache``, and
  the second of the two absorbed ``kv_b`` batched GEMMs (W_UK before attention, W_UV after;
  the linear term prices its weight once, with one kernel).  The last two run on the decode
  path only (prefill chunks attend in the expanded form, mla.py), and their bytes are a few
  KB a request, so they are priced at one request's bytes, i.e. at their latency, whatever
  the step's tokens (the token tables know the total, not how many are decodes);
- ``fp8_quant`` (W8A8/W4A4 weights): the dynamic activation quantisation before each FP8
  linear input (vLLM's Fp8LinearMethod quantises per token on the fly: one kernel per distinct
  input: the attention's input, q_b's, o_proj's, the dense MLP's or shared experts' two).

Each is priced with ``Roofline.transfer_time`` at the bytes it loads and stores, so a small
kernel costs the profile's latency and floor; without kernel shapes, its bytes at the flat
memory roof (as ``token_terms.elementwise``).  A kernel an engine's measurement times
carries that time (small_kernel.py ``SmallKernel.measured_s``) and costs at least it: vLLM
0.7.x's and SGLang 0.4.1's one-block aligns at 256 experts (engine_kernels.measured_align_s).

The grouped GEMM (``grouped_gemm_s``).  The fused-MoE GEMM runs one thread block per
(BLOCK_M rows of one expert) x (BLOCK_N columns): each touched expert's routed rows are padded
to whole BLOCK_M tiles (tile quantisation per expert, not over the step's total rows), the
tiles run in waves of ``sm_count`` blocks, and each block computes its whole tile; the
compute roof is the padded work of the waves at the GEMM kind's rate per SM.  The touched
experts' weights are read from HBM once: the blocks of an expert's M tiles share each weight
tile through the L2 cache, as the kernel's ``GROUP_SIZE_M`` ordering runs them together (16 to
64 in vLLM's tuned Mixtral H100 configs from 256 tokens up, E=8,N=7168,device_name=
NVIDIA_H100_80GB_HBM3.json).  Weights stream at the profile's
``moe.quantized_grouped_gemm_memory_efficiency`` for block-scaled FP8/FP4 weights (the
fused-MoE kernels' measured rate, below a dense GEMM's: the kernel loads and applies a scale
per 128 x 128 block in its K loop; ``moe.fp8_triton_memory_efficiency`` instead for FP8
experts reached by all-gather where a profile measured that family's tuned configs apart:
h200, from ai-dynamo/aiconfigurator's SGLang table), at the GEMM kind's memory efficiency for
16-bit weights (vLLM PR #19049's BF16 Qwen3-30B-A3B series on an A100 PCIe 40GB, 1-64
tokens, is within -3% to -8% of that from 8 tokens; tests/simulator/cost/
fused_moe_measured.py); the routed rows are gathered in and scattered out (permute and
unpermute traffic).
Its compute, for 16-bit experts where the profile measured it (``GroupedGemm``, the profile's
``moe.grouped_gemm_compute_efficiency`` and ``moe.grouped_gemm_overlap_exponent``): the Triton
kernel is not cuBLAS.  vLLM PR #24700's Mixtral-8x7B BF16 TP2 series on an H100 (tuned
config, 1-1536 tokens; tests/simulator/cost/fused_moe_measured.py) stays at the weights'
stream up to 128 tokens, then grows: 537, 662, 834, 1,123 us at 256, 512, 1,024, 1,536 tokens,
about 480 TFLOPS on the last, half the BF16 peak where dense GEMMs reach 0.78 of it, and at
256-512 tokens (64-128 rows per expert, the ridge point) above both roofs: the weight tiles'
loads and the tiles' MMAs overlap only in part.  So the compute roof runs at the kernel's
own fraction of the peak, and the two roofs combine as ``(c^p + m^p)^(1/p)`` (p 1: they add;
p -> infinity: their max), both fitted jointly to that series; the max of the roofs at the
GEMM kind's rate priced it 19-29% too cheap from 512 tokens, so a step carrying a prefill
chunk was priced too cheap.  Decode-sized calls, far below the ridge, move by under 3%.
FP8 experts, per kernel family (``moe.fp8_triton_*``, ``moe.fp8_deepgemm_*``): behind
DeepEP's dispatch (``moe_dispatch`` all_to_all or deepep_normal) SGLang runs DeepGEMM's
grouped GEMMs (contiguous layout at prefill, masked at decode), fitted on the grouped rows of
DeepGEMM's README (H800: 815-1,297 TFLOPS, 0.41-0.66 of the FP8 peak); reached by all-gather,
vLLM's Triton fused_moe, fitted on vLLM PR #24700's Qwen3-30B-A3B FP8 H100 series (about 200
TFLOPS at 4,096 tokens) jointly with SGLang PR #11730's decode-sized one (untuned
configs; h200's from its tuned kernel, 0.24 of the peak, aiconfigurator's table; vLLM's
own kernel, 24-52% slower there from 1,024 tokens, its own pair ``moe.fp8_vllm_*`` where the
engine runs it, ``vllm_fused_moe``).  The max of the roofs at the GEMM kind's 0.78 was 10-29%
too cheap on the first, up to 59% on the second.
There the efficiency bounds the routed rows' own FLOPs, beside the padded tiles' waves at the
GEMM kind's rate (``GroupedGemm.on_routed_rows``): a wave of one 16-row tile per expert costs
what it did, so a decode-sized call keeps its price (the Triton kernel's tenth of the peak
is a throughput over many tiles, not one tile's time).  FP4 experts: no measured numbers.
BLOCK_M is 16 while an expert gets at most 16 rows and 64 beyond (the tuned configs of small
batches: BLOCK_SIZE_M 16 up to 32 tokens in that Mixtral file and at 1-16 tokens in
sgl-project/sglang PR #11816's DeepSeek-R1 runs; 64 in vLLM's ``get_default_config`` for FP8
block weights); BLOCK_N 128 (the FP8 block scale's 128 columns).  Where few rows reach each
expert the weights bound the time and the tile choice does not matter.

The busiest device (``busiest_experts``, ``expected_max_count``).  Under expert parallelism
every rank waits for the slowest before the layer's all-reduce, so the rank with the most
touched experts is priced:
each expert is touched with probability ``1 - (1 - p_e)^T`` (simulator/cost/moe.py), experts
independently (the k-of-E picks of one token are slightly anti-correlated: an approximation),
rank r holding experts [r E/ep, (r+1) E/ep) as vLLM assigns them; the count on each rank is
Poisson-binomial (exact by convolution) and the expected maximum over the ranks is
``sum_j 1 - prod_r P(count_r < j)``.  Its rows are the touched experts' share of the mean
rank's; where a skewed routing or EPLB's placement makes one rank's expected rows larger
(``busiest_rank_share``), those rows (simulator/cost/moe.py ``MoeShape.rank_share``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hardware.kernels import GEMM, OTHER
from hardware.roofline import fast_ndim
from simulator.cost.engine_kernels import (
    engine_kernels,
    ep_kernels,
    measured_align_s,
    mla_module_terms,
    split_qkv_a_terms,
)
from simulator.cost.precision import compute_dtype
from simulator.cost.small_kernel import SmallKernel

BLOCK_M_SMALL, BLOCK_M, BLOCK_N = 16, 64, 128
QUANT_GROUP = 128          # FP8 block scales: one fp32 scale per 128 activations
# the bytes the generic moe_align_block_size is priced at, a routed row (3 x 4 bytes)
ALIGN_BYTES = 4.0 * 3


def grouped_gemm_s(roof, eta, experts, rows, n: float, k: float, wb: float, ab: float,
                   kernel: "GroupedGemm | None" = None):
    """GPU seconds of one grouped GEMM: ``experts`` touched (fractional: an expectation) with
    ``rows`` routed rows between them, each expert an ``[m x k] @ [k x n]`` of ``wb``-byte
    weights and ``ab``-byte activations (module docstring); arrays broadcast.  ``kernel``:
    the fused-MoE kernel's own compute efficiency and roof overlap (None: the GEMM kind's
    rate, the roofs' max)."""
    crate, mrate, latency, floor = roof.kind_rates(GEMM)
    if eta is not None:
        mrate = roof.bandwidth_bytes_per_s * eta
    own = None if kernel is None else kernel.compute_efficiency
    if own is not None and not kernel.on_routed_rows:
        crate = roof.peak_flops_per_s * own
    sms = roof.kernels.sm_count
    experts = np.asarray(experts, dtype=np.float64)
    rows = np.asarray(rows, dtype=np.float64)
    m_e = rows / np.maximum(experts, 1e-12)
    bm = np.where(m_e <= BLOCK_M_SMALL, BLOCK_M_SMALL, BLOCK_M)
    blocks = experts * np.ceil(m_e / bm) * np.ceil(n / BLOCK_N)
    compute = np.ceil(blocks / sms) * (2.0 * bm * BLOCK_N * k) / (crate / sms)
    if own is not None and kernel.on_routed_rows:  # the kernel's throughput on real rows
        compute = np.maximum(compute, 2.0 * rows * n * k / (roof.peak_flops_per_s * own))
    hbm = (experts * n * k * wb + rows * (n + k) * ab) / mrate
    p = None if kernel is None else kernel.overlap_exponent
    return np.where(rows > 0, np.maximum(_roofs(compute, hbm, p) + latency, floor), 0.0)


def _roofs(compute, memory, p: float | None):
    """The two roofs together: their max (``p`` None), else ``(c^p + m^p)^(1/p)``, written
    as ``max * (1 + (min/max)^p)^(1/p)`` so that tiny times do not underflow."""
    top = np.maximum(compute, memory)
    if p is None:
        return top
    low = np.minimum(compute, memory) / np.maximum(top, 1e-300)
    return top * (1.0 + low ** p) ** (1.0 / p)


@dataclass(frozen=True)
class GroupedGemm:
    """A grouped-GEMM kernel family's own numbers where a profile measured them (its
    ``moe:`` block: the BF16 Triton kernel, the FP8 Triton kernel, DeepGEMM): the fraction
    of the peak its compute reaches, and p of its roofs' overlap (module docstring); None:
    the GEMM kind's rate, the roofs' max."""

    compute_efficiency: float | None = None
    overlap_exponent: float | None = None
    # the efficiency bounds the routed rows' own work (the FP8 fits) beside the padded tiles'
    # waves at the GEMM kind's rate, instead of replacing that rate (the BF16 fit)
    on_routed_rows: bool = False


def grouped_gemm_kernel(cm) -> GroupedGemm | None:
    """The profile's grouped-GEMM numbers for the model's experts and the kernel family that
    runs them (module docstring): 16-bit experts, the Triton kernel's BF16 fit; FP8
    block-scaled experts reached by all-gather, the Triton fused_moe FP8 fit (vLLM's own,
    ``moe.fp8_vllm_*``, where the engine runs it, ``vllm_fused_moe``, and the profile measured
    it apart from SGLang's); behind
    DeepEP's dispatch (``moe_dispatch`` all_to_all or deepep_normal), DeepGEMM's; other
    formats (FP4) or a profile without the numbers: None."""
    hw, dtype = cm.hardware, cm.model.dtype
    if compute_dtype(dtype) == dtype:
        pair = (hw.moe_grouped_gemm_compute_efficiency, hw.moe_grouped_gemm_overlap_exponent)
    elif dtype != "fp8":
        return None
    elif cm.parallel.moe_dispatch == "all_gather":
        pair = (hw.moe_fp8_triton_compute_efficiency, hw.moe_fp8_triton_overlap_exponent)
        if cm.execution.spec.vllm_fused_moe and hw.moe_fp8_vllm_compute_efficiency is not None:
            pair = (hw.moe_fp8_vllm_compute_efficiency, hw.moe_fp8_vllm_overlap_exponent)
    else:
        pair = (hw.moe_fp8_deepgemm_compute_efficiency, hw.moe_fp8_deepgemm_overlap_exponent)
    if pair == (None, None):
        return None
    return GroupedGemm(*pair, on_routed_rows=compute_dtype(dtype) != dtype)


def streaming_efficiency(cm) -> float | None:
    """The fraction of the bandwidth the grouped GEMMs stream expert weights at: the profile's
    measured rate for block-scaled 8-/4-bit weights (FP8 experts reached by all-gather, the
    Triton family: its own rate where the profile measured one); None (the GEMM kind's
    memory efficiency) for 16-bit weights or a profile without one (module docstring)."""
    hw, dtype = cm.hardware, cm.model.dtype
    if compute_dtype(dtype) == dtype:
        return None
    if (dtype == "fp8" and cm.parallel.moe_dispatch == "all_gather"
            and hw.moe_fp8_triton_memory_efficiency is not None):
        return hw.moe_fp8_triton_memory_efficiency
    return hw.moe_quantized_gemm_efficiency


def _transfer(cm, nbytes, kind: str = OTHER, rows=None):
    """One small kernel's GPU seconds at ``nbytes`` (tokens an array or a float)."""
    if cm._shapes:
        return cm._roof.transfer_time(nbytes, kind, rows=rows)
    return np.where(np.asarray(nbytes) > 0, cm._roof.memory_time(nbytes), 0.0)


def _quant_bytes(cm, tokens, width: float):
    """Bytes of one dynamic FP8 activation quantisation of ``width`` elements per token:
    16-bit in, 8-bit out, one fp32 scale per 128."""
    return tokens * width * (cm._b + 1.0 + 4.0 / QUANT_GROUP)


def small_kernel_terms(cm, tokens) -> list[tuple[str, object, object, int, int]]:
    """``(name, bytes, GPU s, kernels, layers)`` per forward of each family of small kernels
    (module docstring), the GPU seconds and bytes for one layer; ``tokens`` a float or an
    array (the same operations either way, so the tables and the scalar path agree)."""
    m, T, b = cm.model, tokens, cm._b
    quantised = compute_dtype(m.dtype) != m.dtype  # activations quantised on the fly
    out = [] if cm._moe is None else _moe_kernels(cm, T, cm._moe)
    if m.is_mla:
        hd, L, R, v = m.num_heads / cm._tp, m.kv_lora_rank, m.qk_rope_head_dim, m.value_head_dim
        kern = [SmallKernel(T * m.q_lora_rank * 2 * b, "norm")] if m.q_lora_rank else []
        one = np.minimum(T, 1.0)  # decode-path kernels: one request's bytes (see below)
        kern += [SmallKernel(T * L * 2 * b, "norm"), SmallKernel(T * (L + R) * 2 * b),
                 SmallKernel(one * hd * L * 4.0 * 2), SmallKernel(one * hd * (L + v) * b)]
        out.append(("mla_kernels", kern, m.num_layers))
    if quantised:
        for name, widths, layers in _quant_inputs(cm):
            out.append((name, [SmallKernel(_quant_bytes(cm, T, w)) for w in widths], layers))
    out += engine_kernels(cm, T)  # the engine's own launches beside these (engines.yaml)
    return _priced(cm, T, out) + split_qkv_a_terms(
        cm, T, _quant_bytes(cm, T, m.hidden_size)) + mla_module_terms(cm, T)


def _priced(cm, T, out) -> list[tuple[str, object, object, int, int]]:
    return [(name, sum(k.nbytes for k in kern), sum(_kernel_s(cm, k, T) for k in kern),
             len(kern), layers) for name, kern, layers in out]


def _kernel_s(cm, k: SmallKernel, T):
    """One small kernel's GPU seconds at ``T`` tokens: its bytes at its kind's rates, at
    least its measured time where it has one, nothing where it moves no bytes
    (small_kernel.py)."""
    s = _transfer(cm, k.nbytes, OTHER if k.kind is None else k.kind,
                  rows=None if k.kind is None else T)
    if k.measured_s is None:
        return s
    if fast_ndim(k.nbytes) == 0:
        return max(float(s), k.measured_s) if k.nbytes > 0 else 0.0
    return np.where(np.asarray(k.nbytes) > 0, np.maximum(s, k.measured_s), 0.0)


def _moe_kernels(cm, T, s, low_latency: bool = False, eplb: bool = False, rows=None,
                 received=None) -> list[tuple]:
    """The ``moe_routing`` and ``moe_shared_add`` families of MoeShape ``s`` at ``T`` tokens;
    ``low_latency``: behind DeepEP's low-latency dispatch, which quantises, lays out and sums
    the routed rows itself (no align, no moe_sum, no quantisation of the hidden states), with
    the engine's own launches around it (engine_kernels.ep_kernels, ``eplb`` its map).
    ``rows``: the routed rows the device's experts compute (None: ``T k / ep``, every rank
    routing the same ``T`` tokens), which the second quantisation reads; ``received``: the
    tokens DeepEP's normal dispatch delivered (None: ``T``): SGLang's contiguous path scatters
    the FP8 rows by expert and gathers the sums into them (python/sglang/srt/layers/moe/
    ep_moe/layer.py ``forward_deepgemm_contiguous``; test_wideep_moe_measured.py)."""
    b, h = cm._b, cm._h
    E, k = s.num_experts, s.k
    quantised = compute_dtype(cm.model.dtype) != cm.model.dtype  # activations on the fly
    route = [SmallKernel(T * (E * 4.0 + k * 8.0))]
    rows = T * k / s.ep if rows is None else rows
    down_q = [SmallKernel(_quant_bytes(cm, rows, s.down_in))] if quantised else []
    if low_latency:
        kern = route + down_q
    else:
        out, scatter = (T, []) if received is None else (received, [SmallKernel(
            2 * rows * h * (1 + 4.0 / QUANT_GROUP))])  # FP8 rows in and out
        # the align at its bytes, or at its measured time where the engine's is measured
        kern = route + scatter + [SmallKernel(T * k * ALIGN_BYTES, None,
                                              measured_align_s(cm, s)),
                                  SmallKernel(T * k * h * b + out * h * b)] + (
            [SmallKernel(_quant_bytes(cm, T, h))] if quantised else []) + down_q
    kern += ep_kernels(cm, T, low_latency, eplb)
    out = [("moe_routing", kern, s.layers)]
    if cm.model.shared_experts and not s.fused_shared:  # routed output scaled, shared
        # output added (in place); fused, the shared rows are summed with the routed ones
        out.append(("moe_shared_add", [SmallKernel(2 * T * h * b), SmallKernel(3 * T * h * b)],
                    s.layers))
    return out


def moe_kernel_terms(cm, tokens, shape, low_latency: bool = False, eplb: bool = False,
                     rows=None, received=None) -> list[tuple[str, object, object, int, int]]:
    """``small_kernel_terms``' MoE families for the experts' placement ``shape`` (DP
    attention prices them outside its ranks' forwards: dp_attention.py), behind DeepEP's
    low-latency dispatch or not, with EPLB's expert map or not (``_moe_kernels``)."""
    return _priced(cm, tokens, _moe_kernels(cm, tokens, shape, low_latency, eplb, rows,
                                            received))


def small_kernel_count(cm) -> int:
    """Kernels per forward of the small-kernel families (the eager launch count)."""
    return sum(kernels * layers for *_, kernels, layers in small_kernel_terms(cm, 1.0))


def _quant_inputs(cm) -> list[tuple[str, list[float], int]]:
    """The distinct inputs of a quantised model's dense FP8 linears, by the layers they are in."""
    m, tp = cm.model, cm._tp
    if m.is_mla:
        attn = [m.hidden_size] + ([m.q_lora_rank] if m.q_lora_rank else []) \
            + [m.num_heads * m.value_head_dim / tp]
    else:
        attn = [m.hidden_size, m.q_size / tp]
    out = [("fp8_quant", attn, m.num_layers)]
    dense = m.num_layers - m.moe_layers
    if dense:
        out.append(("fp8_quant_mlp", [m.hidden_size, m.ffn_size / tp], dense))
    if m.is_moe and m.shared_experts and not (cm._moe is not None and cm._moe.fused_shared):
        out.append(("fp8_quant_shared",
                    [m.hidden_size, m.shared_experts * m.expert_ffn_size / tp], m.moe_layers))
    return out
