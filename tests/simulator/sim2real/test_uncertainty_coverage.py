"""The cost factor's 90% intervals against what was measured (simulator/uncertainty/
coverage.py): on the four inference-sim H100 runs, how often [p5, p95] of 20 replays, each
under one draw of the cost factor, holds the measured TTFT, TPOT and E2E (mean, p50, p90,
p99).  The sigma (docs/uncertainty.md) is the median APE of TPOT on these same runs, so the
TPOT rows are in-sample; TTFT and E2E add queueing, which the replays reproduce.  Measured
with numpy's linear quantile (Hyndman & Fan type 7), 20 and 40 draws: 44 of 48 covered (all
12 means; the misses are TTFT and E2E percentiles whose error is one of shape, not of
scale).  With the type 6 intervals (``propagate.INTERVAL_METHOD``, whose expected coverage
is the nominal 90%) three of those misses fall just inside: 47 of 48 with 20 draws (only
``jan20-codellama-train-1``'s TTFT p90 missed), 45 of 48 with 40.  The 48 rows are
correlated within a run, so the bound is the nominal 90% less a margin, not the measured
figure."""
import pytest

from simulator.cli import main
from simulator.sim2real.otel import read_otel_run
from simulator.uncertainty.coverage import coverage
from tests.simulator.sim2real.test_validate_serving import RUNS, need_runs


# a 90% interval should hold between 80% and 97% of the measurements (issue 39's band):
# below, the widths are too narrow; above, too wide to be informative
BAND = (0.8, 0.97)


@pytest.fixture(scope="module")
def table():
    runs = [read_otel_run(p) for p in sorted(RUNS.iterdir()) if p.is_dir()]
    return coverage(runs, "h100-sxm", 20)


@need_runs
def test_the_90_percent_cost_intervals_cover_the_measured_runs(table):
    assert len(table) == 48
    assert table["covered"].mean() >= BAND[0]
    assert table.loc[table["metric"].str.endswith("mean_ms"), "covered"].all()
    assert ((table["p5"] <= table["p50"]) & (table["p50"] <= table["p95"])).all()


@need_runs
@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "47 of 48 (97.9%) with type 6 intervals of 20 draws, above the band's 97%: the cost "
    "sigma is read from these runs' TPOT (in-sample), and 20 draws put p5/p95 at nearly "
    "the draws' range; 45 of 48 with 40 draws. Strict: back inside, this must be removed"))
def test_the_cost_intervals_are_not_wider_than_the_band(table):
    assert table["covered"].mean() <= BAND[1]


@need_runs
def test_validate_serving_prints_the_coverage(capsys):
    code = main(["validate-serving", str(RUNS / "jan21-llama7b-train-1"), "--profile",
                 "h100-sxm", "--uncertainty", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "coverage of the 90% intervals:" in out and "over 1 runs, 2 draws" in out
