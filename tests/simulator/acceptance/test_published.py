"""The conversions from published acceptance numbers to model inputs, and the shipped
scenarios' acceptance blocks: each must be what its conversion gives from the cited table."""
import numpy as np
import pytest

from simulator.acceptance import acceptance_from_config
from simulator.acceptance import published as pub
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import load_yaml_file
from simulator.speculation.closed_forms import expected_tokens
from simulator.speculation.tree_shapes import chain_tree
from tests.helpers import REPO

SCENARIOS = REPO / "workloads" / "scenarios"


@pytest.mark.parametrize("alpha, gamma", [(0.8, 4), (0.5, 1), (0.62, 7), (0.05, 3)])
def test_alpha_for_tau_inverts_the_closed_form(alpha, gamma):
    assert pub.alpha_for_tau(expected_tokens(alpha, gamma), gamma) == pytest.approx(alpha,
                                                                                   abs=1e-9)


def test_alpha_for_tau_hand_values_and_limits():
    # Leviathan et al. Eq. 1: alpha 0.8, gamma 4 gives E = (1 - 0.8^5) / 0.2 = 3.3616
    assert pub.alpha_for_tau(3.3616, 4) == pytest.approx(0.8, abs=1e-9)
    assert pub.alpha_for_tau(1.0, 5) == pytest.approx(0.0, abs=1e-9)
    assert pub.alpha_for_tau(6.0, 5) == pytest.approx(1.0, abs=1e-9)
    for tau, gamma in [(6.5, 5), (0.9, 5), (2.0, 0)]:
        with pytest.raises(SpecsimError):
            pub.alpha_for_tau(tau, gamma)


def test_geometric_coverage_by_hand():
    cov = pub.geometric_coverage([0.6, 0.5], 0.5, 3)
    # 1 - 0.4 * 0.5^(k-1) and 1 - 0.5 * 0.5^(k-1)
    np.testing.assert_allclose(cov, [[0.6, 0.8, 0.9], [0.5, 0.75, 0.875]])
    np.testing.assert_allclose(pub.geometric_coverage([0.3], 0.0, 4), [[0.3] * 4])
    np.testing.assert_allclose(pub.geometric_coverage([0.3], 1.0, 3), [[0.3, 1.0, 1.0]])
    with pytest.raises(SpecsimError):
        pub.geometric_coverage([1.2], 0.5, 3)


def test_hit_rate_reproduces_the_published_top5():
    top1, top5 = pub.SPECINFER_TOPK["stochastic"]
    h = pub.hit_rate_from_topk(top1, top5, 5)
    cov = pub.geometric_coverage([top1], h, 5)[0]
    assert cov[0] == pytest.approx(top1) and cov[4] == pytest.approx(top5)
    assert np.all(np.diff(cov) > 0)
    with pytest.raises(SpecsimError):
        pub.hit_rate_from_topk(0.9, 0.8, 5)


def test_tree_tau_of_a_chain_is_the_positional_closed_form():
    rates = pub.EAGLE_CHAIN_RATES["vicuna-7b"]
    # a chain uses rank 0 only: tau = 1 + sum of prod of rates, whatever h is
    expected = 1 + np.cumprod(rates).sum()
    for h in (0.0, 0.4, 1.0):
        assert pub.tree_tau(rates, h, chain_tree(5)) == pytest.approx(expected)


def test_fit_hit_rate_reproduces_eagles_tree_tau_and_rejects_the_unreachable():
    tree, rates = pub.eagle_tree(), pub.EAGLE_CHAIN_RATES["vicuna-7b"]
    assert tree.num_nodes == 25 and tree.max_depth == 5          # mc_sim_7b_63
    h = pub.eagle_hit_rate()
    assert 0 < h < 1
    assert pub.tree_tau(rates, h, tree) == pytest.approx(pub.EAGLE_TREE_TAU["vicuna-7b"],
                                                         abs=1e-6)
    taus = [pub.tree_tau(rates, x, tree) for x in np.linspace(0, 1, 11)]
    assert np.all(np.diff(taus) > 0)
    with pytest.raises(SpecsimError, match="outside"):
        pub.fit_hit_rate(rates, tree, 6.5)


def test_eagle_top1_uses_table2_else_the_chain_tau():
    assert pub.eagle_top1("vicuna-7b") == pub.EAGLE_CHAIN_RATES["vicuna-7b"]
    (alpha,) = pub.eagle_top1("vicuna-13b")
    assert expected_tokens(alpha, 5) == pytest.approx(pub.EAGLE_CHAIN_TAU["vicuna-13b"])
    with pytest.raises(SpecsimError):
        pub.eagle_top1("gpt-2")


def _block(name: str) -> dict:
    return load_yaml_file(SCENARIOS / f"{name}.yaml")["acceptance"]


@pytest.mark.parametrize("name", ["eagle", "eagle2"])
def test_eagle_scenarios_hold_the_converted_table(name):
    block = _block(name)
    np.testing.assert_allclose(block["coverage"], pub.eagle_coverage("vicuna-7b", 10),
                               atol=5e-5)
    np.testing.assert_allclose(np.array(block["coverage"])[:, 0],
                               pub.EAGLE_CHAIN_RATES["vicuna-7b"])
    assert "Table 2" in block["source"] and "3.94" in block["source"]


def test_specinfer_scenario_holds_the_converted_table():
    block = _block("specinfer")
    np.testing.assert_allclose(block["coverage"], pub.specinfer_coverage(), atol=5e-5)
    assert "SpecInfer" in block["source"] and "Table 1" in block["source"]


@pytest.mark.parametrize("name, alpha", [
    ("default", pub.LEVIATHAN_T5_SMALL_ARGMAX), ("adaptive", pub.LEVIATHAN_T5_SMALL_ARGMAX),
    ("adaptive_schedule", pub.LEVIATHAN_T5_SMALL_ARGMAX),
    ("staged", pub.LEVIATHAN_T5_LARGE_ARGMAX)])
def test_chain_scenarios_cite_leviathan_table3(name, alpha):
    block = _block(name)
    assert block["alpha"] == alpha and "Leviathan" in block["source"]


@pytest.mark.parametrize("name", ["default", "adaptive", "adaptive_schedule", "staged",
                                  "specinfer", "medusa", "eagle", "eagle2"])
def test_every_model_based_scenario_cites_a_source_that_parses(name):
    block = _block(name)
    assert isinstance(block.get("source"), str) and len(block["source"]) > 40
    acceptance_from_config(block)
