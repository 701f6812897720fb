"""vLLM 0.7.x's absorbed W_UV_O (issue 35): its extra K steps are paid by the step's decode
rows only, in waves of 128-row tiles, checked in closed form and against the cited times."""
from math import ceil

import numpy as np
import pytest

from simulator.cost import engine_kernels as ek
from tests.simulator.cost.test_engine_kernels import _cm  # DeepSeek-V3, 8 x H200, TP8

# sgl-project/sglang PR #5820 (2025-04-28), 'main' tables, DeepSeek-V3 N = 7168, K = 16384,
# the 'vllm' column (vLLM's CUTLASS blockwise FP8 GEMM, cutlass_scaled_mm): M -> us
PR_5820_VLLM_K16384_US = {1: 77.184, 8: 75.936, 16: 76.448, 32: 76.768, 64: 76.448,
                          128: 75.712, 256: 77.792, 512: 149.216}


def _waves(rows):
    """128-row tiles of the 7168 / 128 = 56 output columns, 132 SMs a wave (H200)."""
    return ceil(ceil(rows / 128) * 56 / 132)


ON, OFF = _cm("vllm-v0.7"), _cm("vllm-v0.7", absorbed_uv_o=False)
# vllm/attention/backends/mla/utils.py at v0.7.1: W_UV_O's K is the local heads x
# kv_lora_rank, 128 / 8 x 512 = 8192 at TP 8, where o_proj's is 128 / 8 x 128 = 2048:
# 64 - 16 = 48 more 128-deep steps a layer and wave
WAVE_S = 61 * 48 * ek.CUTLASS_K_STEP_S


def _extra(new, ctx):
    new, ctx = np.asarray(new, np.float64), np.asarray(ctx, np.float64)
    return ON.step_time(new, ctx) - OFF.step_time(new, ctx)


def test_the_tile_rule_matches_the_cited_vllm_times():
    # one wave up to 256 rows (112 tiles), two at 512 (224): the time goes as the waves
    base = PR_5820_VLLM_K16384_US[1]
    for m, us in PR_5820_VLLM_K16384_US.items():
        assert us / base == pytest.approx(_waves(m), rel=0.05), m
        assert ON._uv_o.waves(m) == _waves(m)
    assert WAVE_S == pytest.approx(61 * 48 * 0.527e-6, rel=1e-3)  # 1.54 ms a wave


@pytest.mark.parametrize("b", [1, 8, 64, 256, 300, 600])
def test_a_decode_batch_pays_its_waves(b):
    ones, ctx = np.ones(b), np.full(b, 500.0)
    assert _extra(ones, ctx) == pytest.approx(_waves(b) * WAVE_S, rel=1e-9)
    ops = {op.name: op.time_s for op in ON.breakdown(ones, ctx).ops}
    assert ops["engine_uv_o_proj"] == pytest.approx(_waves(b) * WAVE_S)
    assert ON.step_time(ones, ctx) == pytest.approx(ON.breakdown(ones, ctx).time_s)
    assert _waves(300) == 2 and _waves(600) == 3


def test_a_prefill_only_step_pays_nothing():
    # MLACommonImpl.forward: prefill rows go through _forward_prefill's o_proj
    for new, ctx in (([2048.0], [0.0]), ([512.0, 300.0], [1000.0, 0.0])):
        assert _extra(new, ctx) == 0.0
        assert {op.name: op.time_s for op in ON.breakdown(np.array(new), np.array(
            ctx)).ops}["engine_uv_o_proj"] == 0.0


def test_mixed_and_verification_steps_pay_by_their_decode_rows():
    chunk = [512.0] + [1.0] * 10  # a prefill chunk beside 10 decodes: 10 rows
    assert _extra(chunk, [0.0] + [300.0] * 10) == pytest.approx(WAVE_S, rel=1e-9)
    for n, u in ((100, 2), (150, 2), (40, 8)):  # chain verifications: n x u decode rows
        assert _extra([float(u)] * n, [400.0] * n) == pytest.approx(
            _waves(n * u) * WAVE_S, rel=1e-9)
    ragged = [2.0] * 120 + [1.0] * 20  # 260 rows: 3 tiles of rows, 168 tiles, 2 waves
    assert _extra(ragged, [400.0] * 140) == pytest.approx(2 * WAVE_S, rel=1e-9)


def test_the_row_paths_agree_with_step_time():
    # rows of the same totals, fewest and most tokens but other decode rows (17 vs 1)
    rows = np.array([[1.0, 16.0, 18.0, 20.0], [1.0, 17.0, 17.0, 20.0]])
    ctx = np.full(rows.shape, 300.0)
    got = ON.rows_step_times(rows, ctx)
    for j in range(2):
        assert got[j] == ON.step_time(rows[j], ctx[j])
        assert ON.few_step_time(rows[j].tolist(), ctx[j].tolist()) == got[j]
    assert got[0] - OFF.step_time(rows[0], ctx[0]) == pytest.approx(WAVE_S)
    ctx300 = np.full(300, 100.0)  # a chain of decodes over 2 waves' rows: step by step
    assert ON.chain_decode_time(ctx300, 3) == pytest.approx(
        sum(ON.step_time(np.ones(300), ctx300 + j) for j in range(3)), rel=1e-12)
    verify = ON.verify_step_times(rows, ctx[0])  # one context, every token to the head
    assert verify.tolist() == [ON.step_time(r, ctx[0], r) for r in rows]


def test_engines_without_the_absorption_price_nothing():
    # V1's bmm + o_proj, SGLang's bmm_fp8, and V0 with the absorption turned off
    for cm in (_cm("vllm-v0.9"), _cm("sglang-v0.4"), _cm("sglang-v0.5"), OFF):
        assert ek.absorbed_uv_o(cm) is None and cm._decode_rows(np.ones(4)) == 0.0
        assert "engine_uv_o_proj" not in {op.name for op in cm.breakdown(
            np.ones(4), np.full(4, 100.0)).ops}
    assert ON._uv_o.time_s(0.0) == 0.0
