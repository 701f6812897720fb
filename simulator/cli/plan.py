"""``specsim plan plan.yaml``: the highest sustainable rate, replicas and cost per deployment."""
from __future__ import annotations

import argparse
import sys

from simulator.cli.args import add_executor_arguments
from simulator.cli.output import FORMATS, render

SHOWN = ("rank", "candidate", "devices", "max_rate_per_s", "p99_ttft_s", "p99_tpot_s",
         "goodput_fraction", "cost_per_million_tokens", "min_replicas_for_target",
         "cost_per_million_tokens_at_target", "evaluations")

# a plan table starts with these columns (plan() inserts rank first, then candidate)
PLAN_MARKS = (b"rank,candidate,",)


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Arguments of ``plan``."""
    p.add_argument("plan", help="plan YAML (see workloads/scenarios/plan_*.yaml)")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--out", default=None, help="also write the full table to this CSV")
    p.add_argument("--report", default=None, help="also write an HTML report to this path")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an --out or --report file that specsim did not write")
    add_executor_arguments(p)


def main(args: argparse.Namespace) -> int:
    """Search every candidate deployment and print the ranked table."""
    from simulator.output_paths import check_file_target, write_text_file
    from simulator.planning.plan import load_plan, plan
    spec = load_plan(args.plan)
    if args.out:  # every path is checked before the search starts
        check_file_target(args.out, "--out", marks=PLAN_MARKS, overwrite=args.overwrite,
                          what="plan table")
    if args.report:
        from reports.page import check_report_target
        check_report_target(args.report, overwrite=args.overwrite)
    from simulator.cli.progress import Progress
    with Progress(spec.name, len(spec.candidates), unit="deployments",
                  enabled=not args.no_progress) as bar:
        df = plan(spec, executor=args.executor, workers=args.workers, address=args.address,
                  progress=bar.set)
    if args.out:
        write_text_file(args.out, df.to_csv(index=False), "--out", marks=PLAN_MARKS,
                        overwrite=args.overwrite, what="plan table")
    if args.report:
        from reports import render_report  # only reports/ imports altair
        path = render_report([], args.report, plan=df, overwrite=args.overwrite)
        print(f"report: {path}", file=sys.stderr)
    if args.format != "table":
        print(render(df, args.format))
        return 0
    shown = df[[c for c in SHOWN if c in df]].copy()
    for c in ("p99_ttft_s", "p99_tpot_s"):
        if c in shown:
            shown[c] = shown[c] * 1e3
    shown = shown.rename(columns={"p99_ttft_s": "p99_ttft_ms", "p99_tpot_s": "p99_tpot_ms"})
    slo = spec.slo
    parts = [f"p99 TTFT <= {slo.p99_ttft_s * 1e3:g} ms" if slo.p99_ttft_s else "",
             f"p99 TPOT <= {slo.p99_tpot_s * 1e3:g} ms" if slo.p99_tpot_s else "",
             f"goodput >= {slo.goodput_fraction:.0%}" if slo.goodput_fraction else ""]
    target = f"; replicas for {spec.target_rate_per_s:g} req/s" \
        if spec.target_rate_per_s else ""
    print(f"plan {spec.name}: SLO {', '.join(p for p in parts if p)}{target}")
    print(render(shown, "table"))
    for _, row in df.iterrows():
        if isinstance(row.get("error"), str):
            print(f"  {row['candidate']}: failed: {row['error']}")
        elif isinstance(row.get("note"), str) and row["note"]:
            print(f"  {row['candidate']}: {row['note']}")
    return 0
