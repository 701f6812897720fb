"""Acceptance against sampling temperature: greedy is the T -> 0 limit; shape sets direction."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.speculation.temperature import (
    acceptance_vs_temperature,
    greedy_acceptance,
    tempered_probs,
)


def test_greedy_is_the_zero_temperature_limit():
    rng = np.random.default_rng(0)
    p = rng.standard_normal((200, 12)) * 2
    q = p + rng.standard_normal((200, 12))
    greedy = greedy_acceptance(p, q)
    at_zero, near_zero = acceptance_vs_temperature(p, q, [0.0, 1e-3])
    assert np.array_equal(at_zero, greedy)
    # Away from ties the tempered overlap is within exp(-gap / T) of the greedy value.
    gap = np.minimum(*(np.sort(x, axis=-1)[:, -1] - np.sort(x, axis=-1)[:, -2] for x in (p, q)))
    clear = gap > 0.05
    assert np.max(np.abs(near_zero[clear] - greedy[clear])) < 1e-6


def test_infinite_temperature_makes_both_uniform():
    rng = np.random.default_rng(1)
    p, q = rng.standard_normal((2, 50, 8))
    assert acceptance_vs_temperature(p, q, [1e6])[0] == pytest.approx(np.ones(50), abs=1e-5)


def test_flat_disagreeing_distributions_gain_acceptance_with_temperature():
    # Lecture 000, section 2.6, case 1: no clear peak -> heating makes both closer to
    # uniform and the overlap grows; greedy (different argmax) accepts nothing.
    p = np.array([0.3, 0.2, 0.1, 0.0])
    q = np.array([0.0, 0.1, 0.2, 0.3])
    curve = acceptance_vs_temperature(p, q, [0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0])
    assert curve[0] == 0.0
    assert np.all(np.diff(curve) > 0)


def test_confident_peak_with_flatter_draft_loses_acceptance_with_temperature():
    # Case 2: one confident token plus a long tail, the draft less sure than the target:
    # the argmax agrees (greedy accepts), heating fattens the tails and the overlap falls.
    p = np.r_[5.0, np.zeros(19)]
    q = np.r_[2.5, np.zeros(19)]
    curve = acceptance_vs_temperature(p, q, [0.0, 0.25, 0.5, 0.75, 1.0])
    assert curve[0] == 1.0
    assert np.all(np.diff(curve) < 0)


def test_temperature_input_errors():
    with pytest.raises(SpecsimError, match="temperatures"):
        acceptance_vs_temperature([1.0, 0.0], [0.0, 1.0], [-1.0])
    with pytest.raises(SpecsimError, match="draft_logits"):
        acceptance_vs_temperature([1.0, 0.0], [0.0, 1.0, 2.0], [1.0])
    with pytest.raises(SpecsimError, match="logits"):
        tempered_probs([np.nan, 1.0], 1.0)
    assert tempered_probs([0.0, 3.0, 1.0], 0.0).tolist() == [0.0, 1.0, 0.0]
