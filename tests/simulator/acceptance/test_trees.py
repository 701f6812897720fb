"""Tree acceptance: Medusa head accuracies, per-depth top-k coverage, Sequoia, token level."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.acceptance import acceptance_from_config
from simulator.acceptance.medusa import MEDUSA_TOP_K, MedusaAcceptance
from simulator.acceptance.token_level import TokenLevelAcceptance
from simulator.inputs.errors import SpecsimError
from simulator.speculation.token_tree import TokenTree
from tests.helpers import SHARED

MEDUSA_CSV = SHARED / "traces" / "acceptance" \
    / "medusa_acc.csv"


def _mean_within(draws, expected, sd=None, k=5.0):
    sd = draws.std() if sd is None else sd
    return abs(draws.mean() - expected) <= k * sd / np.sqrt(draws.size) + 1e-12


def test_medusa_table_matches_the_published_csv():
    if not MEDUSA_CSV.exists():
        pytest.skip(f"{MEDUSA_CSV} not available")
    import pandas as pd
    frame = pd.read_csv(MEDUSA_CSV)
    for _, row in frame.iterrows():
        table = np.array(MEDUSA_TOP_K[row["Name"]])
        csv = np.array([[row[f"train/medusa{h}_top{k}"] for k in range(1, 6)]
                        for h in range(5)])
        assert np.max(np.abs(table - csv)) <= 5e-5              # rounded to 4 decimals


def test_medusa_chain_uses_each_heads_top1():
    model = acceptance_from_config({"model": "medusa", "size": "13b"})
    top1 = [0.5939, 0.3397, 0.2161, 0.1500, 0.1223]             # medusa{h}_top1, 13b row
    assert model.position_rates(5) == pytest.approx(np.cumprod(top1))
    with pytest.raises(SpecsimError, match="heads"):
        model.position_rates(6)
    with pytest.raises(SpecsimError, match="size"):
        acceptance_from_config({"model": "medusa", "size": "70b"})


def test_medusa_tree_expectation_by_hand_and_by_sampling():
    model = MedusaAcceptance.published("7b")
    # Two candidates for head 0, one for head 1 under each: P(depth 1) = top-2 of head 0;
    # under rank 0 and rank 1 alike, head 1's top-1 is accepted with 0.3164.
    tree = TokenTree.from_config([2, 1])
    by_hand = 0.6717 + 0.6717 * 0.3164
    assert model.expected_tree_accepted(tree) == pytest.approx(by_hand)
    n = 100_000
    draws = model.sample_tree(tree, np.zeros(n, int), np.arange(n), np.random.default_rng(0))
    assert _mean_within(draws, by_hand)


def test_tree_topk_coverage_by_hand():
    model = acceptance_from_config({"model": "tree_topk",
                                    "coverage": [[0.6, 0.8], [0.5, 0.7]]})
    assert model.expected_tree_accepted(TokenTree.from_config([2])) == pytest.approx(0.8)
    tree = TokenTree.from_config([2, 2])
    assert model.expected_tree_accepted(tree) == pytest.approx(0.8 + 0.8 * 0.7)
    # Depths past the list repeat the last row; the chain uses rank 0.
    assert model.position_rates(3) == pytest.approx([0.6, 0.3, 0.15])
    n = 100_000
    draws = model.sample_tree(tree, np.zeros(n, int), np.arange(n), np.random.default_rng(1))
    assert _mean_within(draws, 0.8 + 0.8 * 0.7)
    with pytest.raises(SpecsimError, match="top-2"):
        model.sample_tree(TokenTree.from_config([3]), np.zeros(2, int), np.arange(2),
                          np.random.default_rng(0))
    with pytest.raises(SpecsimError, match="decrease"):
        acceptance_from_config({"model": "tree_topk", "coverage": [[0.8, 0.6]]})


def test_sequoia_positional_acceptance_by_hand():
    model = acceptance_from_config({"model": "sequoia", "rates": [0.7, 0.3, 0.1]})
    # Two children: 0.7 + 0.3 * 0.3 = 0.79 accepted at a node.
    one = 0.7 + 0.3 * 0.3
    assert model.expected_tree_accepted(TokenTree.from_config([2])) == pytest.approx(one)
    tree = TokenTree.from_config([2, 2])
    assert model.expected_tree_accepted(tree) == pytest.approx(one + one * one)
    n = 100_000
    draws = model.sample_tree(tree, np.zeros(n, int), np.arange(n), np.random.default_rng(2))
    assert _mean_within(draws, one + one * one)
    # A chain is i.i.d. with alpha = rates[0]; a wider tree never expects less.
    assert model.expected_accepted(2) == pytest.approx(0.7 + 0.49)
    assert model.expected_tree_accepted(tree) >= model.expected_accepted(2)
    with pytest.raises(SpecsimError, match="rank 4"):
        model.expected_tree_accepted(TokenTree.from_config([4]))


@pytest.mark.parametrize("name, cfg", [("iid", {"alpha": 0.8}),
                                       ("positional", {"rates": [0.8]}),
                                       ("hard_token", {"alpha_easy": 0.9, "alpha_hard": 0.1,
                                                       "p_easy_to_hard": 0.1,
                                                       "p_hard_to_hard": 0.5})])
def test_chain_models_refuse_branching_trees_but_take_chains(name, cfg):
    model = acceptance_from_config({"model": name, **cfg})
    with pytest.raises(SpecsimError, match="no tree semantics.*tree_topk"):
        model.sample_tree(TokenTree.from_config([2, 1]), np.zeros(3, int), np.arange(3),
                          np.random.default_rng(0))
    out = model.sample_tree(TokenTree.chain(3), np.zeros(3, int), np.arange(3),
                            np.random.default_rng(0))
    assert np.all((out >= 0) & (out <= 3))


def test_token_level_chain_tree_agrees_with_the_chain_closed_form():
    # A chain-shaped tree through MSS is speculative sampling: its mean must match the
    # exact chain expectation sum_k P(first k accepted).
    model = TokenLevelAcceptance(vocab_size=6)
    n = 30_000
    draws = model.sample_tree(TokenTree.chain(3), np.zeros(n, int), np.arange(n),
                              np.random.default_rng(3))
    assert _mean_within(draws, model.expected_accepted(3))


def test_token_level_mss_accepts_more_than_naive_and_trees_more_than_chains():
    n = 20_000
    tree = TokenTree.from_config([2, 2, 1])
    mss = TokenLevelAcceptance(vocab_size=6, tree_method="mss")
    naive = TokenLevelAcceptance(vocab_size=6, tree_method="naive")
    rng = np.random.default_rng(4)
    ctx, ids = np.zeros(n, int), np.arange(n)
    a_mss = mss.sample_tree(tree, ctx, ids, rng)
    a_naive = naive.sample_tree(tree, ctx, ids, rng)
    a_chain = mss.sample_tree(TokenTree.chain(3), ctx, ids, rng)
    se = np.sqrt(a_mss.var() / n + a_naive.var() / n)
    assert a_mss.mean() - a_naive.mean() > 5 * se
    se = np.sqrt(a_mss.var() / n + a_chain.var() / n)
    assert a_mss.mean() - a_chain.mean() > 5 * se


def test_token_level_bound_state_advances_with_the_text():
    model = TokenLevelAcceptance(vocab_size=5).bind(4, np.random.default_rng(0))
    before = model.state.copy()
    model.sample_tree(TokenTree.from_config([2, 1]), np.zeros(4, int), np.arange(4),
                      np.random.default_rng(1))
    assert not np.array_equal(before, model.state)
    assert np.all((model.state >= 0) & (model.state < 5))
