"""Published timings of FP8 grouped expert GEMMs at many rows per expert, the two kernel
families the profiles' ``moe.fp8_triton_*`` and ``moe.fp8_deepgemm_*`` pairs were fitted on,
and the cost model's price of the same calls (simulator/cost/moe_kernels.py)."""
from __future__ import annotations

import numpy as np

from hardware.profile import load_profile
from simulator.cost import moe_kernels
from tests.simulator.cost import fused_moe_measured as fm

# vllm-project/vllm PR #24700 ("[Perf] Improve default fused moe configs by analyzing tuned
# configs", mgoin, 2025-09-11), "Qwen3 MoE FP8": benchmark_moe.py --model=Qwen/Qwen3-30B-A3B
# -tp=1 --dtype=fp8_w8a8 on an H100, the "# Main" block (the default Triton config before
# the PR), "Kernel time" (us) by batch size.  The BF16 checkpoint has no weight_block_size,
# so the weights are per-tensor FP8: the same Triton kernel without the block-scale loads.
QWEN3_30B_H100_FP8 = ("h100-sxm", "qwen3-30b-a3b", 1, "fp8",
                      {1: 44.54, 2: 59.94, 4: 90.46, 8: 129.77, 16: 185.40, 24: 215.99,
                       32: 238.37, 48: 257.83, 64: 262.73, 96: 270.98, 128: 273.72,
                       256: 355.49, 512: 391.86, 1024: 536.33, 1536: 727.31, 2048: 911.64,
                       3072: 1279.17, 4096: 1647.57})

# ai-dynamo/aiconfigurator (Apache-2.0, commit 095f58a), aic-core/src/aiconfigurator_core/
# systems/data/h200_sxm/moe/sglang/0.5.14/moe_perf.parquet (h200_sxm/moe/sglang/0.5.12/
# reuse.yaml names it for 0.5.12): SGLang's Triton fused_moe with the tuned configs it ships
# (collector/sglang/collect_moe.py: get_moe_configs), kernel sglang_fused_moe_triton,
# fp8_block, hidden 7168, inter 2048, 256 experts, top 8, moe_tp 8, EP 1, balanced routing,
# on an H200 ("NVIDIA H200"); latency (ms) x 1000, rounded to 0.1 us.
DEEPSEEK_V3_H200_SGLANG = ("h200", "deepseek-v3", 8, "fp8",
                           {1: 36.4, 2: 55.8, 4: 61.6, 8: 94.1, 16: 167.9, 32: 249.8,
                            48: 247.3, 64: 248.8, 80: 254.7, 96: 257.2, 128: 257.0,
                            160: 286.3, 192: 289.6, 256: 296.8, 320: 303.1, 384: 310.2,
                            512: 329.1, 768: 355.0, 1024: 393.0, 1536: 484.8, 2048: 553.9,
                            3072: 950.1, 4096: 974.5, 6144: 1431.2, 8192: 1881.3,
                            12288: 2782.2, 16384: 3651.5})

# The same table's vLLM counterpart: aic-core/src/aiconfigurator_core/systems/data/h200_sxm/
# moe/vllm/0.14.0/moe_perf.parquet (commit 095f58a), vLLM 0.14.1.dev1+gd68209402's own
# FusedMoE (kernel_source vllm_fused_moe, the tuned E=256,N=256 NVIDIA_H200 fp8_w8a8
# block_shape=[128,128] config vLLM ships), fp8_block, the same shape, moe_tp 8, EP 1,
# balanced routing, on an H200 ("NVIDIA H200"); latency (ms) x 1000, rounded to 0.1 us.
DEEPSEEK_V3_H200_VLLM = ("h200", "deepseek-v3", 8, "fp8",
                         {1: 58.2, 2: 65.1, 4: 81.3, 8: 124.7, 16: 216.3, 32: 428.8,
                          48: 395.8, 64: 398.4, 80: 399.9, 96: 408.1, 128: 412.6,
                          160: 418.5, 192: 422.3, 256: 429.5, 320: 439.1, 384: 447.8,
                          512: 463.3, 768: 647.3, 1024: 599.9, 1536: 648.3, 2048: 739.2,
                          3072: 1121.6, 4096: 1245.4, 6144: 1782.0, 8192: 2328.0,
                          12288: 3402.5, 16384: 4493.0})

# deepseek-ai/DeepGEMM README, "Performance" ("all shapes potentially used in DeepSeek-V3/R1
# inference ... on H800 with NVCC 12.8"), the two grouped tables: (groups, M per group, N,
# K, TFLOPS), FLOPs 2 x groups x M x N x K.  Contiguous layout (prefill, what SGLang runs
# after DeepEP's normal dispatch), then masked layout (decode, after the low-latency one).
# The H800 is the H100 SXM's GH100 (132 SMs, same clocks and HBM3), only its NVLink cut.
DEEPGEMM_H800 = (
    (4, 8192, 4096, 7168, 1297), (4, 8192, 7168, 2048, 1099),
    (8, 4096, 4096, 7168, 1288), (8, 4096, 7168, 2048, 1093),
    (1, 1024, 4096, 7168, 1233), (1, 1024, 7168, 2048, 925),
    (2, 512, 4096, 7168, 1040), (2, 512, 7168, 2048, 916),
    (4, 256, 4096, 7168, 932), (4, 256, 7168, 2048, 815))

TRITON_EFFICIENCIES = tuple(np.round(np.arange(0.05, 0.401, 0.01), 2))
DEEPGEMM_EFFICIENCIES = tuple(np.round(np.arange(0.40, 0.901, 0.01), 2))
EXPONENTS = (1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0)


def triton_errors(kernel: tuple | None = None) -> np.ndarray:
    """Relative errors of the priced fused-MoE calls over both untuned Triton FP8 series (PR
    #24700's H100 one, then PR #11730's H200 decode one, at the H200's untuned streaming
    rate, moe.quantized_grouped_gemm_memory_efficiency); ``kernel``: ``(efficiency, p)``
    instead of the profile's."""
    untuned = load_profile("h200").moe_quantized_gemm_efficiency
    return np.concatenate([fm.errors(QWEN3_30B_H100_FP8, kernel=kernel),
                           fm.errors(fm.QWEN3_235B_H200, eta=untuned, kernel=kernel)])


def tuned_h200_errors(kernel: tuple | None = None, eta: float = -1.0) -> np.ndarray:
    """Relative errors of the priced calls against aiconfigurator's tuned H200 series
    (``kernel``, ``eta``: numbers instead of h200's, as ``fused_moe_measured.errors``)."""
    return fm.errors(DEEPSEEK_V3_H200_SGLANG, eta=eta, kernel=kernel)


def best_tuned_h200() -> tuple[float, float]:
    """h200's ``moe.fp8_triton_*`` pair: the grid's least-squares one over the tuned H200
    series at h200's ``moe.fp8_triton_memory_efficiency``."""
    eta = load_profile("h200").moe_fp8_triton_memory_efficiency
    return _triton_grid_best(lambda kp: tuned_h200_errors(kp, eta))


def vllm_h200_errors(kernel: tuple | None = None, engine: str | None = "vllm-v0.11"
                     ) -> np.ndarray:
    """Relative errors of the priced calls against aiconfigurator's vLLM H200 series at
    h200's ``moe.fp8_triton_memory_efficiency``, priced under ``engine`` (vLLM 0.11's: its
    Triton fused_moe's K-loop floor, engine_kernels.grouped_k_step_s; None: no engine, no
    floor); ``kernel``: ``(efficiency, p)``, else h200's ``moe.fp8_vllm_*`` pair."""
    hw = load_profile("h200")
    pair = kernel or (hw.moe_fp8_vllm_compute_efficiency, hw.moe_fp8_vllm_overlap_exponent)
    return fm.errors(DEEPSEEK_V3_H200_VLLM, eta=hw.moe_fp8_triton_memory_efficiency,
                     kernel=pair, engine=engine)


def best_vllm_h200() -> tuple[float, float]:
    """h200's ``moe.fp8_vllm_*`` pair: the grid's least-squares one (the Triton grid) over
    the vLLM H200 series, the streaming rate held at ``moe.fp8_triton_memory_efficiency``."""
    return _triton_grid_best(vllm_h200_errors)


def best_triton() -> tuple[float, float]:
    """The ``moe.fp8_triton_*`` pair on the grid with the least rms over both series."""
    return _triton_grid_best(triton_errors)


def _triton_grid_best(errors) -> tuple[float, float]:
    """The ``(efficiency, p)`` of the Triton grid whose ``errors(pair)`` has the least rms."""
    grid = [(float(e), p) for e in TRITON_EFFICIENCIES for p in EXPONENTS]
    return min(grid, key=lambda kp: fm.rms(errors(kp)))


def deepgemm_errors(kernel: tuple | None = -1) -> np.ndarray:
    """Relative errors of ``grouped_gemm_s`` (FP8 weights, BF16 activations as the MoE
    layer prices them) on h100-sxm against each DeepGEMM row; ``kernel`` -1: the profile's
    pair, None: the GEMM kind's rate and the roofs' max, else ``(efficiency, p)``."""
    hw = load_profile("h100-sxm")
    roof = hw.roofline("fp8")
    if kernel == -1:
        kernel = (hw.moe_fp8_deepgemm_compute_efficiency, hw.moe_fp8_deepgemm_overlap_exponent)
    own = None if kernel is None else moe_kernels.GroupedGemm(*kernel, on_routed_rows=True)
    out = []
    for groups, m, n, k, tflops in DEEPGEMM_H800:
        measured = 2.0 * groups * m * n * k / (tflops * 1e12)
        priced = moe_kernels.grouped_gemm_s(roof, hw.moe_quantized_gemm_efficiency,
                                            float(groups), float(groups * m), float(n),
                                            float(k), 1.0, 2.0, own)
        out.append(float(priced) / measured - 1.0)
    return np.array(out)


def best_deepgemm() -> tuple[float, float]:
    """The ``moe.fp8_deepgemm_*`` pair on the grid with the least rms over the table."""
    grid = [(float(e), p) for e in DEEPGEMM_EFFICIENCIES for p in EXPONENTS + (12.0,)]
    return min(grid, key=lambda kp: fm.rms(deepgemm_errors(kp)))
