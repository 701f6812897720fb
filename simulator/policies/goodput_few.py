"""Kit: the goodput search (adaptive_controllers.goodput_choice) on Python numbers, for a
few requests.

Why: the array search makes about 40 numpy calls whatever the batch size, and a third of
the batches it sees hold 1 to 3 requests (adaptive.yaml), where numpy's per-call cost is
most of its time; from about 5 requests on the Python loops cost more than the calls they
save (timed on the search's own inputs: the caller's ``FEW_REQUESTS``).  ``few_choice``
makes the same candidates, in the same order, with the same floats: the powers alpha^j by
the same numpy expression (one call: a libm ``pow`` and a SIMD one need not agree in the
last bit, so they are not recomputed in Python), every other value by the same IEEE
operations on Python floats (subtraction, division, comparison: correctly rounded in
both), each candidate's expected emissions summed as numpy sums a row (``numpy_sum``), and
the same comparison choosing among them.  Where a value could make the two differ (an
estimate at or below 0, or NaN) the caller takes the array search.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Callable

import numpy as np

_MIN = np.minimum.reduce
_SPREADS: dict[tuple[int, int], list[int]] = {}


def numpy_sum(values: list[float]) -> float:
    """``np.add.reduce`` of a C-contiguous float64 row holding ``values``, bitwise: left to
    right below 8 values; from 8 on numpy's pairwise sum (8 running sums, combined as a
    tree, the rest added one by one; halves past 128 values)."""
    n = len(values)
    if n < 8:
        total = -0.0  # numpy starts from -0.0 (a sum of -0.0 stays -0.0)
        for v in values:
            total += v
        return total
    if n > 128:
        half = n // 2
        half -= half % 8
        return numpy_sum(values[:half]) + numpy_sum(values[half:])
    r0, r1, r2, r3, r4, r5, r6, r7 = values[:8]
    end = n - n % 8
    for i in range(8, end, 8):
        r0 += values[i]
        r1 += values[i + 1]
        r2 += values[i + 2]
        r3 += values[i + 3]
        r4 += values[i + 4]
        r5 += values[i + 5]
        r6 += values[i + 6]
        r7 += values[i + 7]
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for i in range(end, n):
        total += values[i]
    return total


def few_choice(alpha: np.ndarray, cap: list[int], k_max: int, steps: np.ndarray,
               max_candidates: int, price: Callable[[np.ndarray], list]
               ) -> tuple[np.ndarray, int] | None:
    """``goodput_choice``'s (candidates, chosen index) for caps ``cap`` (each >= 0, the
    largest ``k_max`` > 0) and estimates ``alpha`` (an array; ``steps``: 1..k_max + 1),
    every candidate's seconds by ``price`` (a (C, n) int64 array -> C floats); None where
    an estimate is not above 0 (the array search decides those)."""
    a = np.minimum(np.maximum(alpha, 0.0), 1.0)  # as the array search clips
    if not _MIN(a) > 0.0:  # 0, or NaN: its powers' signs and orders are left to numpy
        return None
    powers = (a[:, None] ** steps).tolist()  # the array search's expression: its floats
    table = _emissions(a.tolist(), powers)
    levels = _levels(powers, cap, k_max, max_candidates)
    rows = {(0,) * len(cap): None}  # insertion order: the candidates' order, repeats out
    for u in range(1, k_max + 1):
        rows.setdefault(tuple([c if c < u else u for c in cap]), None)
    levels = [-t for t in levels]  # negated: bisected in ascending order
    for row in zip(*[_counts(p[:c], levels) for p, c in zip(powers, cap)]):
        rows.setdefault(row, None)
    ks = np.array(list(rows), np.int64)
    seconds = price(ks)
    # each candidate's expected emissions, table[i][k_i], summed as numpy sums its row
    gains = [numpy_sum([t[k] for t, k in zip(table, row)]) for row in rows]
    best_c, best = 0, float(len(cap)) / seconds[0]
    for c in range(1, len(seconds)):
        value = gains[c] / seconds[c]
        if value > best * (1 + 1e-12):
            best_c, best = c, value
    return ks, best_c


def _emissions(a: list[float], powers: list[list[float]]) -> list[list[float]]:
    """Per request, expected_emitted(alpha_i, g) for g = 0..k_max: (1 - alpha^(g+1)) /
    (1 - alpha), or g + 1 where alpha is 1 (the array search's table, entry by entry)."""
    out = []
    for ai, p in zip(a, powers):
        if ai >= 1.0:
            out.append([float(g) for g in range(1, len(p) + 1)])
        else:
            d = 1.0 - ai
            out.append([(1.0 - x) / d for x in p])
    return out


def _levels(powers: list[list[float]], cap: list[int], k_max: int,
            max_candidates: int) -> list[float]:
    """The thresholds: the distinct powers alpha_i^j (j <= cap_i), descending (positive:
    no signed zeros), spread over ``max_candidates`` as the array search spreads them."""
    values = set()
    for p, c in zip(powers, cap):
        values.update(p[:c])
    levels = sorted(values, reverse=True)
    if len(levels) > max_candidates:
        key = (len(levels), max_candidates)
        spread = _SPREADS.get(key)
        if spread is None:  # np.linspace's indices, rounded (a function of the two sizes)
            spread = _SPREADS[key] = np.linspace(
                0, len(levels) - 1, max_candidates).round().astype(int).tolist()
        levels = [levels[i] for i in spread]
    return levels


def _counts(powers: list[float], levels: list[float]) -> list[int]:
    """For each threshold (descending, negated in ``levels``), how many of ``powers`` are
    at or above it: the negated powers ascending, bisected (negation is exact)."""
    ordered = sorted([-p for p in powers])
    return [bisect_right(ordered, t) for t in levels]
