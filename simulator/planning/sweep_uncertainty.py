"""``sweep --uncertainty N``: each simulated point's summary metrics as p5/p50/p95 over N
draws of its scenario's declared uncertainty, the same Monte Carlo as ``run --uncertainty``
(simulator/uncertainty/propagate.py: the same draws for the same scenario and seed, the
same variance shares), one point per scenario.  Without ``--uncertainty`` each point draws
its own scenario's ``uncertainty.draws`` (the base scenario's, or ``fixed:``'s), as ``run``
and ``plan`` read it; a point whose scenario declares none gets no interval.

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


def _scenario(spec, i: int):
    from simulator.scenario import scenario_from_dict
    return scenario_from_dict(spec.payloads[i], source=f"{spec.name}: point {i}",
                              base_dir=spec.base_dir)


def draws_asked(spec, asked: int | None) -> int | None:
    """``--uncertainty N`` (checked); None: each point's own ``uncertainty.draws``, where
    some point declares draws; 0: neither asks.  Before any point runs."""
    if asked is not None:
        check_sweep_uncertainty(spec)
        return asked
    if spec.mode != "simulated" or not any(
            isinstance(raw.get("uncertainty"), dict) and raw["uncertainty"].get("draws")
            for raw in spec.payloads):  # (no point's mapping names draws: no parse needed)
        return 0
    return None if any(_scenario(spec, i).uncertainty.draws
                       for i in range(len(spec.payloads))) else 0


def sweep_intervals(spec, df: pd.DataFrame, draws: int | None, *, executor: Any = "local",
                    workers: int | None = None, address: str | None = None,
                    progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """``df`` (``run_sweep(spec)``'s table, one row per point in point order) with each
    point's interval and share columns (``propagate``'s) over ``draws`` draws (None: its
    scenario's ``uncertainty.draws``; 0 draws: no interval); a point that failed gets none."""
    from simulator.planning.executors import make_executor
    from simulator.uncertainty.propagate import propagate
    check_sweep_uncertainty(spec)
    ok = [int(p) for p, err in zip(df["point"], df["error"]) if not isinstance(err, str)]
    scenarios = {i: _scenario(spec, i) for i in ok}
    counts = {i: sc.uncertainty.draws if draws is None else draws
              for i, sc in scenarios.items()}
    if executor == "local" and sum(counts.values()) <= 1:
        executor = "serial"
    ex = make_executor(executor, workers=workers, address=address) \
        if isinstance(executor, str) else executor
    rows = {i: {} for i, n in counts.items() if n == 0}
    try:
        for n in sorted(set(counts.values()) - {0}):  # one Monte Carlo per number of draws
            mine = [i for i in ok if counts[i] == n]
            rows.update(zip(mine, propagate([scenarios[i] for i in mine], n, ex,
                                            progress=progress)))
    finally:
        if isinstance(executor, str):
            ex.close()
    table = pd.DataFrame([{"point": i, "uncertainty_draws": counts[i], **rows[i]}
                          for i in ok])
    return df.merge(table, on="point", how="left") if len(table) else df
