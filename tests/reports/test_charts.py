"""Each chart on its own: the spec it builds from a small frame, and that Vega renders it."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reports import charts
from reports.html import chart_spec

vl_convert = pytest.importorskip("vl_convert")


def rows_of(spec: dict) -> list[list[dict]]:
    """The inlined datasets of a spec, largest first."""
    return sorted(spec.get("datasets", {}).values(), key=len, reverse=True)


def render_svg(chart) -> str:
    """Render with the same Vega-Lite that the report bundles (vl-convert, offline)."""
    import altair as alt
    version = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    if version not in vl_convert.get_vegalite_versions():
        version = None
    svg = vl_convert.vegalite_to_svg(chart_spec(chart), vl_version=version)
    assert svg.lstrip().startswith("<svg")
    return svg


def cdf_frame() -> pd.DataFrame:
    q = np.linspace(0, 1, 11)
    return pd.concat([pd.DataFrame({"policy": p, "value_ms": (1 + q) * s, "quantile": q})
                      for p, s in (("none", 30.0), ("chain", 12.0))], ignore_index=True)


def test_latency_cdf_chart_spec_and_render():
    chart = charts.latency_cdf_chart(cdf_frame(), "TPOT", policies=["none", "chain", "x"])
    spec = chart_spec(chart)
    assert spec["mark"]["type"] == "line"
    enc = spec["encoding"]
    assert enc["x"]["field"] == "value_ms" and enc["x"]["scale"]["type"] == "log"
    assert enc["y"]["field"] == "quantile"
    # colour domain is the run's policies (stable colours); legend lists only those drawn
    assert enc["color"]["scale"]["domain"] == ["none", "chain", "x"]
    assert enc["color"]["legend"]["values"] == ["none", "chain"]
    assert spec["params"][0]["bind"] == "legend"  # the policy selector
    assert len(rows_of(spec)[0]) == 22
    assert "TPOT" in render_svg(chart)


def test_labels_are_drawn_as_text_not_markup():
    df = cdf_frame()
    df["policy"] = df["policy"].replace("chain", "<script>alert(1)</script>")
    svg = render_svg(charts.latency_cdf_chart(df, "TTFT"))
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_sweep_chart_picks_one_metric():
    sweep = pd.DataFrame({"policy": ["none", "none", "chain", "chain"],
                          "request_rate": [1, 2, 1, 2], "metric": ["a", "a", "a", "b"],
                          "value": [1.0, 2.0, 3.0, 4.0]})
    chart = charts.sweep_chart(sweep, "a")
    spec = chart_spec(chart)
    assert len(rows_of(spec)[0]) == 3
    assert spec["encoding"]["x"]["field"] == "request_rate"
    render_svg(chart)


def grid_frame() -> pd.DataFrame:
    rows = [{"batch": b, "context": c, "best_gamma": g, "speedup": s, "c": 0.1}
            for b, g, s in ((1, 5, 2.3), (64, 2, 1.4)) for c in (128, 256)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("fn,field", [(charts.gamma_heatmap_chart, "best_gamma"),
                                      (charts.speedup_surface_chart, "speedup")])
def test_grid_charts(fn, field):
    chart = fn(grid_frame())
    spec = chart_spec(chart)
    marks = [layer["mark"]["type"] for layer in spec["layer"]]
    assert marks == ["rect", "text"]
    assert spec["layer"][0]["encoding"]["color"]["field"] == field
    for layer in spec["layer"]:
        assert layer["encoding"]["x"]["field"] == "context"
        assert layer["encoding"]["y"]["field"] == "batch"
    assert len(rows_of(spec)[0]) == 4
    render_svg(chart)


def test_acceptance_charts():
    hist = pd.DataFrame({"policy": "chain", "accepted_tokens": [0, 1, 2],
                         "count": [5, 3, 2], "fraction": [0.5, 0.3, 0.2]})
    bar = chart_spec(charts.acceptance_length_chart(hist, ["none", "chain"]))
    assert bar["mark"]["type"] == "bar" and bar["encoding"]["y"]["field"] == "fraction"
    assert bar["encoding"]["color"]["legend"]["values"] == ["chain"]
    pos = pd.DataFrame({"policy": "chain", "position": [1, 2], "rate": [0.8, 0.6]})
    line = chart_spec(charts.position_rate_chart(pos))
    assert line["encoding"]["y"]["scale"]["domain"] == [0, 1]
    render_svg(charts.acceptance_length_chart(hist))
    render_svg(charts.position_rate_chart(pos))


def test_roofline_chart_layers_roof_under_points():
    ops = pd.DataFrame({"step": ["decode", "verify"], "op": ["mlp_up", "mlp_up"],
                        "arithmetic_intensity": [8.0, 40.0], "flops_per_s": [1e13, 5e13],
                        "time_s": [1e-3, 1e-3], "bound": ["memory", "memory"]})
    ai = np.geomspace(1, 1000, 20)
    roofs = pd.DataFrame({"arithmetic_intensity": ai,
                          "flops_per_s": np.minimum(312e12, ai * 1555e9), "roof": "r"})
    chart = charts.roofline_chart(ops, roofs)
    spec = chart_spec(chart)
    roof, points = spec["layer"]
    assert roof["mark"]["type"] == "line" and points["mark"]["type"] == "point"
    assert points["encoding"]["color"]["field"] == "op"
    assert points["encoding"]["shape"]["field"] == "step"
    assert points["encoding"]["x"]["scale"]["type"] == "log"
    assert "roofline" in render_svg(chart)


def test_timeline_chart():
    tl = pd.DataFrame({"policy": "none", "time_s": [0.5, 1.5], "value": [3.0, 4.0]})
    spec = chart_spec(charts.timeline_chart(tl, "batch size"))
    assert spec["encoding"]["x"]["field"] == "time_s"
    assert len(rows_of(spec)[0]) == 2
    render_svg(charts.timeline_chart(tl, "batch size"))


def test_calibration_chart_with_and_without_kind():
    fit = pd.DataFrame({"measured_s": [1e-3, 2e-3], "predicted_s": [1.1e-3, 1.9e-3]})
    spec = chart_spec(charts.calibration_chart(fit))
    assert spec["layer"][1]["encoding"]["x"]["field"] == "measured_s"
    render_svg(charts.calibration_chart(fit))
    fit["kind"] = ["decode", "prefill"]
    spec = chart_spec(charts.calibration_chart(fit))
    assert spec["layer"][1]["encoding"]["color"]["field"] == "kind"


def test_specs_carry_no_schema_url():
    spec = chart_spec(charts.latency_cdf_chart(cdf_frame(), "E2E"))
    assert "$schema" not in spec


def test_plan_chart_bars_per_candidate():
    plan = pd.DataFrame({"candidate": ["a", "b"], "max_rate_per_s": [2.0, 5.0],
                         "devices": [1, 2], "note": ["", "x"]})
    spec = chart_spec(charts.plan_chart(plan))
    assert spec["mark"]["type"] == "bar" and spec["encoding"]["y"]["field"] == "candidate"
    assert set(rows_of(spec)[0][0]) == {"candidate", "max_rate_per_s", "devices"}
    render_svg(charts.plan_chart(plan))
