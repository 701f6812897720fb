"""The default report in headless Chromium: every chart drawn, no console error, no request.

Skipped where Chromium, its driver or selenium are missing (.ci/run installs the Debian
packages chromium and chromium-driver).  Two control pages prove that the checks can fail.
"""
from __future__ import annotations

import dataclasses
import re

import pytest

from reports.browser import check_report, find_chromium
from simulator.cli import main as cli_main

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(find_chromium() is None,
                                 reason="needs chromium, chromium-driver and selenium")]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def default_report(tmp_path_factory):
    """``specsim run --report`` on the built-in scenario, as the README runs it."""
    d = tmp_path_factory.mktemp("browser")
    rc = cli_main(["run", "--no-progress", "--out", str(d / "out"),
                   "--report", str(d / "report.html")])
    assert rc == 0
    return d / "report.html"


def test_default_report_renders_offline(default_report, tmp_path):
    shot = tmp_path / "report.png"
    check = check_report(default_report, shot)
    html = default_report.read_text()
    containers = re.findall(r'<div class="chart" id="([^"]+)"', html)
    # 12 + the verify/decode ratio curve (roofline section) + the policy-comparison chart
    # (summary section: p50/p99 TTFT and TPOT and throughput per policy, SLO lines)
    assert len(containers) == 14
    assert [c["id"] for c in check.charts] == containers
    assert check.undrawn == [], check.charts
    assert all(c["state"] == "true" for c in check.charts)
    assert check.console_errors == ()
    # the report's own file is the only thing fetched
    assert check.requests == (default_report.resolve().as_uri(),)
    assert check.ok and check.title == "specsim report: default"
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 50_000


def test_escaped_labels_run_nothing(default_report, tmp_path):
    from reports import load_results_dir, render_report
    results, scenario, _ = load_results_dir(default_report.parent / "out")
    # Unescaped, either label would fetch a URL and log an error in the console.
    evil = '<img src="http://127.0.0.1:9/x.png" onerror="console.error(\'xss\')">'
    results = [dataclasses.replace(results[0], label=evil), *results[1:]]
    scenario = dataclasses.replace(scenario, name="<script>console.error('xss')</script>")
    path = render_report(results, tmp_path / "evil.html", scenario=scenario)
    check = check_report(path)
    assert check.ok, (check.console_errors, check.external_requests, check.undrawn)
    assert check.title == "specsim report: <script>console.error('xss')</script>"


def test_checks_catch_requests_errors_and_blank_charts(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><head><title>bad</title></head><body>'
                    '<div class="chart" id="c1" data-rendered="true"></div>'
                    '<img src="http://127.0.0.1:9/nothing.png">'
                    '<script>console.error("boom")</script></body></html>')
    check = check_report(page, timeout_s=10)
    assert check.undrawn == ["c1"]
    assert any("boom" in e for e in check.console_errors)
    assert "http://127.0.0.1:9/nothing.png" in check.external_requests
    assert not check.ok


def test_planner_charts_render_offline(tmp_path):
    """The charts an analytic sweep and a plan add (gamma heatmap and speedup with infeasible
    cells, rate bars, cost against replicas, latency against throughput with the SLO band)."""
    from reports import render_report
    from simulator.planning.capacity import CapacitySLO
    from tests.reports.test_planner_charts import analytic_sweep, plan_table
    path = render_report([], tmp_path / "planner.html", sweep=analytic_sweep(),
                         plan=plan_table(), slo=CapacitySLO(p99_ttft_s=1.0, p99_tpot_s=0.04),
                         versions={"specsim": "test"})
    check = check_report(path)
    assert len(check.charts) == 8  # 2 grids x (heatmap, speedup) + 4 plan charts
    assert check.ok, (check.undrawn, check.console_errors, check.external_requests)
