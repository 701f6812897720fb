"""vLLM's decode attention call and its dense GEMMs at 128 rows on an H100 SXM, measured, against
the shipped ``h100-sxm`` profile (issue 35: the inference-perf ``reasoning`` stages, 128 running
requests of ~1,800 tokens, are priced 10-13% fast per token).

Both tables are ai-dynamo/aiconfigurator's (Apache-2.0, commit 095f58a), measured on an
'NVIDIA H100 80GB HBM3' with vLLM 0.14.0, the nearest release to 0.11 with these tables (its
0.11.0 files were withdrawn as incomplete, aiconfigurator PR #214):
aic-core/src/aiconfigurator_core/systems/data/h100_sxm/attention/vllm/0.14.0/
generation_attention_perf.parquet (kernel_source vllm_flash_attn: FlashAttentionImpl.forward,
the KV-cache write and the FA3 varlen kernel, one query a request, BF16, head dim 128, paged
KV of 64-token blocks placed at random, CUDA-graph replays; collector/vllm/collect_attn.py at
5ef50c9) and .../gemm/vllm/0.14.0/gemm_perf.parquet (bfloat16, kernel_source vllm_default).

What they say: at the reasoning stages' size the call reads the KV at the profile's rate (2.88
TB/s at batch 128 x 2,047 tokens, 0.86 of the peak), and the GEMMs at M = 128 are priced within
a few percent, so neither is the 10-13% (docs/calibration.md).  The call's fixed time, ~12 us
against the kernel latency's 3.8, is the profile's ``attention_decode`` entry (0.89, 11.9 us).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from hardware.kernels import ATTENTION_DECODE
from hardware.profile import load_profile

CONTEXTS = (127, 511, 2047, 8191)  # the table's `step`: KV tokens a request attends
# (query heads, KV heads, batch): microseconds a call at CONTEXTS (None: not measured);
# the table's latency column is in ms, here x 1000 rounded to 0.1 us
ATTENTION_US = {
    (32, 4, 1): (11.2, 12.6, 15.1, 18.7),
    (32, 4, 8): (12.2, 14.6, 21.0, 59.9),
    (32, 4, 32): (13.0, 17.5, 56.3, 182.5),
    (32, 4, 128): (26.8, 63.2, 186.4, None),
    (16, 2, 1): (11.1, 12.6, 14.3, 18.3),
    (16, 2, 8): (12.1, 14.7, 21.0, 48.7),
    (16, 2, 32): (12.3, 15.8, 36.2, 106.2),
    (16, 2, 128): (17.8, 39.3, 101.4, None),
    (64, 8, 1): (11.4, 13.5, 15.1, 19.4),
    (64, 8, 8): (12.3, 15.6, 36.4, 99.9),
    (64, 8, 32): (16.7, 37.8, 100.9, None),
    (64, 8, 128): (47.1, 109.1, None, None),
    (8, 1, 1): (10.9, 12.2, 13.7, 17.3),
    (8, 1, 8): (11.2, 14.1, 20.2, 46.7),
    (8, 1, 32): (12.0, 16.5, 28.9, 85.7),
    (8, 1, 128): (14.7, 21.2, 57.2, 184.6),
}
# M = 128 rows: (N, K, microseconds), the shapes of issue 35's models at their tensor parallel
# (CodeLlama-34B TP2 QKV, O and the down projection's neighbours K 10240 / 12288; Llama-2-70B
# TP4 QKV, O, down and the gate-up's neighbours N 12288 / 16384; Mixtral-8x7B TP2 QKV and O)
GEMM_M128_US = ((5120, 8192, 31.7), (8192, 4096, 27.0), (8192, 10240, 60.1),
                (8192, 12288, 71.4), (2560, 8192, 19.8), (8192, 2048, 15.2),
                (12288, 8192, 70.7), (16384, 8192, 93.8), (8192, 7168, 42.9),
                (3072, 4096, 13.3), (4096, 2048, 9.1))
HEAD_DIM, BF16 = 128, 2.0


def _rows():
    """(query heads, KV heads, batch, context, measured seconds) of every measured call."""
    for (qh, kvh, batch), times in ATTENTION_US.items():
        for ctx, us in zip(CONTEXTS, times):
            if us is not None:
                yield qh, kvh, batch, ctx, us * 1e-6


def _kv_bytes(kvh: int, batch: int, ctx: int) -> float:
    return float(batch * ctx * kvh * HEAD_DIM * 2 * BF16)  # K and V, BF16


def _priced_s(qh: int, kvh: int, batch: int, ctx: int) -> float:
    """The call as the shipped profile prices it: Roofline.attention_time's decode kernel."""
    roof = load_profile("h100-sxm").roofline("bf16")
    flops = np.full(batch, 4.0 * qh * HEAD_DIM * ctx)
    nbytes = np.full(batch, _kv_bytes(kvh, 1, ctx))
    return roof.attention_time(flops, nbytes, np.ones(batch))


def _refit() -> tuple[float, float, float]:
    """(memory efficiency, latency us, MAPE) minimising the MAPE of bytes / (eff x peak) +
    latency over the measured calls: efficiency 0.60-1.00 step 0.01, latency 0-30 us step
    0.1 (the decode kind's two numbers; the calls are memory-bound)."""
    peak = load_profile("h100-sxm").memory_bandwidth_bytes_per_s
    rows = list(_rows())
    nbytes = np.array([_kv_bytes(kvh, b, c) for _, kvh, b, c, _ in rows])
    measured = np.array([t for *_, t in rows])
    effs = np.round(np.arange(0.60, 1.0001, 0.01), 2)
    lats = np.round(np.arange(0.0, 30.0001, 0.1), 1)
    best = (np.inf, 0.0, 0.0)
    for eff, lat in itertools.product(effs, lats):
        mape = float(np.mean(np.abs((nbytes / (eff * peak) + lat * 1e-6) / measured - 1)))
        best = min(best, (mape, float(eff), float(lat)))
    return best[1], best[2], best[0]


def test_the_profile_prices_the_refit():
    # the decode kind's entry is the refit below: 0.89 of 3,350 GB/s and 11.9 us a call
    roof = load_profile("h100-sxm").roofline("bf16")
    _, mrate, latency, _ = roof.kind_rates(ATTENTION_DECODE)
    eff, lat, _ = _refit()
    assert (mrate, latency) == pytest.approx((0.89 * 3350e9, 11.9e-6))
    assert (mrate, latency) == pytest.approx((eff * 3350e9, lat * 1e-6))


def test_long_calls_read_the_kv_at_the_profiles_rate():
    # every measured call of at least 0.5 GB (the reasoning stages' CodeLlama call is 0.47 GB:
    # 128 x 1,800 tokens x 4 KV heads): priced +3% to +5.2%, never cheap, so the KV rate is not
    # the reasoning stages' -10% to -13%
    big = [(r, _priced_s(*r[:4])) for r in _rows() if _kv_bytes(r[1], r[2], r[3]) >= 5e8]
    assert len(big) == 3  # (32, 4, 32, 8191), (32, 4, 128, 2047), (8, 1, 128, 8191)
    for row, priced in big:
        assert 0.0 < priced / row[4] - 1 < 0.06, (row, priced)


def test_the_refit_keeps_the_rate_and_adds_the_calls_fixed_time():
    eff, lat, mape = _refit()
    assert (eff, lat) == (0.89, 11.9)
    assert mape < 0.11
    # the efficiency is the defaults' within 0.01; the latency is three times the kernel's
    assert abs(eff - 0.9) <= 0.011 and lat > 3 * 3.8


def test_the_shipped_profile_prices_the_short_calls():
    rows = list(_rows())
    err = np.array([_priced_s(*r[:4]) / r[4] - 1 for r in rows])
    assert np.mean(np.abs(err)) < 0.11  # the refit's MAPE (the kernel latency alone: 45%)
    short = np.array([r[4] < 20e-6 for r in rows])  # 33 calls of mostly fixed time
    assert np.mean(np.abs(err[short])) < 0.10 and abs(np.mean(err[short])) < 0.03


def test_gemms_at_128_rows_priced_within_10_percent():
    roof = load_profile("h100-sxm").roofline("bf16")
    err = np.array([roof.gemm_time(128.0, n, k) / (us * 1e-6) - 1 for n, k, us in GEMM_M128_US])
    assert np.max(np.abs(err)) < 0.10, np.round(100 * err, 1)
    assert abs(float(np.mean(err))) < 0.03  # no bias either way: not the reasoning deficit
