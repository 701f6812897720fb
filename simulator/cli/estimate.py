"""``specsim estimate`` and ``specsim gamma``: closed forms and the cost model, no event loop."""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

import numpy as np

from hardware.profile import load_profile
from simulator.cli.args import (
    MAX_BATCH,
    MAX_C,
    MAX_CONTEXT_TOKENS,
    MAX_CURVE_GAMMA,
    MAX_GAMMA,
    MAX_TENSOR_PARALLEL,
    bounded_float,
    bounded_int,
    parse_number_list,
    unit_float,
)
from simulator.cli.output import FORMATS, render
from simulator.inputs.errors import SpecsimError
from simulator.models.default_draft import resolve_draft
from simulator.models.spec import check_shared_vocabulary, load_model
from simulator.planning.analytic import estimate_table, point_cost_models
from simulator.speculation.closed_forms import optimal_gamma, speedup_curve, stationary_gamma

if TYPE_CHECKING:  # pandas loads where a frame is built: `--help` starts fast
    import pandas as pd


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Arguments of ``estimate`` or ``gamma``."""
    p.add_argument("--alpha", type=unit_float, default=0.8,
                   help="i.i.d. acceptance rate per draft token (default 0.8)")
    p.add_argument("--format", choices=FORMATS, default="table")
    if name == "gamma":
        p.add_argument("--c", type=bounded_float(MAX_C), required=True,
                       help=f"draft/target step-time ratio (Leviathan's c), 0 to {MAX_C:g}")
        p.add_argument("--max-gamma", type=bounded_int(MAX_CURVE_GAMMA), default=16,
                       help=f"largest gamma of the curve (default 16, at most "
                            f"{MAX_CURVE_GAMMA})")
        return
    p.add_argument("--hardware", default="a100-40gb")
    p.add_argument("--hardware-dir", default=None, help="extra folder of profile YAML files")
    p.add_argument("--target", default="opt-13b")
    p.add_argument("--draft", default=None,
                   help="draft model of the chain policy (default: the catalog's smallest "
                        "model of the target's family and tokenizer; opt-13b: opt-125m)")
    p.add_argument("--policy", choices=("chain", "mtp", "eagle3"), default="chain",
                   help="chain (a draft model), mtp (the target's MTP modules) or eagle3 "
                        "(the target's EAGLE-3 head); mtp and eagle3 ignore --draft")
    p.add_argument("--batch", type=bounded_int(MAX_BATCH), default=1,
                   help=f"requests per step (default 1, at most {MAX_BATCH:,})")
    p.add_argument("--context", type=bounded_float(MAX_CONTEXT_TOKENS), default=512,
                   help=f"context tokens per request (default 512, at most "
                        f"{MAX_CONTEXT_TOKENS:,})")
    p.add_argument("--gamma", default="0-8",
                   help=f"range 0-8, list 1,2,4, or one value (0 to {MAX_GAMMA})")
    p.add_argument("--tensor-parallel", type=bounded_int(MAX_TENSOR_PARALLEL), default=1)
    p.add_argument("--draft-tensor-parallel", type=bounded_int(MAX_TENSOR_PARALLEL),
                   default=None, help="the draft's TP: 1 or --tensor-parallel "
                                      "(default: --tensor-parallel, as vLLM)")
    p.add_argument("--no-overheads", action="store_true",
                   help="plain roofline: no per-kernel or per-step overheads")


def main(args: argparse.Namespace) -> int:
    """Run ``estimate`` or ``gamma``."""
    if args.command == "gamma":
        return _gamma(args)
    hw = load_profile(args.hardware, args.hardware_dir)
    target = load_model(args.target)
    chain = args.policy == "chain"
    if chain:
        args.draft = resolve_draft(args.draft, target)
    draft = load_model(args.draft) if chain else None
    if chain and draft.kind != "decoder":
        raise SpecsimError(f"{draft.name} is a {draft.kind} model, not a draft decoder",
                           field="--draft", fix="name a small decoder model such as opt-125m")
    check_shared_vocabulary(draft, target, field="--draft")
    gammas = parse_number_list(args.gamma, field="--gamma", maximum=MAX_GAMMA)
    if not chain:  # mtp and eagle3 draft at least one token: no gamma 0
        gammas = [g for g in gammas if g > 0] or gammas
    # priced as a sweep or gamma-map point of the same shape is (the engine's cost models)
    def models(gamma: int):
        return point_cost_models(args.hardware, args.hardware_dir, args.target,
                                 args.draft if chain else None, args.tensor_parallel,
                                 not args.no_overheads, args.draft_tensor_parallel,
                                 args.policy, gamma)

    df = _with_feasibility(estimate_table(models, None, batch=args.batch,
                                          context=args.context, gammas=gammas,
                                          alpha=args.alpha, policy=args.policy), args, chain)
    if args.format != "table":
        print(render(df.astype(object).where(df.notna(), None), args.format))
        return 0
    shown = df.drop(columns=["best_gamma", "is_best", "infeasible_reason"]).copy()
    for col in ("draft_s", "verify_s", "decode_s"):
        shown[col.replace("_s", "_ms")] = shown.pop(col) * 1e3
    shown = shown.drop(columns=["limit", "fits"])
    shown["fits"] = np.where(df["fits"], "yes", "NO: " + df["limit"].fillna("").astype(str))
    shown[""] = np.where(df["is_best"], "<- best", "")
    drafter = f"draft {draft.name}" if chain else args.policy
    print(f"{target.name} ({drafter}) on {hw.name} x{args.tensor_parallel}, batch "
          f"{args.batch}, context {args.context:g}, alpha {args.alpha}")
    print(render(shown, "table"))
    for _, row in df[~df["fits"]].drop_duplicates("limit").iterrows():  # one per limit
        print(f"does not fit (gamma {int(row['gamma'])}): {row['infeasible_reason']}")
    if df["fits"].any():
        print(f"best gamma: {int(df['best_gamma'].iloc[0])}" +
              (" (among those that fit)" if not df["fits"].all() else ""))
    else:
        print("best gamma: none: no gamma fits this batch and context (the speedups above "
              "are of a deployment that cannot exist)")
    return 0


def _with_feasibility(df: pd.DataFrame, args: argparse.Namespace, chain: bool) -> pd.DataFrame:
    """``fits`` (the weights, activations and this batch's KV cache fit the devices, and the
    context the models), ``limit`` and ``infeasible_reason`` per gamma, as a gamma-map point
    checks them; the best gamma is the fastest that fits (none when none does)."""
    from simulator.planning.analytic import point_feasibility
    point = {"hardware": args.hardware, "hardware_dir": args.hardware_dir,
             "target": args.target, "draft": args.draft if chain else None,
             "policy": args.policy, "tensor_parallel": args.tensor_parallel,
             "batch": args.batch, "context": args.context, "overheads": not args.no_overheads}
    if args.draft_tensor_parallel is not None:
        point["draft_tensor_parallel"] = args.draft_tensor_parallel
    rows = [point_feasibility({**point, "gamma": int(g)}) for g in df["gamma"]]
    df["fits"] = [r["feasible"] for r in rows]
    df["limit"] = [r["limit"] for r in rows]
    df["infeasible_reason"] = [r["infeasible_reason"] for r in rows]
    ok = df[df["fits"]]
    best = int(ok.loc[ok["speedup"].idxmax(), "gamma"]) if len(ok) else None
    df["best_gamma"] = best if best is not None else np.nan
    df["is_best"] = df["gamma"] == best if best is not None else False
    return df


def _gamma(args: argparse.Namespace) -> int:
    import pandas as pd
    gammas = np.arange(0, args.max_gamma + 1)
    curve = speedup_curve(args.alpha, args.c, gammas)
    best, best_speedup = optimal_gamma(args.alpha, args.c, args.max_gamma)
    if best_speedup <= 1.0:  # no draft length beats plain decoding (speedup 1 at gamma 0)
        best, best_speedup = 0, 1.0
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
    if best == 0:
        print(f"best gamma: 0 (no speculation): with c = {args.c:g} no draft length pays at "
              f"alpha {args.alpha:g}")
    else:
        print(f"best gamma: {best} (speedup {best_speedup:.3f}); continuous K* = "
              f"{stationary_gamma(args.alpha, args.c):.2f}")
    sys.stdout.flush()
    return 0
