"""The report of a run with uncertainty intervals: error bars and bands whose data are the
summary's p5/p95 columns, "x (lo-hi)" cells, the widest source per metric; and without
intervals, the same report as before to the byte."""
from __future__ import annotations

import html as htmllib
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from reports import build_report_html, charts, frames, uncertainty_marks
from reports.html import chart_spec, format_number
from simulator.cli import main as cli_main
from simulator.inputs.errors import SpecsimError
from simulator.uncertainty.propagate import METRICS
from tests.reports.test_charts import render_svg
from tests.reports.test_html import EVIL, VERSIONS, make_scenario, pair, specs_of
from tests.simulator.test_uncertainty import SYNTHETIC

PANEL_OF = {"p50_ttft_s": ("TTFT (ms)", "p50", 1e3), "p99_ttft_s": ("TTFT (ms)", "p99", 1e3),
            "p50_tpot_s": ("TPOT (ms)", "p50", 1e3), "p99_tpot_s": ("TPOT (ms)", "p99", 1e3),
            "output_tokens_per_s": (frames.THROUGHPUT_PANEL, "mean", 1.0)}


def with_intervals(summary: pd.DataFrame) -> pd.DataFrame:
    """``summary`` with made-up, distinct p5/p50/p95 and shares per metric (0.8x, 1x,
    1.3x the point; workload widest at 60%)."""
    out = summary.copy()
    for m in METRICS:
        if m not in out.columns:
            continue
        out[f"{m}_p5"], out[f"{m}_p50"], out[f"{m}_p95"] = 0.8 * out[m], out[m], 1.3 * out[m]
        out[f"{m}_widest"] = "workload"
        out[f"{m}_share_workload"], out[f"{m}_share_cost"] = 0.6, 0.4
    return out.assign(uncertainty_draws=7)


def layer_rows(spec: dict, mark: str, node: dict | None = None) -> list[list[dict]]:
    """The inlined data of every layer of ``node`` (default: the whole ``spec``, at any
    depth) drawn with ``mark``."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            m = node.get("mark")
            if (m if isinstance(m, str) else (m or {}).get("type")) == mark and "data" in node:
                found.append(spec["datasets"][node["data"]["name"]])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(spec if node is None else node)
    return found


def bars_drawn(spec: dict) -> set:
    """(policy, stat, panel, lo, hi) of every error bar of a policy comparison spec."""
    return {(r["policy"], r["stat"], p["title"], round(r["lo"], 9), round(r["hi"], 9))
            for p in spec["hconcat"] for rows in layer_rows(spec, "rule", p) for r in rows
            if "lo" in r}


def expected_bars(summary: pd.DataFrame) -> set:
    """(policy, stat, panel) -> (p5, p95) straight from the summary's columns."""
    out = set()
    for _, r in summary.iterrows():
        for m, (panel, stat, scale) in PANEL_OF.items():
            out.add((r["policy"], stat, panel, round(r[f"{m}_p5"] * scale, 9),
                     round(r[f"{m}_p95"] * scale, 9)))
    return out


def test_comparison_error_bars_are_the_summary_p5_and_p95():
    sc = make_scenario()
    summary = with_intervals(frames.summary_frame(pair(200, sc)))
    comp = uncertainty_marks.comparison_bounds(frames.policy_comparison_frame(summary), summary)
    chart = charts.policy_comparison_chart(comp, {"ttft": 1000.0}, list(summary["policy"]))
    assert bars_drawn(chart_spec(chart)) == expected_bars(summary)
    assert "<svg" in render_svg(chart)  # Vega-Lite draws a rule with yOffset


def test_latency_throughput_band_is_the_table_p5_and_p95():
    sweep = pd.DataFrame({"policy": ["none", "none", "chain", "chain"],
                          "request_rate": [1.0, 2.0, 1.0, 2.0],
                          "output_tokens_per_s": [100.0, 190.0, 120.0, 230.0],
                          "p99_ttft_s": [0.1, 0.2, 0.1, 0.3]})
    sweep["p99_ttft_s_p5"], sweep["p99_ttft_s_p95"] = [0.08, 0.15, 0.09, 0.2], [.2, .4, .2, .6]
    lt = frames.latency_throughput_frame(sweep)
    chart = charts.latency_throughput_chart(lt, "ttft", 250.0, ["none", "chain"])
    [rows] = layer_rows(chart_spec(chart), "area")
    got = {(r["policy"], r["request_rate"], round(r["lo_ms"], 9), round(r["hi_ms"], 9))
           for r in rows}
    assert got == {(p, q, round(lo * 1e3, 9), round(hi * 1e3, 9)) for p, q, lo, hi in zip(
        sweep["policy"], sweep["request_rate"], sweep["p99_ttft_s_p5"], sweep["p99_ttft_s_p95"])}
    assert "<svg" in render_svg(chart)


def test_tables_show_point_and_interval_and_the_widest_source_escaped():
    sc = make_scenario()
    results = pair(200, sc, labels=("none", EVIL))
    summary = with_intervals(frames.summary_frame(results))
    page = build_report_html(results, sc, versions=VERSIONS, intervals=summary)
    assert EVIL not in page and htmllib.escape(EVIL, quote=True) in page
    row = summary.iloc[0]
    ms = lambda v: format_number(v * 1e3)  # noqa: E731  (the table's own number format)
    cell = f"{ms(row['p50_tpot_s'])} ({ms(row['p50_tpot_s_p5'])}-{ms(row['p50_tpot_s_p95'])})"
    assert f"<td>{cell}</td>" in page
    assert "over 7 Monte Carlo draws" in page
    assert "p50 TPOT (none: workload 60%" in page
    assert "--uncertainty 7 --report report.html" in page


def test_without_intervals_the_report_does_not_change():
    sc = make_scenario()
    results = pair(200, sc)
    plain = build_report_html(results, sc, versions=VERSIONS)
    # a summary without interval columns (a run without --uncertainty) changes nothing
    assert build_report_html(results, sc, versions=VERSIONS,
                             intervals=frames.summary_frame(results)) == plain
    assert "p5-p95" not in plain and "--uncertainty" not in plain
    for spec in specs_of(plain).values():
        assert not any("lo" in r[0] for r in layer_rows(spec, "rule") if r)
        assert layer_rows(spec, "area") == []


def test_intervals_of_other_policies_are_refused():
    sc = make_scenario()
    results = pair(50, sc)
    other = with_intervals(frames.summary_frame(results)).assign(policy=["a", "b"])
    with pytest.raises(SpecsimError, match="intervals"):
        build_report_html(results, sc, versions=VERSIONS, intervals=other)


def test_run_uncertainty_report_draws_the_summary_intervals(tmp_path, capsys):
    data = {"policy": "chain", "draft": "opt-125m", "workload": SYNTHETIC,
            "acceptance": {"model": "iid", "alpha": 0.75,
                           "uncertainty": {"sd": 0.03, "source": "test"}}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    assert cli_main(["run", str(tmp_path / "s.yaml"), "--compare", "none,chain",
                     "--uncertainty", "4", "--workers", "1", "--no-progress", "--out",
                     str(out), "--report", str(out / "report.html")]) == 0
    assert cli_main(["report", str(out), "-o", str(tmp_path / "again.html")]) == 0
    capsys.readouterr()
    summary = pd.read_csv(out / "summary.csv")
    assert (summary["p50_tpot_s_p5"] < summary["p50_tpot_s_p95"]).all()  # a real spread
    for page in (out / "report.html", tmp_path / "again.html"):
        text = page.read_text()
        specs = specs_of(text)
        [cid] = re.findall(r'id="(chart-\d+)" data-chart="policy-comparison"', text)
        assert bars_drawn(specs[cid]) == expected_bars(summary)
        assert "--uncertainty 4" in text
        assert np.isfinite(summary["p99_ttft_s_p95"]).all()
