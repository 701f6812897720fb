"""vLLM's MoE router (gate) GEMM of DeepSeek-V3/R1 at its measured times (``vllm_router_gemm``
engines).

Why the roofline prices it too dear.  The router is ``[rows x 7168] @ [7168 x 256]`` in 16
bits (layer_ops.linear_ops: replicated, unquantised), priced by ``Roofline.gemm_time``: its
256-wide output is four 64 x 64 tiles, each walking the whole K on one SM (the tile and wave
quantisation of hardware/kernels.py, no split-K), so at 1-64 rows the compute term is one
SM's share of the 16-bit rate over 64 x 64 x 7168 x 2 FLOPs, 10.0 us, plus the GEMM kind's
3.8 us latency: 13.8 us a layer, flat in the rows, on h200 and h100-sxm alike.  Neither FP32,
a floor, nor the softmax/top-k (``moe_routing``, priced apart) is in it.  cuBLAS does not run
it so (which kernel its heuristics pick at these rows, split-K or a narrower tile, was not
read): it takes about half that, while the weights (3.7 MB) stream in about 1 us (0.85 on
h200, 1.2 on h100-sxm at the GEMM kind's rate).

What the engine runs.  vLLM's DeepseekV2MoE builds the gate as ``ReplicatedLinear(
config.hidden_size, config.n_routed_experts, bias=False, quant_config=None)``
(vllm/model_executor/models/deepseek_v2.py, v0.7-v0.11; only ``e_score_correction_bias`` is
FP32), so its forward is ``UnquantizedLinearMethod``'s ``F.linear`` in BF16: a cuBLAS GEMM.
vLLM took a DeepSeek router kernel for 1-16 rows (``GateLinear``, SGLang's ``dsv3_router_gemm``)
only in vllm-project/vllm PR #34302, merged 2026-02-11, after 0.11.0 (October 2025).
SGLang 0.5.x runs its ``MoEGate`` through sgl-kernel's ``dsv3_router_gemm`` (FP32 output) at
1-16 rows on sm90+ for hidden 7168 and 256 or 384 experts, ``F.linear`` above
(python/sglang/srt/models/deepseek_v2.py ``MoEGate.forward``): that kernel is not in the
tables below, so SGLang's engines keep the roofline's price.

The measurement.  ai-dynamo/aiconfigurator (Apache-2.0, commit 095f58a) timed vLLM's
unquantised linear (``F.linear``, kernel_source vllm_default; collector/vllm/collect_gemm.py)
under a CUDA graph: aic-core/src/aiconfigurator_core/systems/data/<gpu>/gemm/vllm/0.14.0/
gemm_perf.parquet, gemm_dtype bfloat16, n 256, k 7168 (one row a size; latency ms x 1000):
``MEASURED_US`` at ``ROWS``.  vLLM 0.14.0's table, the version nearest 0.11.0 measured (no
0.11 table), as h200.yaml's ``fp8_vllm_*`` are.  The time is flat at 6.2-6.9 us to 128 rows
and meets the roofline's price at about 1,024 rows (12.1 us measured, 13.8 priced on h200),
so the read prices 1-1,024 rows (linear in the rows between the read sizes, each size at
least its smaller sizes' time: the table dips by up to 0.25 us, 6.74 at 16 rows and 6.49 at
32 on h200) and the roofline the rest.  Only DeepSeek-V3/R1's shape (``SHAPE``), only the
profiles the table was measured on (``MEASURED_US``'s keys), only engines that run vLLM's
gate (engines.yaml ``vllm_router_gemm``).
"""
from __future__ import annotations

import numpy as np

from hardware.roofline import fast_ndim

ROUTER = "router"       # layer_ops.linear_ops's name for the gate
SHAPE = (256, 7168)     # (routed experts, hidden size): DeepSeek-V3/R1's gate, N x K
ROWS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0)
# the tables' times at ROWS (module docstring): h200_sxm/gemm/vllm/0.14.0 ('NVIDIA H200', vLLM
# 0.14.1.dev1+gd68209402) and h100_sxm/gemm/vllm/0.14.0 ('NVIDIA H100 80GB HBM3', 0.14.0)
MEASURED_US = {
    "h200": (6.36, 6.32, 6.21, 6.41, 6.74, 6.49, 6.67, 6.75, 8.32, 9.48, 12.05),
    "h100-sxm": (6.27, 6.30, 6.49, 6.41, 6.40, 6.60, 6.94, 6.98, 7.96, 11.16, 12.59),
}
# each size at least the time of the sizes below it (a larger step never cheaper)
_PRICED_S = {gpu: 1e-6 * np.maximum.accumulate(np.array(us)) for gpu, us in MEASURED_US.items()}


def measured(cm) -> np.ndarray | None:
    """The router's priced seconds at ``ROWS`` for CostModel ``cm``, or None where the
    measurement does not apply (another engine, profile, gate shape or width)."""
    m = cm.model
    if not cm.execution.spec.vllm_router_gemm or not m.is_moe \
            or (m.num_experts, m.hidden_size) != SHAPE or m.activation_bytes != 2:
        return None
    return _PRICED_S.get(cm.hardware.name)


def router_s(cm, tokens, gpu):
    """``gpu``, the roofline's seconds of the router at ``tokens`` rows (a float or an
    array), replaced by the measured time at 1-1,024 rows where it applies (module
    docstring); the same operations on a float and an array (the token tables agree with
    the scalar path bit for bit)."""
    priced = measured(cm)
    if priced is None:
        return gpu
    rows = np.asarray(tokens, dtype=np.float64)
    read = np.interp(rows, ROWS, priced)
    out = np.where((rows > 0.0) & (rows <= ROWS[-1]), read, gpu)
    return float(out) if fast_ndim(tokens) == 0 else out
