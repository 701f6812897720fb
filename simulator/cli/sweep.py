"""``specsim sweep sweep.yaml`` and ``specsim gamma-map``: grids of points, tables out."""
from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.cli.args import (MAX_BATCH, MAX_CONTEXT_TOKENS, MAX_GAMMA, MAX_TENSOR_PARALLEL,
                                 MAX_WORKERS, bounded_int)
from simulator.inputs.errors import SpecsimError
from simulator.planning.executors import EXECUTORS
from simulator.cli.output import FORMATS, render

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
    p.add_argument("--workers", type=bounded_int(MAX_WORKERS), default=None,
                   help=f"processes for the local pool (default: every core; at most "
                        f"{MAX_WORKERS})")
    p.add_argument("--address", default=None, help="Ray cluster address (with --executor ray)")
    p.add_argument("--no-progress", action="store_true")


# Most values one list flag (--batch 1-5000, --gamma 0,1,2...) may expand to; a range's
# size is checked before it is expanded.  README.md, "Limits".
MAX_LIST_VALUES = 10_000
# Most points `specsim gamma-map` evaluates (policies x batches x contexts x widths x gammas),
# checked before any point is built: about 150 us each, so 15 s at the limit.
MAX_GAMMA_MAP_POINTS = 100_000


def parse_number_list(text: str, *, field: str, integer: bool = True,
                      minimum: float = 0, maximum: float | None = None,
                      max_count: int = MAX_LIST_VALUES) -> list:
    """``1,2,4``, a range ``0-8`` (integers) or both mixed, into a sorted list.

    Every value must be finite and within ``[minimum, maximum]``; at most ``max_count``
    distinct values, a range's size being checked before it is expanded.
    """
    from simulator.inputs.yaml_io import short
    values: set = set()
    shown = short(str(text), 60)
    fix = "write a list like 1,2,4" + (" or a range like 0-8" if integer else "")

    def over(value) -> SpecsimError:
        return SpecsimError(f"{value:,} is above the limit of {maximum:,}, in {shown}",
                            field=field, fix=f"keep the values at most {maximum:,}")

    def too_many(count: int) -> SpecsimError:
        return SpecsimError(f"{shown} gives {count:,} values; the limit is {max_count:,}",
                            field=field, fix="give fewer values (a coarser list)")

    try:
        for part in filter(None, (s.strip() for s in str(text).split(","))):
            m = re.fullmatch(r"(\d{1,18})-(\d{1,18})", part) if integer else None
            if m:
                lo, hi = int(m.group(1)), int(m.group(2))
                if hi < lo:
                    raise SpecsimError(f"the range {short(part, 40)} runs backwards",
                                       field=field, fix=f"write it low-high, as {hi}-{lo}")
                if maximum is not None and hi > maximum:
                    raise over(hi)
                if hi - lo + 1 > max_count:
                    raise too_many(hi - lo + 1)
                values.update(range(lo, hi + 1))
            else:
                value = float(part)
                if not math.isfinite(value):
                    raise SpecsimError(f"needs finite numbers, got {short(part, 40)}",
                                       field=field, fix=fix)
                if integer and not value.is_integer():
                    raise ValueError
                if maximum is not None and value > maximum:
                    raise over(int(value) if integer else value)
                values.add(int(value) if integer else value)
            if len(values) > max_count:
                raise too_many(len(values))
    except SpecsimError:
        raise
    except ValueError:
        raise SpecsimError(f"cannot read {shown}", field=field, fix=fix) from None
    if not values or min(values) < minimum:
        raise SpecsimError(f"needs numbers >= {minimum:g}, got {shown}", field=field, fix=fix)
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
        p.add_argument("--allow-large", action="store_true",  # simulator.planning.sweep.CONFIRM_POINTS
                       help="run a grid above the confirmation limit (100,000 analytic or "
                            "1,000 simulated points; hard limits 2,000,000 and 100,000)")
        add_executor_arguments(p, default="auto")
        return
    p.add_argument("--hardware", default="a100-40gb")
    p.add_argument("--hardware-dir", default=None, help="extra folder of profile YAML files")
    p.add_argument("--target", default="opt-13b")
    p.add_argument("--draft", default="opt-125m")
    p.add_argument("--tensor-parallel", type=bounded_int(MAX_TENSOR_PARALLEL), default=1)
    p.add_argument("--alpha", type=float, default=0.8, help="i.i.d. acceptance rate")
    p.add_argument("--batch", default="1,2,4,8,16,32,64,128,256",
                   help=f"batches tried (list or range, at most {MAX_BATCH:,})")
    p.add_argument("--context", default="128,512,2048,8192",
                   help=f"contexts tried (list, at most {MAX_CONTEXT_TOKENS:,} tokens)")
    p.add_argument("--gamma", default="0-16",
                   help=f"gammas tried (tree: depths; at most {MAX_GAMMA})")
    p.add_argument("--policy", default="chain", help="chain, tree or chain,tree")
    p.add_argument("--tree-width", default="1,2,4,8", help="tree widths tried")
    p.add_argument("--tree-rates", default=None,
                   help="Sequoia per-rank acceptance, e.g. 0.8,0.3,0.15 (needed for tree; "
                        "then used for chain too, alpha = the first rate)")
    p.add_argument("--max-batch", type=bounded_int(MAX_BATCH), default=4096,
                   help=f"largest batch the crossover search tries (at most {MAX_BATCH:,})")
    p.add_argument("--no-overheads", action="store_true",
                   help="plain roofline: no per-kernel or per-step overheads")


def main(args: argparse.Namespace) -> int:
    """Run ``sweep`` or ``gamma-map``."""
    if args.command == "gamma-map":
        return _gamma_map(args)
    from simulator.planning.sweep import load_sweep, run_sweep
    spec = load_sweep(args.sweep, allow_large=args.allow_large)
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
    from simulator.planning.gamma_map import crossover_table, gamma_map
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    for pol in policies:
        if pol not in ("chain", "tree"):
            raise SpecsimError(f"unknown policy {pol!r}", field="--policy",
                               fix="choose chain, tree or chain,tree")
    if not 0.0 <= args.alpha <= 1.0:
        raise SpecsimError(f"must be in [0, 1], got {args.alpha}", field="--alpha",
                           fix="give an acceptance rate such as 0.8")
    acceptance = None
    if args.tree_rates:
        from simulator.inputs.yaml_io import short
        try:  # in rank order: not sorted
            rates = [float(x) for x in args.tree_rates.split(",") if x.strip()]
        except ValueError:
            rates = None
        if not rates or len(rates) > MAX_GAMMA or not all(0.0 <= r <= 1.0 for r in rates):
            raise SpecsimError(f"cannot use {short(args.tree_rates, 60)}",
                               field="--tree-rates", fix=f"write up to {MAX_GAMMA} per-rank "
                               "rates in [0, 1] like 0.8,0.3,0.15")
        acceptance = {"model": "sequoia", "rates": rates}
    elif "tree" in policies:
        raise SpecsimError("the tree policy needs per-rank acceptance rates",
                           field="--tree-rates", fix="add e.g. --tree-rates 0.8,0.3,0.15")
    batches = parse_number_list(args.batch, field="--batch", minimum=1, maximum=MAX_BATCH)
    contexts = parse_number_list(args.context, field="--context", integer=False,
                                 maximum=MAX_CONTEXT_TOKENS)
    gammas = parse_number_list(args.gamma, field="--gamma", maximum=MAX_GAMMA)
    widths = parse_number_list(args.tree_width, field="--tree-width", minimum=1,
                               maximum=MAX_GAMMA)
    points = len(batches) * len(contexts) * len(gammas) * sum(
        len(widths) if pol == "tree" else 1 for pol in policies)
    if points > MAX_GAMMA_MAP_POINTS:  # before a single point is built
        raise SpecsimError(f"the map has {points:,} points; the limit is "
                           f"{MAX_GAMMA_MAP_POINTS:,}", field="gamma-map",
                           fix="give fewer batches, contexts, gammas or tree widths, or run "
                               "a sweep YAML with --allow-large")
    common = dict(hardware=args.hardware, hardware_dir=args.hardware_dir, target=args.target,
                  draft=args.draft, tensor_parallel=args.tensor_parallel, alpha=args.alpha,
                  acceptance=acceptance, overheads=not args.no_overheads)
    df = gamma_map(batches=batches, contexts=contexts, gammas=gammas, policies=policies,
                   tree_widths=widths, **common)
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
