"""``specsim plan plan.yaml``: the highest sustainable rate, replicas and cost per deployment."""
from __future__ import annotations

import argparse
import sys
import textwrap

from simulator.cli.args import add_executor_arguments
from simulator.cli.output import FORMATS, render, wrap_text

SHOWN = ("rank", "candidate", "devices", "max_rate_per_s", "p99_ttft_s", "p99_tpot_s",
         "goodput_fraction", "cost_per_million_tokens", "min_replicas_for_target",
         "cost_per_million_tokens_at_target", "evaluations")

# a plan table starts with these columns (plan() inserts rank first, then candidate)
PLAN_MARKS = (b"rank,candidate,",)


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Arguments of ``plan``."""
    p.add_argument("plan", nargs="?", default=None,
                   help="plan YAML (see workloads/scenarios/plan_*.yaml); or ask in flags: "
                        "--target, --hardware, --gpus, ...")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--out", default=None, help="also write the full table to this CSV")
    p.add_argument("--report", default=None, help="also write an HTML report to this path")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an --out or --report file that specsim did not write")
    over = p.add_mutually_exclusive_group()
    over.add_argument("--drop-over-context", action="store_true",
                      help="drop the requests whose prompt + output exceed the target's "
                           "max_context (default: the engine rejects them, as vLLM does)")
    over.add_argument("--truncate-over-context", action="store_true",
                      help="cut their output so prompt + output fits (a prompt that leaves "
                           "no room for one output token is dropped)")
    add_executor_arguments(p)
    from simulator.cli.plan_uncertainty import add_arguments as add_uncertainty
    add_uncertainty(p)
    from simulator.cli.plan_quick import add_quick_arguments
    add_quick_arguments(p)


def main(args: argparse.Namespace) -> int:
    """Pre-flight, search every candidate deployment, print the ranked table and how to
    read it."""
    import dataclasses

    if args.target is not None or args.plan is None:
        return _question(args)
    from simulator.output_paths import check_file_target, write_text_file
    from simulator.planning.plan import load_plan, plan
    from simulator.planning.preflight import preflight, preflight_lines
    spec = load_plan(args.plan)
    if args.drop_over_context or args.truncate_over_context:
        spec = dataclasses.replace(spec, over_context="drop" if args.drop_over_context
                                   else "truncate")
    from simulator.cli.plan_uncertainty import draws_asked
    draws = draws_asked(args, spec)  # 0: none; None: each candidate's own
    from simulator.input_clash import check_outputs_not_inputs, workload_files
    traces = {str(p) for _, payload in spec.candidates
              for p in workload_files(payload.get("workload") or {}, spec.base_dir)}
    check_outputs_not_inputs([("--out", args.out), ("--report", args.report)],
                             [args.plan, *sorted(traces)])
    if args.out:  # every path is checked before the search starts
        check_file_target(args.out, "--out", marks=PLAN_MARKS, overwrite=args.overwrite,
                          what="plan table")
    if args.report:
        from reports.page import check_report_target
        check_report_target(args.report, overwrite=args.overwrite)
    stream = sys.stdout if args.format == "table" else sys.stderr  # keep csv/json clean
    for line in preflight_lines(preflight(spec), spec.over_context):
        print(wrap_text(line), file=stream, flush=True)
    from simulator.cli.progress import Progress
    with Progress(spec.name, 0, unit="simulations", enabled=not args.no_progress) as bar:
        df = plan(spec, executor=args.executor, workers=args.workers, address=args.address,
                  progress=_with_eta(bar))
    if draws != 0:  # the p5/p50/p95 columns (simulator/planning/plan_uncertainty.py)
        from simulator.cli.plan_uncertainty import with_intervals
        df = with_intervals(args, spec, df, draws)
    if args.out:
        write_text_file(args.out, df.to_csv(index=False), "--out", marks=PLAN_MARKS,
                        overwrite=args.overwrite, what="plan table")
    if args.report:
        from reports import render_report  # only reports/ imports altair
        path = render_report([], args.report, plan=df, slo=spec.slo, overwrite=args.overwrite)
        print(f"report: {path}", file=sys.stderr)
    from simulator.acceptance.provenance import frame_notes
    sources, warnings = frame_notes(df, "candidate")
    if args.format != "table":
        print(render(df, args.format))
    else:
        _print_table(df, spec)
        if draws != 0:
            from simulator.cli.plan_uncertainty import verdict_lines
            print("\n".join(wrap_text(f"  {x}", indent="    ") for x in verdict_lines(df, spec)))
        for line in sources:
            print(wrap_text(line, indent="    "))
    for line in warnings:  # stderr: stdout stays the table (or the csv/json)
        print(wrap_text(f"warning: {line}", indent="    "), file=sys.stderr)
    return 0


def _question(args: argparse.Namespace) -> int:
    """``plan --target ...``: the question in flags (simulator/cli/plan_quick.py)."""
    from simulator.inputs.errors import SpecsimError
    if args.plan is not None:
        raise SpecsimError("a plan YAML and --target given together", field="--target",
                           fix="ask in flags or in the YAML, not both")
    if args.target is None:
        raise SpecsimError("no plan YAML and no --target", field="plan",
                           fix="give a plan YAML, or ask in flags: specsim plan --target "
                               "llama-3.1-8b --hardware h100-sxm --gpus 1 --isl 1000 --osl "
                               "200 --rate 2 --ttft-ms 1000 --tpot-ms 40")
    from simulator.cli.plan_quick import main_quick
    return main_quick(args)


def _with_eta(bar):
    """``progress(done, total)`` for ``bar`` with an ETA label: the time per simulation so
    far times the simulations left of the bound (so an upper estimate: searches that end
    sooner lower the total)."""
    import time
    start = time.monotonic()

    def update(done: int, total: int) -> None:
        left = (time.monotonic() - start) / done * (total - done) if done else None
        bar.set(done, total, label=None if left is None else f"ETA <= {_duration(left)}")
    return update


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else \
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _print_table(df, spec) -> None:
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
    print()
    for line in explain(spec.target_rate_per_s):
        print(textwrap.fill(line, 100, subsequent_indent="  "))
    for _, row in df.iterrows():
        if isinstance(row.get("error"), str):
            print(wrap_text(f"  {row['candidate']}: failed: {row['error']}", indent="    "))
            continue
        for line in explain_row(row, spec.target_rate_per_s):
            print(textwrap.fill(f"  {row['candidate']}: {line}", 100, subsequent_indent="    "))
        if isinstance(row.get("note"), str) and row["note"]:
            print(wrap_text(f"  {row['candidate']}: {row['note']}", indent="    "))


def _stretch(factor: float) -> str:
    return f"stretched {factor:.3g}x in time" if factor >= 1 else \
        f"compressed {1 / factor:.3g}x in time"


def explain(target: float | None) -> list[str]:
    """How the table's rates and replica counts were measured."""
    lines = ["max_rate_per_s: the highest request rate a deployment (all its replicas) holds, "
             "found by simulating one trace with its arrival times rescaled (stretched in "
             "time for a lower rate)"]
    if target is not None:
        lines.append(f"min_replicas_for_target: the fewest replicas for which a simulation of "
                     f"that many replicas at {target:g} req/s (the same trace rescaled, split "
                     "by the router) holds the SLO; replicas x the per-replica rate need not "
                     f"equal {target:g}: the split stream is not the whole trace slowed down")
    return lines


def explain_row(row, target: float | None) -> list[str]:
    """One candidate's measurement: the stretch, and the check run at the target."""
    rate, n = row.get("max_rate_per_s"), row.get("min_replicas_for_target")
    if not isinstance(rate, float) or rate != rate:
        return []
    per = rate / row["replicas"]
    lines = [f"max {rate:.3g} req/s ({per:.3g} per replica) measured on the trace of "
             f"{row['trace_requests']:,} requests ({row['trace_rate_per_s']:.3g} req/s as "
             f"recorded) {_stretch(row['time_stretch_at_max_rate'])}"]
    if target is None or "replicas_checked_at_target" not in row:
        return lines
    at = (f"p99 TTFT {row['p99_ttft_s_at_target'] * 1e3:.1f} ms, p99 TPOT "
          f"{row['p99_tpot_s_at_target'] * 1e3:.1f} ms, goodput "
          f"{row['goodput_fraction_at_target']:.1%}")
    checked = int(row["replicas_checked_at_target"])
    if n != n:
        lines.append(f"no replica count holds {target:g} req/s: {checked} replicas simulated "
                     f"at it gave {at} (violated {row['violated_at_target']})")
        return lines
    fewer = f"; {int(n) - 1} violated {row['violated_one_fewer']}" \
        if row.get("violated_one_fewer") else ""
    many = f"{int(n)} replica" + ("s" if n != 1 else "")
    lines.append(f"{many} checked by a simulation of {many} at "
                 f"{target:g} req/s (the trace {_stretch(row['time_stretch_at_target'])}): "
                 f"{at}{fewer}; by multiplication {int(n)} x {per:.3g} = {n * per:.3g} req/s")
    return lines
