"""``uncertainty: {model_error: published}`` (simulator/uncertainty/spec.py): the cost
factor's sigma from the published check's absolute throughputs, declared with its source;
opt-in, and refused with the field named where it clashes or is misspelt."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.planning.executors import SerialExecutor
from simulator.scenario import scenario_from_dict
from simulator.simulate import simulate
from simulator.uncertainty.draws import draw_inputs
from simulator.uncertainty.propagate import INTERVAL_METHOD, propagate
from simulator.uncertainty.spec import (
    COST_SIGMA,
    COST_SOURCE,
    MODEL_ERROR_SIGMA,
    MODEL_ERROR_SOURCE,
    Uncertainty,
)

Z95 = 1.6448536269514722  # the standard normal's 95th percentile
# one request: every step is the decode of that request alone, so its time per output token
# is exactly the cost factor times the point's (hardware/scaled.py scales every step)
ONE = {"synthetic": {"num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1},
                     "prompt": {"dist": "fixed", "tokens": 100},
                     "output": {"dist": "fixed", "tokens": 40}}}


def scenario(**unc):
    return scenario_from_dict({"policy": "none", "workload": ONE, "uncertainty": unc},
                              source="test")


def test_it_is_opt_in_and_replaces_the_cost_sigma_with_its_source():
    assert (Uncertainty().cost_sigma, Uncertainty().cost_source) == (COST_SIGMA, COST_SOURCE)
    unc = scenario(model_error="published").uncertainty
    assert (unc.cost_sigma, unc.cost_source) == (MODEL_ERROR_SIGMA, MODEL_ERROR_SOURCE)
    assert 0.0 < MODEL_ERROR_SIGMA <= 1.0 and f"{MODEL_ERROR_SIGMA:.4f}" in MODEL_ERROR_SOURCE


def test_its_factor_is_lognormal_with_p5_p95_at_exp_of_1645_sigma():
    # 4,000 draws: the 5% quantile of a normal sample has standard error
    # sqrt(0.05 * 0.95 / n) / phi(1.645) = 0.034 in z; four of them, times sigma
    unc = scenario(model_error="published").uncertainty
    logs = np.log([d.cost_factor for d in draw_inputs(11, 4000, unc)])
    lo, hi = np.quantile(logs, (0.05, 0.95))
    tol = 4 * 0.034 * MODEL_ERROR_SIGMA
    assert lo == pytest.approx(-Z95 * MODEL_ERROR_SIGMA, abs=tol)
    assert hi == pytest.approx(Z95 * MODEL_ERROR_SIGMA, abs=tol)


def test_a_single_request_s_tpot_interval_is_the_factor_s_quantiles_times_the_point():
    sc = scenario(model_error="published", sources=["cost"])
    point = float(simulate(sc).summary()["p50_tpot_s"])
    n = 40
    [row] = propagate([sc], n, SerialExecutor())
    factors = [d.cost_factor for d in draw_inputs(sc.seed, n, sc.uncertainty)]
    # TPOT = factor x point on each draw, and the interval's quantile (type 6, as type 7,
    # interpolates linearly between order statistics) commutes with a positive scale:
    # p5/p95 are the factors' own quantiles times the point, exactly
    for name, q in (("p5", 0.05), ("p50", 0.5), ("p95", 0.95)):
        assert row[f"p50_tpot_s_{name}"] == pytest.approx(
            point * float(np.quantile(factors, q, method=INTERVAL_METHOD)), rel=1e-9)
    assert row["p50_tpot_s_p5"] < point < row["p50_tpot_s_p95"]


@pytest.mark.parametrize("block", [{"model_error": "sim2real"}, {"model_error": 1},
                                   {"model_error": "published",
                                    "cost": {"sigma": 0.1, "source": "mine"}}])
def test_a_bad_model_error_names_its_field(block):
    with pytest.raises(SpecsimError) as exc:
        scenario(**block)
    assert "uncertainty.model_error" in str(exc.value)


def test_the_cli_refuses_it_with_exit_2_and_prints_its_sigma_and_source(tmp_path, capsys):
    from simulator.cli import main
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: none\nuncertainty: {model_error: measured}\n")
    assert main(["run", str(bad), "--uncertainty", "2", "--no-progress",
                 "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "uncertainty.model_error" in err and "Traceback" not in err
    assert not (tmp_path / "bad").exists()
    good = tmp_path / "good.yaml"
    good.write_text("policy: none\nworkload: {synthetic: {num_requests: 4, arrival: "
                    "{process: poisson, rate_per_s: 2}, prompt: {dist: fixed, tokens: 50}, "
                    "output: {dist: fixed, tokens: 10}}}\n"
                    "uncertainty: {model_error: published, sources: [cost]}\n")
    assert main(["run", str(good), "--uncertainty", "3", "--no-progress",
                 "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert f"sigma {MODEL_ERROR_SIGMA:.4f}" in out and MODEL_ERROR_SOURCE[:60] in out
