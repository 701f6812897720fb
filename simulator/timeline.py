"""A run's engine steps as a Chrome trace-event file (``specsim run --timeline FILE.json``).

The file is the trace-event format's JSON object form (Chrome's "Trace Event Format"
document, the format Perfetto's UI and chrome://tracing open): ``{"traceEvents": [...],
"displayTimeUnit": "ms", "otherData": {...}}``.  Each policy of the run is a process
(``pid``; named by a ``process_name`` metadata event), each replica a thread (``tid``).  Per
step there is one complete event (``ph: X``, ``ts`` and ``dur`` in microseconds of simulated
time) whose ``args`` hold the batch's composition (running requests, prefills and decodes,
their tokens, drafted and accepted tokens); a step that drafts has two child slices inside
it, ``draft`` then ``verify`` (the engine runs them back to back), which Perfetto nests
under the step.  Counter events (``ph: C``) carry each replica's KV-cache occupancy and
queue length at the step's start.

Bounded: at most ``MAX_STEPS`` steps are written (the earliest, in simulated time), and when
the run kept only a sample of its steps (``engine.steps_table: sampled``, or ``auto`` past
its row cap) the file has those; ``otherData`` says which and how many of how many.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from simulator.inputs.errors import SpecsimError

MAX_STEPS = 200_000          # step slices per file (every policy together)
MARK = b'{"otherData":{"generator":"specsim timeline"'  # how the file starts
_US = 1e6


def check_timeline_options(steps_table: str) -> None:
    """A timeline is drawn from the steps table: refuse a run that keeps none."""
    if steps_table == "off":
        raise SpecsimError("--timeline draws the steps table, which engine.steps_table: off "
                           "does not keep", field="--timeline",
                           fix="remove --timeline, or set engine.steps_table to auto or all")


def _name(row) -> str:
    if row.num_prefill and row.num_decode:
        return f"mixed {row.num_prefill}p+{row.num_decode}d"
    if row.num_prefill:
        return f"prefill x{row.num_prefill}"
    return f"decode x{row.num_decode}"


def _step_events(pid: int, steps) -> list[dict]:
    """Slices and counters of one policy's steps (a DataFrame of the steps table)."""
    out: list[dict] = []
    for row in steps.itertuples(index=False):
        tid, ts, dur = int(row.replica), float(row.start_s) * _US, float(row.duration_s) * _US
        out.append({"name": _name(row), "cat": "step", "ph": "X", "pid": pid, "tid": tid,
                    "ts": ts, "dur": dur, "args": {
                        "batch_size": int(row.batch_size), "num_prefill": int(row.num_prefill),
                        "num_decode": int(row.num_decode),
                        "prefill_tokens": int(row.prefill_tokens),
                        "decode_tokens": int(row.decode_tokens),
                        "emitted_tokens": int(row.emitted_tokens),
                        "draft_tokens": int(row.draft_tokens),
                        "accepted_tokens": int(row.accepted_tokens),
                        "draft_ms": float(row.draft_s) * 1e3,
                        "verify_ms": float(row.verify_s) * 1e3,
                        "preemptions": int(row.preemptions)}})
        if row.draft_s > 0:
            draft = float(row.draft_s) * _US
            out.append({"name": "draft", "cat": "phase", "ph": "X", "pid": pid, "tid": tid,
                        "ts": ts, "dur": min(draft, dur)})
            out.append({"name": "verify", "cat": "phase", "ph": "X", "pid": pid, "tid": tid,
                        "ts": ts + min(draft, dur), "dur": max(dur - draft, 0.0)})
        out.append({"name": f"replica {tid} KV occupancy", "ph": "C", "pid": pid, "ts": ts,
                    "args": {"occupancy": float(row.kv_occupancy)}})
        out.append({"name": f"replica {tid} queue", "ph": "C", "pid": pid, "ts": ts,
                    "args": {"waiting": int(row.queue_len)}})
    return out


def timeline_document(results: Sequence, max_steps: int = MAX_STEPS) -> dict:
    """The trace-event document of ``results`` (one process per policy)."""
    kept_total = sum(len(r.steps) for r in results)
    budget = max_steps
    events: list[dict] = []
    policies = []
    for pid, r in enumerate(results):
        steps = r.steps.sort_values(["start_s", "replica"], kind="stable")
        total = int(r.totals()["steps"])
        take = steps.iloc[:max(budget, 0)]
        budget -= len(take)
        events.append({"name": "process_name", "ph": "M", "pid": pid,
                       "args": {"name": f"policy {r.label}"}})
        for tid in np.unique(steps["replica"].to_numpy()) if len(steps) else ():
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": int(tid),
                           "args": {"name": f"replica {int(tid)}"}})
        events.extend(_step_events(pid, take))
        policies.append({"policy": r.label, "steps_run": total, "steps_kept": len(steps),
                         "steps_written": len(take)})
    note = "every step" if all(p["steps_written"] == p["steps_run"] for p in policies) else (
        f"the earliest {max_steps:,} steps kept (the file's limit)" if kept_total > max_steps
        else "the steps the run's steps table kept (a sample)")
    return {"otherData": {"generator": "specsim timeline", "time": "simulated",
                          "contents": note, "policies": policies},
            "displayTimeUnit": "ms", "traceEvents": events}


def write_timeline(results: Sequence, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write the timeline file (atomically; never over a file specsim did not write)."""
    from simulator.output_paths import write_text_file

    doc = timeline_document(results)
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False)  # starts with MARK
    return write_text_file(path, text, "--timeline", marks=(MARK,), overwrite=overwrite,
                           what="timeline")


def check_timeline_target(path: str | Path, *, overwrite: bool = False) -> Path:
    """Check the timeline path before any work is done."""
    from simulator.output_paths import check_file_target

    return check_file_target(path, "--timeline", marks=(MARK,), overwrite=overwrite,
                             what="timeline")
