"""vLLM's own dense block-FP8 linear at decode rows (``vllm_fp8_linear`` engines).

A block-FP8 ``RowParallelLinear``/``ColumnParallelLinear`` forward in vLLM (its
``Fp8LinearMethod`` with ``weight_block_size`` [128, 128]: the per-token-group quantisation
of the input, then the GEMM its dispatch picks on sm90) measured alone on an H200 does not
shrink with the weight it streams: at 1-32 rows its time is flat in the rows and grows with
K, as a kernel whose programs walk K serially (engine_kernels.py, "The K loop").
ai-dynamo/aiconfigurator (Apache-2.0, commit 095f58a), aic-core/src/aiconfigurator_core/
systems/data/h200_sxm/gemm/vllm/0.19.0/gemm_perf.parquet ('NVIDIA H200', vLLM 0.19.0,
gemm_dtype fp8_block, kernel_source vllm_default; collector/vllm/collect_gemm.py builds the
layer with vLLM's Fp8Config and times its forward): at 4 rows 26.5 us for N 512 x K 7168
(DeepSeek-V3's shared-expert gate_up at TP 8), 9.2 us for 7168 x 256 (its down), 17.0 us
for 7168 x 2048 (o_proj), 12.4 us for 3072 x 1536 (q_b_proj), 59.1 us for 7168 x 16384,
each flat within 20% from 1 to 16 rows; the weights' stream at the H200's bandwidth is 0.4-25 us.

The floor: ``latency + TILE_S + waves x ceil(K / 128) x K_STEP_S`` for a step of 1 to
``DECODE_ROWS`` rows (``waves``: the ``ceil(rows / 128) x ceil(N / 128)`` tiles over the
SMs), beside the linear's roofline, with the input's quantisation priced apart (moe_kernels'
``fp8_quant`` terms) and the GEMM kind's latency.  ``TILE_S`` and ``K_STEP_S`` are the pair
of least rms relative error (grid 0-15 us step 0.1, 0.200-0.600 us step 0.005) of
``quantisation + max(the priced GEMM, floor)`` over the table's 6,480 one-wave rows (N up to
16,896 in multiples of 128, K multiples of 128, 1-32 rows): 3.5 us and 0.370 us a step, rms
16.9% (the GEMM priced without it: 49%, every row too cheap); 0.370 us a step is within 30%
of the Triton block-FP8 GEMM's 0.525 (h200's moe.fp8_triton_k_step_us) and CUTLASS's 0.527
(engine_kernels.CUTLASS_K_STEP_S).  vLLM 0.14.0's table (the same harness and GPU, h200_sxm/
gemm/vllm/0.14.0) walks K at about the same rate, 0.405 us a step, with 15 us or more a call
(the same fit stops at its grid's 15 us edge): not used, the engine's MLA module being
measured at 0.19.0 (h200.yaml moe.vllm_mla_decode_excess_us): one version prices both.
The pair is an H200's: a profile that runs ``vllm-v0.11`` elsewhere (an H100) takes the same
3.5 us and 0.370 us a step, an extrapolation (no other GPU's vLLM fp8_block table was fitted).
The rows were graph-timed: the collector's eager switch (collector/vllm/collect_gemm.py) came
with aiconfigurator 4bed48d96 (2026-05-11), after the H200 0.19.0 table (a77af1b04,
2026-04-15), and its fp8_block rows at 32 rows or fewer are the same in later versions.
Which kernel vLLM 0.11.0 dispatches at these rows (DeepGEMM or CUTLASS: engines.yaml
vllm-v0.11 fp8_gemm) was not read; both walk K per program.
"""
from __future__ import annotations

import numpy as np

from hardware.kernels import GEMM

TILE_S = 3.5e-6       # the fixed time a call beyond the GEMM kind's latency
K_STEP_S = 0.370e-6   # one 128-deep K step of a one-wave grid
DECODE_ROWS = 32      # the rows the fit covers (the table's 1-17 and 32)
K_STEP, TILE = 128.0, 128.0


def floor_s(cm, tokens, n: float, k: float):
    """Seconds of vLLM's block-FP8 GEMM ``[tokens x k] @ [k x n]`` at 1-``DECODE_ROWS``
    rows (module docstring); 0 at no rows and past them (the roofline prices it)."""
    sms = cm._roof.kernels.sm_count
    _, _, latency, _ = cm._roof.kind_rates(GEMM)
    rows = np.asarray(tokens, dtype=np.float64)
    waves = np.ceil(np.ceil(rows / TILE) * np.ceil(n / TILE) / sms)
    t = latency + TILE_S + waves * np.ceil(k / K_STEP) * K_STEP_S
    return np.where((rows > 0.0) & (rows <= DECODE_ROWS), t, 0.0)


def with_floor(cm, floor, tokens, n: float, k: float, exempt: bool):
    """``floor`` raised to vLLM's block-FP8 linear's where the engine runs it
    (``vllm_fp8_linear``) and the linear is not ``exempt`` (kv_b's decode rows: the
    absorbed bmm, engine_kernels.NOT_TRITON)."""
    if not cm.execution.spec.vllm_fp8_linear or exempt:
        return floor
    return np.maximum(floor, floor_s(cm, tokens, n, k))
