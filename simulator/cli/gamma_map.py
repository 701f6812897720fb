"""``specsim gamma-map``: the best gamma per batch and context, and the crossover batch
beyond which no gamma pays, from the analytic model (``simulator.planning.gamma_map``)."""
from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from simulator.cli.args import (
    MAX_BATCH,
    MAX_CONTEXT_TOKENS,
    MAX_GAMMA,
    MAX_TENSOR_PARALLEL,
    bounded_int,
    parse_number_list,
)
from simulator.cli.output import FORMATS, render
from simulator.inputs.errors import SpecsimError

# Most points `specsim gamma-map` evaluates (policies x batches x contexts x widths x gammas),
# checked before any point is built: about 150 us each, so 15 s at the limit.
MAX_GAMMA_MAP_POINTS = 100_000


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Arguments of ``gamma-map``."""
    p.add_argument("--format", choices=FORMATS, default="table")
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
    """Run ``specsim gamma-map``: check every flag, build the map, print it."""
    from simulator.planning.gamma_map import crossover_table, gamma_map
    policies = _policies(args)
    acceptance = _acceptance(args, policies)
    batches, contexts, gammas, widths = _grid(args, policies)
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
    _print_map(args, df, cross, policies, acceptance)
    return 0


def _print_map(args, df: pd.DataFrame, cross: pd.DataFrame, policies: list[str],
               acceptance) -> None:
    """One grid per policy: best gamma (and width) with its speedup, then the crossovers."""
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


def _policies(args: argparse.Namespace) -> list[str]:
    """The --policy list (chain, tree), with --alpha checked."""
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    for pol in policies:
        if pol not in ("chain", "tree"):
            raise SpecsimError(f"unknown policy {pol!r}", field="--policy",
                               fix="choose chain, tree or chain,tree")
    if not 0.0 <= args.alpha <= 1.0:
        raise SpecsimError(f"must be in [0, 1], got {args.alpha}", field="--alpha",
                           fix="give an acceptance rate such as 0.8")
    return policies


def _acceptance(args: argparse.Namespace, policies: list[str]) -> dict | None:
    """Sequoia per-rank rates from --tree-rates (needed by the tree policy), else None."""
    acceptance = None
    if args.tree_rates:  # in rank order: not sorted, repeats kept
        rates = parse_number_list(args.tree_rates, field="--tree-rates", integer=False,
                                  maximum=1.0, max_count=MAX_GAMMA, ordered=True)
        acceptance = {"model": "sequoia", "rates": rates}
    elif "tree" in policies:
        raise SpecsimError("the tree policy needs per-rank acceptance rates",
                           field="--tree-rates", fix="add e.g. --tree-rates 0.8,0.3,0.15")
    return acceptance


def _grid(args: argparse.Namespace, policies: list[str]):
    """The batches, contexts, gammas and widths, the map's size checked before it is built."""
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
    return batches, contexts, gammas, widths
