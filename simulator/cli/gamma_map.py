"""``specsim gamma-map``: the best gamma per batch and context, and the crossover batch
beyond which no gamma pays, from the analytic model (``simulator.planning.gamma_map``).

Cells that cannot exist (KV over the budget of one replica, past the target's or the draft's
max_context) are printed as a mark, never a number, and the crossover search stops at the
largest batch that fits.  Gamma 0 is chain drafting nothing with its draft still loaded (the
engine's meaning, ``simulator.planning.analytic``); speedups are over policy none."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from simulator.cli.args import (
    MAX_BATCH,
    MAX_CONTEXT_TOKENS,
    MAX_GAMMA,
    MAX_TENSOR_PARALLEL,
    bounded_float,
    bounded_int,
    parse_number_list,
)
from simulator.cli.output import FORMATS, render, wrap_text
from simulator.inputs.errors import SpecsimError
from simulator.planning.gamma_map import MAX_GAMMA_MAP_POINTS, check_gamma_map_size, map_gammas
from simulator.scenario import Batching
from simulator.uncertainty.spec import MAX_ACCEPTANCE_SD, MAX_UNCERTAINTY_DRAWS

if TYPE_CHECKING:  # pandas loads where a frame is built: `--help` starts fast
    import pandas as pd

__all__ = ["MAX_GAMMA_MAP_POINTS", "add_arguments", "main"]  # the limit: docs/limits.md
MARKS = {"kv": "x KV", "memory": "x mem", "max_context": "x ctx",
         "draft_max_context": "x draft ctx"}
LEGEND = {"kv": "batch x (context + drafts + 1) tokens exceed the KV budget of one replica",
          "memory": "the weights and activations leave no KV block",
          "max_context": "context + 1 + gamma reaches the target's max_context",
          "draft_max_context": "context + 1 + gamma reaches the draft's max_context (vLLM "
                               "skips the draft)"}


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Arguments of ``gamma-map``."""
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--hardware", default="a100-40gb")
    p.add_argument("--hardware-dir", default=None, help="extra folder of profile YAML files")
    p.add_argument("--target", default="opt-13b")
    p.add_argument("--draft", default=None,
                   help="draft model of chain and tree (default: the catalog's smallest "
                        "model of the target's family and tokenizer; opt-13b: opt-125m)")
    p.add_argument("--tensor-parallel", type=bounded_int(MAX_TENSOR_PARALLEL), default=1)
    p.add_argument("--draft-tensor-parallel", type=bounded_int(MAX_TENSOR_PARALLEL),
                   default=None, help="the draft's TP: 1 or --tensor-parallel "
                                      "(default: --tensor-parallel, as vLLM)")
    p.add_argument("--alpha", type=float, default=0.8, help="i.i.d. acceptance rate")
    p.add_argument("--batch", default="1,2,4,8,16,32,64,128,256",
                   help=f"batches tried (list or range, at most {MAX_BATCH:,})")
    p.add_argument("--context", default="128,512,1024,2000",
                   help=f"contexts tried (list, at most {MAX_CONTEXT_TOKENS:,} tokens; those "
                        f"past the target's max_context are marked)")
    p.add_argument("--gamma", default="0-16",
                   help=f"gammas tried (tree: depths; at most {MAX_GAMMA})")
    p.add_argument("--policy", default="chain",
                   help="chain, tree, mtp (the target's MTP modules) or eagle3, or a list")
    p.add_argument("--tree-width", default="1,2,4,8", help="tree widths tried")
    p.add_argument("--tree-rates", default=None,
                   help="Sequoia per-rank acceptance, e.g. 0.8,0.3,0.15 (needed for tree; "
                        "then used for chain too, alpha = the first rate)")
    p.add_argument("--max-batch", type=bounded_int(MAX_BATCH), default=4096,
                   help=f"largest batch the crossover search tries (at most {MAX_BATCH:,})")
    p.add_argument("--gpu-memory-utilization", type=bounded_float(1.0, strict=True),
                   default=Batching.gpu_memory_utilization,
                   help="fraction of device memory for weights, activations and KV (vLLM's "
                        "knob; default the scenario's)")
    p.add_argument("--block-size", type=bounded_int(MAX_BATCH),
                   default=Batching.block_size, help="KV block size in tokens")
    p.add_argument("--no-overheads", action="store_true",
                   help="plain roofline: no per-kernel or per-step overheads")
    p.add_argument("--uncertainty", type=bounded_int(MAX_UNCERTAINTY_DRAWS), default=None,
                   metavar="N", help="also build the map under N draws of the acceptance "
                   "spread --alpha-sd and report p5/p50/p95 of each cell's best gamma and "
                   f"speedup (at most {MAX_UNCERTAINTY_DRAWS:,}; docs/uncertainty.md)")
    p.add_argument("--alpha-sd", type=bounded_float(MAX_ACCEPTANCE_SD), default=None,
                   metavar="SD", help="with --uncertainty: the sd of one additive normal "
                   "shift per draw on --alpha (and every --tree-rates rank), clipped to [0, 1]")


def main(args: argparse.Namespace) -> int:
    """Run ``specsim gamma-map``: check every flag, build the map, print it."""
    import pandas as pd
    from simulator.planning.gamma_map import crossover_table, gamma_map
    policies = _policies(args)
    _check_uncertainty(args)
    if {"chain", "tree"} & set(policies):
        from simulator.models.default_draft import resolve_draft
        from simulator.models.spec import load_model
        args.draft = resolve_draft(args.draft, load_model(args.target))
    acceptance = _acceptance(args, policies)
    batches, contexts, gammas, widths = _grid(args, policies)
    memory = {"gpu_memory_utilization": args.gpu_memory_utilization,
              "block_size": args.block_size}
    common = dict(hardware=args.hardware, hardware_dir=args.hardware_dir, target=args.target,
                  draft=args.draft, tensor_parallel=args.tensor_parallel, alpha=args.alpha,
                  acceptance=acceptance, overheads=not args.no_overheads)
    if args.draft_tensor_parallel is not None:
        common["draft_tensor_parallel"] = args.draft_tensor_parallel
    grid = dict(batches=batches, contexts=contexts, gammas=gammas, policies=policies,
                tree_widths=widths, memory=memory)
    df = gamma_map(**grid, **common)
    if args.uncertainty is not None:  # the best gamma's interval per cell
        df = _with_intervals(args, df, grid, common)
    from simulator.acceptance.provenance import frame_notes
    for line in frame_notes(df, "policy")[1]:  # stderr: stdout stays the map
        print(wrap_text(f"warning: {line}", indent="    "), file=sys.stderr)
    if args.format != "table":  # missing values (an infeasible cell's) as empty / null
        print(render(df.astype(object).where(df.notna(), None), args.format))
        return 0
    cross = pd.concat([crossover_table({**common, **memory, "policy": pol}, contexts,
                                       gammas=[g for g in gammas if g > 0] or [1],
                                       tree_widths=widths if pol == "tree" else (1,),
                                       max_batch=args.max_batch).assign(policy=pol)
                       for pol in policies], ignore_index=True)
    _print_map(args, df, cross, policies, acceptance, gammas)
    return 0


def _with_intervals(args: argparse.Namespace, df: pd.DataFrame, grid: dict,
                    common: dict) -> pd.DataFrame:
    """The map with each cell's best gamma and speedup over --uncertainty draws of the
    acceptance spread (simulator/planning/gamma_map_uncertainty.py)."""
    from simulator.planning.gamma_map import gamma_map
    from simulator.planning.gamma_map_uncertainty import (
        acceptance_shifts,
        gamma_map_intervals,
        shifted,
    )
    acc = common["acceptance"]

    def build(shift: float) -> pd.DataFrame:
        alpha, rates = shifted(common["alpha"], acc["rates"] if acc else None, shift)
        return gamma_map(**grid, **{**common, "alpha": alpha, "acceptance":
                                    {**acc, "rates": rates} if acc else None})
    return gamma_map_intervals(df, acceptance_shifts(args.alpha_sd, args.uncertainty), build)


def _check_uncertainty(args: argparse.Namespace) -> None:
    """--uncertainty and --alpha-sd go together (the map's only uncertain input)."""
    if args.uncertainty is not None and args.alpha_sd is None:
        raise SpecsimError("--uncertainty needs the acceptance's spread", field="--alpha-sd",
                           fix="add e.g. --alpha-sd 0.03 (the sd of the measured alpha over "
                               "datasets); the cost model's error leaves every speedup as it is")
    if args.alpha_sd is not None and args.uncertainty is None:
        raise SpecsimError("--alpha-sd without draws", field="--uncertainty",
                           fix="add --uncertainty N (e.g. 100)")


def _cells(part: pd.DataFrame, top_gamma: int) -> pd.Series:
    """A cell's text: [w<width> ]gamma (x speedup), '+' where larger gammas do not fit; an
    infeasible cell is its mark, never a number."""
    def one(row) -> str:
        if not row["feasible"]:
            return MARKS.get(row["limit"], "x")
        width = f"w{int(row['best_tree_width'])} " if row["best_tree_width"] > 1 else ""
        capped = row["best_gamma"] == row["largest_feasible_gamma"] < top_gamma
        lo, hi = row.get("best_gamma_p5"), row.get("best_gamma_p95")
        span = f" [{lo}-{hi}]" if lo is not None and lo != hi else ""
        return f"{width}{int(row['best_gamma'])}{span} (x{row['speedup']:.2f})" + \
            ("+" if capped else "")
    return part.apply(one, axis=1)


def _crossover_text(row, max_batch: int) -> str:
    b, last, limit = row["crossover_batch"], row["last_paying_batch"], row["limit"]
    if b == b:
        return f"no gamma pays from batch {int(b)}"
    if row["largest_batch"] == 0:
        return f"no batch fits: {row['reason']}"
    if limit == "max_batch":
        return f"still pays at batch {int(last)} (--max-batch {max_batch})"
    return f"still pays at the largest batch that fits, {int(last)} " \
        f"({'KV' if limit == 'kv' else limit} limit)"


def _print_map(args, df: pd.DataFrame, cross: pd.DataFrame, policies: list[str],
               acceptance, gammas: list[int]) -> None:
    """One grid per policy: best gamma (and width) with its speedup, then the crossovers."""
    accept = f"Sequoia rates {args.tree_rates}" if acceptance else f"alpha {args.alpha}"
    drafter = f"draft {args.draft}" if {"chain", "tree"} & set(policies) else "no draft model"
    print(wrap_text(f"{args.target} ({drafter}) on {args.hardware} x{args.tensor_parallel}, "
                    f"{accept}: best gamma (speedup over policy none, no draft loaded) per "
                    f"batch and context; gamma 0 = chain drafting nothing, its draft still "
                    f"loaded"))
    capped = False
    for pol in policies:
        part = df[df["policy"] == pol].copy()
        part["cell"] = _cells(part, max(map_gammas(pol, gammas)))
        capped |= bool(part["cell"].str.endswith("+").any())
        grid = part.pivot(index="batch", columns="context", values="cell")
        grid.columns = [f"ctx {c:g}" for c in grid.columns]
        print(f"\n{pol}" + (" (w<width> depth)" if pol == "tree" else ""))
        print(render(grid.reset_index(), "table"))
        for _, row in cross[cross["policy"] == pol].iterrows():
            print(f"  context {row['context']:g}: {_crossover_text(row, args.max_batch)}")
    for limit in dict.fromkeys(df.loc[~df["feasible"], "limit"]):
        print(f"{MARKS.get(limit, 'x')}: {LEGEND.get(limit, limit)} (not ranked)")
    if capped:
        print("+: larger gammas do not fit this cell; its best is the largest that fits")
    if args.uncertainty is not None:
        print(wrap_text(f"[lo-hi]: the best gamma's p5-p95 over {args.uncertainty} draws of "
                        f"the acceptance shifted by N(0, {args.alpha_sd:g}) (none: every draw "
                        "agrees; the csv has best_gamma_p5/p50/p95, best_gamma_agree and "
                        "speedup_p5/p50/p95)"))
    from simulator.acceptance.provenance import frame_notes
    for line in frame_notes(df, "policy")[0]:
        print(wrap_text(line, indent="    "))


def _policies(args: argparse.Namespace) -> list[str]:
    """The --policy list (chain, tree), with --alpha checked."""
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    for pol in policies:
        if pol not in ("chain", "tree", "mtp", "eagle3"):
            raise SpecsimError(f"unknown policy {pol!r}", field="--policy",
                               fix="choose chain, tree, mtp, eagle3 or a list (chain,tree)")
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
    check_gamma_map_size(batches, contexts, gammas, policies, widths)  # before any point
    return batches, contexts, gammas, widths
