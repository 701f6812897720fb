"""``specsim plan ... --pareto FILE``: every candidate over a ladder of client concurrencies.

Each deployment the question allows (quick_disagg.all_candidates: aggregated, and with
``--disagg`` disaggregated; each method at each draft length) that fits in memory runs
closed loop, as ``vllm bench serve --request-rate inf --max-concurrency C``, at C = 1, 2,
4, ... up to the question's ``--concurrency`` (which ends the ladder even when it is no
power of two).  Each
level runs ``max(--requests, RUNS_PER_SLOT x C)`` requests, so that the client's ramp-down
(its last C requests, fewer than C in flight) is a small part of the run.  Every run is a
point: output tokens/s per GPU (the deployment's output over all its GPUs) against output
tokens/s per user (1 / mean TPOT); simulator/planning/pareto.py marks the frontiers.
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from simulator.inputs.errors import SpecsimError
from simulator.planning.pareto import PER_GPU, PER_USER, with_frontier
from simulator.planning.quick_disagg import all_candidates
from simulator.planning.quick_plan import (
    MAX_PARETO_CONCURRENCY,
    Candidate,
    Question,
    workload_payload,
)

RUNS_PER_SLOT = 4
SERIES = ("aggregated", "aggregated + speculation", "disaggregated",
          "disaggregated + speculation")


@dataclass(frozen=True)
class ParetoAnswer:
    """Every point with its frontier marks, and one note per deployment that did not fit."""

    points: pd.DataFrame
    notes: tuple[str, ...]
    acceptance: dict[str, str]


def ladder(top: int) -> tuple[int, ...]:
    """1, 2, 4, ... below ``top``, then ``top``."""
    if not 1 <= top <= MAX_PARETO_CONCURRENCY:
        raise SpecsimError(f"a Pareto ladder up to {top} concurrent requests",
                           field="--concurrency", fix=f"give 1 to {MAX_PARETO_CONCURRENCY}")
    out, c = [], 1
    while c < top:
        out.append(c)
        c *= 2
    return tuple(out + [top])


def series_of(c: Candidate) -> str:
    """The chart's series of a candidate: how it is deployed, and whether it speculates."""
    name = "disaggregated" if c.disaggregated else "aggregated"
    return name + (" + speculation" if c.method != "none" else "")


def level_payload(q: Question, c: Candidate, concurrency: int) -> dict[str, Any]:
    """The candidate's scenario held to ``concurrency`` requests in flight."""
    requests = max(q.requests, RUNS_PER_SLOT * concurrency)
    level = dataclasses.replace(q, rate=None, concurrency=concurrency, requests=requests)
    payload = copy.deepcopy(dict(c.payload))
    payload["workload"] = workload_payload(level)
    return payload


def _point(task: tuple) -> dict[str, Any]:
    """One candidate at one concurrency (runs in a worker)."""
    label, payload, ttft_s, tpot_s = task
    from simulator.scenario import scenario_from_dict
    from simulator.simulate import simulate
    res = simulate(scenario_from_dict(payload, source=label))
    s = res.summary()
    mean_tpot = s["mean_tpot_s"]
    return {"requests": s["requests"], "output_tok/s": s["output_tokens_per_s"],
            "mean_tpot_ms": mean_tpot * 1e3, "p99_tpot_ms": s["p99_tpot_s"] * 1e3,
            "p99_ttft_ms": s["p99_ttft_s"] * 1e3, "rejected": s["rejected"],
            "holds": bool(s["rejected"] == 0 and s["p99_ttft_s"] <= ttft_s
                          and not s["p99_tpot_s"] > tpot_s),
            "acceptance_source": res.info.get("acceptance_source", "")}


def pareto_points(q: Question, top: int, *, executor: Any = "local",
                  workers: int | None = None,
                  progress: Callable[[], None] | None = None) -> ParetoAnswer:
    """Run every fitting candidate at every level of the ladder; mark the frontiers."""
    from simulator.planning.quick_search import fitting, run_tasks
    from simulator.scenario import scenario_from_dict
    from simulator.simulate import scenario_workload
    levels = ladder(top)
    cands = all_candidates(dataclasses.replace(q, rate=None, concurrency=top))
    workload = scenario_workload(scenario_from_dict(cands[0].payload, source="plan"))
    kept, notes = fitting(cands, workload)
    if not kept:
        raise SpecsimError(f"no deployment of {q.target} fits on {q.gpus} x {q.hardware}",
                           field="--gpus", fix="add GPUs, or use a larger GPU or a "
                                               "quantized model; " + "; ".join(notes))
    runs = [(c, n) for c in kept for n in levels]
    rows = run_tasks(_point, [(c.label, level_payload(q, c, n), q.ttft_ms / 1e3, q.tpot_ms / 1e3)
                         for c, n in runs], executor, workers, progress)
    acceptance = {c.method: r.pop("acceptance_source") for (c, _), r in zip(runs, rows)}
    points = pd.DataFrame([{
        "series": series_of(c), "candidate": c.label, "deployment":
        "disaggregated" if c.disaggregated else "aggregated", "layout": c.layout,
        "method": c.method, "gamma": c.gamma, "devices": c.devices, "concurrency": n, **r}
        for (c, n), r in zip(runs, rows)])
    points[PER_GPU] = points["output_tok/s"] / points["devices"]
    points[PER_USER] = 1e3 / points["mean_tpot_ms"]
    return ParetoAnswer(with_frontier(points), tuple(notes), acceptance)
