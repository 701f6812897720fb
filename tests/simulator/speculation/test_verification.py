"""Chain verification rules: worked examples, exact properties, sampler vs exact outcome."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.inputs.errors import SpecsimError
from simulator.speculation.token_tree import TokenTree
from simulator.speculation.toy_lm import ToyLM
from simulator.speculation.tree_verification import verify_tree
from simulator.speculation.verification import (
    CHAIN_RULES,
    acceptance_rate,
    first_token_distribution,
    greedy_verdict,
    greedy_verification,
    residual_distribution,
    sample_verdict,
    speculative_sampling,
    speculative_sampling_verdict,
    stop_probabilities,
    verdict_outcomes,
)

A, B, C, D, E = range(5)


def test_worked_round_of_lecture_003_section_9():
    # Lecture 003, section 9: q and p over {A..E}; alpha 0.80, residual (0, .75, .25, 0, 0).
    q = np.array([0.50, 0.20, 0.15, 0.10, 0.05])
    p = np.array([0.30, 0.35, 0.20, 0.10, 0.05])
    assert acceptance_rate(p, q) == pytest.approx(0.80, abs=1e-12)
    assert residual_distribution(p, q) == pytest.approx([0, 0.75, 0.25, 0, 0], abs=1e-12)
    # The traced round: drafts A, B, A (K = 3), same p and q at every position.
    verdict = speculative_sampling_verdict([A, B, A], np.tile(q, (3, 1)), np.tile(p, (4, 1)))
    assert verdict.accept == pytest.approx([0.60, 1.0, 0.60], abs=1e-12)
    # P(accept A, accept B, reject A, correct to B) = 0.6 * 1 * 0.4 * 0.75.
    assert verdict_outcomes(verdict)[2, B] == pytest.approx(0.18, abs=1e-12)


def test_exercise_2_of_lecture_003():
    q = np.array([0.6, 0.3, 0.1])
    p = np.array([0.4, 0.5, 0.1])
    assert acceptance_rate(p, q) == pytest.approx(0.8, abs=1e-12)
    assert 1 - acceptance_rate(p, q) == pytest.approx(0.2, abs=1e-12)
    assert residual_distribution(p, q) == pytest.approx([0, 1, 0], abs=1e-12)
    verdict = speculative_sampling_verdict([0, 1, 0], np.tile(q, (3, 1)), np.tile(p, (4, 1)))
    assert verdict.accept == pytest.approx([2 / 3, 1.0, 2 / 3], abs=1e-12)
    # A rejection at draft 3 must correct to B: the residual is a point mass.
    assert verdict.stop[2] == pytest.approx([0, 1, 0], abs=1e-12)


def test_exercise_3_of_lecture_000_correct_and_greedy_rule():
    p, q = np.array([0.6, 0.4]), np.array([0.5, 0.5])
    assert first_token_distribution("speculative_sampling", p, q) == pytest.approx([0.6, 0.4])
    # The greedy rule under sampling pushes the output to the argmax: (0.8, 0.2).
    assert first_token_distribution("greedy_rule_under_sampling", p, q) == \
        pytest.approx([0.8, 0.2], abs=1e-12)


def test_exercise_7_of_lecture_000_first_draft_kept_is_biased():
    # Keeping the first draft regardless of p makes the first token follow q.
    p, q = np.array([0.5, 0.5]), np.array([0.6, 0.4])
    assert first_token_distribution("accept_first_unconditionally", p, q) == \
        pytest.approx([0.6, 0.4], abs=1e-12)


@st.composite
def two_distributions(draw):
    vocab = draw(st.integers(2, 7))
    w = st.floats(0.0, 10.0, allow_nan=False)
    p = np.array(draw(st.lists(w, min_size=vocab, max_size=vocab))) + 1e-3
    q = np.array(draw(st.lists(w, min_size=vocab, max_size=vocab)))
    q[draw(st.integers(0, vocab - 1))] += 1e-3          # q may have zeros, never all
    return p / p.sum(), q / q.sum()


@settings(max_examples=60, deadline=None, derandomize=True)  # same examples every run
@given(two_distributions())
def test_speculative_sampling_emits_p_for_any_q(pq):
    p, q = pq
    assert first_token_distribution("speculative_sampling", p, q) == pytest.approx(p, abs=1e-12)
    tv = 0.5 * np.abs(p - q).sum()
    assert acceptance_rate(p, q) == pytest.approx(1 - tv, abs=1e-12)   # Theorem 3.5


def test_stop_probabilities_and_outcomes_are_distributions():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(6), size=(4, 5))
    q = rng.dirichlet(np.ones(6), size=(4, 4))
    x = rng.integers(0, 6, size=(4, 4))
    for name, rule in CHAIN_RULES.items():
        verdict = rule(x, q, p)
        assert stop_probabilities(verdict).sum(axis=-1) == pytest.approx(np.ones(4))
        emitted = verdict_outcomes(verdict).sum(axis=(-1, -2))
        if name == "discard_on_reject":
            assert np.all(emitted < 1)
        else:
            assert emitted == pytest.approx(np.ones(4), abs=1e-12)


def test_sampler_matches_the_exact_outcome():
    # One verification repeated N times: the (accepted, token) frequencies must match the
    # exact joint within 5 binomial standard deviations per cell.
    rng = np.random.default_rng(7)
    vocab, gamma, n = 4, 3, 60_000
    p = rng.dirichlet(np.ones(vocab), size=gamma + 1)
    q = rng.dirichlet(np.ones(vocab), size=gamma)
    x = np.array([q[i].argmax() for i in range(gamma)])
    exact = verdict_outcomes(speculative_sampling_verdict(x, q, p))
    accepted, token = speculative_sampling(np.tile(x, (n, 1)), np.tile(q, (n, 1, 1)),
                                           np.tile(p, (n, 1, 1)), rng)
    freq = np.zeros_like(exact)
    np.add.at(freq, (accepted, token), 1.0 / n)
    bound = 5 * np.sqrt(exact * (1 - exact) / n) + 1.0 / n
    assert np.all(np.abs(freq - exact) <= bound)


def test_per_request_draft_counts_end_with_the_bonus_row():
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(5), size=(2, 4))
    q = rng.dirichlet(np.ones(5), size=(2, 3))
    x = rng.integers(0, 5, size=(2, 3))
    verdict = speculative_sampling_verdict(x, q, p, num_drafts=[1, 3])
    assert verdict.accept[0, 1:] == pytest.approx([0, 0])
    assert verdict.stop[0, 1] == pytest.approx(p[0, 1])           # bonus after draft 1
    assert verdict.stop[1, 3] == pytest.approx(p[1, 3])


def test_one_hot_distributions_make_speculative_sampling_greedy():
    # Lecture 003, section 10: with point-mass p and q the rule is argmax equality.
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((6, 5))
    p = (np.arange(5) == logits.argmax(-1)[:, None]).astype(float)
    x = rng.integers(0, 5, size=5)
    q = (np.arange(5) == x[:, None]).astype(float)
    spec = speculative_sampling_verdict(x, q, p)
    greedy = greedy_verdict(x, None, p)
    assert spec.accept == pytest.approx(greedy.accept)
    reached = np.concatenate([[1.0], np.cumprod(spec.accept)[:-1]])
    rejected = (spec.accept < 1) & (reached > 0)
    assert spec.stop[:5][rejected] == pytest.approx(greedy.stop[:5][rejected])


@pytest.mark.parametrize("gamma", [1, 2, 3, 5])
@pytest.mark.parametrize("drafting", ["argmax", "sample"])
def test_greedy_chain_reproduces_the_targets_greedy_decoding(gamma, drafting):
    rng = np.random.default_rng(gamma)
    target = ToyLM.random_target(6, rng)
    draft = target.noisy_draft(rng, noise=1.5)
    for context in ([], [2], [4, 1]):
        text = list(context)
        while len(text) < len(context) + 40:
            drafts, ctx = [], list(text)
            for _ in range(gamma):
                q = draft.probs(ctx)
                tok = int(q.argmax()) if drafting == "argmax" else int(rng.choice(6, p=q))
                drafts.append(tok)
                ctx.append(tok)
            rows = np.array([target.probs(text + drafts[:i]) for i in range(gamma + 1)])
            accepted, token = greedy_verification(np.array(drafts), rows)
            text += drafts[:int(accepted)] + [int(token)]
        produced = text[len(context):len(context) + 40]
        assert produced == target.greedy_decode(context, 40)


def test_discard_variant_emits_nothing_on_rejection():
    p = np.array([[0.0, 1.0], [0.5, 0.5]])
    q = np.array([[1.0, 0.0]])
    verdict = CHAIN_RULES["discard_on_reject"]([0], q, p)
    accepted, token = sample_verdict(verdict, np.random.default_rng(0))
    assert int(accepted) == 0 and int(token) == -1


@pytest.mark.parametrize("bad, field", [
    (np.array([[0.5, 0.6], [0.5, 0.5]]), "target_probs"),       # does not sum to 1
    (np.array([[1.2, -0.2], [0.5, 0.5]]), "target_probs"),      # negative entry
    (np.array([[np.nan, 1.0], [0.5, 0.5]]), "target_probs"),
])
def test_bad_target_probabilities_are_named(bad, field):
    with pytest.raises(SpecsimError) as err:
        speculative_sampling_verdict([0], [[0.5, 0.5]], bad)
    assert err.value.field == field
    assert isinstance(err.value, ValueError)


def test_bad_shapes_and_tokens_are_named():
    p = np.full((3, 4), 0.25)
    with pytest.raises(SpecsimError, match="draft_probs"):
        speculative_sampling_verdict([0, 1], np.full((2, 3), 1 / 3), p)
    with pytest.raises(SpecsimError, match="draft_tokens"):
        speculative_sampling_verdict([0], np.full((2, 4), 0.25), p)
    with pytest.raises(SpecsimError, match="draft_tokens"):
        speculative_sampling_verdict([0, 4], np.full((2, 4), 0.25), p)
    with pytest.raises(SpecsimError, match="num_drafts"):
        speculative_sampling_verdict([0, 1], np.full((2, 4), 0.25), p, num_drafts=3)
    with pytest.raises(SpecsimError, match="q"):
        acceptance_rate([0.5, 0.5], [1.0, 0.0, 0.0])
    with pytest.raises(SpecsimError, match="q"):
        acceptance_rate([0.5, 0.5], [0.7, 0.7])
    with pytest.raises(SpecsimError, match="rule"):
        first_token_distribution("typical_acceptance", [0.5, 0.5], [0.5, 0.5])


def test_sampling_tree_walk_without_rng_is_an_error():
    tree = TokenTree.from_sequences([[0], [1]])  # two root children carrying tokens 0 and 1
    p = np.full((1, tree.num_nodes + 1, 3), 1 / 3)
    with pytest.raises(SpecsimError, match="rng"):
        verify_tree(tree, p, None, "naive")
    # greedy needs no randomness
    verify_tree(tree, p, None, "greedy")
