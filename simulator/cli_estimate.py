"""``specsim estimate`` and ``specsim gamma``: closed forms and the cost model, no event loop."""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd

from hardware.profile import load_profile
from simulator.cli_types import nonneg_float, positive_int, unit_float
from simulator.cost_model import CostModel, Parallelism
from simulator.errors import SpecsimError
from simulator.estimate import estimate_table, parse_gamma_range
from simulator.model_spec import load_model
from simulator.output import FORMATS, render
from simulator.spec_math import optimal_gamma, speedup_curve, stationary_gamma


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Arguments of ``estimate`` or ``gamma``."""
    p.add_argument("--alpha", type=unit_float, default=0.8,
                   help="i.i.d. acceptance rate per draft token (default 0.8)")
    p.add_argument("--format", choices=FORMATS, default="table")
    if name == "gamma":
        p.add_argument("--c", type=nonneg_float, required=True,
                       help="draft/target step-time ratio (Leviathan's c)")
        p.add_argument("--max-gamma", type=positive_int, default=16)
        return
    p.add_argument("--hardware", default="a100-40gb")
    p.add_argument("--hardware-dir", default=None, help="extra folder of profile YAML files")
    p.add_argument("--target", default="opt-13b")
    p.add_argument("--draft", default="opt-125m")
    p.add_argument("--batch", type=positive_int, default=1)
    p.add_argument("--context", type=nonneg_float, default=512)
    p.add_argument("--gamma", default="0-8", help="range 0-8, list 1,2,4, or one value")
    p.add_argument("--tensor-parallel", type=positive_int, default=1)
    p.add_argument("--no-overheads", action="store_true",
                   help="plain roofline: no per-kernel or per-step overheads")


def main(args: argparse.Namespace) -> int:
    """Run ``estimate`` or ``gamma``."""
    if args.command == "gamma":
        return _gamma(args)
    hw = load_profile(args.hardware, args.hardware_dir)
    target = load_model(args.target)
    draft = load_model(args.draft)
    if draft.kind != "decoder":
        raise SpecsimError(f"{draft.name} is a {draft.kind} model, not a draft decoder",
                           field="--draft", fix="name a small decoder model such as opt-125m")
    gammas = parse_gamma_range(args.gamma)
    par = Parallelism(tensor_parallel=args.tensor_parallel)
    overheads = not args.no_overheads
    tcm = CostModel(hw, target, par, overheads=overheads)
    dcm = CostModel(hw, draft, Parallelism(), overheads=overheads)
    df = estimate_table(tcm, dcm, batch=args.batch, context=args.context, gammas=gammas,
                        alpha=args.alpha)
    if args.format == "table":
        shown = df.drop(columns=["best_gamma", "is_best"]).copy()
        for col in ("draft_s", "verify_s", "decode_s"):
            shown[col.replace("_s", "_ms")] = shown.pop(col) * 1e3
        shown[""] = np.where(df["is_best"], "<- best", "")
        print(f"{target.name} (draft {draft.name}) on {hw.name}, batch {args.batch}, "
              f"context {args.context:g}, alpha {args.alpha}")
        print(render(shown, "table"))
        print(f"best gamma: {int(df['best_gamma'].iloc[0])}")
    else:
        print(render(df, args.format))
    return 0


def _gamma(args: argparse.Namespace) -> int:
    gammas = np.arange(0, args.max_gamma + 1)
    curve = speedup_curve(args.alpha, args.c, gammas)
    best, best_speedup = optimal_gamma(args.alpha, args.c, args.max_gamma)
    if args.format == "json":
        print(json.dumps({"alpha": args.alpha, "c": args.c, "best_gamma": best,
                          "best_speedup": best_speedup,
                          "stationary_gamma": stationary_gamma(args.alpha, args.c),
                          "speedup": [{"gamma": int(g), "speedup": float(s)}
                                      for g, s in zip(gammas, curve)]}, indent=2))
        return 0
    df = pd.DataFrame({"gamma": gammas, "speedup": curve})
    if args.format == "csv":
        print(render(df, "csv"))
        return 0
    df[""] = np.where(df["gamma"] == best, "<- best", "")
    print(render(df, "table"))
    print(f"best gamma: {best} (speedup {best_speedup:.3f}); continuous K* = "
          f"{stationary_gamma(args.alpha, args.c):.2f}")
    sys.stdout.flush()
    return 0
