"""Shipped hardware profiles: every number sourced, datasheet peaks pinned, bad files rejected."""
from __future__ import annotations

import copy

import pytest
import yaml

from hardware.profile import DTYPES, PROFILE_DIR, list_profiles, load_profile, load_profile_file
from simulator.inputs.errors import SpecsimError

PROFILES = list_profiles()
ACCELERATORS = [n for n in PROFILES if n != "cpu"]
NVIDIA_GPUS = ["a10", "a100-40gb", "a100-80gb", "h100-sxm", "h200", "l40s"]
REFERENCE = PROFILE_DIR / "a100-40gb.yaml"


def test_shipped_profiles_are_the_assigned_ones():
    assert {"a100-40gb", "a100-80gb", "a10", "tpu-v4", "tpu-v5e", "h100-sxm", "h200", "l40s",
            "b200", "b300", "cpu"} <= set(PROFILES)


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_loads_with_a_source_for_every_number(name):
    p = load_profile(name)
    assert p.name == name and not p.calibrated
    needed = {"memory_gib", "memory_bandwidth_gb_per_s", "interconnect", "host_link",
              "defaults.compute_efficiency", "defaults.memory_efficiency",
              "defaults.kernel_overhead_us", "defaults.step_overhead_us"}
    needed |= {f"peak_tflops.{dt}" for dt in p.peak_flops_per_s}
    assert needed <= set(p.sources)
    for key, text in p.sources.items():
        assert len(text.strip()) >= 15, f"{name}: source of {key} says too little"


@pytest.mark.parametrize("name", PROFILES)
def test_units_and_orders_of_magnitude(name):
    p = load_profile(name)
    assert set(p.peak_flops_per_s) <= set(DTYPES)
    assert 1 * 2**30 <= p.memory_bytes <= 4 * 2**40
    assert 1e11 <= p.memory_bandwidth_bytes_per_s <= 1e13
    # Offloading over the host link is slower than reading device memory.
    assert p.host_link.bandwidth_bytes_per_s < p.memory_bandwidth_bytes_per_s
    assert p.interconnect.bandwidth_bytes_per_s < p.memory_bandwidth_bytes_per_s
    assert 0 < p.compute_efficiency <= 1 and 0 < p.memory_efficiency <= 1


# Dense half-precision peaks from the vendors' pages (TFLOP/s, TB/s):
# NVIDIA A100 datasheet (2021): 312 dense fp16/bf16, 1.555 TB/s (40GB), 2.039 TB/s (80GB SXM).
# NVIDIA H100 / H200 datasheets: 1,979 TFLOP/s bf16 *with sparsity*, so 989 dense;
#   3.35 TB/s (H100 SXM), 4.8 TB/s (H200).
# NVIDIA A10 datasheet: 125 dense bf16, 600 GB/s. NVIDIA L40S datasheet: 362.05 dense, 864 GB/s.
# Cloud TPU docs: v4 275 bf16, 1200 GBps; v5e 197 bf16, 819 GBps.
# NVIDIA HGX B200 specifications: FP16/BF16 36 PFLOPS with sparsity per 8 GPUs, so 2,250 dense
#   per GPU, 7.7 TB/s; Blackwell Ultra datasheet (HGX B300): 4.5 PFLOPS sparse per GPU, 7.7 TB/s.
#   (Their FP4/FP8 peaks and the sparse/dense ratios: tests/hardware/test_blackwell.py.)
DATASHEET = {
    "a100-40gb": (312, 1.555), "a100-80gb": (312, 2.039), "h100-sxm": (989, 3.35),
    "h200": (989, 4.8), "a10": (125, 0.600), "l40s": (362, 0.864),
    "tpu-v4": (275, 1.2), "tpu-v5e": (197, 0.819), "b200": (2250, 7.7), "b300": (2250, 7.7),
}


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_half_precision_peak_and_bandwidth_match_datasheet(name):
    tflops, tb_per_s = DATASHEET[name]
    p = load_profile(name)
    assert p.peak_flops("bf16") == pytest.approx(tflops * 1e12, rel=0.005)
    if "fp16" in p.peak_flops_per_s:
        assert p.peak_flops("fp16") == p.peak_flops("bf16")
    assert p.memory_bandwidth_bytes_per_s == pytest.approx(tb_per_s * 1e12, rel=1e-9)


def test_design_reference_numbers_are_pinned():
    # DESIGN.md sec. 4 reference arithmetic: 312 TFLOP/s and 1555 GB/s, fp16.
    a100 = load_profile("a100-40gb")
    assert a100.peak_flops("fp16") == 312e12
    assert a100.memory_bandwidth_bytes_per_s == 1555e9
    h100 = load_profile("h100-sxm")
    assert h100.peak_flops("bf16") == pytest.approx(989e12, rel=0.001)
    assert h100.memory_bandwidth_bytes_per_s == 3.35e12


@pytest.mark.parametrize("name", NVIDIA_GPUS)
def test_nvidia_peaks_are_dense_not_sparse(name):
    # On Ampere/Ada/Hopper tensor cores, dense TF32 runs at half the 16-bit rate and INT8
    # (and FP8 where present) at twice it; a sparse figure slipped in breaks the ratio.
    # (Blackwell, whose B300 cut INT8 and whose FP4 breaks the doubling: test_blackwell.py.)
    p = load_profile(name)
    half = p.peak_flops("bf16")
    assert p.peak_flops("tf32") == pytest.approx(half / 2, rel=0.02)
    assert p.peak_flops("int8") == pytest.approx(2 * half, rel=0.02)
    if "fp8" in p.peak_flops_per_s:
        assert p.peak_flops("fp8") == pytest.approx(2 * half, rel=0.02)
    assert p.peak_flops("fp32") < half


def test_tpus_list_no_fp16_and_a10_l40s_have_no_nvlink():
    for name in ("tpu-v4", "tpu-v5e"):
        p = load_profile(name)
        assert "fp16" not in p.peak_flops_per_s
        # fp16 checkpoints run in bf16 on a TPU: priced at the bf16 rate
        assert p.peak_flops("fp16") == p.peak_flops("bf16")
        with pytest.raises(SpecsimError, match="fp32"):
            p.peak_flops("fp32")
    for name in ("a10", "l40s"):
        assert load_profile(name).interconnect.name.startswith("pcie")


@pytest.mark.parametrize("name", ACCELERATORS)
def test_ridge_point_is_sane(name):
    p = load_profile(name)
    peak = max(p.peak_flops_per_s[dt] for dt in ("bf16", "fp16") if dt in p.peak_flops_per_s)
    ridge = peak / p.memory_bandwidth_bytes_per_s
    assert 10 <= ridge <= 1000, f"{name}: ridge point {ridge:.0f} FLOP/byte"


def test_unknown_profile_lists_valid_names():
    with pytest.raises(SpecsimError) as err:
        load_profile("a100-40")
    assert err.value.field == "hardware"
    for name in ("a100-40gb", "h100-sxm", "tpu-v4", "cpu"):
        assert name in str(err.value)


# ---- --hardware-dir: user profiles ----

def _reference_data():
    return yaml.safe_load(REFERENCE.read_text(encoding="utf-8"))


def _write(folder, data, name):
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_user_profile_is_listed_and_loads(tmp_path):
    data = _reference_data()
    data["name"] = "my-gpu"
    _write(tmp_path, data, "my-gpu")
    assert "my-gpu" not in list_profiles()
    names = list_profiles(tmp_path)
    assert "my-gpu" in names and set(PROFILES) <= set(names)
    assert load_profile("my-gpu", hardware_dir=tmp_path).memory_bandwidth_bytes_per_s == 1555e9


def test_user_profile_overrides_builtin_of_same_name(tmp_path):
    data = _reference_data()
    data["memory_bandwidth_gb_per_s"]["value"] = 2000
    _write(tmp_path, data, "a100-40gb")
    assert load_profile("a100-40gb", hardware_dir=tmp_path).memory_bandwidth_bytes_per_s == 2e12
    assert load_profile("a100-40gb").memory_bandwidth_bytes_per_s == 1555e9


def test_hardware_dir_must_be_a_folder(tmp_path):
    with pytest.raises(SpecsimError) as err:
        list_profiles(tmp_path / "missing")
    assert err.value.field == "--hardware-dir"


def test_profile_whose_name_disagrees_with_file_is_rejected(tmp_path):
    _write(tmp_path, _reference_data(), "renamed")  # still says name: a100-40gb
    with pytest.raises(SpecsimError) as err:
        load_profile("renamed", hardware_dir=tmp_path)
    assert err.value.field == "name"


# ---- bad profiles: one thing broken each; the error names the file and the field ----

_DELETE = object()


def _set(data, dotted, value):
    *parents, last = dotted.split(".")
    for key in parents:
        data = data[key]
    if value is _DELETE:
        del data[last]
    else:
        data[last] = value


@pytest.mark.parametrize("dotted, value, field", [
    ("memory_gib", _DELETE, "memory_gib"),                                   # missing field
    ("memory_bandwidth_gb_per_s.value", 0, "memory_bandwidth_gb_per_s.value"),
    ("interconnect.bandwidth_gb_per_s", -300, "interconnect.bandwidth_gb_per_s"),
    ("host_link.bandwidth_gb_per_s", 0, "host_link.bandwidth_gb_per_s"),
    ("peak_tflops.fp16.value", "312", "peak_tflops.fp16.value"),             # string
    ("interconnect.latency_us", True, "interconnect.latency_us"),             # bool
    ("memory_bandwith_gb_per_s", {"value": 1, "source": "x"}, "memory_bandwith_gb_per_s"),
    ("peak_tflops.fp2", {"value": 1, "source": "x"}, "peak_tflops.fp2"),      # unknown dtype
    ("memory_gib.source", _DELETE, "memory_gib.source"),                      # missing source
    ("interconnect.source", _DELETE, "interconnect.source"),
    ("defaults.kernel_overhead_us.source", _DELETE, "defaults.kernel_overhead_us.source"),
    ("defaults.compute_efficiency.value", 1.5, "defaults.compute_efficiency.value"),
    ("calibrated", True, "calibration"),                                      # no curves
])
def test_bad_profile_names_file_and_field(tmp_path, dotted, value, field):
    data = copy.deepcopy(_reference_data())
    _set(data, dotted, value)
    path = _write(tmp_path, data, "bad")
    with pytest.raises(SpecsimError) as err:
        load_profile_file(path)
    assert err.value.field == field
    assert str(path) in str(err.value)
    assert field in str(err.value)


def test_reference_fixture_is_valid(tmp_path):
    assert load_profile_file(_write(tmp_path, _reference_data(), "good")).name == "a100-40gb"


def test_unknown_key_error_lists_valid_keys(tmp_path):
    data = _reference_data()
    data["memory_bandwith_gb_per_s"] = data.pop("memory_bandwidth_gb_per_s")
    with pytest.raises(SpecsimError) as err:
        load_profile_file(_write(tmp_path, data, "typo"))
    assert "memory_bandwidth_gb_per_s" in err.value.fix


def test_yaml_exponent_without_sign_is_caught(tmp_path):
    # PyYAML reads 3.12e14 (no sign in the exponent) as a string: the error must say so.
    text = REFERENCE.read_text(encoding="utf-8").replace(
        'fp16: {value: 312,', 'fp16: {value: 3.12e2,')
    assert "3.12e2" in text
    path = tmp_path / "exp.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecsimError) as err:
        load_profile_file(path)
    assert err.value.field == "peak_tflops.fp16.value"
    assert str(path) in str(err.value)


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\nmemory_gib: {value: 40, source: \"x\"\n", encoding="utf-8")
    with pytest.raises(SpecsimError) as err:
        load_profile_file(path)
    assert str(path) in str(err.value) and "line" in str(err.value)
