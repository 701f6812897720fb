"""``specsim sweep sweep.yaml`` and ``specsim gamma-map``: grids of points, tables out."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.cli_types import positive_int
from simulator.errors import SpecsimError
from simulator.executors import EXECUTORS
from simulator.output import FORMATS, render

SHOWN_SIMULATED = ("p50_ttft_s", "p99_ttft_s", "p50_tpot_s", "p99_tpot_s",
                   "output_tokens_per_s", "goodput_requests_per_s", "mean_acceptance_length")
SHOWN_ANALYTIC = ("draft_s", "verify_s", "decode_s", "c", "expected_tokens", "speedup",
                  "tokens_per_s", "kv_fits")


def add_executor_arguments(p: argparse.ArgumentParser, default: str = "local") -> None:
    """--executor, --workers, --address and --no-progress (shared with ``plan``)."""
    choices = tuple(EXECUTORS) + (("auto",) if default == "auto" else ())
    p.add_argument("--executor", choices=choices, default=default,
                   help=f"where points run (default {default}"
                        + (": one process for analytic sweeps under 20,000 points, else the "
                           "local pool" if default == "auto" else "")
                        + "; ray needs pip install 'specsim[ray]')")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="processes for the local pool (default: every core)")
    p.add_argument("--address", default=None, help="Ray cluster address (with --executor ray)")
    p.add_argument("--no-progress", action="store_true")


def parse_number_list(text: str, *, field: str, integer: bool = True,
                      minimum: float = 0) -> list:
    """``1,2,4``, a range ``0-8`` (integers) or both mixed, into a sorted list."""
    values: set = set()
    try:
        for part in filter(None, (s.strip() for s in str(text).split(","))):
            m = re.fullmatch(r"(\d+)-(\d+)", part) if integer else None
            if m:
                lo, hi = int(m.group(1)), int(m.group(2))
                if hi < lo:
                    raise ValueError
                values.update(range(lo, hi + 1))
            else:
                value = float(part)
                if integer and not value.is_integer():
                    raise ValueError
                values.add(int(value) if integer else value)
    except ValueError:
        raise SpecsimError(f"cannot read {text!r}", field=field,
                           fix="write a list like 1,2,4" + (" or a range like 0-8" if integer
                                                             else "")) from None
    if not values or min(values) < minimum or not np.all(np.isfinite(list(values))):
        raise SpecsimError(f"needs numbers >= {minimum}, got {text!r}", field=field)
    return sorted(values)


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Arguments of ``sweep`` or ``gamma-map``."""
    p.add_argument("--format", choices=FORMATS, default="table")
    if name == "sweep":
        p.add_argument("sweep", help="sweep YAML (see workloads/scenarios/sweep_*.yaml)")
        p.add_argument("--out", default=None,
                       help="results file, .csv or .parquet (a folder of parts); a rerun "
                            "skips the points already in it (default sweep-<name>.csv)")
        p.add_argument("--restart", action="store_true",
                       help="discard the points already in --out and run every point")
        p.add_argument("--report", default=None, help="also write an HTML report to this path")
        p.add_argument("--overwrite", action="store_true",
                       help="replace a --report file that specsim did not write")
        add_executor_arguments(p, default="auto")
        return
    p.add_argument("--hardware", default="a100-40gb")
    p.add_argument("--hardware-dir", default=None, help="extra folder of profile YAML files")
    p.add_argument("--target", default="opt-13b")
    p.add_argument("--draft", default="opt-125m")
    p.add_argument("--tensor-parallel", type=positive_int, default=1)
    p.add_argument("--alpha", type=float, default=0.8, help="i.i.d. acceptance rate")
    p.add_argument("--batch", default="1,2,4,8,16,32,64,128,256")
    p.add_argument("--context", default="128,512,2048,8192")
    p.add_argument("--gamma", default="0-16", help="gammas tried (tree: depths)")
    p.add_argument("--policy", default="chain", help="chain, tree or chain,tree")
    p.add_argument("--tree-width", default="1,2,4,8", help="tree widths tried")
    p.add_argument("--tree-rates", default=None,
                   help="Sequoia per-rank acceptance, e.g. 0.8,0.3,0.15 (needed for tree; "
                        "then used for chain too, alpha = the first rate)")
    p.add_argument("--max-batch", type=positive_int, default=4096,
                   help="largest batch the crossover search tries")
    p.add_argument("--no-overheads", action="store_true",
                   help="plain roofline: no per-kernel or per-step overheads")


def main(args: argparse.Namespace) -> int:
    """Run ``sweep`` or ``gamma-map``."""
    if args.command == "gamma-map":
        return _gamma_map(args)
    from simulator.sweep import load_sweep, run_sweep
    spec = load_sweep(args.sweep)
    from simulator.output_paths import OutputLock
    out = Path(args.out).expanduser() if args.out else Path(f"sweep-{spec.name}.csv")
    if args.report:
        from reports.page import check_report_target
        check_report_target(args.report, overwrite=args.overwrite)
    with OutputLock(out.absolute(), "--out"):  # one sweep at a time appends to a file
        df = run_sweep(spec, executor=args.executor, workers=args.workers,
                       address=args.address, out=out, progress=not args.no_progress,
                       restart=args.restart)
    failed = int(df["error"].notna().sum())
    if args.report:
        from reports import render_report  # only reports/ imports altair
        path = render_report([], args.report, sweep=df, overwrite=args.overwrite)
        print(f"report: {path}", file=sys.stderr)
    if args.format != "table":
        print(render(df, args.format))
        return 1 if failed else 0
    fields = list(dict.fromkeys(k for cols in spec.columns for k in cols))
    shown_cols = SHOWN_ANALYTIC if spec.mode == "analytic" else SHOWN_SIMULATED
    shown = df[fields + [c for c in shown_cols if c in df] + ["error"]].copy()
    for c in [c for c in shown.columns if c.endswith("_s") and not c.endswith("per_s")]:
        shown[c[:-2] + "_ms"] = shown.pop(c) * 1e3
    if not failed:
        shown = shown.drop(columns=["error"])
    print(f"sweep {spec.name}: {len(df)} {spec.mode} points")
    print(render(shown, "table"))
    print(f"results: {out}" + (f" ({failed} points failed; see the error column)"
                               if failed else ""))
    return 1 if failed else 0


def _gamma_map(args: argparse.Namespace) -> int:
    from simulator.gamma_map import crossover_table, gamma_map
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    for pol in policies:
        if pol not in ("chain", "tree"):
            raise SpecsimError(f"unknown policy {pol!r}", field="--policy",
                               fix="choose chain, tree or chain,tree")
    if not 0.0 <= args.alpha <= 1.0:
        raise SpecsimError(f"must be in [0, 1], got {args.alpha}", field="--alpha")
    acceptance = None
    if args.tree_rates:
        try:  # in rank order: not sorted
            rates = [float(x) for x in args.tree_rates.split(",") if x.strip()]
        except ValueError:
            raise SpecsimError(f"cannot read {args.tree_rates!r}", field="--tree-rates",
                               fix="write per-rank rates like 0.8,0.3,0.15") from None
        acceptance = {"model": "sequoia", "rates": rates}
    elif "tree" in policies:
        raise SpecsimError("the tree policy needs per-rank acceptance rates",
                           field="--tree-rates", fix="add e.g. --tree-rates 0.8,0.3,0.15")
    batches = parse_number_list(args.batch, field="--batch", minimum=1)
    contexts = parse_number_list(args.context, field="--context", integer=False)
    gammas = parse_number_list(args.gamma, field="--gamma")
    if max(gammas) > 64:
        raise SpecsimError("gammas go up to 64", field="--gamma")
    common = dict(hardware=args.hardware, hardware_dir=args.hardware_dir, target=args.target,
                  draft=args.draft, tensor_parallel=args.tensor_parallel, alpha=args.alpha,
                  acceptance=acceptance, overheads=not args.no_overheads)
    df = gamma_map(batches=batches, contexts=contexts, gammas=gammas, policies=policies,
                   tree_widths=parse_number_list(args.tree_width, field="--tree-width",
                                                 minimum=1), **common)
    widths = parse_number_list(args.tree_width, field="--tree-width", minimum=1)
    cross = pd.concat([crossover_table({**common, "policy": pol}, contexts,
                                       gammas=[g for g in gammas if g > 0] or [1],
                                       tree_widths=widths if pol == "tree" else (1,),
                                       max_batch=args.max_batch).assign(policy=pol)
                       for pol in policies], ignore_index=True)
    if args.format != "table":
        print(render(df, args.format))
        return 0
    accept = f"Sequoia rates {args.tree_rates}" if acceptance else f"alpha {args.alpha}"
    print(f"{args.target} (draft {args.draft}) on {args.hardware} x{args.tensor_parallel}, "
          f"{accept}: best gamma (speedup over no speculation) per batch and context")
    for pol in policies:
        part = df[df["policy"] == pol].copy()
        label = np.where(part["best_tree_width"] > 1,
                         "w" + part["best_tree_width"].astype(str) + " ", "")
        part["cell"] = label + part["best_gamma"].astype(str) + " (x" + \
            part["speedup"].map("{:.2f}".format) + ")" + np.where(part["kv_fits"], "", "*")
        grid = part.pivot(index="batch", columns="context", values="cell")
        grid.columns = [f"ctx {c:g}" for c in grid.columns]
        print(f"\n{pol}" + (" (w<width> depth)" if pol == "tree" else ""))
        print(render(grid.reset_index(), "table"))
        for _, row in cross[cross["policy"] == pol].iterrows():
            b = row["crossover_batch"]
            text = f"no gamma pays from batch {int(b)}" if b == b else \
                f"still pays at batch {args.max_batch}"
            print(f"  context {row['context']:g}: {text}")
    if not df["kv_fits"].all():
        print("* the KV cache of batch x (context + drafts + 1) does not fit one replica")
    return 0
