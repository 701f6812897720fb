"""DeepGEMM's dense FP8 GEMM at decode rows (engine_kernels.deepgemm_decode_floor) against
the measured times it is fitted to, and the engine path that charges it."""
import dataclasses
from math import ceil

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost import engine_kernels as ek
from simulator.cost import vllm_linear
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import resolve_execution
from simulator.cost.parallelism import Parallelism
from simulator.cost.spec_catalog import load_engine
from simulator.models.spec import load_model

# sgl-project/sglang PR #5820 (2025-04-28, 'cutlass 3.9 supported to improve
# fp8_blockwise_gemm', the 'main' tables of sgl-kernel/benchmark/bench_fp8_blockwise_gemm.py
# at --tp-sizes 8: triton.testing.do_bench medians, launch included), the 'deepgemm' column:
# DeepSeek-V3 (N, K) -> {M: us} at the rows read (1-32)
PR_5820_DEEPGEMM_US = {(3072, 1536): {1: 10.336, 8: 10.016, 16: 9.872, 32: 9.376},
                       (512, 7168): {1: 13.632},
                       (7168, 16384): {1: 60.384, 8: 58.240, 16: 57.024, 32: 50.240},
                       (32768, 512): {8: 12.928, 16: 13.184, 32: 13.056}}


def _cm(name: str = "h200", fp8_gemm: str = "deepgemm",
        engine: str = "sglang-v0.4.5") -> CostModel:
    hw = load_profile(name)
    host = dataclasses.replace(load_engine(engine), fp8_gemm=fp8_gemm)
    ex = resolve_execution(hw, {"spec": host}, max_num_seqs=256)
    return CostModel(hw, load_model("deepseek-v3"), Parallelism(tensor_parallel=8),
                     execution=ex)


def _errors(cm, stream_bps: float) -> np.ndarray:
    saved = ek.DEEPGEMM_SM_STREAM_BPS
    ek.DEEPGEMM_SM_STREAM_BPS = stream_bps
    try:
        return np.array([float(ek.deepgemm_decode_floor(cm, float(m), n, k, 1.0))
                         / (us * 1e-6) - 1.0
                         for (n, k), rows in PR_5820_DEEPGEMM_US.items()
                         for m, us in rows.items()])
    finally:
        ek.DEEPGEMM_SM_STREAM_BPS = saved


def test_stream_is_the_least_squares_one_on_its_grid():
    # the launch latency (the GEMM kind's) and the tile's fixed cost held; the same on the
    # H100 SXM and the H200 profiles (one GH100 die: 132 SMs, the same GEMM latency)
    for name in ("h200", "h100-sxm"):
        cm = _cm(name)
        grid = np.round(np.arange(5.0, 40.01, 0.5), 1)
        best = min(grid, key=lambda r: float(np.sum(_errors(cm, r * 1e9) ** 2)))
        assert best * 1e9 == ek.DEEPGEMM_SM_STREAM_BPS


def test_every_measured_row_within_22_percent():
    errors = _errors(_cm(), ek.DEEPGEMM_SM_STREAM_BPS)
    assert np.all(np.abs(errors) < 0.22), errors
    # the short K (12 steps) is the one the stream under-prices most
    assert errors[:4].max() < 0.0


def test_closed_form_and_the_rows_it_covers():
    cm = _cm()
    latency = cm._roof.kind_rates("gemm")[2]
    # fused_qkv_a_proj (N 2112 = 1536 + 576, K 7168): ceil(2112 / 16) = 132 CTAs
    want = latency + ek.DEEPGEMM_TILE_S + 2112 * 7168 / 132 / ek.DEEPGEMM_SM_STREAM_BPS
    for rows in (1.0, 8.0, 32.0):
        assert float(ek.deepgemm_decode_floor(cm, rows, 2112, 7168, 1.0)) == pytest.approx(
            want, rel=1e-12)
    # the shared expert's up (N 512): 32 CTAs, each a quarter of the SMs' share
    want = latency + ek.DEEPGEMM_TILE_S + 512 * 7168 / ceil(512 / 16) \
        / ek.DEEPGEMM_SM_STREAM_BPS
    assert float(ek.deepgemm_decode_floor(cm, 4.0, 512, 7168, 1.0)) == pytest.approx(want)
    rows = np.array([0.0, 1.0, 32.0, 33.0, 64.0])
    floor = ek.deepgemm_decode_floor(cm, rows, 3072, 1536, 1.0)
    assert list(floor > 0.0) == [False, True, True, False, False]


def test_decode_rows_pay_it_on_a_deepgemm_engine_only():
    on, off = _cm(), _cm(fp8_gemm="default")
    for n, k in ((2112, 7168), (3072, 1536), (7168, 2048)):
        roof = float(on._lin_roof.gemm_time(8.0, n, k))
        floor = ek.dense_floor(on, 8.0, n, k, 1.0, "o_proj")
        assert floor > roof  # the H200's roofline is the faster price at 8 rows
        assert ek.dense_floor(off, 8.0, n, k, 1.0, "o_proj") == 0.0
        # nor the engines of a DeepGEMM rewritten since the measurement (engines.yaml);
        # vLLM 0.11 pays its own linear's measured floor instead (vllm_linear.py)
        assert ek.dense_floor(_cm(engine="sglang-v0.5"), 8.0, n, k, 1.0, "o_proj") == 0.0
        v011 = _cm(engine="vllm-v0.11")
        assert ek.dense_floor(v011, 8.0, n, k, 1.0, "o_proj") == float(
            vllm_linear.floor_s(v011, 8.0, n, k))
        # a 16-bit linear (the router's) never pays it
        assert ek.dense_floor(on, 8.0, n, k, 2.0, "router") == 0.0
    # kv_b_proj's decode rows run the absorbed bmm's, not DeepGEMM
    assert ek.dense_floor(on, 8.0, 4096, 512, 1.0, "kv_b_proj") == 0.0
    # at 16,384 rows the waves of tiles price it as before
    assert float(ek.dense_floor(on, 16384.0, 7168, 2048, 1.0)) == pytest.approx(
        float(ek.deepgemm_floor(on, 16384.0, 7168, 2048)))
