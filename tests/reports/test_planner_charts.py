"""The charts a capacity planner sends on: policies compared with the SLO lines, the
latency-throughput curve of a sweep or plan with the SLO band, cost against replicas, the
gamma heatmap of an analytic sweep, and policy labels that fit."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reports import build_report_html, charts, frames
from reports.html import chart_spec
from simulator.inputs.errors import SpecsimError
from simulator.planning.capacity import CapacitySLO
from simulator.scenario import SLO
from tests.reports.test_html import VERSIONS, make_scenario, pair, specs_of

vl_convert = pytest.importorskip("vl_convert")
LONG = ("eagle3:model=eagle3-kimi-k2,num_speculative_tokens=3",
        "eagle3:model=eagle3-kimi-k2,num_speculative_tokens=5")


def render_svg(chart) -> str:
    import altair as alt
    version = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    svg = vl_convert.vegalite_to_svg(chart_spec(chart), vl_version=version if version in
                                     vl_convert.get_vegalite_versions() else None)
    assert svg.lstrip().startswith("<svg")
    return svg


def datasets(spec: dict) -> list[list[dict]]:
    return list(spec.get("datasets", {}).values())


# ------------------------------------------------------------------ labels
def test_short_labels_fit_stay_unique_and_keep_the_differing_tail():
    labels = ["none", "chain:num_speculative_tokens=4", *LONG,
              "x" * 30 + "A" * 30 + "y" * 12, "x" * 30 + "B" * 30 + "y" * 12]
    short = frames.short_labels(labels)
    assert short[:2] == labels[:2]  # <= 32 characters: unchanged
    assert all(len(s) <= frames.LABEL_LIMIT for s in short)
    assert len(set(short)) == len(short)
    assert short[2].endswith("tokens=3") and short[3].endswith("tokens=5")
    assert short[5].endswith("#2")  # same head and tail: numbered
    legend = frames.label_legend(labels, short)
    assert legend["policy"].tolist() == labels[2:]


def test_long_labels_leave_every_summary_column_and_a_legend(monkeypatch):
    def no_pricing(scenario):  # the cost-model sections are not what this test is about
        raise SpecsimError("not priced in this test", field="scenario")
    monkeypatch.setattr("reports.page.scenario_pricing", no_pricing)
    sc = make_scenario()
    html = build_report_html(pair(60, sc, labels=("none", LONG[0])), sc, versions=VERSIONS)
    summary = html[html.index(">Summary</h2>"):html.index(">Latency</h2>")]
    first_table = summary[:summary.index("</table>")]
    cells = re.findall(r"<tr><td>([^<]*)</td>", first_table)
    assert cells == ["none", frames.short_labels(["none", LONG[0]])[1]]
    assert f"<td>{LONG[0]}</td>" in summary  # the legend table has the full label
    for header in ("p99 TPOT (ms)", "throughput (tok/s)", "speedup vs none (TPOT)"):
        assert f"<th>{header}</th>" in first_table
    # no chart draws the long label; the reproduce command keeps it whole
    assert LONG[0] not in str(specs_of(html))
    assert f"--compare none,{LONG[0]} --report" in html


# ------------------------------------------------------------------ SLO
def test_slo_targets_from_a_scenario_a_plan_or_a_mapping():
    assert frames.slo_targets(SLO(ttft_s=1.0, tpot_s=0.06)) == {"ttft": 1.0, "tpot": 0.06}
    plan_slo = CapacitySLO(p99_ttft_s=2.0, p99_tpot_s=0.04, ttft_s=1.0)
    assert frames.slo_targets(plan_slo) == {"ttft": 2.0, "tpot": 0.04}  # p99 first
    assert frames.slo_targets({"tpot_ms": 50}) == {"tpot": 0.05}
    assert frames.slo_targets(SLO()) == {} and frames.slo_targets(None) == {}


# ------------------------------------------------------------------ policies compared
def test_policy_comparison_frame_is_the_percentiles_of_the_requests():
    sc = make_scenario()
    results = pair(200, sc)
    comp = frames.policy_comparison_frame(frames.summary_frame(results))
    for r in results:
        done = r.requests[r.requests["status"] == "finished"]
        for m, panel in frames.COMPARISON_PANELS.items():
            for stat, q in (("p50", 50), ("p99", 99)):
                got = comp[(comp["policy"] == r.label) & (comp["panel"] == panel)
                           & (comp["stat"] == stat)]["value"]
                np.testing.assert_allclose(got, [np.percentile(done[f"{m}_s"], q) * 1e3],
                                           rtol=1e-9)
        span = done["finish_s"].max() - r.requests["arrival_s"].min()
        got = comp[(comp["policy"] == r.label) & (comp["panel"] == frames.THROUGHPUT_PANEL)]
        np.testing.assert_allclose(got["value"], [done["output_tokens"].sum() / span])


def test_policy_comparison_chart_draws_slo_lines_on_latency_panels_only():
    sc = make_scenario()
    comp = frames.policy_comparison_frame(frames.summary_frame(pair(50, sc)))
    chart = charts.policy_comparison_chart(comp, {"ttft": 1000.0, "tpot": 60.0},
                                           ["none", "chain:num_speculative_tokens=4"])
    spec = chart_spec(chart)
    panels = spec["hconcat"]
    assert [p["title"] for p in panels] == ["TTFT (ms)", "TPOT (ms)",
                                            frames.THROUGHPUT_PANEL]
    assert [len(p["layer"]) for p in panels] == [2, 2, 1]  # bars (+ SLO rule)
    rules = [d for d in datasets(spec) if d and "slo_ms" in d[0]]
    assert sorted(d[0]["slo_ms"] for d in rules) == [60.0, 1000.0]
    # policy names label the first panel's rows only, within the label limit
    assert panels[0]["layer"][0]["encoding"]["y"]["axis"]["labelLimit"] == charts.LABEL_PX
    assert panels[1]["layer"][0]["encoding"]["y"]["axis"] is None
    assert "TTFT (ms)" in render_svg(chart)


# ------------------------------------------------------------------ latency vs throughput
def sim_sweep() -> pd.DataFrame:
    return pd.DataFrame({"policy_label": ["none"] * 3 + [LONG[0]] * 3,
                         "workload.rate_per_s": [4.0, 1.0, 2.0] * 2,
                         "output_tokens_per_s": [400.0, 100.0, 200.0, 420.0, 110.0, 215.0],
                         "p99_ttft_s": [0.9, 0.2, 0.3, 0.8, 0.2, np.nan],
                         "p99_tpot_s": [0.05, 0.02, 0.03, 0.02, 0.01, 0.015]})


def plan_table() -> pd.DataFrame:
    return pd.DataFrame({"rank": [1, 2, 3], "candidate": ["h100 x1", "a100 x2", "a100 x1"],
                         "devices": [1, 2, 1], "replicas": [1, 2, 1],
                         "max_rate_per_s": [7.7, 4.5, np.nan],
                         "p99_ttft_s": [0.10, 0.27, np.nan],
                         "p99_tpot_s": [0.007, 0.012, np.nan],
                         "output_tokens_per_s": [796.0, 447.0, np.nan],
                         "cost_per_million_tokens": [0.88, 1.50, np.nan],
                         "min_replicas_for_target": [2.0, np.nan, np.nan],
                         "cost_per_million_tokens_at_target": [1.69, np.nan, np.nan],
                         "note": ["", "", "infeasible: no rate meets the SLO"]})


def test_latency_throughput_frame_of_a_sweep_in_rate_order():
    lt = frames.latency_throughput_frame(sim_sweep())
    tpot = lt[(lt["metric"] == "tpot") & (lt["policy"] == "none")]
    assert tpot["request_rate"].tolist() == [1.0, 2.0, 4.0]
    assert tpot["output_tokens_per_s"].tolist() == [100.0, 200.0, 400.0]
    np.testing.assert_allclose(tpot["value_ms"], [20.0, 30.0, 50.0])
    assert len(lt) == 11  # 12 points, one NaN TTFT left out


def test_latency_throughput_frame_of_a_plan_has_one_point_per_feasible_candidate():
    lt = frames.latency_throughput_frame(plan_table())
    assert set(lt["policy"]) == {"h100 x1", "a100 x2"} and len(lt) == 4
    row = lt[(lt["policy"] == "a100 x2") & (lt["metric"] == "ttft")].iloc[0]
    assert (row["request_rate"], row["output_tokens_per_s"]) == (4.5, 447.0)
    assert row["value_ms"] == pytest.approx(270.0)


@pytest.mark.parametrize("slo", [None, 40.0])
def test_latency_throughput_chart_band_and_rule(slo):
    lt = frames.latency_throughput_frame(sim_sweep())
    chart = charts.latency_throughput_chart(lt, "tpot", slo, ["none", LONG[0]])
    spec = chart_spec(chart)
    marks = [layer["mark"]["type"] for layer in spec["layer"]]
    assert marks == (["line"] if slo is None else ["rect", "rule", "line"])
    if slo is not None:
        band = next(d for d in datasets(spec) if d and "hi" in d[0])
        assert band == [{"lo": 0.0, "hi": 40.0}]
    assert spec["layer"][-1]["encoding"]["order"]["field"] == "request_rate"
    render_svg(chart)


# ------------------------------------------------------------------ cost vs replicas
def test_plan_cost_frame_uses_the_target_replicas_when_there_are_some():
    cost = frames.plan_cost_frame(plan_table())
    assert cost["candidate"].tolist() == ["h100 x1", "a100 x2"]  # a100 x1: no cost
    assert cost["replicas"].tolist() == [2.0, 2.0]
    assert cost["cost"].tolist() == [1.69, 1.50]
    assert cost["basis"].str.startswith("replicas to hold").tolist() == [True, False]


def test_cost_replicas_chart_has_whole_replica_ticks():
    chart = charts.cost_replicas_chart(frames.plan_cost_frame(plan_table()),
                                       ["h100 x1", "a100 x2", "a100 x1"])
    spec = chart_spec(chart)
    assert spec["encoding"]["x"]["axis"]["values"] == [0, 1, 2]
    assert spec["encoding"]["color"]["scale"]["domain"] == ["h100 x1", "a100 x2", "a100 x1"]
    render_svg(chart)


# ------------------------------------------------------------------ analytic gamma heatmap
def analytic_sweep() -> pd.DataFrame:
    """speedup(b, g) = 1 - alpha + alpha (1 + g) / (1 + g^2 b / 64), largest at a whole g
    beside the stationary point -1 + sqrt(1 + 64 / b) (7.06, 3.12, 1.24, 0.73 for b = 1, 4,
    16, 32: gamma 7, 3, 1, 1 by enumeration); context 8192 is infeasible."""
    rows = []
    for alpha in (0.6, 0.8):
        for b in (1, 4, 16, 32):
            for ctx in (128, 8192):
                for g in range(9):
                    rows.append({"point": len(rows), "key": str(len(rows)), "hardware": "h",
                                 "alpha": alpha, "batch": b, "context": ctx, "gamma": g,
                                 "draft_s": 0.001, "c": 0.04,
                                 "speedup": alpha * (1 + g) / (1 + g * g * b / 64) + 1 - alpha,
                                 "feasible": ctx < 8192, "error": None})
    return pd.DataFrame(rows)


def test_analytic_gamma_grid_is_the_argmax_per_cell_per_alpha():
    grids = frames.analytic_gamma_grids(analytic_sweep())
    assert [t for t, _ in grids] == ["alpha=0.6", "alpha=0.8"]  # hardware is fixed
    g = np.arange(9)
    for _, grid in grids:
        ok = grid[grid["feasible"]]
        assert ok["context"].eq(128).all() and len(ok) == 4
        for _, cell in ok.iterrows():
            score = (1 + g) / (1 + g * g * cell["batch"] / 64)
            assert cell["best_gamma"] == int(np.argmax(score))
        assert grid.loc[~grid["feasible"], "best_gamma"].isna().all()
    first = grids[0][1].set_index("batch")
    assert first.loc[first["context"] == 128, "best_gamma"].to_dict() == {1: 7, 4: 3, 16: 1,
                                                                           32: 1}


def test_heatmap_of_a_grid_with_infeasible_cells():
    _, grid = frames.analytic_gamma_grids(analytic_sweep())[0]
    for fn in (charts.gamma_heatmap_chart, charts.speedup_surface_chart):
        spec = chart_spec(fn(grid))
        assert [layer["mark"]["type"] for layer in spec["layer"]] == ["rect", "text", "rect",
                                                                      "text"]
        render_svg(fn(grid))


def test_analytic_sweep_report_draws_the_heatmaps():
    html = build_report_html([], sweep=analytic_sweep(), versions=VERSIONS)
    names = re.findall(r'data-chart="([^"]+)"', html)
    assert names == ["sweep-gamma-heatmap-0", "sweep-speedup-0", "sweep-gamma-heatmap-1",
                     "sweep-speedup-1"]
    assert "<th>best gamma</th>" in html


def test_sweep_and_plan_reports_carry_the_planner_charts_with_the_slo():
    slo = CapacitySLO(p99_ttft_s=1.0, p99_tpot_s=0.04)
    html = build_report_html([], sweep=sim_sweep(), plan=plan_table(), slo=slo,
                             versions=VERSIONS)
    names = re.findall(r'data-chart="([^"]+)"', html)
    assert {"sweep-latency-throughput-ttft", "sweep-latency-throughput-tpot", "plan",
            "plan-cost", "plan-latency-throughput-ttft", "plan-latency-throughput-tpot"} \
        <= set(names)
    assert "SLO: TTFT 1000 ms, TPOT 40 ms." in html
    assert "a100 x1: infeasible: no rate meets the SLO" in html
    assert "<th>replicas for the target</th>" in html


def test_the_shipped_analytic_sweep_report_has_its_heatmap(tmp_path):
    from simulator.cli import main as cli_main
    yaml = Path(__file__).resolve().parents[2] / "workloads/scenarios/sweep_gamma_batch.yaml"
    rc = cli_main(["sweep", str(yaml), "--no-progress", "--executor", "serial",
                   "--out", str(tmp_path / "g.csv"), "--report", str(tmp_path / "r.html")])
    assert rc == 0
    html = (tmp_path / "r.html").read_text()
    assert re.findall(r'data-chart="([^"]+)"', html) == ["sweep-gamma-heatmap-0",
                                                         "sweep-speedup-0"]
    heat = specs_of(html)["chart-1"]
    cells = max(datasets(heat), key=len)
    assert len(cells) == 9 * 4  # every batch x context of the grid, feasible or not


def test_a_simulated_sweep_report_draws_its_scenarios_slo(tmp_path):
    """`specsim sweep --report` passes the SLO its points share (the default scenario's
    slo: ttft 1000 ms, tpot 60 ms) to the latency-throughput band."""
    from simulator.cli import main as cli_main
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: tiny\nmode: simulated\nscenario: default\n"
                     "fixed: {workload.max_requests: 8}\n"
                     "points: [{policy: none}]\ngrid: {workload.rate_per_s: [1, 2]}\n")
    rc = cli_main(["sweep", str(sweep), "--no-progress", "--executor", "serial",
                   "--out", str(tmp_path / "s.csv"), "--report", str(tmp_path / "r.html")])
    assert rc == 0
    html = (tmp_path / "r.html").read_text()
    assert "SLO: TTFT 1000 ms, TPOT 60 ms." in html and "No latency SLO given." not in html
