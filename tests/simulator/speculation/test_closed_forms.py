"""Closed forms against the published tables (Leviathan et al. 2023; lecture 003, sec. 7.3)."""
import math

import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.speculation.closed_forms import (
    compute_cost_factor,
    expected_tokens,
    expected_tokens_per_position,
    optimal_gamma,
    optimal_gamma_target_over_draft,
    speedup,
    speedup_curve,
    speedup_target_over_draft,
    stationary_gamma,
    tree_expected_accepted,
)

# Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding",
# ICML 2023, Table 1 (c = c_hat = 0): alpha, gamma, operations factor, speed factor.
LEVIATHAN_TABLE_1 = [
    (0.6, 2, 1.53, 1.96),
    (0.7, 3, 1.58, 2.53),
    (0.8, 2, 1.23, 2.44),
    (0.8, 5, 1.63, 3.69),
    (0.9, 2, 1.11, 2.71),
    (0.9, 10, 1.60, 6.86),
]


@pytest.mark.parametrize("alpha,gamma,ops,speed", LEVIATHAN_TABLE_1)
def test_leviathan_table_1(alpha, gamma, ops, speed):
    assert round(compute_cost_factor(alpha, gamma, 0.0), 2) == ops
    assert round(speedup(alpha, gamma, 0.0), 2) == speed


# Lecture 003 section 7.3: exact integer K* over 1..64 with c' = T_p / T_q (the inverse of
# the project's c), with speedup(K*), speedup(K*-2) (K=1 when K*-2 < 1) and speedup(K*+2).
K_STAR_TABLE = [
    (0.6, 5, 2, 1.40, 1.33, 1.28),
    (0.6, 10, 3, 1.67, 1.45, 1.59),
    (0.7, 10, 4, 1.98, 1.82, 1.91),
    (0.8, 10, 6, 2.47, 2.40, 2.40),
    (0.8, 20, 8, 3.09, 3.04, 3.05),
    (0.9, 10, 10, 3.43, 3.40, 3.39),
    (0.9, 20, 13, 4.67, 4.63, 4.66),
    (0.95, 20, 21, 6.60, 6.58, 6.59),
]


@pytest.mark.parametrize("alpha,c_inv,k_star,s_best,s_minus,s_plus", K_STAR_TABLE)
def test_k_star_table(alpha, c_inv, k_star, s_best, s_minus, s_plus):
    k, s = optimal_gamma_target_over_draft(alpha, c_inv, max_gamma=64)
    assert k == k_star
    assert round(s, 2) == s_best
    assert round(speedup_target_over_draft(alpha, max(k - 2, 1), c_inv), 2) == s_minus
    assert round(speedup_target_over_draft(alpha, k + 2, c_inv), 2) == s_plus
    # the continuous stationary point (lecture 003 eq. 7.1) lies within one of the integer K*
    assert abs(stationary_gamma(alpha, 1.0 / c_inv) - k_star) < 1.0


def test_lecture_000_optimal_gamma_trend():
    # lecture 000 sec. 2.5: alpha = 0.8, c from 0.01 to 0.1 moves gamma* from 14 to 6 and the
    # speedup from 4.2x to 2.5x.
    assert optimal_gamma(0.8, 0.01)[0] == 14
    assert round(optimal_gamma(0.8, 0.01)[1], 1) == 4.2
    assert optimal_gamma(0.8, 0.1)[0] == 6
    assert round(optimal_gamma(0.8, 0.1)[1], 1) == 2.5


def test_worked_example_lecture_003_sec9():
    # E[N] = (1 - 0.8^4) / 0.2 = 2.952; with c' = 10 the speedup is 2.27x; exercise 2: 2.15x
    assert expected_tokens(0.8, 3) == pytest.approx(2.952, abs=1e-12)
    assert round(speedup_target_over_draft(0.8, 3, 10), 2) == 2.27
    assert round(speedup_target_over_draft(0.8, 3, 8), 2) == 2.15


def test_corollary_3_9_gamma_one():
    # Leviathan Corollary 3.9: with gamma = 1 the speedup is (1 + alpha) / (1 + c)
    for alpha, c in [(0.5, 0.1), (0.8, 0.05), (0.3, 0.2)]:
        assert speedup(alpha, 1, c) == pytest.approx((1 + alpha) / (1 + c))


def test_expected_tokens_limits_and_bound():
    assert expected_tokens(0.0, 7) == 1.0
    assert expected_tokens(1.0, 7) == 8.0
    # bounded by 1 / (1 - alpha) (lecture 000 sec. 2.5)
    assert expected_tokens(0.8, 1000) == pytest.approx(5.0)
    assert np.all(np.diff([expected_tokens(0.7, g) for g in range(20)]) > 0)


def test_per_position_generalisation_reduces_to_iid():
    rates = [0.8] * 5
    assert expected_tokens_per_position(rates) == pytest.approx(expected_tokens(0.8, 5))
    assert expected_tokens_per_position([0.9, 0.5, 0.0, 1.0]) == pytest.approx(1 + 0.9 + 0.45)


def test_tree_expected_accepted_chain_and_star():
    # a chain of 4 nodes each accepted w.p. alpha: sum_i alpha^i = E - 1
    chain = tree_expected_accepted([-1, 0, 1, 2], [0.8] * 4)
    assert chain == pytest.approx(expected_tokens(0.8, 4) - 1)
    # two root children with exclusive acceptance 0.5 and 0.3: expected depth 0.8
    assert tree_expected_accepted([-1, -1], [0.5, 0.3]) == pytest.approx(0.8)
    with pytest.raises(SpecsimError):
        tree_expected_accepted([-1, -1], [0.7, 0.6])  # siblings cannot both be accepted
    with pytest.raises(SpecsimError):
        tree_expected_accepted([0], [0.5])  # a node before its parent


def test_speedup_curve_matches_scalar_and_bad_input():
    curve = speedup_curve(0.75, 0.05, range(10))
    assert curve == pytest.approx([speedup(0.75, g, 0.05) for g in range(10)])
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(SpecsimError, match="alpha"):
            expected_tokens(bad, 3)
    with pytest.raises(SpecsimError, match="gamma"):
        expected_tokens(0.5, -1)
    with pytest.raises(SpecsimError, match="c"):
        speedup(0.5, 2, -1.0)
    assert math.isinf(stationary_gamma(1.0, 0.1))
    assert stationary_gamma(0.1, 0.5) == 0.0  # alpha < c: speculation never pays
