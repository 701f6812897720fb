"""Blackwell profiles (b200, b300) against NVIDIA's published figures and measured collectives,
and the FP8 / FP4 refusals on devices without those tensor cores."""
from __future__ import annotations

import json

import numpy as np
import pytest

from hardware.collectives import all_gather_factor, all_reduce_factor
from hardware.profile import DTYPE_BYTES, TENSOR_CORE_DEVICES, list_profiles, load_profile
from simulator.cli import main
from simulator.inputs.errors import SpecsimError

T, TB, MIB = 1e12, 1e12, 2**20   # tera-FLOP/s, TB/s (decimal, as datasheets), MiB

# Dense per-GPU tensor-core peaks in TFLOP/s, fp4 / fp8 / bf16.
# HGX B200 (nvidia.com/en-us/data-center/hgx, all tensor-core figures with 2:4 sparsity, per
#   8 GPUs): FP4 144, FP8/FP6 72, FP16/BF16 36 PFLOPS -> / 8 / 2 = 9000, 4500, 2250 dense.
# HGX B300 (NVIDIA Blackwell Ultra datasheet, per GPU): FP4 18 sparse | 14 dense, FP8/FP6 9
#   sparse, FP16/BF16 4.5 sparse -> 14000, 4500, 2250 dense.  Blackwell Ultra raised dense FP4
#   only: its sparse FP4 (18) is still 2 x FP8 (9), its dense FP4 is not.
PEAKS = {"b200": (9000, 4500, 2250), "b300": (14000, 4500, 2250)}
# Memory per GPU (GB as the datasheets write it) and bandwidth (TB/s): HGX B200 180 GB,
# 7.7 TB/s; HGX B300 (Blackwell Ultra datasheet) 270 GB, 7.7 TB/s.
MEMORY = {"b200": (180, 7.7), "b300": (270, 7.7)}


@pytest.mark.parametrize("name", ["b200", "b300"])
def test_profiles_are_shipped_and_load_with_datasheet_numbers(name):
    assert name in list_profiles()
    p = load_profile(name)
    fp4, fp8, bf16 = PEAKS[name]
    assert p.peak_flops("fp4") == pytest.approx(fp4 * T)
    assert p.peak_flops("fp8") == pytest.approx(fp8 * T)
    assert p.peak_flops("bf16") == p.peak_flops("fp16") == pytest.approx(bf16 * T)
    gb, tb_per_s = MEMORY[name]
    assert p.memory_bytes == gb * 2**30        # the repo's convention: the datasheet's GB
    assert p.memory_bandwidth_bytes_per_s == pytest.approx(tb_per_s * TB)
    # NVLink 5: 1.8 TB/s bidirectional per GPU (HGX B200 / B300 specifications) = 900 per
    # direction, twice the H200's NVLink 4 (900 bidirectional, H200 datasheet)
    assert p.interconnect.bandwidth_bytes_per_s == 900e9
    assert p.interconnect.bandwidth_bytes_per_s == 2 * load_profile(
        "h200").interconnect.bandwidth_bytes_per_s


def test_peaks_are_dense_and_ordered_as_the_datasheets_give_them():
    b200, b300 = load_profile("b200"), load_profile("b300")
    for p in (b200, b300):
        bf16 = p.peak_flops("bf16")
        assert p.peak_flops("fp8") == pytest.approx(2 * bf16)
        assert p.peak_flops("tf32") == pytest.approx(bf16 / 2)
        assert p.peak_flops("fp32") == pytest.approx(75 * T)   # 600 TFLOPS per 8 GPUs
    assert b200.peak_flops("fp4") == pytest.approx(2 * b200.peak_flops("fp8"))
    assert b200.peak_flops("int8") == pytest.approx(b200.peak_flops("fp8"))
    # Blackwell Ultra: dense FP4 1.56x the B200's (14 vs 9 PFLOPS), INT8 cut to a few percent
    assert b300.peak_flops("fp4") / b200.peak_flops("fp4") == pytest.approx(14 / 9)
    assert b300.peak_flops("int8") < 0.05 * b300.peak_flops("fp8")
    # the 4-bit storage formats compute at the fp4 peak, with their block scales' bytes
    for dtype in ("nvfp4", "mxfp4"):
        roof = b300.roofline(dtype)
        assert roof.peak_flops_per_s == b300.peak_flops("fp4")
        assert roof.dtype_bytes == DTYPE_BYTES[dtype]
    assert DTYPE_BYTES["nvfp4"] == 0.5 + 1 / 16 and DTYPE_BYTES["mxfp4"] == 0.5 + 1 / 32


@pytest.mark.parametrize("name", ["b200", "b300"])
def test_ridge_points_are_plausible(name):
    p, h200 = load_profile(name), load_profile("h200")
    ridge = p.peak_flops("bf16") / p.memory_bandwidth_bytes_per_s
    # 2250 / 7.7 = 292 FLOP/byte: above the H200's 989 / 4.8 = 206 (compute grew 2.3x,
    # bandwidth 1.6x), and well inside the range of the other GPUs
    assert ridge == pytest.approx(2250 / 7.7, rel=1e-6)
    assert h200.peak_flops("bf16") / h200.memory_bandwidth_bytes_per_s < ridge < 1000
    # in FP4 a decode step stays memory-bound up to > 1000 FLOP/byte
    assert p.peak_flops("fp4") / p.memory_bandwidth_bytes_per_s > 1000


@pytest.mark.parametrize("name", ["b200", "b300"])
def test_kernel_shapes(name):
    k = load_profile(name).kernels
    assert k.sm_count == 148               # 74 of 80 SMs per die on both (see the sources)
    assert k.l2_bytes == 126 * 2**20
    assert max(m for m, _ in k.gemm_tiles) == 128   # one SM's tcgen05 MMA is at most 128 rows


# Measured nccl-tests all_reduce_perf times (us) on 8-GPU HGX nodes, NCCL 2.29.2, fp16:
# ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/systems/data/{b200_sxm,b300_sxm}/
# comm/nccl/2.29.2/nccl_perf.parquet (median per world and size).  (world, MiB): us
MEASURED_ALL_REDUCE = {
    "b200": {(8, 64): 278.33, (8, 512): 1334.56, (2, 512): 1005.26, (4, 512): 1270.83,
             (8, 16): 99.07, (2, 0.5 / 1024): 10.26, (8, 0.5 / 1024): 25.09},
    "b300": {(8, 64): 272.79, (8, 512): 1335.36, (2, 512): 987.52, (4, 512): 1261.26,
             (8, 16): 97.55, (2, 0.5 / 1024): 9.99, (8, 0.5 / 1024): 24.64},
}


@pytest.mark.parametrize("name", ["b200", "b300"])
def test_all_reduce_reproduces_the_measured_nccl_times(name):
    c = load_profile(name).collectives
    for (world, mib), us in MEASURED_ALL_REDUCE[name].items():
        got = c.all_reduce_s(float(mib * MIB), world, custom=False) * 1e6
        assert got == pytest.approx(us, rel=0.05), (world, mib)


@pytest.mark.parametrize("name", ["b200", "b300"])
def test_no_collective_beats_the_nvlink_line_rate(name):
    # 900 GB/s per direction is a bound no NCCL or vLLM kernel can beat: each rank moves
    # S * factor bytes through its own link
    p = load_profile(name)
    c, link = p.collectives, p.interconnect.bandwidth_bytes_per_s
    sizes = np.geomspace(1024, 2**30, 400)
    for world in (2, 4, 8):
        assert np.all(c.all_reduce_s(sizes, world) >= sizes * all_reduce_factor(world) / link)
        assert np.all(c.all_gather_s(sizes, world) >= sizes * all_gather_factor(world) / link)
    assert np.all(c.send_recv_s(sizes) >= sizes / link)
    # and large all-reduces are faster than on the H200's NVLink 4 (measured: 1335 vs 2040 us
    # at 512 MiB over 8 GPUs, aiconfigurator h200_sxm/comm/nccl/2.29.2)
    h200 = load_profile("h200").collectives
    assert c.all_reduce_s(512.0 * MIB, 8) < h200.all_reduce_s(512.0 * MIB, 8)


def test_profiles_without_fp8_and_the_named_tensor_core_devices():
    # A100 and A10 (Ampere) have no FP8 tensor cores (A100 / A10 datasheets list none)
    for name in ("a100-40gb", "a100-80gb", "a10"):
        peaks = load_profile(name).peak_flops_per_s
        assert "fp8" not in peaks and "fp4" not in peaks
    # the devices the refusal names are exactly the shipped ones with that peak
    names = list_profiles()
    for key, text in TENSOR_CORE_DEVICES.items():
        have = {n for n in names if key in load_profile(n).peak_flops_per_s}
        assert have == set(text.replace(" or ", ", ").split(", ")), key


def test_fp8_on_an_a100_names_the_device_and_what_it_supports():
    a100 = load_profile("a100-40gb")
    with pytest.raises(SpecsimError) as err:
        a100.roofline("fp8")
    text = str(err.value)
    assert err.value.field == "dtype"
    assert "a100-40gb" in text and "FP8 tensor cores" in text
    assert "supports: fp32, tf32, bf16, fp16, int8" in text
    assert "dtype: bf16" in err.value.fix and "h100-sxm" in err.value.fix
    with pytest.raises(SpecsimError) as err:         # the caller names its own field
        a100.peak_flops("fp8", field="quantization")
    assert err.value.field == "quantization" and "quantization: bf16" in err.value.fix


def test_nvfp4_on_an_h200_says_it_needs_fp4_tensor_cores():
    with pytest.raises(SpecsimError) as err:
        load_profile("h200").roofline("nvfp4", field="quantization")
    text = str(err.value)
    assert "nvfp4 needs FP4 tensor cores" in text and "h200" in text
    assert "supports: fp32, tf32, bf16, fp16, fp8, int8" in text
    assert err.value.fix == "use b200 or b300, or quantization: fp8 or bf16"
    with pytest.raises(SpecsimError) as err:         # no fp8 to fall back on
        load_profile("a10").peak_flops("mxfp4")
    assert err.value.fix == "use b200 or b300, or dtype: bf16"


def test_unknown_dtype_lists_the_known_ones():
    with pytest.raises(SpecsimError) as err:
        load_profile("b200").roofline("int4")
    assert err.value.field == "dtype" and "nvfp4" in err.value.fix


def test_cli_lists_and_shows_the_blackwell_profiles(capsys):
    assert main(["hardware", "list", "--format", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert {"b200", "b300"} <= set(rows)
    assert rows["b300"]["bandwidth_gb_per_s"] == pytest.approx(7700)
    assert rows["b200"]["bf16_tflops"] == pytest.approx(2250)
    assert main(["hardware", "show", "b300"]) == 0
    out = capsys.readouterr().out
    assert "nvlink5" in out and "fp4" in out
