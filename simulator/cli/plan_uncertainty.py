"""``plan --uncertainty N``: each candidate's max rate, replicas and costs as p5/p50/p95
over N draws of its declared input uncertainty (simulator/planning/plan_uncertainty.py),
and a verdict line per candidate: "6 replicas (5-7 at 90%)" and the input that makes the
width."""
from __future__ import annotations

import argparse
import math
from typing import Any

from simulator.cli.args import bounded_int
from simulator.uncertainty.spec import MAX_UNCERTAINTY_DRAWS


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``--uncertainty N`` (the draws run on the plan's --executor and --workers)."""
    p.add_argument("--uncertainty", type=bounded_int(MAX_UNCERTAINTY_DRAWS), default=None,
                   metavar="N",
                   help="also search each candidate under N Monte Carlo draws of its "
                        "scenario's declared input uncertainty (at most "
                        f"{MAX_UNCERTAINTY_DRAWS:,}) and report p5/p50/p95 of its max rate, "
                        "replicas and costs (docs/uncertainty.md); default: the scenario's "
                        "uncertainty.draws, else none")


def draws_asked(args: argparse.Namespace, spec) -> int | None:
    """``--uncertainty N``; None: each candidate's own ``uncertainty.draws``; 0: no draws
    (neither asks).  Checked before any search."""
    from simulator.planning.plan_uncertainty import check_unique_labels
    from simulator.scenario import scenario_from_dict
    if args.uncertainty is not None:
        check_unique_labels(spec)
        return args.uncertainty
    own = [scenario_from_dict(raw, source=label, base_dir=spec.base_dir).uncertainty.draws
           for label, raw in spec.candidates]
    if not any(own):
        return 0
    check_unique_labels(spec)
    return None


def with_intervals(args: argparse.Namespace, spec, df: Any, draws: int | None) -> Any:
    """The plan's table with its interval columns, the draws on the plan's executor."""
    from simulator.cli.progress import Progress
    from simulator.planning.plan_uncertainty import plan_intervals
    with Progress("uncertainty", unit="draws", enabled=not args.no_progress) as bar:
        return plan_intervals(spec, df, draws, executor=args.executor, workers=args.workers,
                              address=args.address, progress=bar.set)


def _span(row, metric: str, fmt: str, unit: str = "", none: str = "none") -> str:
    """``p50 unit (p5-p95 at 90%)`` of one metric; a draw without an answer (no replica
    count up to max_replicas, no sustainable rate) reads ``none``."""
    lo, mid, hi = (row.get(f"{metric}_p{q}") for q in (5, 50, 95))
    if mid is None or mid != mid:
        return "n/a"

    def num(v: float) -> str:
        return format(v, fmt) if not math.isinf(v) else none
    sep = "-" if not math.isinf(hi) else " to "
    return f"{num(mid)}{unit} ({num(lo)}{sep}{num(hi)} at 90%)" if lo != hi else \
        f"{num(mid)}{unit} (every draw)"


def _widest(row, metric: str) -> str:
    src = row.get(f"{metric}_widest")
    if not isinstance(src, str) or src == "none":
        return ""
    share = row.get(f"{metric}_share_{src}")
    return f"; width mostly from {src}" + (f" ({share:.0%} of the variance)"
                                           if isinstance(share, float) and share == share
                                           else "")


def verdict_lines(df: Any, spec) -> list[str]:
    """One line per candidate: its answers with their 90% intervals and widest source."""
    lines = []
    for _, row in df.iterrows():
        head = f"{row['candidate']} ({int(row['uncertainty_draws'])} draws): "
        if isinstance(row.get("uncertainty_error"), str):
            lines.append(head + f"no interval: {row['uncertainty_error']}")
            continue
        parts = []
        if spec.target_rate_per_s is not None:
            one = row.get("min_replicas_for_target_p50") == 1
            n = _span(row, "min_replicas_for_target", ".0f", " replica" + ("" if one else "s"),
                      f">{spec.max_replicas}")
            parts.append(f"{n} for {spec.target_rate_per_s:g} req/s"
                         + _widest(row, "min_replicas_for_target"))
        parts.append(f"max rate {_span(row, 'max_rate_per_s', '.3g', ' req/s')}"
                     + _widest(row, "max_rate_per_s"))
        cost = "cost_per_million_tokens_at_target" if spec.target_rate_per_s is not None \
            else "cost_per_million_tokens"
        if spec.prices is not None:
            parts.append(_span(row, cost, ".3g", " $/Mtok", "n/a"))
        lines.append(head + "; ".join(parts))
    return lines
