"""The quantile sketch's stated bound, checked against exact quantiles of large samples, and
the exact sums it (and the recorder) rely on, checked against math.fsum.

The bound (simulator/engine/sketch.py): with relative accuracy a, the estimate of the order
statistic x_(r), r = floor(q (n - 1)) (0-based, the sketch's rank definition), is within
a * x_(r); the linearly interpolated estimate is within a * q_numpy of numpy's default
(linear) quantile.  Both up to the rounding of log at a bin edge, hence SLACK.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.engine.exact_sum import ExactSum, exact_sums
from simulator.engine.sketch import MIN_VALUE, QuantileSketch

SLACK = 1 + 1e-9
QUANTILES = np.array([0.0, 1e-4, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999,
                      0.9999, 1.0])


def _samples(kind: str, rng: np.random.Generator, n: int) -> np.ndarray:
    if kind == "lognormal":
        return rng.lognormal(-3.5, 0.6, n)
    if kind == "lognormal-wide":
        return rng.lognormal(-4.0, 2.5, n)
    if kind == "exponential":
        return rng.exponential(0.02, n)
    # a mixture like decode ITLs: a tight mode, a prefill-stall mode, a long tail, some zeros
    parts = [rng.normal(0.015, 0.001, n // 2).clip(1e-4), rng.lognormal(-2.0, 0.3, n // 4),
             rng.pareto(1.5, n // 4 - n // 100) * 0.05 + 0.05, np.zeros(n // 100)]
    return rng.permutation(np.concatenate(parts))


@pytest.mark.parametrize("a", [0.005, 0.02, 0.1])
@pytest.mark.parametrize("kind", ["lognormal", "lognormal-wide", "exponential", "mixture"])
def test_quantiles_within_the_stated_relative_error(kind, a):
    rng = np.random.default_rng([len(kind), int(a * 1000)])
    x = _samples(kind, rng, 400_000)
    sk = QuantileSketch(a)
    for chunk in np.array_split(x, 7):
        sk.add(chunk)
    s = np.sort(x)
    # the sketch's rank definition: the order statistic of rank floor(q (n - 1))
    exact_rank = s[np.floor(QUANTILES * (x.size - 1)).astype(np.int64)]
    err = np.abs(sk.rank_quantiles(QUANTILES) - exact_rank)
    assert (err <= a * exact_rank * SLACK + MIN_VALUE).all(), (err / exact_rank).max()
    # numpy's default (linear) quantile
    exact_linear = np.quantile(x, QUANTILES)
    err = np.abs(sk.quantiles(QUANTILES) - exact_linear)
    assert (err <= a * exact_linear * SLACK + MIN_VALUE).all()
    # the bound scales with a: a sketch ten times as accurate is within a / 10
    fine = QuantileSketch(a / 10)
    fine.add(x)
    mid = np.array([0.5, 0.99])
    assert (np.abs(fine.quantiles(mid) - np.quantile(x, mid))
            <= a / 10 * np.quantile(x, mid) * SLACK).all()
    # the extremes and the counts are exact
    assert sk.quantiles([0.0, 1.0]).tolist() == [x.min(), x.max()]
    assert (sk.count, sk.min, sk.max) == (x.size, x.min(), x.max())
    assert sk.mean == math.fsum(x) / x.size


def test_relative_error_is_attained_near_a_bin_edge():
    # every value equal to a bin's upper edge gamma**i: the estimate 2 gamma**i / (gamma + 1)
    # is off by exactly a relatively (clamping is defeated by a second, far value)
    a = 0.05
    sk = QuantileSketch(a)
    edge = sk.gamma ** 10
    sk.add(np.r_[np.full(99, edge), 1e3])
    est = sk.rank_quantiles([0.5])[0]
    assert abs(est - edge) / edge == pytest.approx(a, rel=1e-9)


def test_order_and_chunking_do_not_change_the_sketch():
    rng = np.random.default_rng(3)
    x = _samples("mixture", rng, 50_000)
    one, other = QuantileSketch(), QuantileSketch()
    one.add(x)
    for chunk in np.array_split(rng.permutation(x), 13):
        other.add(chunk)
    assert (one.offset, one.zero_count, one.count) == (other.offset, other.zero_count,
                                                       other.count)
    np.testing.assert_array_equal(one.counts, other.counts)
    assert one.total == other.total and one.min == other.min and one.max == other.max
    np.testing.assert_array_equal(one.quantiles(QUANTILES), other.quantiles(QUANTILES))


def test_merge_equals_adding_everything():
    rng = np.random.default_rng(4)
    x, y = rng.lognormal(-3, 1, 10_000), rng.lognormal(2, 1, 10_000)  # disjoint bin ranges
    both, left, right = QuantileSketch(), QuantileSketch(), QuantileSketch()
    both.add(np.r_[x, y])
    left.add(x)
    right.add(y)
    right.merge(left)
    np.testing.assert_array_equal(both.quantiles(QUANTILES), right.quantiles(QUANTILES))
    assert both.total == right.total and both.count == right.count
    with pytest.raises(ValueError):
        right.merge(QuantileSketch(0.1))


def test_zero_bin_constant_values_and_empty():
    sk = QuantileSketch()
    sk.add(np.zeros(10))
    sk.add(np.full(30, 0.25))
    # ranks 0..9 are the zeros (estimate 0); the rest are one value, clamped to it exactly
    assert sk.rank_quantiles([0.0, 0.2, 0.3, 1.0]).tolist() == [0.0, 0.0, 0.25, 0.25]
    lower, upper, counts = sk.bins()
    assert counts.tolist() == [10, 30] and lower[0] == 0.0 and upper[0] == MIN_VALUE
    assert lower[1] < 0.25 <= upper[1] and upper[1] / lower[1] == pytest.approx(sk.gamma)
    empty = QuantileSketch()
    assert np.isnan(empty.quantiles([0.5])).all() and np.isnan(empty.mean)
    with pytest.raises(ValueError):
        QuantileSketch(0.0)


def test_bins_hold_their_values():
    rng = np.random.default_rng(5)
    x = rng.lognormal(-3, 1.5, 20_000)
    sk = QuantileSketch(0.01)
    sk.add(x)
    lower, upper, counts = sk.bins()   # the non-empty bins, in order
    assert counts.sum() == x.size and (np.diff(lower) > 0).all()
    np.testing.assert_allclose(upper / lower, sk.gamma, rtol=1e-12)
    # every value lies in a non-empty bin, and the bins count them (a value within 1e-12 of
    # an edge could fall either side by log's rounding; these draws hit none)
    idx = np.searchsorted(upper, x, side="left")
    assert (lower[idx] < x).all() and (x <= upper[idx]).all()
    np.testing.assert_array_equal(np.bincount(idx, minlength=counts.size), counts)


def test_arrays_round_trip(tmp_path):
    rng = np.random.default_rng(6)
    sk = QuantileSketch(0.01)
    sk.add(np.r_[0.0, rng.exponential(0.1, 5_000)])
    np.savez(tmp_path / "s.npz", **sk.to_arrays())
    with np.load(tmp_path / "s.npz", allow_pickle=False) as arrays:
        back = QuantileSketch.from_arrays(arrays)
    np.testing.assert_array_equal(back.quantiles(QUANTILES), sk.quantiles(QUANTILES))
    assert (back.count, back.min, back.max, back.total, back.zero_count) == \
        (sk.count, sk.min, sk.max, sk.total, sk.zero_count)


# ------------------------------------------------------------------ exact sums
def test_exact_sums_are_correctly_rounded_whatever_the_blocking():
    rng = np.random.default_rng(7)
    x = rng.lognormal(0, 30, (100_000, 3))   # magnitudes from 1e-40 to 1e40: cancellation
    x[::3] *= -1
    x[5, 1], x[6, 2], x[7, 0] = 5e-324, 1e300, -2.5e-320   # subnormals and a huge value
    want = [math.fsum(x[:, c]) for c in range(3)]
    assert exact_sums(x).tolist() == want
    acc = ExactSum(3)
    for block in np.array_split(rng.permutation(x), 37):
        acc.add(block)
    assert acc.totals().tolist() == want
    halves = ExactSum(3), ExactSum(3)
    halves[0].add(x[:50_000])
    halves[1].add(x[50_000:])
    halves[0].merge(halves[1])
    assert halves[0].totals().tolist() == want


def test_exact_sums_of_special_values():
    assert exact_sums(np.array([1e308, 1e308])).tolist() == [np.inf]
    assert exact_sums(np.array([np.inf, 1.0])).tolist() == [np.inf]
    assert np.isnan(exact_sums(np.array([np.inf, -np.inf]))[0])
    assert exact_sums(np.zeros(0)).tolist() == [0.0]
    assert exact_sums(np.array([0.1, 0.2, -0.3])).tolist() == [math.fsum([0.1, 0.2, -0.3])]


def _state(sk: QuantileSketch):
    return (sk.offset, sk.counts.tolist(), sk.zero_count, sk.count, sk.min, sk.max, sk.total)


def test_counted_values_are_the_repeated_values():
    # the ITL gap every decode of an iteration shares comes as (gap, batch size): the sketch
    # and its exact total count it as the repeated samples would be counted, whatever the size
    rng = np.random.default_rng(21)
    for size, top in ((1, 1), (50, 300), (70_000, 4), (4, 1 << 20)):
        values = _values(rng, size)
        counts = rng.integers(1, top + 1, size)
        counted, repeated = QuantileSketch(), QuantileSketch()
        counted.add_counts(values, counts)
        repeated.add(np.repeat(values, counts))
        assert _state(counted) == _state(repeated)


def _values(rng, size: int) -> np.ndarray:
    values = np.where(rng.random(size) < 0.05, 0.0,
                      rng.lognormal(-3.0, 1.5, size) * 10.0 ** rng.integers(-3, 3, size))
    values[0] = 1e-13  # below MIN_VALUE: the zero bin
    return values


def test_exact_sum_of_counted_values_is_correctly_rounded():
    # counts up to 2**25 force add_counts' chunks down to a few rows (a mantissa half times
    # a count, summed over a chunk, must stay below 2**53); the reference is the exact
    # rational sum, rounded once
    from fractions import Fraction
    rng = np.random.default_rng(23)
    for size, top in ((3, 1), (500, 1 << 25), (200_000, 64)):
        values = _values(rng, size) * np.where(rng.random(size) < 0.5, -1.0, 1.0)
        counts = rng.integers(1, top + 1, size)
        total = ExactSum()
        total.add_counts(values, counts)
        exact = sum((Fraction(v) * int(c) for v, c in zip(values.tolist(), counts.tolist())),
                    Fraction(0))
        assert total.total() == float(exact)


def test_itl_samples_counted_match_repeated_below_and_past_the_cap():
    from simulator.engine.recorder import ItlSamples
    rng = np.random.default_rng(22)
    for cap in (10_000_000, 5_000):  # exact throughout; sketched part of the way
        counted, repeated = ItlSamples(cap), ItlSamples(cap)
        for _ in range(40):
            values, counts = rng.random(30) * 0.1, rng.integers(1, 64, 30)
            counted.extend_counts(values, counts)
            repeated.extend(np.repeat(values, counts))
        (a, sa), (b, sb) = counted.finish(), repeated.finish()
        assert np.array_equal(a, b)
        assert (sa is None) == (sb is None) == (cap > 1_000_000)
        if sa is not None:
            assert _state(sa) == _state(sb)
