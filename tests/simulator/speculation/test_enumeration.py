"""Exact enumeration on a toy LM: lossless rules match the target, wrong ones are caught."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.speculation.enumeration import (
    chain_step,
    children_tuples,
    expected_length,
    output_distribution,
    root_acceptance,
    target_distribution,
    total_variation,
    tree_step,
)
from simulator.speculation.toy_lm import ToyLM
from simulator.speculation.tree_verification import tree_method
from simulator.speculation.verification import WRONG_CHAIN_RULES

VOCAB, N_TOKENS = 5, 4


@pytest.fixture(scope="module")
def pair():
    # Lecture 000, section 0.4: 5 tokens, order 2, p a fixed random table,
    # q = softmax(log p + noise).
    rng = np.random.default_rng(20240)
    target = ToyLM.random_target(VOCAB, rng, sharpness=1.5)
    return target, target.noisy_draft(rng, noise=1.0)


def _tv(pair, step, context=()):
    target, _ = pair
    dist = output_distribution(step, VOCAB, N_TOKENS, context)
    assert dist.sum() == pytest.approx(1.0, abs=1e-12)
    return total_variation(dist, target_distribution(target, N_TOKENS, context))


@pytest.mark.parametrize("gamma", [1, 2, 3, 4])
def test_speculative_sampling_is_lossless(pair, gamma):
    assert _tv(pair, chain_step(*pair, gamma)) < 1e-12
    assert _tv(pair, chain_step(*pair, gamma), context=(3, 1)) < 1e-12


@pytest.mark.parametrize("gamma", [1, 2, 3, 4])
@pytest.mark.parametrize("rule", WRONG_CHAIN_RULES)
def test_each_wrong_chain_variant_is_caught(pair, gamma, rule):
    assert _tv(pair, chain_step(*pair, gamma, rule)) > 0.05


@pytest.mark.parametrize("config", [(1,), (2,), (3,), (2, 2, 1), (1, 3, 1)])
def test_mss_with_sampled_children_is_lossless(pair, config):
    assert _tv(pair, tree_step(*pair, config, "mss", "sampled")) < 1e-12


@pytest.mark.parametrize("children", ["sampled", "top_k"])
def test_naive_sampling_is_lossless_for_any_tree(pair, children):
    assert _tv(pair, tree_step(*pair, (2, 2, 1), "naive", children)) < 1e-12


@pytest.mark.parametrize("config", [(1,), (2,), (2, 2, 1)])
def test_mss_over_deterministic_top_k_is_caught(pair, config):
    # Lecture 000, section 4.5: the plain formula over top-k children is biased (even k = 1).
    assert _tv(pair, tree_step(*pair, config, "mss_plain_q", "top_k")) > 0.05


def test_mss_never_rejects_more_than_naive_sampling_on_average(pair):
    # SpecInfer Theorem 4.3, exactly, at every context and width, averaged over the sampled
    # children.  It is a statement about the average: for some particular drafted children
    # naive sampling accepts more, so the per-tuple gap is also reported.
    target, draft = pair
    worst_tuple = 0.0
    for a in range(VOCAB + 1):
        for b in range(VOCAB + 1):
            p, q = target.table[a, b], draft.table[a, b]
            for k in (1, 2, 3, 4):
                mss = root_acceptance(p, q, k, "mss")
                naive = root_acceptance(p, q, k, "naive")
                assert mss >= naive - 1e-12
                kids = np.stack([t for t, _ in children_tuples(q, k, "sampled")])
                pb, qb = np.tile(p, (len(kids), 1)), np.tile(q, (len(kids), 1))
                m = 1 - np.prod(1 - tree_method("mss")(pb, qb, kids)[0], axis=-1)
                n = 1 - np.prod(1 - tree_method("naive")(pb, qb, kids)[0], axis=-1)
                worst_tuple = min(worst_tuple, float(np.min(m - n)))
    assert worst_tuple < 0


@pytest.mark.parametrize("drafting", ["argmax", "sample"])
def test_greedy_chain_is_a_point_mass_on_the_target_greedy_text(pair, drafting):
    target, draft = pair
    greedy_target = target.with_temperature(0.0)
    step = chain_step(greedy_target, draft, 3, "greedy_verification", drafting)
    dist = output_distribution(step, VOCAB, N_TOKENS)
    expected = np.zeros(VOCAB ** N_TOKENS)
    code = 0
    for tok in target.greedy_decode([], N_TOKENS):
        code = code * VOCAB + tok
    expected[code] = 1.0
    assert total_variation(dist, expected) < 1e-12


def test_greedy_tree_is_a_point_mass_on_the_target_greedy_text(pair):
    target, draft = pair
    step = tree_step(target, draft, (2, 2, 1), "greedy", "top_k")
    dist = output_distribution(step, VOCAB, N_TOKENS, context=(1,))
    code = 0
    for tok in target.greedy_decode([1], N_TOKENS):
        code = code * VOCAB + tok
    assert dist[code] == pytest.approx(1.0, abs=1e-12)


def _constant_lm(probs):
    v = len(probs)
    return ToyLM(np.broadcast_to(np.asarray(probs, float), (v + 1, v + 1, v)))


def test_expected_tokens_of_lecture_003_section_9_by_enumeration():
    # Same p and q at every position: alpha = 0.8, K = 3, E[N] = 2.952.
    target = _constant_lm([0.30, 0.35, 0.20, 0.10, 0.05])
    draft = _constant_lm([0.50, 0.20, 0.15, 0.10, 0.05])
    assert expected_length(chain_step(target, draft, 3)(())) == pytest.approx(2.952, abs=1e-12)


def test_expected_tokens_of_lecture_000_exercise_1_by_enumeration():
    # alpha = 0.75, gamma = 4: E = (1 - 0.75^5) / 0.25 = 3.05 (3.05078125 exactly).
    target, draft = _constant_lm([0.75, 0.25]), _constant_lm([1.0, 0.0])
    assert expected_length(chain_step(target, draft, 4)(())) == pytest.approx(3.05078125,
                                                                              abs=1e-12)


def test_silent_steps_are_folded_in_exactly(pair):
    # A rule that can emit nothing still yields a normalised output distribution.
    dist = output_distribution(chain_step(*pair, 2, "discard_on_reject"), VOCAB, 3)
    assert dist.sum() == pytest.approx(1.0, abs=1e-12)


def test_bad_harness_inputs_are_named(pair):
    target, draft = pair
    with pytest.raises(SpecsimError, match="num_tokens"):
        output_distribution(chain_step(target, draft, 1), VOCAB, 0)
    with pytest.raises(SpecsimError, match="draft"):
        chain_step(target, ToyLM.random_target(4, np.random.default_rng(0)), 2)
    with pytest.raises(SpecsimError, match="gamma"):
        chain_step(target, draft, 0)
    with pytest.raises(SpecsimError, match="drafting"):
        chain_step(target, draft, 2, drafting="beam")
    with pytest.raises(SpecsimError, match="children"):
        tree_step(target, draft, (2,), children="beam")
    with pytest.raises(SpecsimError, match="config"):
        tree_step(target, draft, (2, 0))
