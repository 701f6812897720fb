"""The recorder's inter-token latencies (``ItlSamples``): exact up to the cap and sketched
beyond, shared gaps kept as (gap, count) pairs, and the exact samples sorted whichever way
the singles and pairs are joined."""
from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.engine.recorder import Recorder


def test_itl_exact_up_to_the_cap_then_sketched():
    rng = np.random.default_rng(6)
    x = rng.lognormal(-3.5, 0.8, 5000)
    small = Recorder(itl_exact_cap=5000)
    big = Recorder(itl_exact_cap=4999)
    for chunk in np.array_split(x, 100):
        small.record_itl(chunk)
        big.record_itl(chunk)
    exact, none = small.itl_samples()
    assert none is None
    np.testing.assert_array_equal(exact, np.sort(x))
    empty, sketch = big.itl_samples()
    assert empty.size == 0 and sketch.count == 5000
    assert (sketch.min, sketch.max, sketch.total) == (x.min(), x.max(), math.fsum(x))
    q = np.array([0.5, 0.9, 0.99])
    err = np.abs(sketch.quantiles(q) - np.quantile(x, q))
    assert (err <= sketch.relative_accuracy * np.quantile(x, q) * (1 + 1e-9)).all()


def _itl_calls(per_request: bool):
    """3000 recorder calls: (values, times, per-request gaps?) as an engine makes them."""
    rng = np.random.default_rng(8)
    calls = []
    for i in range(3000):
        times, single = int(rng.integers(1, 40)), False
        if i % 3 == 0:  # a stretch: several gaps, each shared by the batch
            values = rng.lognormal(-3.5, 0.8, int(rng.integers(1, 20)))
        elif i % 3 == 1 or not per_request:  # one iteration: one gap shared by the batch
            values = float(rng.lognormal(-3.5, 0.8))
        else:  # per-request gaps
            values, times = rng.lognormal(-3.5, 0.8, int(rng.integers(1, 30))), 1
            single = True
        calls.append((values, times, single))
    return calls


@pytest.mark.parametrize("per_request", [True, False])  # shared gaps only: kept as pairs alone
@pytest.mark.parametrize("cap", ["above", "equal", "one_below", 20_000])  # of the sample count
def test_repeated_itl_samples_are_those_samples_repeated(cap, per_request):
    """``record_itl_repeated`` (a batch's shared gap, or a stretch's gaps, times its size),
    with or without ordinary samples, past the sketch's chunk and at the cap's edge: the same
    exact samples, or the same sketch, as recording every sample one by one."""
    calls = _itl_calls(per_request)
    every = np.concatenate([np.repeat(np.atleast_1d(v), t) for v, t, _ in calls])
    cap = {"above": every.size + 1, "equal": every.size,
           "one_below": every.size - 1}.get(cap, cap)
    runs, plain = Recorder(itl_exact_cap=cap), Recorder(itl_exact_cap=cap)
    for values, times, single in calls:
        if single:
            runs.record_itl(values)
        else:
            runs.record_itl_repeated(values, times)
        plain.record_itl(np.repeat(np.atleast_1d(values), times))
    assert runs.itl.count == plain.itl.count == every.size > 65536
    (a, sketch_a), (b, sketch_b) = runs.itl_samples(), plain.itl_samples()
    np.testing.assert_array_equal(a, b)
    if cap >= every.size:
        np.testing.assert_array_equal(a, np.sort(every))
        assert sketch_a is None and sketch_b is None
    else:
        assert a.size == 0
        np.testing.assert_array_equal(sketch_a.counts, sketch_b.counts)
        assert (sketch_a.count, sketch_a.zero_count, sketch_a.offset) == \
            (sketch_b.count, sketch_b.zero_count, sketch_b.offset) == \
            (every.size, 0, sketch_b.offset)
        assert (sketch_a.min, sketch_a.max, sketch_a.total) == \
            (every.min(), every.max(), math.fsum(every))


@pytest.mark.parametrize("singles", [3, 5000])  # fewer singles than pairs, and more
def test_sorted_itl_samples_with_singles_and_pairs_either_way_round(singles):
    """The exact samples come sorted whichever way ``_sorted`` goes: singles joined to the
    pairs (fewer singles than pairs) or everything sorted at once (more); values shared
    between singles and pairs included."""
    rng = np.random.default_rng(9)
    shared = np.round(rng.lognormal(-3.5, 0.8, 400), 4)  # rounded: some values repeat
    times = rng.integers(1, 50, shared.size)
    alone = np.concatenate((shared[:2], np.round(rng.lognormal(-3.5, 0.8, singles - 2), 4)))
    rec = Recorder()
    for v, t in zip(shared.tolist(), times.tolist()):
        rec.record_itl_repeated(v, t)
    for chunk in np.array_split(alone, 3):
        rec.record_itl(chunk)
    itl = rec.itl
    itl._store_runs()
    itl._store_parts()
    assert (itl._exact.size > itl._pair_values.size) == (singles > shared.size)
    got, sketch = rec.itl_samples()
    assert sketch is None
    np.testing.assert_array_equal(got, np.sort(np.concatenate((np.repeat(shared, times), alone))))


def test_shared_gaps_are_kept_once_with_their_count():
    """``record_itl_shared``: gaps all equal (a batch that last emitted together) are one
    value and its count, others one by one; the samples are those of ``record_itl``."""
    gaps = [np.full(7, 0.25), np.array([0.1, 0.2, 0.1]), np.array([0.3]), np.full(5, 0.5),
            np.array([0.25, 0.25 + 2**-50])]
    shared, plain = Recorder(), Recorder()
    for g in gaps:
        shared.record_itl_shared(g)
        plain.record_itl(g)
    assert shared.itl._in_runs == 12 and shared.itl._in_parts == 6  # 7 + 5 as two pairs
    assert shared.itl.count == plain.itl.count == 18
    (a, _), (b, _) = shared.itl_samples(), plain.itl_samples()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, np.sort(np.concatenate(gaps)))
