"""calibrate/aiconfigurator.py on synthetic tables (no checkout needed): the rows it keeps, its
units, and fits that recover known numbers exactly.  The fits of the shipped entries against
the real tables: tests/hardware/test_h200_allreduce.py, test_h200_nccl.py,
test_h200_allgather.py, test_h200_decode_attention.py."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calibrate import aiconfigurator as aic
from hardware.collectives import all_gather_factor, all_reduce_factor


def _all_reduce_frame(us_of_bytes) -> pd.DataFrame:
    rows = []
    for world in (2, 8):
        for e in aic.ALL_REDUCE_ELEMENTS + (2**24,):       # one size beyond the fitted ones
            for backend, extra in (("vllm_graph", 0.0), ("vllm_eager", 15.0)):
                for jitter in (-0.1, 0.0, 0.2):            # three repeats: the median is kept
                    rows.append({"backend": backend, "num_gpus": world, "message_size": e,
                                 "latency": (us_of_bytes(2.0 * e, world) + extra + jitter)
                                 * 1e-3})
    return pd.DataFrame(rows)


def test_graph_rows_are_medians_in_seconds_of_bf16_bytes():
    frame = _all_reduce_frame(lambda b, w: 4.0 + b / 1e5)
    rows = aic.graph_all_reduce(frame)
    assert sorted(rows) == [2, 8]
    nbytes, seconds = rows[8]
    assert nbytes.tolist() == [256.0 * 2**i for i in range(15)]   # 256 B to 4 MiB
    assert seconds == pytest.approx((4.0 + nbytes / 1e5) * 1e-6)  # eager rows left out


def test_a_single_line_is_fitted_back():
    # time = 5 us + bytes x factor / 200 GB/s at every size: one piece, those two numbers
    frame = _all_reduce_frame(lambda b, w: 5.0 + b * all_reduce_factor(w) / 200e9 * 1e6)
    for world, (pieces, info) in aic.fit_all_reduce(aic.graph_all_reduce(frame)).items():
        assert info["max_relative_error"] < 0.001
        for p in pieces:   # any joints the fit keeps lie on the same line
            assert p["latency_us"] == pytest.approx(5.0, abs=0.01)
            assert p["busbw_gb_per_s"] == pytest.approx(200.0, rel=0.001)


def _nccl_frame() -> pd.DataFrame:
    # nccl-tests rows as collect_nccl.py logs them: message_size in elements, latency in ms
    rows = []
    for op, extra in (("all_reduce", 0.0), ("all_gather", 50.0)):
        for dtype, width in (("half", 2), ("int8", 1)):
            for world in (2, 8):
                for e in (256, 1024, 2**20):
                    for jitter in (-0.3, 0.0, 0.5):        # three repeats: the median is kept
                        us = 3.0 * world + e * width / 1e4 + extra + (dtype == "int8") + jitter
                        rows.append({"op_name": op, "nccl_dtype": dtype, "num_gpus": world,
                                     "message_size": e, "latency": us * 1e-3})
    return pd.DataFrame(rows)


def test_nccl_rows_are_one_ops_medians_in_seconds_of_the_dtypes_bytes():
    frame = _nccl_frame()
    rows = aic.nccl_rows(frame)                                 # all_reduce, half
    assert sorted(rows) == [2, 8]
    nbytes, seconds = rows[8]
    assert nbytes.tolist() == [512.0, 2048.0, 2.0 * 2**20]     # 2 bytes an fp16 element
    assert seconds == pytest.approx((24.0 + nbytes / 1e4) * 1e-6)
    nbytes, seconds = aic.nccl_rows(frame, "all_gather", "int8")[2]
    assert nbytes.tolist() == [256.0, 1024.0, 2.0**20]         # 1 byte an int8 element
    assert seconds == pytest.approx((6.0 + nbytes / 1e4 + 51.0) * 1e-6)


def test_a_larger_world_is_lifted_to_the_smaller_worlds_time():
    b = np.array([1.0, 2.0, 3.0])
    rows = {2: (b, np.array([1.0, 5.0, 9.0])), 4: (b, np.array([2.0, 4.0, 9.5])),
            8: (b, np.array([3.0, 6.0, 7.0]))}
    out, lifted = aic.never_cheaper(rows)
    assert out[4][1].tolist() == [2.0, 5.0, 9.5] and out[8][1].tolist() == [3.0, 6.0, 9.5]
    assert lifted == {2: 0, 4: 1, 8: 1} and rows[8][1].tolist() == [3.0, 6.0, 7.0]
    with pytest.raises(ValueError):
        aic.never_cheaper({2: (b, b), 4: (b * 2, b)})


def test_a_last_slope_below_the_smaller_worlds_is_capped_and_rejoined():
    # world 4's last piece 300 GB/s; world 8's may not be above 300 x (7/4) / (3/2) = 350
    w4 = [{"from_kib": 0, "latency_us": 10.0, "busbw_gb_per_s": 300.0}]
    w8 = [{"from_kib": 0, "latency_us": 20.0, "busbw_gb_per_s": 100.0},
          {"from_kib": 1024, "latency_us": 20.0 + 1024 * 1024 * 1.75 * (1 / 100 - 1 / 400)
           / 1e3, "busbw_gb_per_s": 400.0}]
    out, capped = aic.cap_last_slopes({4: w4, 8: w8})
    assert capped == {8: 400.0} and out[4] == w4
    assert out[8][-1]["busbw_gb_per_s"] == 350.0
    want = 20.0 + 1024 * 1024 * 1.75 * (1 / 100 - 1 / 350) / 1e3
    assert out[8][-1]["latency_us"] == pytest.approx(want, abs=0.001)
    assert aic.cap_last_slopes({4: w4, 8: out[8]})[1] == {}      # nothing left to cap



def test_an_all_gather_is_fitted_and_capped_in_its_own_convention():
    # h200's all_gather: time = 6 us + bytes x (p-1)/p / 250 GB/s is one piece at 250 GB/s
    # with all_gather_factor (the all-reduce factor would read it as 500 GB/s)
    b = np.array([512.0 * 2**i for i in range(21)])
    rows = {w: (b, (6.0 + b * all_gather_factor(w) / 250e9 * 1e6) * 1e-6) for w in (2, 8)}
    for pieces, info in aic.fit_all_reduce(rows, all_gather_factor).values():
        assert info["max_relative_error"] < 0.001
        assert all(p["busbw_gb_per_s"] == pytest.approx(250.0, rel=0.001) for p in pieces)
    # the cap's ratio is the same for both factors (7/6 from world 4 to 8); the re-joined
    # latency is not: world 8's second piece starts at 1 MiB, (7/8) x 1 MiB x (1/100 - 1/350)
    w4 = [{"from_kib": 0, "latency_us": 10.0, "busbw_gb_per_s": 300.0}]
    w8 = [{"from_kib": 0, "latency_us": 20.0, "busbw_gb_per_s": 100.0},
          {"from_kib": 1024, "latency_us": 0.0, "busbw_gb_per_s": 400.0}]
    out, capped = aic.cap_last_slopes({4: w4, 8: w8}, all_gather_factor)
    assert capped == {8: 400.0} and out[8][-1]["busbw_gb_per_s"] == 350.0
    want = 20.0 + 1024 * 1024 * 0.875 * (1 / 100 - 1 / 350) / 1e3
    assert out[8][-1]["latency_us"] == pytest.approx(want, abs=0.001)

def _attention_frame(eff: float, lat_us: float, peak: float) -> pd.DataFrame:
    rows = []
    shapes = [((h, k), b, c) for h, k in aic.DECODE_HEADS for b in aic.DECODE_BATCHES
              for c in aic.DECODE_CONTEXTS]
    for (h, k), b, c in shapes:
        secs = aic.decode_kv_bytes(k, b, c) / (eff * peak) + lat_us * 1e-6
        base = {"kernel_source": "vllm_flash_attn", "head_dim": 128, "attn_dtype": "bfloat16",
                "num_heads": h, "num_key_value_heads": k, "batch_size": b, "step": c}
        rows.append({**base, "kv_cache_dtype": "bfloat16", "latency": secs * 1e3})
        rows.append({**base, "kv_cache_dtype": "fp8", "latency": secs * 5e2})  # not kept
    return pd.DataFrame(rows)


def test_the_decode_fit_recovers_a_grid_pair_exactly():
    calls = aic.decode_attention(_attention_frame(0.83, 12.5, 4.8e12))
    assert len(calls) == 64 and set(calls["kv_heads"]) == {1, 2, 4, 8}
    eff, lat, mape = aic.fit_decode_attention(calls, 4.8e12)
    assert (eff, lat) == (0.83, 12.5) and mape < 1e-9


def test_no_checkout_no_table(monkeypatch):
    monkeypatch.delenv(aic.ENV, raising=False)
    assert aic.data_root() is None
    with pytest.raises(KeyError):
        aic.table("h200_sxm", "comm", "vllm", "0.14.0", "custom_allreduce_perf")
    monkeypatch.setenv(aic.ENV, "does-not-exist")
    assert aic.data_root() is None
