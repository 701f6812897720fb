"""The cost factor's 90% intervals against what was measured (simulator/uncertainty/
coverage.py): on the four inference-sim H100 runs, how often [p5, p95] of 20 replays, each
under one draw of the cost factor, holds the measured TTFT, TPOT and E2E (mean, p50, p90,
p99).

Every run takes the shipped ``COST_SIGMA`` (0.0343): the split-conformal 90% quantile of the
mean TPOT errors of the 21 inference-perf stages without client timeouts
(``COST_CALIBRATION``, simulator/uncertainty/spec.py).  The two sets are disjoint by
construction, a fact no test here checks: the four runs are OTel traces of vLLM 0.11.0 on
January 20-21 (the folders ``jan20-*``/``jan21-*``; their vllm.log says the version) under
prefill and train traces, the 21 stages inference-perf load stages of vLLM 0.14-0.15 on
February 17-18 (folders ``20260217-*``/``20260218-*``) under codegen, general, roleplay and
reasoning data; so no leave-one-out reading is needed.  ``SPECSIM_INFERENCE_PERF_DIR``, set
to a clone's ``default_args`` folder, runs the slow re-derivation of COST_CALIBRATION.

Measured (``specsim validate-serving ../shared/measured/serving/inference-sim-h100
--profile h100-sxm --uncertainty 20``, type 6 intervals, ``propagate.INTERVAL_METHOD``, at
the commit after 87cdcbb): 43 of 48 (89.6%), all 12 means
and all 16 TPOTs covered; missed: ``jan20-codellama-prefill-1``'s TTFT and E2E p90 (18,306
and 19,066 ms above p95 18,218 and 18,996), ``jan20-codellama-train-1``'s TTFT p50 and p90
(453 and 801 ms below p5 472 and 841) and ``jan20-prefill-llama7b-tp1-1``'s TTFT p50 (254
below p5 256).  The 48 rows are correlated (the 12 metrics of a run move with one factor,
and every run takes the same 20 normal deviates), so the band is the nominal 90% less and
more a margin, not the measured figure."""
import math
import os
import re
import shutil
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.inputs.errors import SpecsimError
from simulator.sim2real.compare import compare_run
from simulator.sim2real.inference_perf import is_inference_perf_run, read_inference_perf_runs
from simulator.sim2real.otel import read_otel_run
from simulator.uncertainty.conformal import Z_TWO_SIDED_90, conformal_rank, conformal_sigma
from simulator.uncertainty.coverage import coverage, run_key, sigma_note
from simulator.uncertainty.spec import COST_CALIBRATION, COST_SIGMA, COST_SOURCE
from tests.simulator.sim2real.test_validate_serving import RUNS, need_runs

# a 90% interval should hold between 80% and 97% of the measurements (issue 39's band):
# below, the widths are too narrow; above, too wide to be informative
BAND = (0.8, 0.97)
# the inference-perf stages whose requests mostly hit the client's 300 s timeout
# (docs/calibration.md: 4,068, 1,600 and 3,294 of 4,800 failed): not in the calibration
TIMED_OUT = ("llama-2-7b-tp1-reasoning/0", "llama-2-70b-tp4-reasoning/0",
             "mixtral-8x7b-tp2-reasoning/0")
# a clone's default_args folder (github.com/inference-sim/training at ed5c1d2): the slow
# re-derivation of COST_CALIBRATION runs only when it is given
IPF_DIR = os.environ.get("SPECSIM_INFERENCE_PERF_DIR", "")


def _runs():
    return [read_otel_run(p) for p in sorted(RUNS.iterdir()) if p.is_dir()]


@pytest.fixture(scope="module")
def table():
    return coverage(_runs(), "h100-sxm", 20)


def test_the_rank_of_21_scores_is_the_20th():
    # ceil((21 + 1) x 0.9) = ceil(19.8) = 20; four runs: ceil(4.5) = 5 > 4 (unbounded), and
    # nine scores are the fewest a 90% rank fits in
    assert conformal_rank(21) == 20
    assert conformal_rank(4) == 5 and conformal_rank(8) == 9 and conformal_rank(9) == 9
    scores = [abs(e) for _, e in COST_CALIBRATION]
    assert conformal_sigma(scores) == sorted(scores)[19] / Z_TWO_SIDED_90


def test_the_shipped_cost_sigma_is_the_conformal_reading_of_its_calibration():
    names = [name for name, _ in COST_CALIBRATION]
    assert len(names) == 21 == len(set(names))
    assert not set(names) & set(TIMED_OUT)
    # 24 stages of 16 experiments less the three timed-out ones; the largest score, CodeLlama
    # reasoning's -14.8%, is the one the 90% rank leaves out
    assert max(COST_CALIBRATION, key=lambda c: abs(c[1]))[0] == "codellama-34b-tp2-reasoning/0"
    assert round(conformal_sigma(abs(e) for _, e in COST_CALIBRATION), 4) == COST_SIGMA
    assert f"{COST_SIGMA:.4f}" in COST_SOURCE and "20th smallest of 21" in COST_SOURCE


def _stage_name(run_name: str) -> str:
    """``20260218-120914-mixtral-8x7b-v0-1-tp2-codegen/stage_0`` -> COST_CALIBRATION's
    ``mixtral-8x7b-tp2-codegen/0`` (the folder's date and time dropped, as are the -hf and
    -v0-1 of the Hugging Face names)."""
    folder, stage = run_name.split("/")
    short = re.sub(r"^\d{8}-\d{6}-", "", folder).replace("-hf", "").replace("-v0-1", "")
    return f"{short}/{stage.removeprefix('stage_')}"


@pytest.mark.slow
@pytest.mark.skipif(not IPF_DIR, reason="SPECSIM_INFERENCE_PERF_DIR is unset")
def test_the_cost_calibration_is_re_derived_from_the_inference_perf_stages():
    """Each of the 21 stages replayed as validate-serving replays it (compare.compare_run):
    its mean TPOT error ln(predicted / measured) is COST_CALIBRATION's to 1e-3."""
    expected = dict(COST_CALIBRATION)
    seen = {}
    for folder in sorted(p for p in Path(IPF_DIR).iterdir() if is_inference_perf_run(p)):
        for run in read_inference_perf_runs(folder):
            name = _stage_name(run.name)
            if name not in expected:
                assert name in TIMED_OUT, name
                continue
            row = compare_run(run, "h100-sxm").set_index("metric").loc["tpot_mean_ms"]
            seen[name] = math.log(row["predicted"] / row["measured"])
    assert set(seen) == set(expected)
    for name, err in seen.items():
        assert err == pytest.approx(expected[name], abs=1e-3), name


@need_runs
def test_every_run_takes_the_shipped_sigma(table):
    assert (table["cost_sigma"] == COST_SIGMA).all()
    assert table["run"].nunique() == 4
    assert sigma_note(_runs()).endswith(COST_SOURCE)


@need_runs
def test_the_90_percent_cost_intervals_cover_the_measured_runs(table):
    # measured: 43 of 48 (89.6%), every mean covered (module docstring)
    assert len(table) == 48
    assert BAND[0] <= table["covered"].mean() <= BAND[1]
    assert int(table["covered"].sum()) == 43
    assert table.loc[table["metric"].str.endswith("mean_ms"), "covered"].all()
    assert table.loc[table["metric"].str.startswith("tpot"), "covered"].all()
    assert ((table["p5"] <= table["p50"]) & (table["p50"] <= table["p95"])).all()


@need_runs
def test_validate_serving_prints_the_coverage(capsys):
    """One run: it takes the shipped sigma, and the line says so."""
    code = main(["validate-serving", str(RUNS / "jan21-llama7b-train-1"), "--profile",
                 "h100-sxm", "--uncertainty", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "coverage of the 90% intervals:" in out and "over 1 runs, 2 draws" in out
    assert f"cost sigma {COST_SIGMA:.4f} on all 1 run(s)" in out


@need_runs
def test_a_run_given_twice_is_one_clear_error(capsys):
    path = str(RUNS / "jan21-llama7b-train-1")
    with pytest.raises(SpecsimError, match="given twice"):
        coverage([read_otel_run(RUNS / "jan21-llama7b-train-1")] * 2, "h100-sxm", 2)
    assert main(["validate-serving", path, path, "--profile", "h100-sxm",
                 "--uncertainty", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "given twice" in err[0]


@need_runs
def test_runs_are_told_apart_by_their_resolved_paths(tmp_path):
    """The same folder by two spellings is one run (refused); a copy in another folder that
    keeps the folder name is another run (accepted: two runs, each its own rows)."""
    name = "jan21-llama7b-train-1"
    twice = [read_otel_run(RUNS / name), read_otel_run(RUNS / name / ".." / name)]
    assert run_key(twice[0]) == run_key(twice[1])
    with pytest.raises(SpecsimError, match="given twice"):
        coverage(twice, "h100-sxm", 2)
    shutil.copytree(RUNS / name, tmp_path / name)
    other = read_otel_run(tmp_path / name)
    assert other.name == twice[0].name and run_key(other) != run_key(twice[0])
    table = coverage([twice[0], other], "h100-sxm", 2)
    one = coverage([twice[0]], "h100-sxm", 2)
    assert len(table) == 2 * len(one)
