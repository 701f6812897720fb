"""The opt-in ``spec_cost`` source of ``uncertainty:`` (simulator/uncertainty/spec.py): a
lognormal factor per draw on the speculative path alone (``Scenario.spec_cost_factor``),
added after the three default sources without moving their numbers."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from simulator.cli import main
from simulator.inputs.errors import SpecsimError
from simulator.planning.executors import SerialExecutor
from simulator.scenario import scenario_from_dict
from simulator.uncertainty.draws import OWN_STREAMS, draw_inputs, draw_scenario, restrict
from simulator.uncertainty.propagate import propagate, varied_sources
from simulator.uncertainty.spec import (
    DEFAULT_SOURCES,
    MAX_COST_SIGMA,
    MODEL_ERROR_SIGMA,
    SPEC_COST_SIGMA,
    Uncertainty,
)

TRACE = {"synthetic": {"num_requests": 16, "arrival": {"process": "poisson", "rate_per_s": 4},
                       "prompt": {"dist": "fixed", "tokens": 100},
                       "output": {"dist": "fixed", "tokens": 30}}}


def small(policy="chain", **unc):
    return scenario_from_dict({"policy": policy, "draft": "opt-125m",
                               "acceptance": {"model": "iid", "alpha": 0.75},
                               "workload": TRACE, "uncertainty": unc}, source="test")


def test_spec_cost_is_opt_in_with_the_published_checks_sigma():
    assert "spec_cost" not in DEFAULT_SOURCES and Uncertainty().sources == DEFAULT_SOURCES
    assert Uncertainty().spec_cost_sigma == SPEC_COST_SIGMA
    sc = small(sources=["spec_cost", "cost"], spec_cost={"sigma": 0.3, "source": "mine"})
    assert sc.uncertainty.sources == ("cost", "spec_cost")
    assert (sc.uncertainty.spec_cost_sigma, sc.uncertainty.spec_cost_source) == (0.3, "mine")


@pytest.mark.parametrize("block, field", [
    ({"spec_cost": {"sigma": 0.3}}, "source"),
    ({"spec_cost": {"sigma": -1, "source": "s"}}, "uncertainty.spec_cost.sigma"),
    ({"spec_cost": {"sigma": float("nan"), "source": "s"}}, "uncertainty.spec_cost.sigma"),
    ({"spec_cost": 0.3}, "uncertainty.spec_cost"),
])
def test_a_bad_spec_cost_block_names_its_field(block, field):
    with pytest.raises(SpecsimError) as exc:
        scenario_from_dict({"uncertainty": block}, source="test")
    assert field in str(exc.value)


def test_the_other_sources_draw_the_numbers_they_drew_before_it_was_added():
    # before spec_cost, draw i split child 3 + i of SeedSequence(seed) into 3 streams
    # (acceptance, cost, workload); a fourth child leaves the first three as they were
    unc = Uncertainty(cost_sigma=0.1)
    for d, child in zip(draw_inputs(5, 6, unc),
                        np.random.SeedSequence(5).spawn(OWN_STREAMS + 6)[OWN_STREAMS:]):
        _, cost, wl = (np.random.default_rng(s) for s in child.spawn(3))
        assert d.cost_factor == float(np.exp(0.1 * cost.standard_normal()))
        assert d.seed == int(wl.integers(2**63 - 1))


def test_the_factor_is_lognormal_with_the_declared_sigma():
    # 4,000 draws: the standard error of a standard deviation is sd / sqrt(2n) ~ 1.1%
    logs = np.log([d.spec_cost_factor
                   for d in draw_inputs(7, 4000, Uncertainty(spec_cost_sigma=0.4))])
    assert abs(logs.mean()) < 4 * 0.4 / np.sqrt(4000)
    assert logs.std() == pytest.approx(0.4, rel=0.05)


def test_it_varies_only_where_the_policy_speculates_and_reaches_the_scenario():
    chain = small(sources=["spec_cost"])
    assert varied_sources(chain) == ("spec_cost",)
    assert varied_sources(small("none", sources=["spec_cost"])) == ()
    assert varied_sources(small(sources=["spec_cost"],
                                spec_cost={"sigma": 0.0, "source": "s"})) == ()
    d = draw_inputs(0, 1, chain.uncertainty)[0]
    assert draw_scenario(chain, restrict(d, ("spec_cost",))).spec_cost_factor \
        == d.spec_cost_factor != 1.0
    assert draw_scenario(chain, restrict(d, ("cost",))).spec_cost_factor == 1.0


def test_a_slower_speculative_path_widens_the_chain_and_leaves_none_a_point():
    chain, plain = small(sources=["spec_cost"]), small("none", sources=["spec_cost"])
    [c, n] = propagate([chain, plain], 6, SerialExecutor())
    assert c["p50_tpot_s_p5"] < c["p50_tpot_s_p95"]
    assert n["p50_tpot_s_p5"] == n["p50_tpot_s_p50"] == n["p50_tpot_s_p95"]
    # the factor only slows the draft: TPOT rises with it across the draws
    draws = [restrict(d, ("spec_cost",)) for d in draw_inputs(0, 6, chain.uncertainty)]
    from simulator.simulate import simulate
    tpot = [simulate(draw_scenario(chain, d)).summary()["p50_tpot_s"] for d in draws]
    order = np.argsort([d.spec_cost_factor for d in draws])
    assert np.all(np.diff(np.asarray(tpot)[order]) >= 0)


def test_the_shipped_default_sigma_is_writable_by_a_scenario():
    # the default a user reads in docs/uncertainty.md must be one a scenario may write back
    assert SPEC_COST_SIGMA <= MAX_COST_SIGMA and MODEL_ERROR_SIGMA <= MAX_COST_SIGMA
    sc = small(sources=["spec_cost"], spec_cost={"sigma": SPEC_COST_SIGMA, "source": "docs"})
    assert sc.uncertainty.spec_cost_sigma == SPEC_COST_SIGMA


@pytest.mark.parametrize("key", ["cost", "spec_cost"])
@pytest.mark.parametrize("sigma, says", [(2.5, "at most 2"), (-0.1, "at least 0")])
def test_a_sigma_outside_the_cap_names_its_field_and_the_fix(key, sigma, says):
    with pytest.raises(SpecsimError) as exc:
        scenario_from_dict({"uncertainty": {key: {"sigma": sigma, "source": "s"}}},
                           source="test")
    text = str(exc.value)
    assert f"uncertainty.{key}.sigma" in text and says in text
    assert f"give a log-scale sigma from 0 to {MAX_COST_SIGMA}" in text


def test_the_cli_refuses_a_sigma_over_the_cap_with_exit_2(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"uncertainty": {"cost": {"sigma": 2.5, "source": "s"}}}))
    code = main(["run", str(path), "--uncertainty", "2", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "uncertainty.cost.sigma" in err and "from 0 to 2.0" in err
    assert not (tmp_path / "out").exists()
