"""The one-sentence answer of a flags-only ``specsim plan`` (quick_search.py's table in)."""
from __future__ import annotations

import math
from typing import Any, Mapping

import pandas as pd

from simulator.planning.quick_plan import OPEN_LOOP_BACKLOG, Question

METHOD_NAMES = {"none": "no speculation", "draft_model": "a draft model", "eagle": "EAGLE",
                "eagle3": "EAGLE-3", "mtp": "MTP"}
# the limits a candidate missed (capacity.evaluate_rate's names), as the verdict says them
VIOLATIONS = {"p99_ttft": "p99 TTFT", "p99_tpot": "p99 TPOT", "goodput": "goodput",
              "rejected": "requests rejected"}


def _violated(names: str) -> str:
    """``in_flight,p99_ttft`` as words (the backlog's limit: the open loop's)."""
    backlog = (f"the backlog: more than {OPEN_LOOP_BACKLOG:.0%} of the requests still in "
               "flight when the last one arrives (the last one always is: a trace of "
               f"{math.ceil(1 / OPEN_LOOP_BACKLOG) - 1} or fewer never holds)")
    return "; ".join(backlog if name == "in_flight" else VIOLATIONS.get(name, name)
                     for name in names.split(","))


def describe(row: Mapping[str, Any]) -> str:
    """``2 x TP4 with EAGLE-3 k=3``, or ``1 x TP8 prefill + 1 x DP8+EP decode with MTP
    k=3`` (disaggregated)."""
    shape = f"{row['replicas']} x {row['shape']}"
    if row.get("deployment") == "disaggregated":
        shape = f"{row['prefill_replicas']} x {row['prefill_shape']} prefill + {shape} decode"
    return f"{shape} with {METHOD_NAMES[row['method']]}" + (
        f" k={row['gamma']}" if row["gamma"] else "")


def _latency(row: Mapping[str, Any]) -> str:
    return f"p99 TTFT {row['p99_ttft_ms']:,.0f} ms and p99 TPOT {row['p99_tpot_ms']:.1f} ms"


def _up_to(row: Mapping[str, Any], q: Question) -> str:
    rate = row["max_rate_per_s"]
    if not math.isfinite(rate):
        return ""
    at_least = "at least " if "raise it" in str(row.get("search_note", "")) else ""
    return f", up to {at_least}{rate:.3g} req/s ({rate / q.rate - 1:.0%} headroom)"


def _load(q: Question) -> str:
    return f"{q.concurrency:,} concurrent requests" if q.closed_loop else f"{q.rate:g} req/s"


def _other(q: Question, table: pd.DataFrame, speculative: bool) -> str:
    """What the same GPUs do with (``speculative``) or without speculation."""
    rows = table[(table["method"] != "none") == speculative]
    what = "with speculation" if speculative else "without speculation"
    if rows.empty:
        return ""
    best = rows.iloc[0]
    if not best["holds"]:
        return (f"; {what} no configuration of the same GPUs holds it (the closest, "
                f"{describe(best)}, reaches {_latency(best)})")
    if q.closed_loop:
        return (f"; {what} the best, {describe(best)}, gives {best['output_tok/s']:,.0f} "
                "output tokens/s")
    return f"; {what} the best, {describe(best)}, holds it" + _up_to(best, q)


def _other_kind(q: Question, table: pd.DataFrame, kind: str) -> str:
    """With ``--disagg``: what the best deployment of the other kind does."""
    other = "aggregated" if kind == "disaggregated" else "disaggregated"
    rows = table[table["deployment"] == other]
    if not q.disagg or rows.empty:
        return ""
    best = rows.iloc[0]
    if not best["holds"]:
        return f"; {other}, the closest, {describe(best)}, reaches {_latency(best)}"
    if q.closed_loop:
        return (f"; {other}, the best, {describe(best)}, gives "
                f"{best['output_tok/s']:,.0f} output tokens/s")
    return f"; {other}, the best, {describe(best)}, holds it" + _up_to(best, q)


def verdict(q: Question, table: pd.DataFrame) -> str:
    """One sentence: what the winner holds, at what latency, and the other side's best."""
    hardware = q.hardware
    if hardware.endswith((".yaml", ".yml")):  # the user's own profile: by its name
        from hardware.profile import load_profile
        hardware = load_profile(hardware).name
    gpus = f"{q.gpus} x {hardware}"
    win = table.iloc[0]
    if not win["holds"]:
        limits = f"p99 TTFT <= {q.ttft_ms:g} ms and p99 TPOT <= {q.tpot_ms:g} ms"
        return (f"No configuration of {gpus} holds {_load(q)} within {limits}: the closest, "
                f"{describe(win)}, reaches {_latency(win)}"
                + (f" (over: {_violated(win['violated'])})" if win["violated"] else "")
                + ".")
    text = f"{gpus} as {describe(win)} hold {_load(q)} at {_latency(win)}"
    if q.closed_loop:
        text += f", {win['output_tok/s']:,.0f} output tokens/s"
    else:
        text += _up_to(win, q)
    return (text + _other(q, table, speculative=win["method"] == "none")
            + _other_kind(q, table, win["deployment"]) + ".")
