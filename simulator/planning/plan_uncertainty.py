"""``plan --uncertainty N``: each candidate's answers under N draws of its declared input
uncertainty (simulator/uncertainty), as p5/p50/p95 columns beside the point answers.

Draw ``i`` of a candidate is ``draw_scenario`` of its scenario under draw ``i`` of
``draw_inputs(scenario.seed, N, ...)`` (the sources it does not vary at their point
values), and the whole capacity search is run under it: the max sustainable rate, the
fewest replicas for the target rate, and the costs per million tokens.  A draw that leaves
the scenario unchanged is the point answer itself (no search).  The others start near the
point answer: the rate search at the point rate over the draw's cost factor (every step
``factor`` times longer), the replica search at the point count times the factor, stepping
out from there (``fewest_holding``); while feasibility is monotone these give the answers a
search from anywhere gives, in fewer simulations.

A draw with no sustainable rate counts as rate 0 (and infinite cost); one where no count
up to ``max_replicas`` holds counts as infinitely many replicas.  Rates are interpolated
between draws as ``run`` does (``INTERVAL_METHOD``); replica counts and costs, and any metric
with an infinite draw, take the draws' own values (``inverted_cdf``: the count some draw
needed, never 5.4 replicas).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from simulator.inputs.errors import SpecsimError
from simulator.uncertainty.draws import Draw, draw_inputs, draw_scenario, restrict
from simulator.uncertainty.propagate import (INTERVAL_METHOD, QUANTILES, shares,
                                             varied_sources)

METRICS = ("max_rate_per_s", "cost_per_million_tokens", "min_replicas_for_target",
           "cost_per_million_tokens_at_target")
DISCRETE = ("min_replicas_for_target", "cost_per_million_tokens_at_target")
NO_ANSWER = {"max_rate_per_s": 0.0, "cost_per_million_tokens": math.inf,
             "min_replicas_for_target": math.inf, "cost_per_million_tokens_at_target": math.inf}


@dataclass(frozen=True)
class PlanDraw:
    """One candidate's search under one draw (picklable: executors ship it to workers):
    ``task`` is ``plan.plan_candidate``'s, ``rate0`` and ``replicas0`` the point answers."""

    task: tuple
    draw: Draw
    rate0: float
    replicas0: float


def fewest_holding(ok: Callable[[int], bool], start: int, most: int) -> float:
    """The fewest n in [1, most] with ``ok(n)`` (monotone: false, then true), searched from
    ``start``: steps of 1, 2, 4, ... away from it until the answer changes, then a
    bisection; NaN where ``ok(most)`` is false."""
    start = min(max(int(start), 1), most)
    step = 1
    if ok(start):
        lo, hi = None, start
        while hi > 1 and lo is None:
            k = max(hi - step, 1)
            lo, hi = (None, k) if ok(k) else (k, hi)
            step *= 2
        if lo is None:
            return 1
    else:
        lo, hi = start, None
        while hi is None:
            if lo == most:
                return float("nan")
            k = min(lo + step, most)
            lo, hi = (k, None) if not ok(k) else (lo, k)
            step *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def run_plan_draw(item: PlanDraw) -> dict[str, Any]:
    """One draw's answers (runs in a worker): the plan's metrics and the simulations run."""
    from simulator.models.spec import load_model
    from simulator.planning.capacity import evaluate_rate, max_sustainable_rate
    from simulator.planning.plan import cost_per_million_tokens, device_price
    from simulator.planning.preflight import fit_context
    from simulator.scenario import scenario_from_dict
    from simulator.simulate import scenario_workload
    label, raw, base_dir, slo, search, target, max_rep, prices, mode = item.task
    sc = draw_scenario(scenario_from_dict(raw, source=label, base_dir=base_dir), item.draw)
    wl = fit_context(scenario_workload(sc), int(load_model(sc.target).max_context), mode)
    factor = item.draw.cost_factor
    start = item.rate0 / factor if item.rate0 > 0 else None
    found = max_sustainable_rate(sc, slo, search, workload=wl, start_rate=start)
    rate, mean_out = found["max_rate_per_s"], float(np.mean(wl.output_tokens))
    price = device_price(prices, sc.hardware) if prices is not None else float("nan")
    out = {"max_rate_per_s": rate, "evaluations": found["evaluations"],
           "cost_per_million_tokens": cost_per_million_tokens(
               price, sc.parallelism.devices * sc.replicas, rate * mean_out)}
    if target is not None:
        import dataclasses
        seen: dict[int, bool] = {}

        def ok(n: int) -> bool:
            if n not in seen:
                seen[n] = evaluate_rate(dataclasses.replace(sc, replicas=n), wl, target, slo,
                                        search.max_in_flight_fraction)["feasible"]
            return seen[n]
        n0 = item.replicas0 * factor if item.replicas0 == item.replicas0 else max_rep
        n = fewest_holding(ok, round(n0), max_rep)
        out.update(min_replicas_for_target=n, replica_evaluations=len(seen),
                   cost_per_million_tokens_at_target=cost_per_million_tokens(
                       price, sc.parallelism.devices * n, target * mean_out)
                   if n == n else float("nan"))
    return out


def check_unique_labels(spec) -> None:
    """Intervals are joined to the ranked table by candidate name: names must be distinct."""
    twice = [n for n, c in Counter(label for label, _ in spec.candidates).items() if c > 1]
    if twice:
        raise SpecsimError(f"two candidates are named {twice[0]!r}", field="candidates",
                           fix="give each candidate its own name to draw intervals "
                               "(--uncertainty)")


def plan_intervals(spec, point: pd.DataFrame, draws: int | None = None, *,
                   executor: Any = "local", workers: int | None = None,
                   address: str | None = None,
                   progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """``point`` (``plan.plan(spec)``'s table) with, per candidate, the p5/p50/p95 of
    ``active_metrics(spec)`` over ``draws`` draws (None: each candidate scenario's own
    ``uncertainty.draws``), each one's widest source and shares, ``uncertainty_draws``,
    ``draw_evaluations`` (the simulations the draws ran) and ``uncertainty_error``."""
    from simulator.planning.executors import Failure, make_executor, run_items
    check_unique_labels(spec)
    metrics = active_metrics(spec)
    plans, items, slots = [], [], []
    for label, raw in spec.candidates:
        k = len(plans)
        row = point.loc[point["candidate"] == label].iloc[0]
        plans.append(_candidate_draws(spec, label, raw, row, draws, metrics))
        for i, item in plans[-1]["pending"]:
            items.append(item)
            slots.append((k, i))
    if executor == "local" and len(items) <= 1:
        executor = "serial"
    ex = make_executor(executor, workers=workers, address=address) \
        if isinstance(executor, str) else executor
    try:
        results = run_items(run_plan_draw, items, ex, chunk_size=1, progress=progress)
    finally:
        if isinstance(executor, str):
            ex.close()
    for (k, i), res in zip(slots, results):
        if isinstance(res, Failure):
            plans[k]["error"] = plans[k]["error"] or f"draw {i}: {res.error}"
            continue
        plans[k]["values"][i] = [_answer(res.get(m), m) for m in metrics]
        plans[k]["evaluations"] += res["evaluations"] + res.get("replica_evaluations", 0)
    rows = [_interval_row(p, metrics) for p in plans]
    return point.merge(pd.DataFrame(rows), on="candidate", how="left")


def active_metrics(spec) -> tuple[str, ...]:
    """The plan's answers that have intervals: costs with a price table, replicas with a
    target rate."""
    out = ["max_rate_per_s"] + (["cost_per_million_tokens"] if spec.prices is not None else [])
    if spec.target_rate_per_s is not None:
        out += ["min_replicas_for_target"] + (["cost_per_million_tokens_at_target"]
                                              if spec.prices is not None else [])
    return tuple(out)


def _answer(value: Any, metric: str) -> float:
    value = float(value)
    return NO_ANSWER[metric] if value != value else value


def _candidate_draws(spec, label: str, raw: dict, row: pd.Series, draws: int | None,
                     metrics: tuple[str, ...]) -> dict[str, Any]:
    """A candidate's draws: the point answer where a draw changes nothing, else a
    ``PlanDraw`` to run (``pending``)."""
    from simulator.scenario import scenario_from_dict
    sc = scenario_from_dict(raw, source=label, base_dir=spec.base_dir)
    varied = varied_sources(sc)
    n = sc.uncertainty.draws if draws is None else draws
    mine = [restrict(d, varied) for d in draw_inputs(sc.seed, n, sc.uncertainty)]
    failed = isinstance(row.get("error"), str)
    plan = {"candidate": label, "draws": mine, "varied": varied, "values": [None] * n,
            "pending": [], "evaluations": 0, "error": row["error"] if failed else None}
    if failed:
        return plan
    task = (label, raw, spec.base_dir, spec.slo, spec.search, spec.target_rate_per_s,
            spec.max_replicas, spec.prices, spec.over_context)
    point = [_answer(row[m], m) for m in metrics]
    rate0 = float(row["max_rate_per_s"])
    replicas0 = float(row.get("min_replicas_for_target", float("nan")))
    for i, d in enumerate(mine):
        if draw_scenario(sc, d) is sc:  # the point answer, exactly
            plan["values"][i] = point
        else:
            plan["pending"].append((i, PlanDraw(task, d, rate0 if rate0 == rate0 else 0.0,
                                                replicas0)))
    return plan


def _interval_row(plan: dict[str, Any], metrics: tuple[str, ...]) -> dict[str, Any]:
    """The candidate's interval columns (NaN where a draw failed or none was asked)."""
    row: dict[str, Any] = {"candidate": plan["candidate"], "uncertainty_draws":
                           len(plan["draws"]), "draw_evaluations": plan["evaluations"],
                           "uncertainty_error": plan["error"]}
    if plan["error"] is not None or not plan["draws"]:
        return row
    values = np.asarray(plan["values"], dtype=float)
    for j, m in enumerate(metrics):
        col = values[:, j]
        finite = bool(np.isfinite(col).all())
        method = INTERVAL_METHOD if finite and m not in DISCRETE else "inverted_cdf"
        for name, q in QUANTILES:
            row[f"{m}_p{name}"] = float(np.quantile(col, q, method=method))
    row.update(shares(np.where(np.isfinite(values), values, np.nan), plan["draws"],
                      plan["varied"], metrics))
    for j, m in enumerate(metrics):  # no width, no widest source (a fit of noise)
        if np.all(values[:, j] == values[0, j]):
            row[f"{m}_widest"] = "none"
    return row
