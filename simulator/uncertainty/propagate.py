"""Monte Carlo over the declared input uncertainty: N draws per policy, p5/p50/p95 of each
summary metric, and the share of its variance each source explains.

The share is a one-source-at-a-time estimate: the N draws are run again with only that
source varying (the same numbers for it, simulator/uncertainty/draws.py), and a source's
share is its variance over the sum of those variances (their sum may differ from the joint
variance by the sources' interactions; ``interaction`` reports 1 - sum / joint).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.scenario import Scenario
from simulator.uncertainty.draws import Draw, draw_inputs, draw_scenario, restrict

METRICS = ("p50_ttft_s", "p99_ttft_s", "p50_tpot_s", "p99_tpot_s", "output_tokens_per_s",
           "goodput_requests_per_s")
QUANTILES = ((5, 0.05), (50, 0.5), (95, 0.95))


@dataclass(frozen=True)
class DrawTask:
    """One policy's scenario under one draw (picklable: executors ship it to workers)."""

    scenario: Scenario
    draw: Draw


def run_draw(task: DrawTask) -> tuple[float, ...]:
    """The summary metrics of one draw."""
    from simulator.simulate import simulate
    summary = simulate(draw_scenario(task.scenario, task.draw)).summary()
    return tuple(float(summary[m]) for m in METRICS)


def varied_sources(scenario: Scenario) -> tuple[str, ...]:
    """The declared sources that vary: acceptance only where the block gives a spread."""
    unc = scenario.uncertainty
    acc = unc.acceptance is not None and not unc.acceptance.zero
    return tuple(s for s in unc.sources if s != "acceptance" or acc)


def propagate(scenarios: list[Scenario], draws: int, executor, progress=None) -> list[dict]:
    """One row per policy scenario: for each metric its p5/p50/p95 over ``draws`` joint
    draws and, where more than one source varies, each source's variance share."""
    from simulator.planning.executors import Failure, run_items

    jobs: list[tuple[int, tuple[str, ...]]] = []
    tasks: list[DrawTask] = []
    for k, sc in enumerate(scenarios):
        varied = varied_sources(sc)
        inputs = draw_inputs(sc.seed, draws, sc.uncertainty)
        runs = [varied] + ([(s,) for s in varied] if len(varied) > 1 else [])
        for sources in runs:
            jobs.append((k, sources))
            tasks.extend(DrawTask(sc, restrict(d, sources)) for d in inputs)
    values = run_items(run_draw, tasks, executor, progress=progress)
    failed = [v for v in values if isinstance(v, Failure)]
    if failed:
        raise SpecsimError(f"a draw failed: {failed[0].error}", field="uncertainty",
                           fix="narrow the declared spreads, or run the draw's scenario "
                               "alone to see why")
    table = np.asarray(values, dtype=float).reshape(len(jobs), draws, len(METRICS))
    rows: list[dict] = [{} for _ in scenarios]
    for j, (k, sources) in enumerate(jobs):
        if sources == varied_sources(scenarios[k]):
            rows[k].update(intervals(table[j]))
        else:
            rows[k].update({f"{m}_var_{sources[0]}": float(np.var(table[j][:, i]))
                            for i, m in enumerate(METRICS)})
    return [shares(row, varied_sources(sc)) for row, sc in zip(rows, scenarios)]


def intervals(values: np.ndarray) -> dict:
    """p5/p50/p95 and the variance of each metric over the draws (rows)."""
    out = {}
    for i, m in enumerate(METRICS):
        col = values[:, i]
        ok = col[~np.isnan(col)]
        for name, q in QUANTILES:
            out[f"{m}_p{name}"] = float(np.quantile(ok, q)) if ok.size else float("nan")
        out[f"{m}_var"] = float(np.var(ok)) if ok.size else float("nan")
    return out


def shares(row: dict, varied: tuple[str, ...]) -> dict:
    """Each source's share of the one-at-a-time variances, the widest source and the
    interaction term, per metric."""
    out = {k: v for k, v in row.items() if "_var" not in k}
    for m in METRICS:
        if len(varied) < 2:
            out[f"{m}_widest"] = varied[0] if varied and row[f"{m}_var"] > 0 else "none"
            continue
        parts = {s: row[f"{m}_var_{s}"] for s in varied}
        total = sum(parts.values())
        for s, v in parts.items():
            out[f"{m}_share_{s}"] = v / total if total > 0 else float("nan")
        out[f"{m}_widest"] = max(parts, key=parts.get) if total > 0 else "none"
        joint = row[f"{m}_var"]
        out[f"{m}_interaction"] = 1.0 - total / joint if joint > 0 else float("nan")
    return out
