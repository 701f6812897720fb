"""``sweep --uncertainty N``: each simulated point's summary metrics as p5/p50/p95 over N
draws of its scenario's declared uncertainty, the same Monte Carlo as ``run --uncertainty``
(simulator/uncertainty/propagate.py: the same draws for the same scenario and seed, the
same variance shares), one point per scenario.

The results file stays the point sweep's (resumable, one row per point); the interval
columns are joined to the table the command prints (``--format csv``/``json`` carry them).
Analytic sweeps have no declared uncertainty (``gamma-map --uncertainty`` draws an
acceptance spread on the analytic model).
"""
from __future__ import annotations

from typing import Any, Callable

import pandas as pd

from simulator.inputs.errors import SpecsimError


def check_sweep_uncertainty(spec) -> None:
    """Only a simulated sweep has scenarios whose inputs carry uncertainty."""
    if spec.mode != "simulated":
        raise SpecsimError("an analytic sweep has no declared uncertainty to draw",
                           field="--uncertainty",
                           fix="use mode: simulated (the scenario's uncertainty: block), or "
                               "gamma-map --uncertainty N --alpha-sd SD for the analytic model")


def sweep_intervals(spec, df: pd.DataFrame, draws: int, *, executor: Any = "local",
                    workers: int | None = None, address: str | None = None,
                    progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """``df`` (``run_sweep(spec)``'s table, one row per point in point order) with each
    point's interval and share columns (``propagate``'s); a point that failed gets none."""
    from simulator.planning.executors import make_executor
    from simulator.scenario import scenario_from_dict
    from simulator.uncertainty.propagate import propagate
    check_sweep_uncertainty(spec)
    ok = [int(p) for p, err in zip(df["point"], df["error"]) if not isinstance(err, str)]
    scenarios = [scenario_from_dict(spec.payloads[i], source=f"{spec.name}: point {i}",
                                    base_dir=spec.base_dir) for i in ok]
    if executor == "local" and len(scenarios) * draws <= 1:
        executor = "serial"
    ex = make_executor(executor, workers=workers, address=address) \
        if isinstance(executor, str) else executor
    try:
        rows = propagate(scenarios, draws, ex, progress=progress) if scenarios else []
    finally:
        if isinstance(executor, str):
            ex.close()
    table = pd.DataFrame([{"point": i, "uncertainty_draws": draws, **r}
                          for i, r in zip(ok, rows)])
    return df.merge(table, on="point", how="left") if len(table) else df
