"""How often the cost factor's 90% interval holds what was measured: the intervals' own
calibration on measured serving runs (simulator/sim2real).

Each run is replayed ``draws`` times, draw ``i`` with the cost factor of draw ``i`` of
``simulator/uncertainty/draws.py`` (seed 0; the run's own trace, so the workload does not
vary, and no speculation, so neither does acceptance); a metric is covered where its
measured value lies within [p5, p95] of the draws' predictions (read as ``run``'s are:
``propagate.INTERVAL_METHOD``).

The cost factor's sigma is read as ``COST_SIGMA`` is (median APE of the runs' mean TPOT over
0.6745), but **leave one out**: each run's intervals take the sigma of the other runs' TPOT
errors, never its own, as the published check's sigmas are read (tests/published/
coverage.py); a run with fewer than ``MIN_OTHER_RUNS`` others takes the shipped
``COST_SIGMA``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from simulator.inputs.errors import SpecsimError
from simulator.uncertainty.draws import draw_inputs
from simulator.uncertainty.propagate import INTERVAL_METHOD
from simulator.uncertainty.spec import COST_SIGMA, COST_SOURCE, NORMAL_MEDIAN_ABS, Uncertainty

COVERED_METRICS = ("ttft_mean_ms", "tpot_mean_ms", "e2e_mean_ms", "ttft_p50_ms",
                   "tpot_p50_ms", "e2e_p50_ms", "ttft_p90_ms", "tpot_p90_ms", "e2e_p90_ms",
                   "ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms")
# a median of one or two errors is not a distribution (the published check now reads its
# sigmas by a conformal rank instead: simulator/uncertainty/conformal.py)
MIN_OTHER_RUNS = 3
SHIPPED = "shipped COST_SIGMA"


def tpot_errors(runs: Sequence, profile: str | None) -> list[float | None]:
    """Each run's |predicted / measured - 1| of its mean TPOT at the point estimate (the
    error ``COST_SIGMA`` is read from); None for a run that did not measure it."""
    from simulator.sim2real.compare import predict

    out: list[float | None] = []
    for run in runs:
        measured = run.measured().get("tpot_mean_ms", float("nan"))
        ok = bool(np.isfinite(measured) and measured > 0)
        out.append(abs(predict(run, profile)[0]["tpot_mean_ms"] / measured - 1.0)
                   if ok else None)
    return out


def sigma_from_errors(errors: Sequence[float]) -> float:
    """Median |e| over 0.6745: the sigma of a zero-mean normal whose median |e| that is
    (``COST_SIGMA``'s reading; for errors this small ln(1 + e) ~ e)."""
    if len(errors) < MIN_OTHER_RUNS:
        raise ValueError(f"{len(errors)} errors: a sigma needs {MIN_OTHER_RUNS} or more")
    return float(np.median(np.abs(errors))) / NORMAL_MEDIAN_ABS


def leave_one_out_sigmas(errors: Sequence[float | None]) -> list[float | None]:
    """Run ``i``'s sigma from the other runs' errors; None where fewer than
    ``MIN_OTHER_RUNS`` others measured one."""
    out: list[float | None] = []
    for i in range(len(errors)):
        others = [e for j, e in enumerate(errors) if j != i and e is not None]
        out.append(sigma_from_errors(others) if len(others) >= MIN_OTHER_RUNS else None)
    return out


def run_coverage(run, profile: str | None, draws: int, sigma: float = COST_SIGMA,
                 seed: int = 0) -> pd.DataFrame:
    """One row per metric of ``run``: measured, p5, p50, p95 and whether it is covered."""
    from simulator.sim2real.compare import predict

    unc = Uncertainty(sources=("cost",), cost_sigma=sigma)
    preds = [predict(run, profile, d.cost_factor)[0] for d in draw_inputs(seed, draws, unc)]
    measured = run.measured()
    rows = []
    for m in COVERED_METRICS:
        if m not in measured or not np.isfinite(measured[m]):
            continue
        lo, mid, hi = np.quantile([p[m] for p in preds], (0.05, 0.5, 0.95),
                                  method=INTERVAL_METHOD)
        rows.append({"run": run.name, "metric": m, "measured": measured[m],
                     "p5": float(lo), "p50": float(mid), "p95": float(hi),
                     "covered": bool(lo <= measured[m] <= hi)})
    return pd.DataFrame(rows)


def coverage(runs: Sequence, profile: str | None, draws: int) -> pd.DataFrame:
    """``run_coverage`` of every run, in one table, each run under the cost sigma of the
    other runs (``leave_one_out_sigmas``; the shipped ``COST_SIGMA`` with fewer than
    ``MIN_OTHER_RUNS`` others): columns ``cost_sigma`` and ``sigma_from`` say which."""
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise SpecsimError("a run is given twice: its own error would be among the others "
                           "its interval's sigma is read from", field="PATH",
                           fix="give each run once")
    # no run can have MIN_OTHER_RUNS others: skip the point predictions
    loo = (leave_one_out_sigmas(tpot_errors(runs, profile)) if len(runs) > MIN_OTHER_RUNS
           else [None] * len(runs))
    parts = []
    for run, sigma in zip(runs, loo):
        part = run_coverage(run, profile, draws, COST_SIGMA if sigma is None else sigma)
        part["cost_sigma"] = COST_SIGMA if sigma is None else sigma
        part["sigma_from"] = SHIPPED if sigma is None else "the other runs"
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def sigma_note(table: pd.DataFrame) -> str:
    """Where the table's cost sigmas come from, in one phrase."""
    own = table.loc[table["sigma_from"] != SHIPPED].drop_duplicates("run")
    parts = []
    if len(own):
        parts.append(f"cost sigma of each run left one out (median APE of the other runs' "
                     f"mean TPOT / {NORMAL_MEDIAN_ABS}): {own['cost_sigma'].min():.4f}-"
                     f"{own['cost_sigma'].max():.4f}")
    shipped = table.loc[table["sigma_from"] == SHIPPED, "run"].nunique()
    if shipped:
        parts.append(f"{shipped} run(s) under the shipped cost sigma {COST_SIGMA:.4f} (fewer "
                     f"than {MIN_OTHER_RUNS} other runs with a measured mean TPOT), from "
                     + COST_SOURCE)
    return "; ".join(parts)
