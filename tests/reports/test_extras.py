"""Calibration and validation sections: frames by hand, and the page sections they make."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from hardware.profile import load_profile
from reports import charts, extras
from reports.html import chart_spec


def validation_table() -> pd.DataFrame:
    measured = np.array([1.0, 2.0, 4.0, 1.0])
    return pd.DataFrame({
        "step": ["decode", "decode", "decode", "prefill"], "measured_s": measured,
        "predicted_base_s": measured * np.array([1.1, 0.8, 1.3, 2.0]),
        "error_base": [0.1, -0.2, 0.3, 1.0],
        "predicted_calibrated_s": measured * np.array([1.0, 1.05, np.nan, 0.9]),
        "error_calibrated": [0.0, 0.05, np.nan, -0.1]})


def test_validation_errors_by_profile_and_step():
    errs = extras.validation_errors(validation_table())
    dec = errs[(errs["profile"] == "base") & (errs["step"] == "decode")].iloc[0]
    assert dec["cases"] == 3
    assert dec["mape"] == pytest.approx(0.2)           # (0.1 + 0.2 + 0.3) / 3
    assert dec["median_error"] == pytest.approx(0.1)
    assert dec["worst_error"] == pytest.approx(0.3)
    cal = errs[(errs["profile"] == "calibrated") & (errs["step"] == "decode")].iloc[0]
    assert cal["cases"] == 2 and cal["mape"] == pytest.approx(0.025)  # NaN case left out
    assert len(errs) == 4


def test_validation_points_one_row_per_finite_prediction():
    pts = extras.validation_points(validation_table())
    assert (pts["kind"] == "base").sum() == 4 and (pts["kind"] == "calibrated").sum() == 3
    base = pts[pts["kind"] == "base"]
    np.testing.assert_allclose(base["predicted_s"] / base["measured_s"], [1.1, 0.8, 1.3, 2.0])
    assert extras.validation_points(pd.DataFrame({"x": [1]})).empty


def test_curves_from_a_fit_and_from_a_calibrated_profile():
    fit = SimpleNamespace(compute_curve=((1e9, 0.2), (1e12, 0.7)),
                          memory_curve=((1e6, 0.3), (1e9, 0.9)), dtype="bf16",
                          peak_flops_per_s=9e14, rms_log_error=0.05)
    curves, params, points = extras.calibration_frames(SimpleNamespace(fit=fit))
    assert curves["efficiency"].tolist() == [0.2, 0.7, 0.3, 0.9]
    assert curves["size"].tolist() == [1e9, 1e12, 1e6, 1e9]
    assert dict(zip(params["field"], params["value"]))["peak_flops_per_s"] == 9e14
    assert points.empty
    hw = dataclasses.replace(load_profile("a100-40gb"),
                             compute_efficiency_curve=((1e8, 0.1), (1e11, 0.75)),
                             memory_efficiency_curve=())
    curves, params, _ = extras.calibration_frames(hw)
    assert len(curves) == 2 and set(curves["curve"]) == {"compute (size in FLOPs)"}
    assert "a100-40gb" in params["value"].tolist()


def test_efficiency_curve_chart():
    curves = extras.efficiency_curve_frame(((1e9, 0.2), (1e12, 0.7)), ((1e6, 0.3),))
    spec = chart_spec(charts.efficiency_curve_chart(curves))
    assert spec["encoding"]["x"]["scale"]["type"] == "log"
    assert spec["encoding"]["y"]["field"] == "efficiency"
    assert spec["encoding"]["color"]["field"] == "curve"
    vl_convert = pytest.importorskip("vl_convert")
    assert vl_convert.vegalite_to_svg(spec).lstrip().startswith("<svg")


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_results_folder_shows_a_validation_table_in_either_format(tmp_path, fmt):
    """``specsim report`` reads validation.csv or validation.parquet beside the results."""
    from reports import render_report_from_dir
    from simulator.cli import main as cli_main

    out = tmp_path / "out"
    assert cli_main(["run", "--no-progress", "--out", str(out), "--compare", "none",
                     "--set", "workload.max_requests=10", "--format", "json"]) == 0
    path = out / f"validation.{fmt}"
    getattr(validation_table(), f"to_{fmt}")(path, index=False)
    html = render_report_from_dir(out, tmp_path / "r.html").read_text(encoding="utf-8")
    assert ">Validation</h2>" in html
    assert "20.0%" in html  # the base profile's decode MAPE, (0.1 + 0.2 + 0.3) / 3
    path.unlink()  # without it, no such section
    plain = render_report_from_dir(out, tmp_path / "p.html").read_text(encoding="utf-8")
    assert ">Validation</h2>" not in plain and "20.0%" not in plain
