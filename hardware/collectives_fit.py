"""Fitting collectives' pieces to measured times (numpy only), for :mod:`hardware.collectives`.

:func:`fit_pieces` fits one world's time as a continuous, non-decreasing piecewise-linear
function of the message size with at most ``max_pieces`` pieces, each written as
``latency + bytes * factor / busbw``: a free intercept and one non-negative slope per piece
(hinge basis, so the pieces join by construction), fitted by least relative absolute error
(iteratively reweighted least squares; each weighted solve is an exact non-negative least
squares over the few slopes).  The joints are chosen from a log-spaced grid of whole KiB,
every piece holding at least ``min_points`` measured sizes, to minimise the mean relative
error; a fit whose later pieces would need a negative latency is refused.

:func:`fit_collectives` reads a Vidur network folder (``all_reduce.csv``, ``send_recv.csv``:
``time_stats.<op>.median`` in ms by ``num_workers``, ``size`` in bytes, ``devices_per_node``),
keeps the packed placement (``devices_per_node = min(num_workers, max_devices_per_node)``: a
tensor-parallel group fills a node before it spans two), takes the median over rows of the
per-row medians for each (world, size), and fits each world.
"""
from __future__ import annotations

import csv
import functools
import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np

from simulator.inputs.csv_rows import check_csv_rows
from simulator.inputs.errors import SpecsimError

KIB = 1024
# rows of one collectives CSV, counted before it is read: Vidur's largest (a100_dgx
# all_reduce.csv) has 6,958
MAX_COLLECTIVE_ROWS = 200_000


def _design(s: np.ndarray, knots: tuple[float, ...]) -> np.ndarray:
    edges = (0.0, *knots, math.inf)
    cols = [np.ones_like(s)] + [np.clip(s - lo, 0.0, hi - lo)
                                for lo, hi in zip(edges[:-1], edges[1:])]
    return np.stack(cols, axis=1)


def _nnls(gram: np.ndarray, rhs: np.ndarray) -> np.ndarray | None:
    """min |A x - b|^2 with x >= 0, from A'A and A'b.  The unconstrained solve when it is
    feasible, else the best feasible solve over the supports (exact for the few columns
    here: the optimum is the plain solve on its own support); the intercept is always in."""
    n = len(rhs)
    best, best_x = math.inf, None
    for use in _supports(n):
        sub = gram[np.ix_(use, use)]
        try:
            xs = np.linalg.solve(sub, rhs[use])
        except np.linalg.LinAlgError:
            continue
        if xs.min() < 0:
            continue
        if len(use) == n:
            best_x = xs
            break
        loss = -2.0 * xs @ rhs[use] + xs @ sub @ xs
        if loss < best:
            best, best_x = loss, np.zeros(n)
            best_x[use] = xs
    return best_x


@functools.lru_cache(maxsize=None)
def _supports(n: int) -> tuple[list[int], ...]:
    """Column subsets holding the intercept, the full set first."""
    subsets = [[0] + [i + 1 for i, m in enumerate(mask) if m]
               for mask in itertools.product((True, False), repeat=n - 1)]
    return tuple(subsets)


def _relative_l1(a: np.ndarray, t: np.ndarray, iters: int = 10) -> np.ndarray | None:
    w = 1.0 / t
    x = None
    for _ in range(iters):
        aw, tw = a * w[:, None], t * w
        nxt = _nnls(aw.T @ aw, aw.T @ tw)
        if nxt is None:
            break
        if x is not None and np.allclose(nxt, x, rtol=1e-6, atol=0.0):
            return nxt
        x = nxt
        rel = np.abs(a @ x - t) / t
        w = 1.0 / (t * np.sqrt(np.maximum(rel, 1e-3)))
    return x


def _latencies(x: np.ndarray, knots: tuple[float, ...]) -> list[float]:
    """Each piece's latency (intercept at zero bytes) of the hinge fit ``x``."""
    lats, value, start = [x[0]], x[0], 0.0
    for k, slope, nxt in zip(knots, x[1:], x[2:]):
        value += slope * (k - start)
        start = k
        lats.append(value - nxt * k)
    return lats


def _rounded(knots: tuple[float, ...], x: np.ndarray, factor: float) -> list[dict]:
    """The fit as YAML pieces: bandwidths to 4 digits, and each later latency re-derived from
    the rounded numbers so that the written pieces join (to the 0.001 us written)."""
    pieces: list[dict] = []
    lat, inv_before = float(x[0]) * 1e6, 0.0          # us, and 1 / busbw of the piece before
    for start, slope in zip((0.0, *knots), x[1:]):
        bw = float(f"{factor / slope / 1e9:.4g}") if slope > 0 else math.inf
        lat += start * factor * (inv_before - 1.0 / bw) / 1e3   # bytes / (GB/s) = 1e-3 us
        piece = {"from_kib": int(start // KIB), "latency_us": round(lat, 3)}
        if slope > 0:
            piece["busbw_gb_per_s"] = bw
        pieces.append(piece)
        inv_before = 1.0 / bw
    return pieces


def _candidates(s: np.ndarray, grid: int, min_points: int) -> list[float]:
    lo, hi = s[min_points - 1], s[len(s) - min_points]
    if hi <= lo:
        return []
    raw = np.exp(np.linspace(math.log(lo), math.log(hi), grid))
    return sorted({float(KIB * max(1, round(k / KIB))) for k in raw})


def fit_pieces(nbytes: Any, seconds: Any, factor: float, *, max_pieces: int = 3,
               min_points: int = 8, grid: int = 24) -> tuple[list[dict], dict]:
    """Pieces (the profile YAML's form) fitted to measured times, and the fit's errors."""
    order = np.argsort(np.asarray(nbytes, float))
    s = np.asarray(nbytes, float)[order]
    t = np.asarray(seconds, float)[order]
    if len(s) < 2 * min_points or np.any(t <= 0):
        raise SpecsimError(f"{len(s)} measured sizes cannot be fitted (need at least "
                           f"{2 * min_points}, all times > 0)", field="nbytes",
                           fix="measure more message sizes")
    cands = _candidates(s, grid, min_points)
    best = (math.inf, (), None)
    for n_knots in range(max_pieces):
        for knots in itertools.combinations(cands, n_knots):
            edges = (0.0, *knots, math.inf)
            if any(np.count_nonzero((s >= lo) & (s < hi)) < min_points
                   for lo, hi in zip(edges[:-1], edges[1:])):
                continue
            a = _design(s, knots)
            x = _relative_l1(a, t)
            if x is None or min(_latencies(x, knots)) < 0:
                continue
            err = float(np.mean(np.abs(a @ x - t) / t))
            if err < best[0] - 1e-12:
                best = (err, knots, x)
    _, knots, x = best
    if x is None:
        raise SpecsimError("no piecewise fit with non-negative latencies", field="seconds")
    rel = np.abs(_design(s, knots) @ x - t) / t
    pieces = _rounded(knots, x, factor)
    big = s >= 8 * 2**20
    errors = {"sizes": int(len(s)), "within_20_percent": round(float(np.mean(rel <= 0.2)), 3),
              "median_relative_error": round(float(np.median(rel)), 3),
              "max_relative_error": round(float(rel.max()), 3),
              "max_relative_error_from_8_mib": round(float(rel[big].max()), 3)
              if big.any() else None}
    return pieces, errors


def measured_medians(path: str | Path, op: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``{world: (sizes in bytes, seconds)}`` from a Vidur collectives CSV: the median over
    rows of ``time_stats.<op>.median`` (ms) per (num_workers, size), packed placement only."""
    col = f"time_stats.{op}.median"
    groups: dict[tuple[int, int], list[float]] = {}
    check_csv_rows(path, MAX_COLLECTIVE_ROWS, what="one collectives CSV",
                   fix="give a Vidur network CSV")
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            world, per_node = int(row["num_workers"]), int(row["devices_per_node"])
            if per_node != min(world, int(row["max_devices_per_node"])):
                continue
            groups.setdefault((world, int(row["size"])), []).append(float(row[col]) * 1e-3)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for world in sorted({w for w, _ in groups}):
        sizes = sorted(size for w, size in groups if w == world)
        out[world] = (np.array(sizes, float),
                      np.array([np.median(groups[(world, n)]) for n in sizes]))
    return out


_STATISTIC = ("median over rows of time_stats.{op}.median per (num_workers, size), packed "
              "placement (devices_per_node = min(num_workers, max_devices_per_node))")


def fit_collectives(folder: str | Path) -> dict:
    """The ``collectives:`` mapping (all_reduce, and send_recv when measured) fitted to a
    Vidur network folder, with a source naming the files and the statistic, and each
    world's fit errors in its provenance."""
    folder = Path(folder)
    out: dict[str, Any] = {}
    for op in ("all_reduce", "send_recv"):
        path = folder / f"{op}.csv"
        if not path.is_file():
            if op == "all_reduce":
                raise SpecsimError("no all_reduce.csv in the folder", source=str(folder),
                                   fix="name a Vidur network folder (e.g. .../a100_dgx)")
            continue
        worlds, errors = [], {}
        for world, (sizes, secs) in measured_medians(path, op).items():
            factor = 2.0 * (world - 1) / world if op == "all_reduce" else 1.0
            pieces, errors[f"world_{world}"] = fit_pieces(sizes, secs, factor)
            worlds.append({"world": world, "pieces": pieces})
        rel = "/".join(path.parts[-2:])
        block: dict[str, Any] = {
            "source": f"fit (hardware.collectives_fit.fit_pieces, at most 3 pieces, least "
                      f"relative absolute error) to {rel}: " + _STATISTIC.format(op=op),
            "provenance": {"files": [rel], "statistic": _STATISTIC.format(op=op),
                           "fit_errors": errors}}
        if op == "all_reduce":
            block["worlds"] = worlds
        else:
            block["pieces"] = next(w["pieces"] for w in worlds if w["world"] == 2)
        out[op] = block
    return out
