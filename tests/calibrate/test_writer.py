"""Calibrated profiles: load like any other, round-trip, change predictions, refuse edits."""
import dataclasses

import pandas as pd
import pytest

pytest.importorskip("torch")

from calibrate.fit import Fit  # noqa: E402
from calibrate.writer import (  # noqa: E402
    calibrated_profile_dict,
    checksum,
    load_calibrated,
    profile_to_dict,
    save_profile,
    write_calibration,
)
from hardware.profile import list_profiles, load_profile, load_profile_file  # noqa: E402
from simulator.cost.cost_model import CostModel  # noqa: E402
from simulator.inputs.errors import SpecsimError  # noqa: E402
from simulator.models.spec import load_model  # noqa: E402

FIT = Fit(dtype="fp32", peak_flops_per_s=9.0e10, bandwidth_bytes_per_s=2.0e10,
          compute_curve=((1e6, 0.05), (1e8, 0.7), (1e10, 1.0)),
          memory_curve=((1e4, 0.4), (1e6, 1.0), (1e9, 0.6)),
          kernel_overhead_s=5e-6, step_overhead_s=4e-5, launch_overhead_s=3e-6,
          measured_peak_flops_per_s={"fp32": 9.0e10, "bf16": 1.8e11},
          measured_bandwidth_bytes_per_s=2.0e10, rms_log_error=0.1)
PROVENANCE = {"device": "test cpu", "device_type": "cpu", "dtype": "fp32", "statistic": "median",
              "threads": 1, "torch": "2.x", "date": "2026-01-01T00:00:00+00:00",
              "command": "specsim calibrate --device cpu", "base_profile": "cpu"}


def _write(tmp_path, fit=FIT, datasheet=False, name="mycpu"):
    data = calibrated_profile_dict(fit, name=name, base=load_profile("cpu"),
                                   datasheet_peaks=datasheet, device_name="test cpu",
                                   memory_bytes=16 * 2**30, provenance=PROVENANCE)
    frame = pd.DataFrame({"kind": ["gemm"], "median_s": [1e-3]})
    return write_calibration(data, frame, tmp_path / f"{name}.yaml")


def test_written_profile_loads_like_any_other(tmp_path):
    yaml_path, csv_path = _write(tmp_path)
    assert csv_path.name == "mycpu.measurements.csv" and csv_path.exists()
    hw = load_profile("mycpu", hardware_dir=tmp_path)        # by name, from a user folder
    assert hw.calibrated and hw.name == "mycpu"
    assert hw.peak_flops("fp32") == pytest.approx(9.0e10)
    assert hw.peak_flops("bf16") == pytest.approx(1.8e11)     # measured, beyond fp32
    assert hw.memory_bandwidth_bytes_per_s == pytest.approx(2.0e10)
    assert hw.compute_efficiency_curve == FIT.compute_curve
    assert hw.kernel_overhead_s == pytest.approx(5e-6) and hw.step_overhead_s == pytest.approx(4e-5)
    assert hw.memory_bytes == 16 * 2**30
    assert hw.provenance["device"] == "test cpu"
    assert hw.provenance["measurements_csv"] == "mycpu.measurements.csv"
    assert hw.interconnect == load_profile("cpu").interconnect
    assert all("measured" in hw.sources[k] for k in ("peak_tflops.fp32",
                                                     "defaults.kernel_overhead_us"))
    assert dataclasses.replace(load_calibrated(yaml_path), path="") == \
        dataclasses.replace(hw, path="")


def test_datasheet_peaks_kept_when_the_device_is_recognised(tmp_path):
    yaml_path, _ = _write(tmp_path, datasheet=True)
    hw, base = load_profile_file(yaml_path), load_profile("cpu")
    assert hw.peak_flops("fp16") == base.peak_flops("fp16")    # datasheet, not measured
    assert hw.sources["peak_tflops.fp16"] == base.sources["peak_tflops.fp16"]
    # the fitted dtype's peak is what its curves are relative to: written as fitted
    assert hw.peak_flops("fp32") == pytest.approx(9.0e10)
    assert "measured" in hw.sources["peak_tflops.fp32"]


def test_datasheet_source_kept_for_a_datasheet_fit(tmp_path):
    base = load_profile("cpu")
    fit = dataclasses.replace(FIT, peak_flops_per_s=base.peak_flops("fp32"),
                              bandwidth_bytes_per_s=base.memory_bandwidth_bytes_per_s)
    hw = load_profile_file(_write(tmp_path, fit=fit, datasheet=True)[0])
    assert hw.sources["peak_tflops.fp32"] == base.sources["peak_tflops.fp32"]
    assert hw.sources["memory_bandwidth_gb_per_s"] == base.sources["memory_bandwidth_gb_per_s"]
    assert hw.peak_flops("bf16") == base.peak_flops("bf16")  # 0.18 measured < 114.7 datasheet


def test_round_trip_through_load_and_save(tmp_path):
    yaml_path, _ = _write(tmp_path)
    first = load_profile_file(yaml_path)
    again = save_profile(first, tmp_path / "again.yaml")
    second = load_profile_file(again)
    assert dataclasses.replace(second, path="") == dataclasses.replace(first, path="")
    assert save_profile(second, tmp_path / "third.yaml").read_text() == again.read_text()
    load_calibrated(again)                                      # checksum survives


@pytest.mark.parametrize("name", list_profiles())
def test_shipped_profiles_round_trip(tmp_path, name):
    hw = load_profile(name)
    back = load_profile_file(save_profile(hw, tmp_path / f"{name}.yaml"))
    assert back.sources == hw.sources and back.name == hw.name
    assert back.interconnect.latency_s == pytest.approx(hw.interconnect.latency_s, rel=1e-11)
    assert back.peak_flops_per_s == pytest.approx(hw.peak_flops_per_s, rel=1e-11)
    assert back.memory_bandwidth_bytes_per_s == pytest.approx(hw.memory_bandwidth_bytes_per_s,
                                                             rel=1e-11)
    # every field, not only the sources and peaks: a field the writer forgets comes back None
    for f in dataclasses.fields(hw):  # but where it was read from
        if f.name != "path":
            assert _same(getattr(back, f.name), getattr(hw, f.name)), f.name


def _same(a, b) -> bool:
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-11)
    return a == b


def test_calibration_changes_predictions(tmp_path):
    yaml_path, _ = _write(tmp_path)
    spec = dataclasses.replace(load_model("opt-125m"), dtype="fp32")
    base = CostModel(load_profile("cpu"), spec)
    cal = CostModel(load_profile_file(yaml_path), spec)
    for batch, ctx in ((1, 128), (8, 1024)):
        assert cal.decode_time(batch, ctx) != pytest.approx(base.decode_time(batch, ctx),
                                                            rel=0.01)
    # a slower device: 90 GFLOP/s and 20 GB/s against a 56-core Xeon's datasheet
    assert cal.decode_time(1, 128) > 5 * base.decode_time(1, 128)


def test_hand_edited_profile_is_refused(tmp_path):
    yaml_path, _ = _write(tmp_path)
    text = yaml_path.read_text()
    edited = text.replace("kernel_overhead_us: {value: 5.0", "kernel_overhead_us: {value: 0.5")
    assert edited != text
    yaml_path.write_text(edited)
    load_profile_file(yaml_path)                  # still a valid profile ...
    with pytest.raises(SpecsimError, match="edited after calibration"):
        load_calibrated(yaml_path)                # ... but not the calibration it claims
    lines = [ln for ln in edited.splitlines() if "checksum:" not in ln]
    yaml_path.write_text("\n".join(lines) + "\n")
    assert load_calibrated(yaml_path).kernel_overhead_s == pytest.approx(0.5e-6)


@pytest.mark.parametrize("corrupt, match", [
    (lambda t: t[: len(t) // 2] + "\n  - [1.0, [", "malformed YAML"),
    (lambda t: t.replace("compute_efficiency_curve:", "compute_efficency_curve:"),
     "unknown key"),
    (lambda t: t.replace("- [1000000.0, 0.05]", "- [1000000.0, 1.5]"), r"\[0\]\[1\]"),
    (lambda t: t.replace("- [10000000000.0, 1.0]", "- [10.0, 1.0]"), "strictly increasing"),
])
def test_corrupted_profile_is_a_clear_error(tmp_path, corrupt, match):
    yaml_path, _ = _write(tmp_path)
    yaml_path.write_text(corrupt(yaml_path.read_text()))
    with pytest.raises(SpecsimError, match=match):
        load_calibrated(yaml_path)


def test_uncalibrated_or_bare_profiles_are_refused(tmp_path):
    with pytest.raises(SpecsimError, match="not calibrated"):
        load_calibrated(load_profile("cpu").path)
    yaml_path, _ = _write(tmp_path)
    text = yaml_path.read_text()
    start = text.index("  compute_efficiency_curve:")
    yaml_path.write_text(text[:start])            # calibrated: true, curves gone
    with pytest.raises(SpecsimError, match="no calibration curves"):
        load_calibrated(yaml_path)


def test_checksum_covers_numbers_not_provenance():
    data = profile_to_dict(load_profile("cpu"))
    data["calibration"] = {"provenance": {"date": "a"}}
    same = {**data, "calibration": {"provenance": {"date": "b"}}}
    assert checksum(data) == checksum(same)
    data2 = {**data, "memory_gib": {"value": 1.0, "source": "x"}}
    assert checksum(data2) != checksum(data)


def test_out_must_be_yaml(tmp_path):
    with pytest.raises(SpecsimError, match=r"\.yaml"):
        write_calibration({}, pd.DataFrame(), tmp_path / "profile.txt")
