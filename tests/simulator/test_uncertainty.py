"""Declared input uncertainty (simulator/uncertainty): the schema, the draws, the cost
factor's mechanism (hardware/scaled.py) and the Monte Carlo's two exact properties: with
nothing varying it is the point estimate, and the same seed gives the same intervals."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator.deployment import resolve_deployment
from simulator.inputs.errors import SpecsimError
from simulator.planning.executors import SerialExecutor
from simulator.scenario import load_scenario, scenario_from_dict
from simulator.simulate import simulate
from simulator.uncertainty.draws import Draw, draw_inputs, draw_scenario, restrict, \
    shifted_acceptance
from simulator.uncertainty.propagate import METRICS, propagate
from simulator.uncertainty.spec import COST_SIGMA, MAX_UNCERTAINTY_DRAWS, Uncertainty
from tests.helpers import workload

SYNTHETIC = {"synthetic": {"num_requests": 24, "arrival": {"process": "poisson",
                                                           "rate_per_s": 8},
                           "prompt": {"dist": "uniform", "min_tokens": 50, "max_tokens": 150},
                           "output": {"dist": "uniform", "min_tokens": 20, "max_tokens": 40}}}
SPREAD = {"sd": 0.03, "source": "test spread"}


def small(policy="chain", sources=None, sd=SPREAD, **unc):
    """The built-in scenario on a 24-request synthetic trace, with a declared spread."""
    acc = {"model": "iid", "alpha": 0.75, **({"uncertainty": sd} if sd else {})}
    data = {"policy": policy, "draft": "opt-125m", "acceptance": acc, "workload": SYNTHETIC,
            "slo": {"ttft_ms": 1000, "tpot_ms": 60},
            "uncertainty": {**({"sources": sources} if sources is not None else {}), **unc}}
    return scenario_from_dict(data, source="test")


def test_the_acceptance_block_carries_its_spread_and_the_model_never_sees_it():
    sc = small()
    assert sc.uncertainty.acceptance.sd == 0.03
    assert sc.uncertainty.acceptance.source == "test spread"
    assert "uncertainty" not in sc.acceptance
    rng = small(sd={"range": [-0.05, 0.02], "source": "s"}).uncertainty.acceptance
    assert rng.range == (-0.05, 0.02) and rng.sd is None


@pytest.mark.parametrize("spread, field", [
    ({"sd": 0.1, "range": [-0.1, 0.1], "source": "s"}, "acceptance.uncertainty"),
    ({"sd": 0.1}, "source"),
    ({"range": [0.01, 0.1], "source": "s"}, "acceptance.uncertainty.range"),
    ({"sd": 0.9, "source": "s"}, "acceptance.uncertainty.sd"),
    ({"sd": 0.1, "width": 2, "source": "s"}, "width"),
])
def test_a_bad_acceptance_spread_names_its_field(spread, field):
    with pytest.raises(SpecsimError) as exc:
        small(sd=spread)
    assert field in str(exc.value)


@pytest.mark.parametrize("unc, field", [
    ({"draws": MAX_UNCERTAINTY_DRAWS + 1}, "uncertainty.draws"),
    ({"draws": 0}, "uncertainty.draws"),
    ({"sources": ["cost", "weather"]}, "uncertainty.sources"),
    ({"cost": {"sigma": 0.05}}, "source"),
    ({"cost": {"sigma": -0.1, "source": "s"}}, "uncertainty.cost.sigma"),
])
def test_a_bad_uncertainty_block_names_its_field(unc, field):
    with pytest.raises(SpecsimError) as exc:
        scenario_from_dict({"uncertainty": unc}, source="test")
    assert field in str(exc.value)


def test_the_default_cost_sigma_is_the_conformal_reading_of_the_inference_perf_stages():
    # the 20th smallest |ln(predicted / measured)| of the 21 stages' mean TPOT (0.05636,
    # spec.py's COST_CALIBRATION) over the normal's two-sided 90% point 1.6449
    assert COST_SIGMA == pytest.approx(0.05636 / 1.6449, abs=5e-5)
    assert Uncertainty().cost_sigma == COST_SIGMA


def test_draws_are_spawned_from_the_seed_and_repeat_per_source():
    unc = small().uncertainty
    a, b = draw_inputs(0, 5, unc), draw_inputs(0, 5, unc)
    assert a == b
    assert a != draw_inputs(1, 5, unc)
    assert len({d.seed for d in a}) == 5
    one = restrict(a[2], ("cost",))
    assert one == Draw(2, 0.0, a[2].cost_factor, None)


def test_zero_spreads_draw_the_point_values_exactly():
    unc = dataclasses.replace(small(sd={"sd": 0.0, "source": "s"}).uncertainty,
                              cost_sigma=0.0)
    for d in draw_inputs(3, 20, unc):
        assert d.acceptance_shift == 0.0 and d.cost_factor == 1.0


def test_the_draws_follow_the_declared_distributions():
    # 4,000 draws: the standard error of a standard deviation is sd / sqrt(2n) ~ 1.1%
    unc = dataclasses.replace(small().uncertainty, cost_sigma=0.1)
    draws = draw_inputs(7, 4000, unc)
    shifts = np.array([d.acceptance_shift for d in draws])
    logs = np.log([d.cost_factor for d in draws])
    assert abs(shifts.mean()) < 4 * 0.03 / np.sqrt(4000)
    assert shifts.std() == pytest.approx(0.03, rel=0.05)
    assert logs.std() == pytest.approx(0.1, rel=0.05)
    box = small(sd={"range": [-0.05, 0.02], "source": "s"}).uncertainty
    u = np.array([d.acceptance_shift for d in draw_inputs(7, 4000, box)])
    assert -0.05 <= u.min() and u.max() <= 0.02 and u.mean() == pytest.approx(-0.015, abs=2e-3)


def test_a_shift_moves_every_probability_and_clips_to_one():
    sc = small()
    assert shifted_acceptance(sc, 0.05)["alpha"] == pytest.approx(0.80)
    assert shifted_acceptance(sc, 0.5)["alpha"] == 1.0
    pos = dataclasses.replace(sc, acceptance={"model": "positional", "rates": [0.9, 0.7]})
    assert shifted_acceptance(pos, -0.1)["rates"] == pytest.approx([0.8, 0.6])
    curve = dataclasses.replace(sc, acceptance={"model": "curve", "lengths": {1: 1.8}})
    with pytest.raises(SpecsimError, match="acceptance.uncertainty"):
        shifted_acceptance(curve, 0.1)


@pytest.mark.parametrize("hw, tp", [("a100-40gb", 1), ("a100-40gb", 2), ("h100-sxm", 2)])
def test_a_cost_factor_makes_every_forward_that_many_times_longer(hw, tp):
    sc = load_scenario(None, [f"hardware={hw}", f"parallelism.tensor_parallel={tp}"])
    a = resolve_deployment(sc)
    b = resolve_deployment(dataclasses.replace(sc, cost_factor=1.1))
    for new, ctx in [(np.ones(8), np.full(8, 500.0)), (np.array([512.0]), np.zeros(1)),
                     (np.full(4, 5.0), np.full(4, 900.0))]:
        for cost_a, cost_b in ((a.target_cost, b.target_cost), (a.draft_cost, b.draft_cost)):
            assert cost_b.step_time(new, ctx) == pytest.approx(
                1.1 * cost_a.step_time(new, ctx), rel=1e-12)


def test_a_cost_factor_scales_tpot_when_the_schedule_cannot_change():
    # every request arrives at t=0: the engine's choices do not depend on step times, so
    # each request's time per output token is exactly the factor's multiple
    wl = workload([0.0] * 6, [100] * 6, [30] * 6)
    sc = small()
    point = simulate(sc, workload=wl).requests
    slow = simulate(dataclasses.replace(sc, cost_factor=1.25), workload=wl).requests
    assert np.allclose(slow["tpot_s"], 1.25 * point["tpot_s"], rtol=1e-12)


def _point(sc):
    s = simulate(sc).summary()
    return {m: float(s[m]) for m in METRICS}


@pytest.mark.parametrize("sources", [[], ["acceptance", "cost"]])
def test_with_nothing_varying_every_interval_is_the_point_estimate(sources):
    sc = small(sources=sources, sd={"sd": 0.0, "source": "s"}, cost={"sigma": 0.0,
                                                                      "source": "s"})
    assert all(draw_scenario(sc, restrict(d, sc.uncertainty.sources)) is sc
               for d in draw_inputs(0, 4, sc.uncertainty))
    [row] = propagate([sc], 4, SerialExecutor())
    for m, value in _point(sc).items():
        assert row[f"{m}_p5"] == row[f"{m}_p50"] == row[f"{m}_p95"] == value, m


def test_the_same_seed_gives_the_same_intervals_and_another_seed_others():
    sc = small()
    a = propagate([sc], 3, SerialExecutor())
    assert a == propagate([sc], 3, SerialExecutor())
    b = propagate([dataclasses.replace(sc, seed=1)], 3, SerialExecutor())
    assert a[0]["p50_tpot_s_p50"] != b[0]["p50_tpot_s_p50"]


def test_shares_are_fractions_of_the_variance():
    [row] = propagate([small()], 4, SerialExecutor())
    for m in METRICS:
        parts = [row[f"{m}_share_{s}"] for s in ("acceptance", "cost", "workload")]
        assert sum(parts) == pytest.approx(1.0)
        assert row[f"{m}_widest"] in ("acceptance", "cost", "workload")
        assert row[f"{m}_p5"] <= row[f"{m}_p50"] <= row[f"{m}_p95"]


def test_regression_shares_recover_a_known_linear_model():
    """y = 3 a + 1 ln f + noise, a and ln f independent: the first-order parts are
    9 var(a) and var(ln f), and the workload (the noise) gets what is left."""
    from simulator.uncertainty.draws import Draw
    from simulator.uncertainty.propagate import shares
    rng = np.random.default_rng(0)
    n = 4000
    a, lnf, noise = rng.normal(0, 1, n), rng.normal(0, 2, n), rng.normal(0, 1, n)
    draws = [Draw(i, a[i], float(np.exp(lnf[i])), i) for i in range(n)]
    y = 3 * a + lnf + noise
    values = np.column_stack([y] * len(METRICS))
    out = shares(values, draws, ("acceptance", "cost", "workload"))
    total = 9 + 4 + 1  # var(3a) + var(ln f) + var(noise)
    m = METRICS[0]
    assert out[f"{m}_share_acceptance"] == pytest.approx(9 / total, abs=0.02)
    assert out[f"{m}_share_cost"] == pytest.approx(4 / total, abs=0.02)
    assert out[f"{m}_share_workload"] == pytest.approx(1 / total, abs=0.02)
    assert out[f"{m}_widest"] == "acceptance"
    # without the workload, a purely linear metric leaves no non-linear remainder
    exact = shares(np.column_stack([3 * a + lnf] * len(METRICS)), draws,
                   ("acceptance", "cost"))
    assert exact[f"{m}_nonlinear"] == pytest.approx(0.0, abs=1e-12)
