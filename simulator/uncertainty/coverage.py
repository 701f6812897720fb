"""How often the cost factor's 90% interval holds what was measured: the intervals' own
calibration on measured serving runs (simulator/sim2real).

Each run is replayed ``draws`` times, draw ``i`` with the cost factor of draw ``i`` of
``simulator/uncertainty/draws.py`` (seed 0; the run's own trace, so the workload does not
vary, and no speculation, so neither does acceptance); a metric is covered where its
measured value lies within [p5, p95] of the draws' predictions (read as ``run``'s are:
``propagate.INTERVAL_METHOD``).

Every run takes the shipped ``COST_SIGMA``: it is calibrated on a disjoint set (the
inference-perf stages' mean TPOT errors, ``COST_CALIBRATION`` in simulator/uncertainty/
spec.py), so no run's own error is in the sigma its intervals are drawn with, and no
leave-one-out reading is needed.  A run given twice would count twice: it is refused
(``run_key``: the same resolved path and name).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from simulator.inputs.errors import SpecsimError
from simulator.uncertainty.draws import draw_inputs
from simulator.uncertainty.propagate import INTERVAL_METHOD
from simulator.uncertainty.spec import COST_SIGMA, COST_SOURCE, Uncertainty

COVERED_METRICS = ("ttft_mean_ms", "tpot_mean_ms", "e2e_mean_ms", "ttft_p50_ms",
                   "tpot_p50_ms", "e2e_p50_ms", "ttft_p90_ms", "tpot_p90_ms", "e2e_p90_ms",
                   "ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms")


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


def run_key(run) -> tuple[str, str]:
    """A run's identity: the resolved path it was read from (its ``source``: the span folder,
    the stage's file, the manifest; a cited source that is no path, as written) and its
    name, so that one run named twice by different paths is one run, and two runs in
    different folders that share a folder name are two."""
    path = Path(run.source)
    return (str(path.resolve()) if run.source and path.exists() else run.source, run.name)


def check_distinct(runs: Sequence) -> None:
    """Refuse a run given twice (by ``run_key``): it would count twice in a median or a
    coverage."""
    keys = [run_key(r) for r in runs]
    if len(set(keys)) != len(keys):
        raise SpecsimError("a run is given twice: it would count twice in the figures",
                           field="PATH", fix="give each run once")


def coverage(runs: Sequence, profile: str | None, draws: int) -> pd.DataFrame:
    """``run_coverage`` of every run, in one table, each run under the shipped
    ``COST_SIGMA`` (column ``cost_sigma``)."""
    check_distinct(runs)
    parts = []
    for run in runs:
        part = run_coverage(run, profile, draws, COST_SIGMA)
        part["cost_sigma"] = COST_SIGMA
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def sigma_note(runs: Sequence) -> str:
    """Where the cost sigma of ``runs``' coverage comes from, in one phrase; the runs
    counted by ``run_key`` (two runs that share a folder name are two), not by the name
    the coverage table's ``run`` column shows."""
    n = len({run_key(r) for r in runs})
    return (f"cost sigma {COST_SIGMA:.4f} on all {n} run(s), calibrated on a set disjoint "
            "from them: " + COST_SOURCE)
