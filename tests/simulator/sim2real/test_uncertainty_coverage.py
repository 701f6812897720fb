"""The cost factor's 90% intervals against what was measured (simulator/uncertainty/
coverage.py): on the four inference-sim H100 runs, how often [p5, p95] of 20 replays, each
under one draw of the cost factor, holds the measured TTFT, TPOT and E2E (mean, p50, p90,
p99).  The sigma (docs/uncertainty.md) is the median APE of TPOT on these same runs, so the
TPOT rows are in-sample; TTFT and E2E add queueing, which the replays reproduce.  Measured
with 20 and 40 draws: 44 of 48 covered (all 12 means; the misses are TTFT and E2E
percentiles whose error is one of shape, not of scale).  The 48 rows are correlated within
a run, so the bound is the nominal 90% less a margin, not the measured figure."""
import pytest

from simulator.cli import main
from simulator.sim2real.otel import read_otel_run
from simulator.uncertainty.coverage import coverage
from tests.simulator.sim2real.test_validate_serving import RUNS, need_runs


@need_runs
def test_the_90_percent_cost_intervals_cover_the_measured_runs():
    runs = [read_otel_run(p) for p in sorted(RUNS.iterdir()) if p.is_dir()]
    table = coverage(runs, "h100-sxm", 20)
    assert len(table) == 48
    # a 90% interval should hold between 80% and 97% of the measurements (issue 39's band):
    # below, the widths are too narrow; above, too wide to be informative
    assert 0.8 <= table["covered"].mean() <= 0.97
    assert table.loc[table["metric"].str.endswith("mean_ms"), "covered"].all()
    assert ((table["p5"] <= table["p50"]) & (table["p50"] <= table["p95"])).all()


@need_runs
def test_validate_serving_prints_the_coverage(capsys):
    code = main(["validate-serving", str(RUNS / "jan21-llama7b-train-1"), "--profile",
                 "h100-sxm", "--uncertainty", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "coverage of the 90% intervals:" in out and "over 1 runs, 2 draws" in out
