"""DeepGEMM's dense FP8 GEMM at prefill rows (engine_kernels.deepgemm_floor) against the
DeepGEMM README's own timings, and the engine path that charges it."""
import dataclasses
from itertools import product
from math import ceil

import numpy as np

from hardware.profile import load_profile
from simulator.cost import engine_kernels as ek
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import resolve_execution
from simulator.cost.parallelism import Parallelism
from simulator.cost.spec_catalog import load_engine
from simulator.models.spec import load_model

# deepseek-ai/DeepGEMM README (its first release, 2025-02: the table "Normal GEMMs for dense
# models", H800 with NVCC 12.8; the H800 is the H100 SXM's GH100: 132 SMs, same clocks):
# (M, N, K, TFLOPS) at M = 4096, DeepSeek-V3's dense linears (fused_qkv_a, q_b, kv_b, o_proj,
# shared/dense MLP up and down), FLOPs 2 M N K
DENSE_H800_M4096 = ((4096, 2112, 7168, 1058), (4096, 24576, 1536, 990),
                    (4096, 32768, 512, 590), (4096, 7168, 16384, 1358),
                    (4096, 4096, 7168, 1304), (4096, 7168, 2048, 1025))
# the same table at M = 64 and 128 (decode rows), (M, N, K, TFLOPS)
DENSE_H800_SMALL = ((64, 2112, 7168, 206), (64, 24576, 1536, 289), (64, 32768, 512, 219),
                    (64, 7168, 16384, 336), (64, 4096, 7168, 287), (64, 7168, 2048, 295),
                    (128, 2112, 7168, 352), (128, 24576, 1536, 535), (128, 32768, 512, 358),
                    (128, 7168, 16384, 645), (128, 4096, 7168, 533), (128, 7168, 2048, 510))


def _cm(fp8_gemm: str) -> CostModel:
    hw = load_profile("h100-sxm")
    host = dataclasses.replace(load_engine("sglang-v0.4.5"), fp8_gemm=fp8_gemm)
    ex = resolve_execution(hw, {"spec": host}, max_num_seqs=256)
    return CostModel(hw, load_model("deepseek-v3"), Parallelism(), execution=ex)


def _errors(cm, eff: float, tile_s: float) -> np.ndarray:
    """deepgemm_floor's relative error on each M = 4096 row at ``(eff, tile_s)``."""
    saved = ek.DEEPGEMM_EFFICIENCY, ek.DEEPGEMM_TILE_S
    ek.DEEPGEMM_EFFICIENCY, ek.DEEPGEMM_TILE_S = eff, tile_s
    try:
        return np.array([float(ek.deepgemm_floor(cm, float(m), n, k))
                         / (2.0 * m * n * k / (tf * 1e12)) - 1.0
                         for m, n, k, tf in DENSE_H800_M4096])
    finally:
        ek.DEEPGEMM_EFFICIENCY, ek.DEEPGEMM_TILE_S = saved


def test_deepgemm_floor_matches_the_readme_rows():
    errors = _errors(_cm("deepgemm"), ek.DEEPGEMM_EFFICIENCY, ek.DEEPGEMM_TILE_S)
    assert np.all(np.abs(errors) < 0.02), errors


def test_deepgemm_pair_is_the_least_squares_one_on_its_grid():
    cm = _cm("deepgemm")
    grid = product(np.round(np.arange(0.60, 0.951, 0.01), 2),
                   np.round(np.arange(0.0, 8.01, 0.1), 1))
    best = min(grid, key=lambda p: float(np.sum(_errors(cm, p[0], p[1] * 1e-6) ** 2)))
    assert best == (ek.DEEPGEMM_EFFICIENCY, round(ek.DEEPGEMM_TILE_S * 1e6, 1))


def test_deepgemm_floor_closed_form_and_one_wave_rule():
    cm = _cm("deepgemm")
    # o_proj at 16,384 rows: 128 x 56 tiles in ceil(7168 / 132) = 55 waves of 128 K steps
    step = 2.0 * 128 ** 3 / (cm._lin_roof.peak_flops_per_s * ek.DEEPGEMM_EFFICIENCY / 132)
    want = ceil(128 * 56 / 132) * (128 * step + ek.DEEPGEMM_TILE_S)
    assert np.isclose(float(ek.deepgemm_floor(cm, 16384.0, 7168, 16384)), want, rtol=1e-12)
    for m, n, k, tf in DENSE_H800_SMALL:  # no floor under one wave of tiles; above it,
        floor = float(ek.deepgemm_floor(cm, float(m), n, k))  # never dearer than measured
        assert floor == 0.0 if ceil(m / 64) * ceil(n / 128) < 132 else \
            0.0 < floor <= 2.0 * m * n * k / (tf * 1e12)


def test_only_a_deepgemm_engine_pays_it():
    rows = np.array([16384.0])
    for name, on in (("deepgemm", True), ("default", False)):
        cm = _cm(name)
        floor = ek.dense_floor(cm, rows, 7168, 16384, 1.0, "o_proj")
        assert (float(floor[0]) > 0.0) is on
        # a 16-bit linear (the router's) never does
        assert float(ek.dense_floor(cm, rows, 256, 7168, 2.0, "router")[0]) == 0.0
    # the roofline alone prices o_proj at 16,384 rows faster than the README's 1,358 TFLOPS
    cm = _cm("default")
    roof = float(cm._lin_roof.gemm_time(16384.0, 7168, 16384))
    assert roof < 2.0 * 16384 * 7168 * 16384 / 1358e12
