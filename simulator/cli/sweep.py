"""``specsim sweep sweep.yaml``: a grid of analytic or simulated points, streamed to a
resumable results file, and a table out."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulator.cli.args import add_executor_arguments
from simulator.cli.output import FORMATS, render, wrap_text

SHOWN_SIMULATED = ("p50_ttft_s", "p99_ttft_s", "p50_tpot_s", "p99_tpot_s",
                   "output_tokens_per_s", "goodput_requests_per_s", "mean_acceptance_length")
SHOWN_ANALYTIC = ("draft_s", "verify_s", "decode_s", "c", "expected_tokens", "speedup",
                  "tokens_per_s", "kv_fits")


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Arguments of ``sweep``."""
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("sweep", help="sweep YAML (see workloads/scenarios/sweep_*.yaml)")
    p.add_argument("--out", default=None,
                   help="results file, .csv or .parquet (a folder of parts); a rerun "
                        "skips the points already in it (default sweep-<name>.csv)")
    p.add_argument("--restart", action="store_true",
                   help="discard the points already in --out and run every point")
    p.add_argument("--report", default=None, help="also write an HTML report to this path")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a --report file that specsim did not write")
    # the limits are simulator.planning.sweep.CONFIRM_POINTS and MAX_POINTS
    p.add_argument("--allow-large", action="store_true",
                   help="run a grid above the confirmation limit (100,000 analytic or "
                        "1,000 simulated points; hard limits 2,000,000 and 100,000)")
    add_executor_arguments(p, default="auto")
    from simulator.cli.args import bounded_int
    from simulator.uncertainty.spec import MAX_UNCERTAINTY_DRAWS
    p.add_argument("--uncertainty", type=bounded_int(MAX_UNCERTAINTY_DRAWS), default=None,
                   metavar="N", help="simulated sweeps: also run N Monte Carlo draws of each "
                   "point's declared input uncertainty and print p5/p50/p95 of each metric "
                   f"(at most {MAX_UNCERTAINTY_DRAWS:,}; docs/uncertainty.md); default: each "
                   "point's scenario's uncertainty.draws, else none")


def main(args: argparse.Namespace) -> int:
    """Run ``specsim sweep``."""
    from simulator.planning.sweep import load_sweep, run_sweep
    spec = load_sweep(args.sweep, allow_large=args.allow_large)
    from simulator.planning.sweep_uncertainty import draws_asked
    draws = draws_asked(spec, args.uncertainty)  # before any point runs
    from simulator.output_paths import OutputLock
    out = Path(args.out).expanduser() if args.out else Path(f"sweep-{spec.name}.csv")
    if args.report:
        from reports.page import check_report_target
        check_report_target(args.report, overwrite=args.overwrite)
    _check_not_inputs(args, spec, out)
    from simulator.cli.progress import Progress
    with OutputLock(out.absolute(), "--out"), \
            Progress(spec.name, unit="points", enabled=not args.no_progress) as bar:
        df = run_sweep(spec, executor=args.executor, workers=args.workers,
                       address=args.address, out=out, progress=bar.set,
                       restart=args.restart)  # one sweep at a time appends to a file
    if draws != 0:  # the intervals join the printed table only
        df = _with_intervals(args, spec, df, draws)
    failed = int(df["error"].notna().sum())
    if args.report:
        from reports import render_report  # only reports/ imports altair
        path = render_report([], args.report, sweep=df, slo=_common_slo(spec),
                             overwrite=args.overwrite)
        print(f"report: {path}", file=sys.stderr)
    from simulator.acceptance.provenance import frame_notes
    sources, warnings = frame_notes(df, "point")
    for line in warnings:  # stderr: stdout stays the table (or the csv/json)
        print(wrap_text(f"warning: point {line}", indent="    "), file=sys.stderr)
    if args.format != "table":
        print(render(df, args.format))
        return 1 if failed else 0
    fields = list(dict.fromkeys(k for cols in spec.columns for k in cols))
    shown_cols = SHOWN_ANALYTIC if spec.mode == "analytic" else SHOWN_SIMULATED
    shown = df[fields + [c for c in shown_cols if c in df] + ["error"]].copy()
    for c in [c for c in shown.columns if c.endswith("_s") and not c.endswith("per_s")]:
        shown[c[:-2] + "_ms"] = shown.pop(c) * 1e3
    if draws != 0:
        shown = _interval_columns(df, shown)
    if not failed:
        shown = shown.drop(columns=["error"])
    print(f"sweep {spec.name}: {len(df)} {spec.mode} points")
    print(render(shown, "table"))
    for line in sources:
        print(wrap_text(line, indent="    "))
    print(f"results: {out}" + (f" ({failed} points failed; see the error column)"
                               if failed else ""))
    return 1 if failed else 0


def _with_intervals(args: argparse.Namespace, spec, df, draws: int | None):
    """The table with each point's p5/p50/p95 (simulator/planning/sweep_uncertainty.py)
    over ``draws`` draws (None: each point's ``uncertainty.draws``)."""
    from simulator.cli.progress import Progress
    from simulator.planning.sweep_uncertainty import sweep_intervals
    executor = "local" if args.executor == "auto" else args.executor
    with Progress("uncertainty", unit="draws", enabled=not args.no_progress) as bar:
        return sweep_intervals(spec, df, draws, executor=executor,
                               workers=args.workers, address=args.address, progress=bar.set)


def _interval_columns(df, shown):
    """``shown`` with a ``{metric} 90%`` column (p5-p95, ms for latencies) per metric."""
    from simulator.uncertainty.propagate import METRICS
    for m in METRICS:
        if f"{m}_p5" not in df:
            continue
        scale, name = (1e3, m[:-2] + "_ms") if not m.endswith("per_s") else (1.0, m)
        at = shown.columns.get_loc(name) + 1 if name in shown else len(shown.columns)
        shown.insert(at, f"{name} 90%", [f"{lo * scale:.4g}-{hi * scale:.4g}" if lo == lo
                                         else "" for lo, hi in zip(df[f"{m}_p5"],
                                                                   df[f"{m}_p95"])])
    return shown


def _check_not_inputs(args: argparse.Namespace, spec, out: Path) -> None:
    """Neither --out nor --report may be the sweep file or a trace a point reads."""
    from simulator.input_clash import check_outputs_not_inputs, workload_files
    traces = {str(p) for payload in spec.payloads if spec.mode == "simulated"
              for p in workload_files(payload.get("workload") or {}, spec.base_dir)}
    check_outputs_not_inputs([("--out", out), ("--report", args.report)],
                             [args.sweep, *sorted(traces)])


def _common_slo(spec):
    """The SLO every point of a simulated sweep shares (its scenario's ``slo:``), for the
    report's latency band; None for analytic sweeps or points with different SLOs."""
    if spec.mode != "simulated":
        return None
    slos = [p.get("slo") for p in spec.payloads]
    return slos[0] if slos[0] and all(s == slos[0] for s in slos) else None
