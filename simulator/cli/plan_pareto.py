"""``specsim plan --target ... --pareto pareto.csv [--disagg] [--report pareto.html]``: every
deployment over a ladder of client concurrencies, and the Pareto frontier of output tokens/s
per GPU against output tokens/s per user (simulator/planning/pareto_search.py, pareto.py).

Prints each series' frontier and, under the question's SLO, each series' most tokens/s per
GPU; writes every point to the CSV and, with --report, the chart (reports/pareto_chart.py).
"""
from __future__ import annotations

import argparse
import sys

import pandas as pd

from simulator.cli.output import render, wrap_text
from simulator.planning.quick_plan import Question

# the first bytes of a points CSV (what --pareto may replace without --overwrite)
PARETO_MARKS = (b"series,candidate,",)
SHOWN = ("series", "candidate", "concurrency", "output_tok/s/user", "output_tok/s/gpu",
         "holds")


def _check_paths(args: argparse.Namespace, q: Question) -> None:
    """Every output path, before any simulation."""
    from simulator.input_clash import check_outputs_not_inputs
    from simulator.output_paths import check_file_target
    trace = None if q.trace in (None, "default") else q.trace
    check_outputs_not_inputs([("--pareto", args.pareto), ("--report", args.report)], [trace])
    check_file_target(args.pareto, "--pareto", marks=PARETO_MARKS, overwrite=args.overwrite,
                      what="Pareto table")
    if args.report:
        from reports.page import check_report_target
        check_report_target(args.report, overwrite=args.overwrite)


def main_pareto(args: argparse.Namespace, q: Question, header: str) -> int:
    """Check the paths, run the ladder, write the CSV (and the chart), print the frontier."""
    from simulator.cli.progress import Progress
    from simulator.output_paths import write_text_file
    from simulator.planning.pareto_search import pareto_points
    _check_paths(args, q)
    with Progress("plan --pareto", 0, unit="simulations", enabled=not args.no_progress) as bar:
        done = [0]

        def tick() -> None:
            done[0] += 1
            bar.set(done[0], done[0])
        ans = pareto_points(q, q.concurrency, executor=args.executor, workers=args.workers,
                            progress=tick)
    write_text_file(args.pareto, ans.points.to_csv(index=False), "--pareto",
                    marks=PARETO_MARKS, overwrite=args.overwrite, what="Pareto table")
    stream = sys.stdout if args.format == "table" else sys.stderr
    if args.report:
        from reports.pareto_chart import render_pareto_report
        path = render_pareto_report(ans.points, args.report, title=f"plan {header}",
                                    overwrite=args.overwrite)
        print(f"report: {path}", file=sys.stderr)
    if args.format != "table":
        print(render(ans.points, args.format))
    else:
        _print(q, ans, header)
    print(f"wrote {args.pareto}: {len(ans.points)} points (on_frontier: each series' "
          "frontier; on_overall_frontier: the frontier of all)", file=stream)
    return 0


def _print(q: Question, ans, header: str) -> None:
    from simulator.planning.pareto import best_at, frontier
    pts = ans.points
    print(f"plan {header} --pareto")
    print(wrap_text(f"{len(pts)} points: {pts['candidate'].nunique()} deployments at "
                    f"{pts['concurrency'].nunique()} concurrencies (closed loop, 1 to "
                    f"{q.concurrency}). The frontier of each series, output tokens/s per "
                    "user (1 / mean TPOT) against output tokens/s per GPU:"))
    print(render(frontier(pts)[list(SHOWN)], "table"))
    print()
    held = best_at(pts[pts["holds"]], 0.0)
    limits = f"p99 TTFT <= {q.ttft_ms:g} ms and p99 TPOT <= {q.tpot_ms:g} ms"
    if held.empty:
        print(wrap_text(f"No point holds {limits}."))
    else:
        print(wrap_text(f"Within {limits}, the most output tokens/s per GPU:"))
        for _, row in _in_series_order(held).iterrows():
            print(wrap_text(f"  {row['series']}: {row['output_tok/s/gpu']:,.1f} at "
                            f"{row['output_tok/s/user']:,.1f} tokens/s per user "
                            f"({row['candidate']}, {row['concurrency']} in flight)",
                            indent="    "))
    for note in ans.notes:
        print(wrap_text(f"  {note}", indent="    "))
    for method, line in ans.acceptance.items():
        print(wrap_text(f"  acceptance of {method}: {line}", indent="    "))


def _in_series_order(df: pd.DataFrame) -> pd.DataFrame:
    from simulator.planning.pareto_search import SERIES
    order = {s: i for i, s in enumerate(SERIES)}
    return df.sort_values("series", key=lambda s: s.map(order), kind="stable")
