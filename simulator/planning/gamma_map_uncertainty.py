"""``gamma-map --uncertainty N``: how sure is each cell's best gamma, given the acceptance's
spread?

Draw ``i`` shifts every acceptance probability of the map (``alpha``, or each Sequoia
rank's rate) by the acceptance shift of draw ``i`` of ``draw_inputs(seed, N, ...)``
(simulator/uncertainty/draws.py: the same numbers ``run`` draws for a scenario of that
seed and spread), clipped to [0, 1], and builds the whole map again.  The acceptance is the
map's only source: the cost factor makes every step of target, draft and host the same
factor longer (hardware/scaled.py), so it leaves every speedup, hence every best gamma,
unchanged; the analytic map has no trace to re-draw.

Per cell: p5/p50/p95 of the best gamma over the draws (numpy's ``inverted_cdf``: a gamma
some draw picked), ``best_gamma_agree``, the fraction of draws whose best gamma is the
point's, and p5/p50/p95 of its speedup (``INTERVAL_METHOD``, as ``run``'s).  A shift of
exactly 0 is the point map itself, so with no spread every column is the point's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from simulator.uncertainty.draws import draw_inputs
from simulator.uncertainty.propagate import INTERVAL_METHOD, QUANTILES
from simulator.uncertainty.spec import AcceptanceSpread, Uncertainty

if TYPE_CHECKING:
    import pandas as pd

CELL = ["policy", "batch", "context"]


def acceptance_shifts(sd: float, draws: int, seed: int = 0) -> list[float]:
    """Draw ``i``'s additive shift on the acceptance probabilities: N(0, ``sd``)."""
    unc = Uncertainty(sources=("acceptance",), acceptance=AcceptanceSpread(
        sd=sd, source="gamma-map --alpha-sd"))
    return [d.acceptance_shift for d in draw_inputs(seed, draws, unc)]


def shifted(alpha: float, rates: list[float] | None, shift: float) -> tuple[float, list | None]:
    """``alpha`` and the per-rank ``rates`` moved by ``shift``, clipped to [0, 1]."""
    def move(p: float) -> float:
        return float(np.clip(p + shift, 0.0, 1.0))
    return move(alpha), None if rates is None else [move(r) for r in rates]


def gamma_map_intervals(point: pd.DataFrame, shifts: list[float],
                        build: Callable[[float], pd.DataFrame]) -> pd.DataFrame:
    """``point`` (``gamma_map``'s table) with the best gamma's and the speedup's interval
    columns over the maps ``build(shift)`` of each shift (0: ``point`` itself)."""
    maps = [point if s == 0.0 else build(s) for s in shifts]
    for m in maps:  # the cells are the grid's, in one order: the draws line up row by row
        if not m[CELL].equals(point[CELL]):
            raise AssertionError("a draw's map has other cells than the point map")
    gam = np.column_stack([m["best_gamma"].to_numpy(dtype=float, na_value=np.nan)
                           for m in maps])
    spd = np.column_stack([m["speedup"].to_numpy(dtype=float, na_value=np.nan) for m in maps])
    out = point.copy()
    ranked = ~np.isnan(gam).any(axis=1)
    for name, q in QUANTILES:
        col = np.full(len(point), np.nan)
        col[ranked] = np.quantile(gam[ranked], q, axis=1, method="inverted_cdf")
        out[f"best_gamma_p{name}"] = col
        out[f"best_gamma_p{name}"] = out[f"best_gamma_p{name}"].astype("Int64")
        sp = np.full(len(point), np.nan)
        sp[ranked] = np.quantile(spd[ranked], q, axis=1, method=INTERVAL_METHOD)
        out[f"speedup_p{name}"] = sp
    own = point["best_gamma"].to_numpy(dtype=float, na_value=np.nan)[:, None]
    agree = np.where(ranked, np.mean(gam == own, axis=1), np.nan)
    out["best_gamma_agree"] = agree
    out["uncertainty_draws"] = len(shifts)
    return out
