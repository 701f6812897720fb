"""The search behind a flags-only ``specsim plan`` (simulator/planning/quick_plan.py).

1. **Screen**: every candidate that fits in memory is simulated once at the question's load
   (the rate, open loop; or the concurrency, closed loop) and checked against p99 TTFT and
   p99 TPOT (``capacity.evaluate_rate``; open loop also needs the backlog to stay small).
2. **Headroom** (open loop): for each method (aggregated and disaggregated apart), the
   candidate that holds the load with the most slack (the lowest ``violation``: its worst
   ratio to a limit) gets a rate search from the question's rate upwards
   (``capacity.max_sustainable_rate``): how far above the asked rate the same GPUs stay
   within the SLO.  Closed loop compares output throughput.
3. **Rank and verdict**: holding candidates first (searched ones by their highest rate, the
   rest by their slack), then the others by how far they miss; one sentence says what the
   winner holds and what the same GPUs do without speculation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pandas as pd

from simulator.inputs.errors import SpecsimError
from simulator.planning.capacity import CapacitySLO, RateSearch
from simulator.planning.quick_disagg import all_candidates
from simulator.planning.quick_plan import OPEN_LOOP_BACKLOG, Candidate, Question

# the rate search of step 2: the lattice from the asked rate up to 16x it, 5% apart
HEADROOM_FACTOR = 16.0
HEADROOM_TOL = 0.05
# the fields of a deployment that does not fit in memory (a pool's, disaggregated)
DOES_NOT_FIT = ("parallelism", "disaggregation.prefill.parallelism",
                "disaggregation.decode.parallelism")
# a draft model that this layout cannot shard (its heads do not divide the draft's tensor
# parallel degree, which vLLM sets to the target's): that candidate is skipped, not the plan
DRAFT_UNSHARDABLE = "parallelism.draft_tensor_parallel_size"


@dataclass(frozen=True)
class QuickAnswer:
    """The ranked table, the winner (None when nothing holds), the verdict and notes."""

    table: pd.DataFrame
    winner: Candidate | None
    verdict: str
    notes: tuple[str, ...]
    acceptance: Mapping[str, str]  # method -> where its acceptance numbers come from


def _slo(q: Question) -> CapacitySLO:
    return CapacitySLO(p99_ttft_s=q.ttft_ms / 1e3, p99_tpot_s=q.tpot_ms / 1e3)


def _screen(task: tuple) -> dict[str, Any]:
    """One candidate at the question's load (runs in a worker)."""
    label, payload, workload, rate, slo, backlog = task
    from simulator.planning.capacity import evaluate_rate
    from simulator.scenario import scenario_from_dict
    sc = scenario_from_dict(payload, source=label)
    return evaluate_rate(sc, workload, rate, slo, backlog)


def _headroom(task: tuple) -> dict[str, Any]:
    """The highest rate one candidate holds, searched up from the question's rate."""
    label, payload, workload, rate, slo = task
    from simulator.planning.capacity import max_sustainable_rate
    from simulator.scenario import scenario_from_dict
    sc = scenario_from_dict(payload, source=label)
    search = RateSearch(min_rate_per_s=rate, max_rate_per_s=rate * HEADROOM_FACTOR,
                        rel_tol=HEADROOM_TOL, max_in_flight_fraction=OPEN_LOOP_BACKLOG)
    found = max_sustainable_rate(sc, slo, search, workload=workload.rescale_rate(rate))
    return {"max_rate_per_s": found["max_rate_per_s"], "evaluations": found["evaluations"],
            "note": found["note"]}


def fitting(cands: list[Candidate], workload) -> tuple[list[Candidate], list[str]]:
    """The candidates whose deployment fits in memory, and one note per deployment that
    does not (any other problem is the user's input: raised)."""
    from simulator.scenario import scenario_from_dict
    from simulator.simulate import check_runnable
    kept, notes, seen = [], [], set()
    for c in cands:
        try:
            check_runnable(scenario_from_dict(c.payload, source=c.label), workload=workload)
        except SpecsimError as exc:
            if exc.field not in DOES_NOT_FIT + (DRAFT_UNSHARDABLE,):
                raise exc.relocated(prefix=f"{c.label}: ") from None
            why = "does not fit" if exc.field in DOES_NOT_FIT else f"{c.method} cannot run"
            if (c.layout, why) not in seen:  # one line per parallelism (drafts add little)
                seen.add((c.layout, why))
                notes.append(f"{c.layout}: {why} ({exc.message})")
            continue
        kept.append(c)
    return kept, notes


def run_tasks(fn: Callable, tasks: list[tuple], executor: Any, workers: int | None,
         progress: Callable[[], None] | None) -> list[Any]:
    from simulator.planning.executors import Failure, make_executor, run_items
    if not tasks:
        return []
    ex = make_executor("serial" if len(tasks) == 1 else executor, workers=workers)
    try:
        out = run_items(fn, tasks, ex, chunk_size=1,
                        on_result=(lambda i, r: progress()) if progress else None)
    finally:
        ex.close()
    for r in out:
        if isinstance(r, Failure):
            raise SpecsimError(f"a simulation failed: {r.error}", field="plan")
    return out


def answer_question(q: Question, *, executor: Any = "local", workers: int | None = None,
           progress: Callable[[], None] | None = None) -> QuickAnswer:
    """Screen, search the headroom, rank, and say the verdict."""
    from simulator.scenario import scenario_from_dict
    from simulator.simulate import scenario_workload
    cands = all_candidates(q)
    try:
        workload = scenario_workload(scenario_from_dict(cands[0].payload, source="plan"))
    except SpecsimError as exc:  # the trace the flags named, by its flag
        if q.trace is None:
            raise
        raise SpecsimError(f"{q.trace}: {exc.message}", field="--trace", fix=exc.fix) from None
    kept, notes = fitting(cands, workload)
    if not kept:
        raise SpecsimError(f"no deployment of {q.target} fits on {q.gpus} x {q.hardware}",
                           field="--gpus", fix="add GPUs, or use a larger GPU or a "
                                               "quantized model; " + "; ".join(notes))
    rate = q.rate if q.rate is not None else workload.mean_rate_per_s
    backlog = 1.0 if q.closed_loop else OPEN_LOOP_BACKLOG  # a closed loop cannot pile up
    slo = _slo(q)
    rows = run_tasks(_screen, [(c.label, c.payload, workload, rate, slo, backlog)
                               for c in kept], executor, workers, progress)
    table = _table(kept, rows)
    acceptance = {c.method: r["acceptance_source"] for c, r in zip(kept, rows)}
    if not q.closed_loop:
        table = _with_headroom(table, kept, q, workload, slo, executor, workers, progress)
    table = _ranked(table, q.closed_loop)
    win = table.iloc[0]
    winner = next(c for c in kept if c.label == win["candidate"]) if win["holds"] else None
    from simulator.planning.quick_verdict import verdict
    return QuickAnswer(table, winner, verdict(q, table), tuple(notes), acceptance)


def _table(kept: list[Candidate], rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{
        "candidate": c.label, "method": c.method, "gamma": c.gamma,
        "tensor_parallel": c.tensor_parallel, "expert_parallel": c.expert_parallel,
        "data_parallel_attention": c.shape.data_parallel, "shape": c.shape.name,
        "replicas": c.replicas, "devices": c.devices,
        "deployment": "disaggregated" if c.disaggregated else "aggregated",
        "prefill_shape": "" if c.prefill_shape is None else c.prefill_shape.name,
        "prefill_replicas": c.prefill_replicas,
        "holds": bool(r["feasible"]), "p99_ttft_ms": r["p99_ttft_s"] * 1e3,
        "p99_tpot_ms": r["p99_tpot_s"] * 1e3, "output_tok/s": r["output_tokens_per_s"],
        "violation": r["violation"], "violated": r["violated"]}
        for c, r in zip(kept, rows)])


def _with_headroom(table: pd.DataFrame, kept: list[Candidate], q: Question, workload,
                   slo: CapacitySLO, executor: Any, workers: int | None,
                   progress: Callable[[], None] | None) -> pd.DataFrame:
    """``max_rate_per_s`` and ``headroom`` for each method's (and deployment kind's)
    most-slack holding candidate (NaN elsewhere: not searched)."""
    held = table[table["holds"]]
    # aggregated and disaggregated apart: the verdict compares the best of each
    picks = [g["violation"].idxmin()
             for _, g in held.groupby(["method", "deployment"], sort=False)]
    by_label = {c.label: c for c in kept}
    tasks = [(lbl, by_label[lbl].payload, workload, q.rate, slo)
             for lbl in table.loc[picks, "candidate"]]
    found = run_tasks(_headroom, tasks, executor, workers, progress)
    table = table.assign(max_rate_per_s=math.nan, headroom=math.nan, search_note="")
    for i, f in zip(picks, found):
        table.loc[i, "max_rate_per_s"] = f["max_rate_per_s"]
        table.loc[i, "headroom"] = f["max_rate_per_s"] / q.rate - 1.0
        table.loc[i, "search_note"] = f["note"]
    return table


def _ranked(table: pd.DataFrame, closed_loop: bool) -> pd.DataFrame:
    """Holding first; among them the searched by highest rate (open loop) or all by output
    throughput (closed loop), then by slack; the rest by how far they miss."""
    key = pd.DataFrame({"miss": ~table["holds"],
                        "first": -(table["output_tok/s"] if closed_loop
                                   else table["max_rate_per_s"].fillna(-1.0)),
                        "slack": table["violation"]})
    order = key.sort_values(["miss", "first", "slack"], kind="stable").index
    out = table.loc[order].reset_index(drop=True)
    out.insert(0, "rank", range(1, len(out) + 1))
    return out


def best_without_speculation(table: pd.DataFrame) -> dict[str, Any] | None:
    """The best-ranked ``none`` row, as a mapping (None when none was tried)."""
    rows = table[table["method"] == "none"]
    return None if rows.empty else dict(rows.iloc[0])
