"""Heterogeneous and correlated acceptance: per request/task, context decay, hard tokens."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.acceptance import acceptance_from_config, summarise_acceptance
from simulator.acceptance.hard_token import HardTokenAcceptance
from simulator.acceptance.token_level import TokenLevelAcceptance
from simulator.inputs.errors import SpecsimError


def _within(draws, expected, k=5.0):
    return abs(draws.mean() - expected) <= k * draws.std() / np.sqrt(draws.size) + 1e-12


def _formula(alpha, gamma):
    # Leviathan et al., Eq. (1), written out: E = (1 - alpha^(gamma+1)) / (1 - alpha).
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def test_per_request_alphas_follow_the_beta_prior():
    model = acceptance_from_config({"model": "per_request", "mean": 0.5,
                                    "concentration": 2.0})
    # Beta(1, 1) is uniform: E[alpha^k] = 1 / (k + 1).
    assert model.position_rates(3) == pytest.approx([1 / 2, 1 / 3, 1 / 4])
    bound = model.bind(50_000, np.random.default_rng(0))
    sd = np.sqrt(1 / 12)
    assert abs(bound.alphas.mean() - 0.5) <= 5 * sd / np.sqrt(50_000)
    assert model.alphas is None                                   # bind made a copy
    n = 50_000
    draws = bound.sample_chain(np.full(n, 3), np.zeros(n, int), np.arange(n),
                               np.random.default_rng(1))
    assert _within(draws, bound.expected_accepted(3))


def test_per_task_alpha_is_exact_and_unknown_tasks_are_named():
    model = acceptance_from_config({"model": "per_request",
                                    "tasks": {"code": 0.9, "chat": 0.6}})
    tasks = np.array(["code", "chat", "code"], dtype=object)
    bound = model.bind(3, np.random.default_rng(0), tasks=tasks)
    assert bound.alphas.tolist() == [0.9, 0.6, 0.9]
    assert bound.position_rates(2) == pytest.approx([(0.9 + 0.6 + 0.9) / 3,
                                                    (0.81 + 0.36 + 0.81) / 3])
    with pytest.raises(SpecsimError, match="docs"):
        model.bind(1, np.random.default_rng(0), tasks=np.array(["docs"], dtype=object))
    with pytest.raises(SpecsimError, match="bind"):
        model.sample_chain(np.array([2]), np.zeros(1, int), np.zeros(1, int),
                           np.random.default_rng(0))
    with_default = acceptance_from_config({"model": "per_request", "mean": 0.5,
                                           "tasks": {"code": 0.9}})
    bound = with_default.bind(2, np.random.default_rng(0),
                              tasks=np.array(["code", "docs"], dtype=object))
    assert bound.alphas.tolist() == [0.9, 0.5]


def test_context_decay_values_and_sampling():
    model = acceptance_from_config({"model": "context_decay", "alpha0": 0.9,
                                    "scale_tokens": 1000.0, "floor": 0.3})
    assert model.alpha_at([0, 1000, 10_000]) == pytest.approx([0.9, 0.9 / np.e, 0.3])
    assert model.expected_accepted(4, context=0) == pytest.approx(_formula(0.9, 4) - 1)
    n = 50_000
    ctx = np.where(np.arange(n) % 2 == 0, 0, 10_000)
    draws = model.sample_chain(np.full(n, 4), ctx, np.arange(n), np.random.default_rng(2))
    assert _within(draws[ctx == 0], _formula(0.9, 4) - 1)
    assert _within(draws[ctx > 0], _formula(0.3, 4) - 1)
    with pytest.raises(SpecsimError, match="floor"):
        acceptance_from_config({"model": "context_decay", "alpha0": 0.5,
                                "scale_tokens": 10.0, "floor": 0.6})


HARD = HardTokenAcceptance(alpha_easy=0.95, alpha_hard=0.2, p_easy_to_hard=0.1,
                           p_hard_to_hard=0.6)


def _run_bound(model, gamma, requests=3000, iterations=40, burn_in=8, seed=0):
    rng = np.random.default_rng(seed)
    bound = model.bind(requests, rng)
    kept = []
    for it in range(iterations):
        out = bound.sample_chain(np.full(requests, gamma), np.zeros(requests, int),
                                 np.arange(requests), rng)
        if it >= burn_in:
            kept.append(out)
    return bound, np.concatenate(kept)


def test_hard_token_monte_carlo_matches_its_closed_form():
    n = 100_000
    draws = HARD.sample_chain(np.full(n, 4), np.zeros(n, int), np.arange(n),
                              np.random.default_rng(5))
    assert _within(draws, HARD.expected_accepted(4))             # stationary start
    bound, draws = _run_bound(HARD, 4)
    # Consecutive iterations of one request are correlated; 6 standard errors of the
    # naive estimate leave room for that (the chain mixes within a few iterations).
    assert _within(draws, bound.expected_accepted(4), k=6.0)


@pytest.mark.parametrize("gamma, gap", [(4, 0.03), (8, 0.04)])
def test_hard_tokens_emit_fewer_tokens_than_the_formula_says(gamma, gap):
    # Exactly (closed form, long run): hard runs make accepted lengths over-dispersed, so
    # the formula fed with the model's own measured alpha overestimates tokens/iteration:
    #   gamma 4: 3.165 tokens vs E(0.790, 4) = 3.296  (-4.0 %)
    #   gamma 8: 4.066 tokens vs E(0.796, 8) = 4.278  (-5.0 %)
    # The i.i.d. model run through the same measurement has no gap (control below).
    bound, draws = _run_bound(HARD, gamma)
    rates = bound.position_rates(gamma)
    exact_tokens = 1 + rates.sum()
    exact_alpha = rates.sum() / (rates.sum() + 1 - rates[-1])    # accepted / tested drafts
    assert 1 - exact_tokens / _formula(exact_alpha, gamma) > gap
    measured = summarise_acceptance(draws, np.full(draws.size, gamma))
    formula = _formula(measured["tested_alpha"], gamma)
    tokens = measured["mean_acceptance_length"]
    se = draws.std() / np.sqrt(draws.size)
    assert formula - tokens > 5 * se, (tokens, formula)
    assert (formula - tokens) / formula > gap


def test_iid_measurement_control_has_no_gap():
    alpha, gamma = 0.8, 8
    model = acceptance_from_config({"model": "iid", "alpha": alpha})
    rates = model.position_rates(gamma)
    tested = rates.sum() / (rates.sum() + 1 - rates[-1])
    assert tested == pytest.approx(alpha)
    assert 1 + rates.sum() == pytest.approx(_formula(tested, gamma))


@pytest.mark.parametrize("temperature", [1.0, 0.5, 0.0])
def test_token_level_acceptance_matches_the_exact_walk(temperature):
    # Acceptance emerges from real speculative sampling (greedy at T = 0) on toy LMs; the
    # exact P(first k accepted) = sum over drafts of prod min(p, q) along the text.
    model = TokenLevelAcceptance(vocab_size=6, temperature=temperature, hard_fraction=0.2)
    n = 40_000
    draws = model.sample_chain(np.full(n, 4), np.zeros(n, int), np.arange(n),
                               np.random.default_rng(6))
    assert _within(draws, model.expected_accepted(4))
    rates = summarise_acceptance(draws, np.full(n, 4))["per_position_rates"]
    exact = model.position_rates(4)
    assert np.all(np.abs(rates - exact) <= 5 * np.sqrt(exact * (1 - exact) / n) + 1e-9)


def test_hard_token_config_errors():
    with pytest.raises(SpecsimError, match="p_hard_to_hard"):
        acceptance_from_config({"model": "hard_token", "alpha_easy": 0.9, "alpha_hard": 0.1,
                                "p_easy_to_hard": 0.1})
    with pytest.raises(SpecsimError, match="stationary"):
        HardTokenAcceptance(0.9, 0.1, 0.0, 1.0)
