"""Closed forms of speculative decoding (Leviathan et al. 2023; lecture notes 000 and 003).

Conventions.  The project's ``c`` is Leviathan's: ``c = draft step time / target step time``
(lecture 000, section 2.5).  Lecture 003 writes ``c`` for the inverse ratio ``T_p / T_q``;
functions taking that convention say so in their name (``..._target_over_draft``) and convert
at the boundary: ``c_003 = 1 / c``.  ``gamma`` is the number of drafted tokens per iteration
(vLLM's ``num_speculative_tokens``); ``alpha`` the i.i.d. per-token acceptance rate.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from simulator.inputs.errors import SpecsimError


def _check_alpha(alpha: float) -> float:
    if not (isinstance(alpha, (int, float)) and 0.0 <= alpha <= 1.0):
        raise SpecsimError(f"must be in [0, 1], got {alpha!r}", field="alpha")
    return float(alpha)


def _check_gamma(gamma: int) -> int:
    if isinstance(gamma, bool) or int(gamma) != gamma or gamma < 0:
        raise SpecsimError(f"must be a whole number >= 0, got {gamma!r}", field="gamma")
    return int(gamma)


def _check_c(c: float, field: str = "c") -> float:
    if not (isinstance(c, (int, float)) and math.isfinite(c) and c >= 0):
        raise SpecsimError(f"must be a finite number >= 0, got {c!r}", field=field)
    return float(c)


def expected_tokens(alpha: float, gamma: int) -> float:
    """Expected tokens emitted per iteration, E = (1 - alpha^(gamma+1)) / (1 - alpha).

    Leviathan et al., Eq. (1); the bonus/correction token is included, so E >= 1.
    """
    alpha, gamma = _check_alpha(alpha), _check_gamma(gamma)
    if alpha == 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def expected_tokens_per_position(rates: Sequence[float]) -> float:
    """E = 1 + sum_i prod_{j<=i} alpha_j for per-position conditional rates alpha_1..alpha_gamma."""
    arr = np.asarray(rates, dtype=float)
    if arr.ndim != 1 or np.any(~np.isfinite(arr)) or np.any((arr < 0) | (arr > 1)):
        raise SpecsimError("must be a list of numbers in [0, 1]", field="rates")
    return float(1.0 + np.cumprod(arr).sum())


def speedup(alpha: float, gamma: int, c: float) -> float:
    """Wall-time speedup E / (gamma * c + 1) (Leviathan et al., Theorem 3.8); c = draft/target."""
    c = _check_c(c)
    return expected_tokens(alpha, gamma) / (gamma * c + 1.0)


def compute_cost_factor(alpha: float, gamma: int, c_hat: float) -> float:
    """Arithmetic-operations factor (1-alpha)(gamma*c_hat + gamma + 1)/(1 - alpha^(gamma+1)).

    Leviathan et al., Theorem 3.11; ``c_hat`` is the draft/target ratio of FLOPs per token.
    """
    c_hat = _check_c(c_hat, "c_hat")
    return (gamma * c_hat + gamma + 1.0) / expected_tokens(alpha, gamma)


def optimal_gamma(alpha: float, c: float, max_gamma: int = 64) -> tuple[int, float]:
    """Best integer gamma in 1..max_gamma by exhaustive search, and its speedup."""
    _check_alpha(alpha)
    _check_c(c)
    max_gamma = _check_gamma(max_gamma)
    if max_gamma < 1:
        raise SpecsimError("must be at least 1", field="max_gamma")
    gammas = np.arange(1, max_gamma + 1)
    values = speedup_curve(alpha, c, gammas)
    best = int(np.argmax(values))
    return int(gammas[best]), float(values[best])


def speedup_curve(alpha: float, c: float, gammas: Sequence[int]) -> np.ndarray:
    """Speedup for each gamma in ``gammas`` (vectorised Theorem 3.8)."""
    alpha, c = _check_alpha(alpha), _check_c(c)
    g = np.asarray(gammas, dtype=float)
    if np.any(g < 0):
        raise SpecsimError("gammas must be >= 0", field="gamma")
    e = g + 1.0 if alpha == 1.0 else (1.0 - alpha ** (g + 1.0)) / (1.0 - alpha)
    return e / (g * c + 1.0)


def stationary_gamma(alpha: float, c: float) -> float:
    """Continuous K* solving alpha^(K+1) [1 + (1/c + K) ln(1/alpha)] = 1 (lecture 003, 7.1).

    The lecture writes the equation with its own c (= target/draft = 1/c here); we take the
    project's c and convert.  Solved by bisection; the objective is unimodal.  Returns 0 when
    speculation does not pay at all (alpha <= c), inf when alpha == 1 or c == 0 with alpha==1.
    """
    alpha, c = _check_alpha(alpha), _check_c(c)
    if alpha in (0.0, 1.0) or c == 0.0:
        return math.inf if (alpha == 1.0 or (c == 0.0 and alpha > 0)) else 0.0
    c_inv = 1.0 / c
    log_inv = math.log(1.0 / alpha)

    def g(k: float) -> float:  # positive while f(K) still rises
        return alpha ** (k + 1.0) * (1.0 + (c_inv + k) * log_inv) - 1.0

    lo, hi = 0.0, 1.0
    if g(lo) <= 0:
        return 0.0
    while g(hi) > 0:
        hi *= 2.0
        if hi > 1e6:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if g(mid) > 0 else (lo, mid)
    return 0.5 * (lo + hi)


def speedup_target_over_draft(alpha: float, gamma: int, c_target_over_draft: float) -> float:
    """Speedup in lecture 003's convention, c' = T_p / T_q: E * c' / (c' + gamma)."""
    c_inv = _check_c(c_target_over_draft, "c_target_over_draft")
    if c_inv == 0:
        raise SpecsimError("must be > 0", field="c_target_over_draft")
    return speedup(alpha, gamma, 1.0 / c_inv)


def optimal_gamma_target_over_draft(alpha: float, c_target_over_draft: float,
                                    max_gamma: int = 64) -> tuple[int, float]:
    """Optimal integer gamma with lecture 003's c' = T_p / T_q (its section 7.3 table)."""
    c_inv = _check_c(c_target_over_draft, "c_target_over_draft")
    if c_inv == 0:
        raise SpecsimError("must be > 0", field="c_target_over_draft")
    return optimal_gamma(alpha, 1.0 / c_inv, max_gamma)


def tree_expected_accepted(parents: Sequence[int], node_accept_prob: Sequence[float]) -> float:
    """Expected accepted path length of a token tree, bonus excluded.

    ``parents[i]`` is node i's parent (-1 for children of the root; nodes in topological order)
    and ``node_accept_prob[i]`` the probability that node i is accepted given that its parent
    was reached.  Siblings are mutually exclusive (at most one child is accepted), so the
    expected depth reached is the sum over nodes of P(node on the accepted path) = product of
    the conditional probabilities along its root path.
    """
    parents = list(parents)
    probs = np.asarray(node_accept_prob, dtype=float)
    if len(parents) != len(probs):
        raise SpecsimError("parents and node_accept_prob differ in length", field="parents")
    if np.any(~np.isfinite(probs)) or np.any((probs < 0) | (probs > 1)):
        raise SpecsimError("probabilities must be in [0, 1]", field="node_accept_prob")
    reach = np.zeros(len(parents))
    child_mass: dict[int, float] = {}
    for i, parent in enumerate(parents):
        if parent >= i or parent < -1:
            raise SpecsimError(f"node {i} has parent {parent}; nodes must follow their parent",
                               field="parents")
        child_mass[parent] = child_mass.get(parent, 0.0) + probs[i]
        reach[i] = probs[i] * (1.0 if parent == -1 else reach[parent])
    for parent, mass in child_mass.items():
        if mass > 1.0 + 1e-9:
            raise SpecsimError(f"children of node {parent} have total acceptance {mass:.3f} > 1",
                               field="node_accept_prob")
    return float(reach.sum())
