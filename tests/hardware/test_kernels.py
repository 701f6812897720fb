"""Kernel shapes (hardware/kernels.py) and the kernel-level roofline methods.

Closed forms and hand-computed cases: tile and wave quantisation of a GEMM that fills exactly
one wave against one with a tile more, the no-``kernels:`` reduction to the flat formula bit
for bit, Hockney's half-performance size, the floor, the L2 rules, and the shipped blocks
against the datasheets' SM counts and a source for every kind of small kernel.
"""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import yaml

from calibrate.writer import save_profile
from hardware.kernels import KINDS, KernelShapes, KindRates, kernels_to_dict, parse_kernels
from hardware.profile import PROFILE_DIR, load_profile, load_profile_file, profile_from_dict
from hardware.roofline import Roofline, wave_efficiency
from simulator.inputs.errors import SpecsimError

PEAK, BW = 312e12, 2039e9            # A100 fp16 dense, A100 80GB HBM (datasheet)
EC, EM = 0.7, 0.9
GPUS = ["a10", "a100-40gb", "a100-80gb", "h100-sxm", "h200", "l40s"]
# SM counts: whitepapers (A100 108, H100 SXM5 132) and datasheet CUDA cores / 128 per SM
SMS = {"a100-40gb": 108, "a100-80gb": 108, "a10": 9216 // 128, "l40s": 18176 // 128,
       "h100-sxm": 132, "h200": 132}


def shapes(**changes) -> KernelShapes:
    base = dict(sm_count=108, gemm_tiles=((128, 256),), latency_s=0.0, min_kernel_s=0.0)
    base.update(changes)
    return KernelShapes(**base)


def roof(kernels=None) -> Roofline:
    return Roofline(PEAK, BW, compute_efficiency=EC, memory_efficiency=EM, kernels=kernels)


# ------------------------------------------------------------------ tile and wave quantisation
def test_exactly_one_wave_is_fully_efficient_and_one_tile_more_costs_a_second_wave():
    # 9 x 12 tiles of 128x256 = 108 blocks = one full wave on 108 SMs: nothing padded
    m, n = 9 * 128, 12 * 256
    assert wave_efficiency(m, n, [(128, 256)], 108) == 1.0
    # one row more: 10 x 12 = 120 blocks, 2 waves of 108 blocks of 128x256 each
    assert wave_efficiency(m + 1, n, [(128, 256)], 108) == \
        pytest.approx((m + 1) * n / (2 * 108 * 128 * 256), rel=1e-15)
    # the GEMM time of a compute-bound shape doubles: the GPU runs two waves
    r, k = roof(shapes()), 16384
    t1, t2 = r.gemm_time(m, n, k), r.gemm_time(m + 1, n, k)
    assert t1 == pytest.approx(2 * m * n * k / (PEAK * EC), rel=1e-12)
    assert t2 == pytest.approx(2 * t1, rel=1e-12)
    # one column more: 9 x 13 = 117 blocks, again two waves
    assert r.gemm_time(m, n + 1, k) == pytest.approx(2 * t1, rel=1e-12)


def test_tile_quantisation_pads_the_last_tile_row():
    # m = 129 rows need two 128-row tiles: 2 x 1 blocks, one wave, 129/(108*256) useful
    eff = wave_efficiency(129, 256, [(128, 256)], 108)
    assert eff == pytest.approx(129 * 256 / (108 * 128 * 256), rel=1e-15)
    assert wave_efficiency(0, 256, [(128, 256)], 108) == 0.0


def test_the_best_tile_of_the_menu_is_taken():
    # m=64, n=64*108: 64x64 tiles fill one wave exactly; 128x256 tiles pad m and leave SMs idle
    m, n = 64, 64 * 108
    menu = [(128, 256), (64, 64)]
    assert wave_efficiency(m, n, menu, 108) == 1.0
    assert wave_efficiency(m, n, [(128, 256)], 108) == pytest.approx(
        m * n / (1 * 108 * 128 * 256))


def test_a_table_of_counts_gets_each_tiles_best_bit_for_bit():
    # the counts-by-one-n path (min padding, one ceil per tile height) against the form tile
    # by tile, every float equal: the cost model's tables must not move a digest
    menu = [(256, 128), (128, 256), (256, 64), (64, 256), (128, 128), (128, 64), (64, 128),
            (64, 64)]
    ms = np.concatenate([np.arange(0.0, 2048.0), [-300.0, -0.0, 0.5, 65535.0, 1e9]])
    for n in (1, 7, 768, 5120, 13824, 50272, 0.5):
        want = np.zeros_like(ms)
        for tm, tn in menu:
            padded = np.ceil(np.ceil(ms / tm) * np.ceil(np.float64(n) / tn) / 108) \
                * (108 * tm * tn)
            want = np.maximum(want, np.where(padded > 0, ms * n / np.maximum(padded, 1.0),
                                             0.0))
        got = wave_efficiency(ms, n, menu, 108)
        assert got.tobytes() == want.tobytes()


def test_gemm_time_is_vectorised_over_m():
    r = roof(shapes(gemm_tiles=((128, 128), (64, 64)), latency_s=2e-6, min_kernel_s=1e-6))
    ms = np.array([1, 7, 128, 1000, 4096])
    vec = r.gemm_time(ms, 4096, 4096)
    assert vec.shape == ms.shape
    assert all(vec[i] == pytest.approx(r.gemm_time(int(m), 4096, 4096), rel=1e-15)
               for i, m in enumerate(ms))
    assert np.all(np.diff(vec) >= 0)     # more rows never cost less


def test_a_decode_gemm_is_the_weight_stream_plus_the_latency():
    # m=1: compute is negligible, the kernel reads k*n weights once
    r = roof(shapes(gemm_tiles=((64, 64),), latency_s=4e-6))
    k, n = 4096, 12288
    nbytes = 2 * (k * n + k + n)
    assert r.gemm_time(1, n, k) == pytest.approx(4e-6 + nbytes / (BW * EM), rel=1e-12)


# ------------------------------------------------------------------ reduction to the flat formula
@pytest.mark.parametrize("m", [1, 7, 512, 4096])
def test_without_kernels_every_method_is_exactly_the_flat_formula(m):
    r = roof()
    n, k = 5120, 13824
    f, b = 2.0 * m * n * k, 2 * (k * n + m * k + m * n)
    assert r.gemm_time(m, n, k) == max(f / (PEAK * EC), b / (BW * EM))
    assert r.transfer_time(b) == b / (BW * EM)
    flops, nbytes = np.array([3e9, 2e6, 0.0]), np.array([1e6, 4e7, 5e5])
    queries = np.array([64, 1, 0])      # the last request is not in the step
    expected = sum(max(x / (PEAK * EC), y / (BW * EM)) for x, y in zip(flops[:2], nbytes[:2]))
    assert r.attention_time(flops, nbytes, queries) == pytest.approx(expected, rel=1e-15)
    vec = r.gemm_time(np.array([m, m]), n, k)
    assert vec[0] == max(f / (PEAK * EC), b / (BW * EM))


def test_a_profile_without_kernels_prices_as_before():
    hw = load_profile("a100-80gb")
    flat = dataclasses.replace(hw, kernels=None).roofline("fp16")
    assert flat.kernels is None and hw.roofline("fp16").kernels is not None
    assert flat.gemm_time(8, 8192, 8192) == max(
        2 * 8 * 8192 * 8192 / (hw.peak_flops("fp16") * hw.compute_efficiency),
        2 * (8192 * 8192 + 2 * 8 * 8192) / (hw.memory_bandwidth_bytes_per_s
                                            * hw.memory_efficiency))
    # Roofline.time keeps working as today, kernels block or not
    assert hw.roofline("fp16").time(1e12, 1e9) == flat.time(1e12, 1e9)
    assert hw.plain_roofline().kernels is None


# ------------------------------------------------------------------ latency, floor, L2, kinds
def test_latency_is_hockney_half_performance_size():
    lat = 3.8e-6
    r = roof(shapes(latency_s=lat))
    for b in (1e4, 1e6, 1e8):
        achieved = b / r.transfer_time(b) / BW
        assert achieved == pytest.approx(EM * b / (b + lat * BW * EM), rel=1e-12)
    # at the half-performance size the transfer reaches half the streaming rate
    n_half = lat * BW * EM
    assert n_half / r.transfer_time(n_half) == pytest.approx(BW * EM / 2, rel=1e-12)


def test_the_floor_and_kernels_not_launched():
    r = roof(shapes(latency_s=0.0, min_kernel_s=2e-6))
    assert r.transfer_time(10.0) == 2e-6
    assert r.transfer_time(0) == 0.0
    assert list(r.transfer_time(np.array([0.0, 10.0, 1e9]))) == [0.0, 2e-6, 1e9 / (BW * EM)]
    assert r.gemm_time(0, 4096, 4096) == 0.0


def test_kind_overrides_and_the_l2_rule():
    norm = KindRates(memory_efficiency=0.5, latency_s=1e-6, min_kernel_s=5e-6,
                     l2_memory_efficiency=0.7)
    r = roof(shapes(kinds={"norm": norm}, l2_bytes=40 * 2**20, latency_s=3e-6))
    small, big = 8 * 2**20, 400 * 2**20
    assert r.transfer_time(small, "norm") == pytest.approx(1e-6 + small / (BW * 0.7))
    assert r.transfer_time(big, "norm") == pytest.approx(1e-6 + big / (BW * 0.5))
    assert r.transfer_time(100.0, "norm") == 5e-6                   # its own floor
    assert r.transfer_time(big) == pytest.approx(3e-6 + big / (BW * EM))  # default kind
    with pytest.raises(SpecsimError, match="unknown kernel kind"):
        r.transfer_time(big, "softmax")


def test_the_l2_rate_is_a_fraction_of_the_l2_bandwidth_and_never_below_hbm():
    l2_bw = 5400e9                       # the A100 L2 read rate a100-80gb.yaml cites
    add = KindRates(memory_efficiency=0.9, latency_s=1e-6, l2_memory_efficiency=0.5)
    slow = KindRates(memory_efficiency=0.9, latency_s=1e-6, l2_memory_efficiency=0.1)
    r = roof(shapes(kinds={"elementwise": add, "norm": slow}, l2_bytes=40 * 2**20,
                    l2_bandwidth_bytes_per_s=l2_bw))
    small, big = 8 * 2**20, 400 * 2**20
    assert r.transfer_time(small) == pytest.approx(1e-6 + small / (0.5 * l2_bw), rel=1e-12)
    assert r.transfer_time(big) == pytest.approx(1e-6 + big / (0.9 * BW), rel=1e-12)
    # 0.1 x 5400 GB/s is below 0.9 x 2039 GB/s: bytes in L2 stream at the HBM rate then
    assert r.transfer_time(small, "norm") == pytest.approx(1e-6 + small / (0.9 * BW), rel=1e-12)
    # vectorised the same, element by element
    got = r.transfer_time(np.array([small, big]))
    assert list(got) == [r.transfer_time(small), r.transfer_time(big)]


SMALL = ("embedding", "norm", "activation", "rope", "elementwise")


@pytest.mark.parametrize("name", GPUS + ["b200", "b300"])
def test_every_gpu_profile_prices_each_small_kernel_kind_with_a_source(name):
    hw = load_profile(name)
    for kind in SMALL:
        rates = hw.kernels.kinds[kind]
        assert rates.memory_efficiency is not None and rates.latency_s is not None, kind
        assert len(hw.sources[f"kernels.{kind}"]) >= 100, kind
    if hw.kernels.l2_bandwidth_bytes_per_s is not None:
        # an L2 faster than the HBM it caches (its source: a whitepaper or a measurement)
        assert hw.kernels.l2_bandwidth_bytes_per_s > hw.memory_bandwidth_bytes_per_s
        assert len(hw.sources["kernels.l2_bandwidth_gb_per_s"]) >= 30


def test_attention_runs_one_kernel_per_kind_of_request():
    dec = KindRates(memory_efficiency=0.8, latency_s=10e-6)
    pre = KindRates(compute_efficiency=0.4, latency_s=20e-6)
    r = roof(shapes(kinds={"attention_decode": dec, "attention_prefill": pre}))
    f = np.array([1e6, 1e6, 4e10])
    b = np.array([8e6, 8e6, 2e7])
    q = np.array([1, 1, 512])
    decode = 10e-6 + 2 * max(1e6 / (PEAK * EC), 8e6 / (BW * 0.8))
    prefill = 20e-6 + max(4e10 / (PEAK * 0.4), 2e7 / (BW * EM))
    assert r.attention_time(f, b, q) == pytest.approx(decode + prefill, rel=1e-12)
    assert r.attention_time(f[:2], b[:2], q[:2]) == pytest.approx(decode, rel=1e-12)


# ------------------------------------------------------------------ the YAML block
def _block(name: str) -> dict:
    return copy.deepcopy(yaml.safe_load((PROFILE_DIR / f"{name}.yaml").read_text())["kernels"])


@pytest.mark.parametrize("name", GPUS)
def test_every_gpu_profile_has_a_sourced_kernels_block(name):
    hw = load_profile(name)
    k = hw.kernels
    assert k is not None and k.sm_count == SMS[name]
    assert (128, 256) in k.gemm_tiles and (64, 64) in k.gemm_tiles
    for key in ("sm_count", "gemm_tiles", "latency_us", "min_kernel_us", "l2_cache_mib"):
        assert len(hw.sources[f"kernels.{key}"]) >= 30, key
    assert 0 < k.min_kernel_s <= k.latency_s < 1e-4
    assert "attention_prefill" in k.kinds and hw.sources["kernels.attention_prefill"]


@pytest.mark.parametrize("name", ["cpu", "tpu-v4", "tpu-v5e"])
def test_non_gpu_profiles_keep_the_flat_formula(name):
    assert load_profile(name).kernels is None


@pytest.mark.parametrize("mutate, field", [
    (lambda b: b["sm_count"].pop("source"), "kernels.sm_count.source"),
    (lambda b: b.update(gemm_tiles={"value": [[128]], "source": "x" * 20}),
     "kernels.gemm_tiles.value"),
    (lambda b: b.update(gemm_tiles={"value": [], "source": "x" * 20}),
     "kernels.gemm_tiles.value"),
    (lambda b: b.update(softmax={"memory_efficiency": 0.5, "source": "x" * 20}),
     "kernels.softmax"),
    (lambda b: b.update(norm={"memory_efficiency": 1.5, "source": "x" * 20}),
     "kernels.norm.memory_efficiency"),
    (lambda b: b.update(norm={"source": "x" * 20}), "kernels.norm"),
    (lambda b: b.update(latency_us={"value": -1, "source": "x" * 20}), "kernels.latency_us.value"),
    (lambda b: b.pop("min_kernel_us"), "kernels.min_kernel_us"),
    (lambda b: b.update(l2_bandwidth_gb_per_s={"value": 0, "source": "x" * 20}),
     "kernels.l2_bandwidth_gb_per_s.value"),
])
def test_a_bad_block_names_its_field(mutate, field):
    block = _block("a100-80gb")
    mutate(block)
    with pytest.raises(SpecsimError) as err:
        parse_kernels(block, source="test.yaml")
    assert err.value.field == field and err.value.fix


def test_a_profile_with_kernels_round_trips_through_the_writer(tmp_path):
    hw = load_profile("a100-80gb")
    # times as the YAML holds them (microseconds), so that one write and read is lossless
    rates = KindRates(memory_efficiency=0.52, latency_s=1e-6 * 2.8, min_kernel_s=1e-6 * 5.0,
                      l2_memory_efficiency=0.71)
    kinds = {**hw.kernels.kinds, "norm": rates}
    sources = {**hw.kernels.sources, "kernels.norm": "a fit for this test, long enough"}
    hw = dataclasses.replace(hw, kernels=dataclasses.replace(hw.kernels, kinds=kinds,
                                                             sources=sources))
    back = load_profile_file(save_profile(hw, tmp_path / "again.yaml"))
    assert back.kernels == hw.kernels
    assert parse_kernels(kernels_to_dict(hw.kernels), source="x") == hw.kernels
    assert set(KINDS) >= set(back.kernels.kinds)


def test_a_calibrated_profile_may_carry_kernels_instead_of_curves():
    data = yaml.safe_load((PROFILE_DIR / "a100-80gb.yaml").read_text())
    data["calibrated"] = True
    with pytest.raises(SpecsimError, match="no calibration curves"):
        profile_from_dict(data, source="x")      # a shipped block is no calibration
    data["calibration"] = {"provenance": {"command": "specsim calibrate --from-measurements"}}
    assert profile_from_dict(data, source="x").calibrated
    data.pop("kernels")
    with pytest.raises(SpecsimError, match="no calibration curves"):
        profile_from_dict(data, source="x")
