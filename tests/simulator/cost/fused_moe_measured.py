"""Published timings of the fused-MoE Triton kernel at small batch, and the cost model's price
of the same call (the kernels one ``fused_moe`` benchmark call times, under a CUDA graph).

Each series is a kernel benchmark's "Kernel time" (us) by batch size (tokens), with the
tensor-parallel shard it ran: the call times the routing, ``moe_align_block_size``, the two
FP8 activation quantisations, the two grouped GEMMs, the SiLU-and-multiply and ``moe_sum``.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from hardware.profile import load_profile
from simulator.cost import moe, moe_kernels
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import resolve_execution
from simulator.cost.parallelism import Parallelism
from simulator.cost.precision import with_precision
from simulator.cost.spec_catalog import load_engine
from simulator.models.spec import load_model

# sgl-project/sglang PR #11730 ("add tuned fuse moe kernel for qwen3 235b fp8 on h200"):
# tuning_fused_moe_triton.py --model Qwen/Qwen3-235B-A22B-Instruct-2507 --tp-size 8
# --dtype fp8_w8a8, the "Without tuned kernel" block, H200.
QWEN3_235B_H200 = ("h200", "qwen3-235b-a22b", 8, "fp8",
                   {1: 31.70, 2: 36.56, 4: 49.67, 8: 66.87, 16: 92.36, 24: 117.38,
                    32: 124.99})
# sgl-project/sglang PR #11816 (comment by b8zhong, 2025-10-19): tuning_fused_moe_triton.py
# --model deepseek-ai/DeepSeek-R1 --tp 8 --dtype w8a8, the "Before" block, B200 (the PR's
# "b200 fp8 dpsk"); DeepSeek-R1 has DeepSeek-V3's shapes.
DEEPSEEK_R1_B200 = ("b200", "deepseek-v3", 8, "fp8",
                    {1: 52.65, 2: 60.35, 4: 79.09, 8: 95.47, 16: 138.68})
# vllm-project/vllm PR #19049 ("Create E=128,N=768,device_name=NVIDIA_A100-PCIE-40GB.json"),
# "Before this PR" (default config): Qwen3-30B-A3B in bf16 at TP 1 on an A100 PCIe 40GB,
# priced on the a100-40gb profile (the SXM4 card: the same 1,555 GB/s and 108 SMs).
QWEN3_30B_A100_BF16 = ("a100-40gb", "qwen3-30b-a3b", 1, "bf16",
                       {1: 109.21, 2: 159.81, 4: 268.89, 8: 403.13, 16: 611.19, 24: 730.19,
                        32: 808.53, 48: 885.97, 64: 917.45})
# vllm-project/vllm PR #24700 ("[Perf] Improve default fused moe configs by analyzing tuned
# configs", mgoin, 2025-09-11), "Benchmarks on H100", "Mixtral BF16", the "# Tuned Config"
# block: benchmark_moe.py --model=mistralai/Mixtral-8x7B-Instruct-v0.1 -tp=2 with vLLM's
# tuned E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json (the config vLLM serves Mixtral
# TP2 on H100 with).  Prefill-sized batches: from 256 tokens (64+ rows per expert) the call
# grows with the tokens while the weights' stream stays flat.
MIXTRAL_H100_BF16 = ("h100-sxm", "mixtral-8x7b", 2, "bf16",
                     {1: 144.03, 2: 229.28, 4: 351.10, 8: 434.98, 16: 471.49, 24: 478.27,
                      32: 487.35, 48: 487.85, 64: 483.14, 96: 494.42, 128: 491.39,
                      256: 536.77, 512: 662.33, 1024: 833.72, 1536: 1122.93})
# ai-dynamo/aiconfigurator (Apache-2.0, commit 095f58a51c4ca8e61b66ec108d86f223f8d559ce),
# aic-core/src/aiconfigurator_core/systems/data/h100_sxm/moe/vllm/0.14.0/moe_perf.parquet:
# vLLM 0.14.0's vllm_fused_moe on an 'NVIDIA H100 80GB HBM3', bfloat16, hidden 4096, inter
# 14336, 8 experts top-2, moe_tp_size 2, moe_ep_size 1, 'balanced' routing (latency ms x
# 1e3), 16-1024 tokens: Mixtral-8x7B TP2 as the inference-perf experiments served it, not
# fitted on.  Below 16 tokens its balanced routing touches every expert (4 tokens: 481.6 us
# where PR #24700's random routing gave 351.1), which the priced expectation does not.
MIXTRAL_H100_VLLM014 = ("h100-sxm", "mixtral-8x7b", 2, "bf16",
                        {16: 487.4, 32: 489.7, 48: 491.1, 64: 493.5, 80: 497.0, 96: 503.3,
                         128: 502.4, 160: 510.3, 192: 513.7, 256: 533.1, 320: 606.2,
                         384: 617.9, 512: 600.6, 768: 725.7, 1024: 686.5})
# vllm-project/vllm PR #44818 ("[Perf] Add H200 BF16 fused MoE configs for Gemma4
# (E=128,N=704)", LucasWilkinson, 2026-06-08), the "Tuned (us)" column of its microbenchmark
# (E=128, N=704, K=2816, top_k=8, BF16, H200, 500 iterations a point), from 256 tokens: not
# fitted on (the H200 carries h100-sxm's kernel numbers).  The catalog has no Gemma 4, so the
# call is priced on qwen3-30b-a3b's MoE (128 experts, top-8, gated) at Gemma 4's hidden size
# and expert width (the sixth field).  Below 256 tokens the table is flat at 185-204 us from
# 1 to 8 tokens, where the touched experts' weights take 20-64 us at the H200's 4.8 TB/s: a
# floor of the harness, not of the kernel, so those sizes are left out.
GEMMA4_H200_BF16 = ("h200", "qwen3-30b-a3b", 1, "bf16",
                    {256: 419.6, 512: 442.3, 1024: 528.4, 1536: 582.0, 2048: 728.2,
                     3072: 962.9, 4096: 1189.6},
                    (("hidden_size", 2816), ("expert_ffn_size", 704)))


def kernel_fields(efficiency, exponent) -> dict:
    """The profile fields of every grouped-GEMM family set to one pair (a call prices with the
    family of its experts' dtype and dispatch only: moe_kernels.grouped_gemm_kernel)."""
    return {f"moe_{family}_{name}": value for family in ("grouped_gemm", "fp8_triton",
                                                          "fp8_deepgemm", "fp8_vllm")
            for name, value in (("compute_efficiency", efficiency),
                                ("overlap_exponent", exponent))}


@functools.cache
def _cost_model(profile: str, model: str, tp: int, dtype: str,
                eta: float | None = -1.0, kernel: tuple | None = None,
                shapes: tuple = (), engine: str | None = None) -> CostModel:
    """``eta`` -1: the profile's fused-MoE streaming efficiencies; else that value instead;
    ``kernel`` None: the profile's grouped-GEMM compute efficiency and overlap exponent;
    else ``(efficiency, exponent)`` instead; ``shapes``: ``(field, value)`` pairs replacing
    the catalog model's; ``engine``: an engines.yaml entry to price under (None: none)."""
    hw = load_profile(profile)
    if eta is None or eta >= 0:  # the one streaming rate, whichever family runs the call
        hw = dataclasses.replace(hw, moe_quantized_gemm_efficiency=eta,
                                 moe_fp8_triton_memory_efficiency=None)
    if kernel is not None:
        hw = dataclasses.replace(hw, **kernel_fields(*kernel))
    spec = dataclasses.replace(load_model(model), **dict(shapes))
    execution = None if engine is None else resolve_execution(hw, {"spec": load_engine(engine)})
    return CostModel(hw, with_precision(spec, hw, dtype), Parallelism(tensor_parallel=tp),
                     execution=execution)


def fused_moe_call_s(profile: str, model: str, tp: int, dtype: str, tokens: float,
                     eta: float | None = -1.0, kernel: tuple | None = None,
                     shapes: tuple = (), engine: str | None = None) -> float:
    """The cost model's seconds for one fused-MoE call of ``tokens`` tokens: the grouped
    GEMMs, the routing/align/sum/quantisation kernels, and the activation of the routed rows
    (``eta``, ``kernel``: numbers to price it with instead of the profile's)."""
    cm = _cost_model(profile, model, tp, dtype, eta, kernel, shapes, engine)
    t = np.array([float(tokens)])
    gemms = sum(float(term[-2][0]) for term in moe.routed_terms(cm, t))
    routing = next(float(gpu) for name, _, gpu, _, _ in moe_kernels.small_kernel_terms(
        cm, float(tokens)) if name == "moe_routing")
    s = cm._moe
    rows = tokens * s.k
    act = float(cm._roof.transfer_time(3.0 * rows * s.down_in * cm._b, "activation",
                                       rows=rows))
    return gemms + routing + act


def errors(series, eta: float | None = -1.0, kernel: tuple | None = None,
           engine: str | None = None) -> np.ndarray:
    """Relative error of the priced call at each batch size of a series (``engine``: an
    engines.yaml entry to price it under)."""
    profile, model, tp, dtype, measured, *shapes = series
    return np.array([fused_moe_call_s(profile, model, tp, dtype, t, eta, kernel,
                                      tuple(shapes[0]) if shapes else (), engine) * 1e6 / us
                     - 1.0 for t, us in measured.items()])


def best_efficiency(series, grid=tuple(np.round(np.arange(0.40, 0.951, 0.05), 2))) -> float:
    """The streaming efficiency of ``grid`` whose priced calls have the least rms error over
    the series (how the profiles' moe.quantized_grouped_gemm_memory_efficiency was fitted)."""
    return min(grid, key=lambda eta: float(np.mean(errors(series, float(eta)) ** 2)))


def rms(err: np.ndarray) -> float:
    return float(np.sqrt(np.mean(err ** 2)))


def best_kernel(series, efficiencies=tuple(np.round(np.arange(0.40, 0.801, 0.05), 2)),
                exponents=(1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0)) -> tuple[float, float]:
    """The grouped GEMM's (compute efficiency, overlap exponent) on these grids whose priced
    calls have the least rms error over the series (how the profiles' moe.grouped_gemm_*
    numbers were fitted: jointly, over every batch size of the series, decode-sized ones
    included, so that the fit cannot trade the decode calls for the prefill ones)."""
    grid = [(float(e), float(p)) for e in efficiencies for p in exponents]
    return min(grid, key=lambda kp: rms(errors(series, kernel=kp)))
