"""The Pareto frontier (simulator/planning/pareto.py) against hand-built point sets and an
exhaustive check of the dominance definition."""
import numpy as np
import pandas as pd
import pytest

from simulator.planning.pareto import (
    PER_GPU,
    PER_USER,
    best_at,
    frontier,
    frontier_mask,
    with_frontier,
)


def dominated_by_any(x, y) -> np.ndarray:
    """The definition, pair by pair: some other point at least as good on both axes and
    better on one."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ge = (x[None, :] >= x[:, None]) & (y[None, :] >= y[:, None])
    gt = (x[None, :] > x[:, None]) | (y[None, :] > y[:, None])
    return (ge & gt).any(axis=1)


def test_a_hand_built_set():
    # (1, 10), (2, 8), (3, 5) trade one axis for the other; (2, 7) is below (2, 8) and
    # (1, 9) below (1, 10); (0.5, 4) is below everything
    x = [1, 2, 3, 2, 1, 0.5]
    y = [10, 8, 5, 7, 9, 4]
    assert frontier_mask(x, y).tolist() == [True, True, True, False, False, False]


def test_ties():
    # equal points do not dominate each other: both on the frontier
    assert frontier_mask([1, 1], [5, 5]).tolist() == [True, True]
    # equal x: the lower y is dominated; equal y: the lower x is
    assert frontier_mask([1, 1], [5, 4]).tolist() == [True, False]
    assert frontier_mask([2, 1], [5, 5]).tolist() == [True, False]
    # a repeat of a dominated point stays dominated
    assert frontier_mask([3, 1, 1], [3, 2, 2]).tolist() == [True, False, False]


def test_nan_is_on_no_frontier_and_dominates_nothing():
    assert frontier_mask([np.nan, 1, 2], [100, 1, np.nan]).tolist() == [False, True, False]
    assert frontier_mask([], []).tolist() == []


@pytest.mark.parametrize("seed", range(5))
def test_the_mask_is_the_definition_on_random_grids(seed):
    """Integer coordinates on a small grid: many ties, every pair checked."""
    rng = np.random.default_rng(seed)
    x, y = rng.integers(0, 6, 60), rng.integers(0, 6, 60)
    assert (frontier_mask(x, y) == ~dominated_by_any(x, y)).all()


def _points():
    rng = np.random.default_rng(3)
    n = 40
    return pd.DataFrame({"series": rng.choice(["a", "b"], n), "candidate": "c",
                         PER_USER: rng.uniform(10, 100, n), PER_GPU: rng.uniform(10, 1000, n)})


def test_each_frontier_falls_as_per_user_speed_rises():
    front = frontier(_points())
    for _, g in front.groupby("series"):
        assert g[PER_USER].is_monotonic_increasing
        assert (np.diff(g[PER_GPU].to_numpy()) < 0).all()  # continuous draws: no repeats


def test_series_frontiers_and_the_overall_one():
    pts = with_frontier(_points())
    for _, g in pts.groupby("series"):
        assert (g["on_frontier"] == ~dominated_by_any(g[PER_USER], g[PER_GPU])).all()
    assert (pts["on_overall_frontier"] == ~dominated_by_any(pts[PER_USER], pts[PER_GPU])).all()
    # a point on the overall frontier is on its own series' frontier
    assert (pts["on_frontier"] | ~pts["on_overall_frontier"]).all()


def test_best_at_a_speed():
    pts = pd.DataFrame({"series": ["a", "a", "a", "b"], PER_USER: [10, 20, 30, 5],
                        PER_GPU: [300, 200, 100, 999]})
    got = best_at(pts, 15)
    assert got[["series", PER_GPU]].values.tolist() == [["a", 200]]  # b has nothing that fast
    assert best_at(pts, 50).empty
