"""The optional ``moe:`` block of a hardware profile (the fused-MoE grouped GEMM's streaming
rate): read with its source, refused with the field named, written back by the calibrator."""
from __future__ import annotations

import pytest
import yaml

from calibrate.writer import profile_to_dict
from hardware.profile import PROFILE_DIR, load_profile, load_profile_file, profile_from_dict
from simulator.inputs.errors import SpecsimError


def _h200_data():
    return yaml.safe_load((PROFILE_DIR / "h200.yaml").read_text(encoding="utf-8"))


def test_moe_block_is_read_with_its_source_and_optional():
    p = load_profile("h200")
    assert p.moe_quantized_gemm_efficiency == 0.65
    assert "PR #11730" in p.sources["moe.quantized_grouped_gemm_memory_efficiency"]
    assert load_profile("a100-80gb").moe_quantized_gemm_efficiency is None
    h100 = load_profile("h100-sxm")  # the BF16 kernel's compute and overlap (PR #24700)
    assert (h100.moe_grouped_gemm_compute_efficiency, h100.moe_grouped_gemm_overlap_exponent) \
        == (0.6, 2.5)
    for key in ("grouped_gemm_compute_efficiency", "grouped_gemm_overlap_exponent"):
        assert "PR #24700" in h100.sources[f"moe.{key}"]
    a100 = load_profile("a100-80gb")
    assert a100.moe_grouped_gemm_compute_efficiency is None
    assert a100.moe_grouped_gemm_overlap_exponent is None


@pytest.mark.parametrize("block, field", [
    ({"quantized_grouped_gemm_memory_efficiency": {"value": 1.5, "source": "x"}},
     "moe.quantized_grouped_gemm_memory_efficiency.value"),
    ({"quantized_grouped_gemm_memory_efficiency": {"value": 0.5}},
     "moe.quantized_grouped_gemm_memory_efficiency.source"),
    ({"grouped_gemm_efficiency": {"value": 0.5, "source": "x"}}, "moe.grouped_gemm_efficiency"),
    ({}, "moe"),
    ({"grouped_gemm_overlap_exponent": {"value": 0.5, "source": "x"}},
     "moe.grouped_gemm_overlap_exponent.value"),
    ({"grouped_gemm_compute_efficiency": {"value": 0.0, "source": "x"}},
     "moe.grouped_gemm_compute_efficiency.value"),
])
def test_bad_moe_block_names_the_field(tmp_path, block, field):
    data = _h200_data()
    data["moe"] = block
    path = tmp_path / "h200.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(SpecsimError) as err:
        load_profile_file(path)
    assert err.value.field == field and str(path) in str(err.value)


def test_moe_block_round_trips_through_the_writer():
    p = load_profile("h200")
    back = profile_from_dict(profile_to_dict(p), source="round trip")
    assert back.moe_quantized_gemm_efficiency == p.moe_quantized_gemm_efficiency
    assert back.moe_grouped_gemm_compute_efficiency == p.moe_grouped_gemm_compute_efficiency
    assert back.moe_grouped_gemm_overlap_exponent == p.moe_grouped_gemm_overlap_exponent
    for key in ("quantized_grouped_gemm_memory_efficiency", "grouped_gemm_compute_efficiency",
                "grouped_gemm_overlap_exponent"):
        assert back.sources[f"moe.{key}"] == p.sources[f"moe.{key}"]


@pytest.mark.parametrize("fit", ["grouped_gemm", "fp8_triton", "fp8_vllm", "fp8_deepgemm"])
@pytest.mark.parametrize("given", ["compute_efficiency", "overlap_exponent"])
def test_a_fit_given_half_is_refused_naming_both_fields(tmp_path, fit, given):
    """(compute efficiency, overlap exponent) price together (moe_kernels.grouped_gemm_kernel):
    one without the other would price with None, so the profile is refused."""
    data = _h200_data()
    value = 0.22 if given == "compute_efficiency" else 1.5
    data["moe"] = {f"{fit}_{given}": {"value": value, "source": "x"}}
    path = tmp_path / "h200.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(SpecsimError) as err:
        load_profile_file(path)
    text = str(err.value)
    assert f"{fit}_compute_efficiency" in text and f"{fit}_overlap_exponent" in text
    assert err.value.field == f"moe.{fit}_compute_efficiency"
    data["moe"][f"{fit}_compute_efficiency"] = {"value": 0.22, "source": "x"}
    data["moe"][f"{fit}_overlap_exponent"] = {"value": 1.5, "source": "x"}
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    assert vars(load_profile_file(path))[f"moe_{fit}_compute_efficiency"] == 0.22
