"""The goodput search on Python numbers (simulator/policies/goodput_few.py, issue 36): its
row sums are numpy's bit for bit, and it chooses among the same candidates, in the same
order, what the array search chooses."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.policies import adaptive_controllers
from simulator.policies.adaptive_controllers import goodput_choice
from simulator.policies.goodput_few import few_choice, numpy_sum


def test_numpy_sum_is_numpy_s_row_sum():
    """Left to right below 8 values, pairwise from 8 on, halved past 128: every length up
    to 300, values of mixed magnitudes (where the order of the additions shows), as 1-D
    arrays and as the rows of a (C, n) matrix (how the search sums its candidates)."""
    rng = np.random.default_rng(7)
    differs = 0
    for n in range(1, 301):
        x = rng.random(n) * 10.0 ** rng.uniform(-8, 8, n)
        assert numpy_sum(x.tolist()) == np.add.reduce(x)
        rows = rng.random((3, n)) * 10.0 ** rng.uniform(-8, 8, (3, n))
        assert [numpy_sum(r) for r in rows.tolist()] == np.add.reduce(rows, axis=1).tolist()
        differs += numpy_sum(x.tolist()) != sum(x.tolist())  # the order matters here
    assert differs > 50


def _array_choice(alpha, cap, price, monkeypatch):
    monkeypatch.setattr(adaptive_controllers, "FEW_REQUESTS", -1)
    return goodput_choice(alpha, cap, step_times=price)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 40])
def test_few_choice_is_the_array_search(n, monkeypatch):
    """Estimates anywhere in (0, 1] (1: every draft accepted), caps of 0 to 6 per request
    or one cap for all, under a price growing with the drafted tokens and the longest
    chain (a draft model's loop) and under a flat one (every candidate ties)."""
    rng = np.random.default_rng(n)
    for _ in range(30):
        alpha = rng.choice([rng.uniform(0.01, 1.0, n), np.full(n, 0.75), np.ones(n),
                            np.round(rng.uniform(0.1, 1.0, n), 1)])
        cap = rng.integers(0, 7, n) if rng.random() < 0.6 else np.full(n, rng.integers(1, 7))
        if not cap.any():
            continue
        for price in (lambda ks: 1.0 + 0.01 * ks.sum(axis=1) + 0.1 * ks.max(axis=1),
                      lambda ks: np.ones(ks.shape[0])):
            want_ks, want = _array_choice(alpha, cap, price, monkeypatch)
            steps = np.arange(1, int(cap.max()) + 2)
            ks, best = few_choice(alpha, cap.tolist(), int(cap.max()), steps, 12,
                                  lambda k: price(k).tolist())
            assert ks.tolist() == want_ks.tolist() and best == want


def test_estimates_at_zero_are_left_to_the_array_search():
    """An estimate of 0 (or NaN) has powers whose order the Python path does not decide."""
    price = lambda ks: np.ones(ks.shape[0]).tolist()  # noqa: E731
    for alpha in ([0.0, 0.5], [np.nan, 0.5]):
        assert few_choice(np.array(alpha), [3, 3], 3, np.arange(1, 5), 12, price) is None
    assert few_choice(np.array([0.2, 0.5]), [3, 3], 3, np.arange(1, 5), 12, price) is not None
