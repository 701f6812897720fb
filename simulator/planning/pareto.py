"""The Pareto frontier of output tokens/s per GPU against output tokens/s per user.

These are the axes InferenceX and NVIDIA's AIConfigurator draw: per GPU is the deployment's
output throughput over its GPUs (what a token costs), per user is 1 / mean TPOT (how fast a
user reads).  A point dominates another when it is at least as good on both axes and better
on one; the frontier is the points nothing dominates.  Pure functions of a table: the search
that makes the points is simulator/planning/pareto_search.py.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

PER_GPU = "output_tok/s/gpu"
PER_USER = "output_tok/s/user"


def frontier_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """True where the point (x[i], y[i]) is not dominated by any other (both maximised).

    Equal points do not dominate one another: a point repeated on the frontier is on it each
    time.  A point with a NaN coordinate is on no frontier and dominates nothing."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    out = np.zeros(x.size, bool)
    ok = np.flatnonzero(np.isfinite(x) & np.isfinite(y))
    # best x first, and at equal x best y first: a point is undominated when its y beats
    # every y before it, or when it repeats the last undominated point exactly
    order = ok[np.lexsort((-y[ok], -x[ok]))]
    best_y, last = -math.inf, None
    for i in order.tolist():
        if y[i] > best_y:
            out[i], best_y, last = True, y[i], (x[i], y[i])
        elif (x[i], y[i]) == last:
            out[i] = True
    return out


def with_frontier(points: pd.DataFrame, by: str = "series") -> pd.DataFrame:
    """``points`` with ``on_frontier`` (undominated within its ``by`` group) and
    ``on_overall_frontier`` (undominated among every point)."""
    out = points.copy()
    out["on_frontier"] = False
    for _, group in out.groupby(by, sort=False):
        mask = frontier_mask(group[PER_USER].to_numpy(), group[PER_GPU].to_numpy())
        out.loc[group.index, "on_frontier"] = mask
    out["on_overall_frontier"] = frontier_mask(out[PER_USER].to_numpy(),
                                               out[PER_GPU].to_numpy())
    return out


def frontier(points: pd.DataFrame, by: str = "series") -> pd.DataFrame:
    """The frontier points of each group, by per-user speed ascending (per-GPU throughput
    then falls along each group: the curve the charts draw)."""
    marked = with_frontier(points, by) if "on_frontier" not in points else points
    front = marked[marked["on_frontier"]]
    return front.sort_values([by, PER_USER, PER_GPU], ascending=[True, True, False],
                             kind="stable").reset_index(drop=True)


def best_at(points: pd.DataFrame, min_per_user: float, by: str = "series") -> pd.DataFrame:
    """Each group's highest per-GPU throughput among the points at least ``min_per_user``
    tokens/s per user (a group with none is left out): the reading of the chart at a speed."""
    fast = points[points[PER_USER] >= min_per_user]
    if fast.empty:
        return fast
    picks = fast.groupby(by, sort=False)[PER_GPU].idxmax()
    return points.loc[picks.to_numpy()].reset_index(drop=True)
