"""The cost factor's 90% intervals against what was measured (simulator/uncertainty/
coverage.py): on the four inference-sim H100 runs, how often [p5, p95] of 20 replays, each
under one draw of the cost factor, holds the measured TTFT, TPOT and E2E (mean, p50, p90,
p99).

The sigma is read as ``COST_SIGMA`` is (median APE of the runs' mean TPOT / 0.6745) but
leave one out: each run's intervals take the sigma of the other three runs' TPOT errors
(0.0514 or 0.0592), so no interval sees its own run's error, as the published check's
sigmas are read.  Measured (``specsim validate-serving ../shared/measured/serving/
inference-sim-h100 --profile h100-sxm --uncertainty 20``, type 6 intervals,
``propagate.INTERVAL_METHOD``): 47 of 48 (97.9%), all 12 means covered, only
``jan20-codellama-train-1``'s TTFT p90 missed (measured 801 ms, p5 802 ms); the in-sample
sigma (0.0549 on every run) gave the same 47 of 48 with the same miss.  The 48 rows are
correlated (the 12 metrics of a run move with one factor, and every run takes the same 20
normal deviates), so the lower bound is the nominal 90% less a margin, not the measured
figure."""
import numpy as np
import pytest

from simulator.cli import main
from simulator.inputs.errors import SpecsimError
from simulator.sim2real.compare import compare_runs
from simulator.sim2real.otel import read_otel_run
from simulator.uncertainty.coverage import (
    SHIPPED,
    coverage,
    leave_one_out_sigmas,
    sigma_from_errors,
    sigma_note,
)
from simulator.uncertainty.spec import COST_SIGMA, NORMAL_MEDIAN_ABS, TPOT_MEDIAN_APE
from tests.simulator.sim2real.test_validate_serving import RUNS, need_runs

# a 90% interval should hold between 80% and 97% of the measurements (issue 39's band):
# below, the widths are too narrow; above, too wide to be informative
BAND = (0.8, 0.97)


def _runs():
    return [read_otel_run(p) for p in sorted(RUNS.iterdir()) if p.is_dir()]


@pytest.fixture(scope="module")
def table():
    return coverage(_runs(), "h100-sxm", 20)


@pytest.fixture(scope="module")
def tpot_ape():
    """Each run's |error| of its mean TPOT, as validate-serving reports it (a fraction)."""
    t = compare_runs(_runs(), "h100-sxm")
    t = t[t["metric"] == "tpot_mean_ms"]
    return dict(zip(t["run"], t["error_%"].abs() / 100.0))


def test_leave_one_out_by_hand():
    # medians of three: of (.02, .03, .05) is .03; of (.01, .02, .03) is .02; a run that
    # measured no TPOT (None) takes the median of all four others, (.02 + .03) / 2
    s = leave_one_out_sigmas([0.01, 0.02, 0.03, 0.05, None])
    want = [0.03, 0.03, 0.02, 0.02, 0.025]
    assert s == pytest.approx([w / 0.6745 for w in want])
    # three runs: each has two others, too few for a median (the shipped sigma then)
    assert leave_one_out_sigmas([0.01, 0.02, 0.03]) == [None, None, None]
    # a run without its own error still has three others
    assert leave_one_out_sigmas([0.01, None, 0.02, 0.03]) == [None, 0.02 / 0.6745, None, None]
    with pytest.raises(ValueError):
        sigma_from_errors([0.01, 0.02])


@need_runs
def test_the_shipped_cost_sigma_is_the_in_sample_reading(tpot_ape):
    """COST_SIGMA states the median APE of TPOT over the four runs to 0.1% (3.7%)."""
    assert len(tpot_ape) == 4
    assert round(float(np.median(list(tpot_ape.values()))), 3) == TPOT_MEDIAN_APE
    in_sample = sigma_from_errors(list(tpot_ape.values()))
    assert COST_SIGMA == pytest.approx(in_sample, abs=0.0005 / NORMAL_MEDIAN_ABS)


@need_runs
def test_each_run_takes_the_sigma_of_the_other_runs(table, tpot_ape):
    for run, sigma in table.groupby("run")["cost_sigma"].first().items():
        others = [e for name, e in tpot_ape.items() if name != run]
        assert sigma == pytest.approx(float(np.median(others)) / 0.6745, rel=1e-9)
    assert (table["sigma_from"] != SHIPPED).all()
    lo, hi = table["cost_sigma"].min(), table["cost_sigma"].max()
    assert "left one out" in sigma_note(table) and f"{lo:.4f}-{hi:.4f}" in sigma_note(table)


@need_runs
def test_the_90_percent_cost_intervals_cover_the_measured_runs(table):
    assert len(table) == 48
    assert table["covered"].mean() >= BAND[0]
    assert table.loc[table["metric"].str.endswith("mean_ms"), "covered"].all()
    assert ((table["p5"] <= table["p50"]) & (table["p50"] <= table["p95"])).all()


@need_runs
@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "47 of 48 (97.9%) with type 6 intervals of 20 draws and the sigma left one out, above "
    "the band's 97% (only jan20-codellama-train-1's TTFT p90: measured 801 ms, p5 802 ms); "
    "the in-sample sigma gave the same. 48 correlated rows of 4 runs: one case is 2 "
    "points. Strict: back inside, this must be removed"))
def test_the_cost_intervals_are_not_wider_than_the_band(table):
    assert table["covered"].mean() <= BAND[1]


@need_runs
def test_validate_serving_prints_the_coverage(capsys):
    """One run has no three others: it takes the shipped sigma, and the line says so."""
    code = main(["validate-serving", str(RUNS / "jan21-llama7b-train-1"), "--profile",
                 "h100-sxm", "--uncertainty", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "coverage of the 90% intervals:" in out and "over 1 runs, 2 draws" in out
    assert f"1 run(s) under the shipped cost sigma {COST_SIGMA:.4f}" in out


@need_runs
def test_a_run_given_twice_is_one_clear_error(capsys):
    path = str(RUNS / "jan21-llama7b-train-1")
    with pytest.raises(SpecsimError, match="given twice"):
        coverage([read_otel_run(RUNS / "jan21-llama7b-train-1")] * 2, "h100-sxm", 2)
    assert main(["validate-serving", path, path, "--profile", "h100-sxm",
                 "--uncertainty", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "given twice" in err[0]
