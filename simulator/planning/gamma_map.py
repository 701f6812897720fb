"""Maps built from the analytic model (lecture 000, section 2.5, demo 5): per (batch,
context) the best gamma and its speedup over no speculation; the crossover batch beyond
which no gamma pays; the best tree width.  Each point is ``analytic.analytic_point``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import pandas as pd

from simulator.inputs.errors import SpecsimError
from simulator.planning.analytic import analytic_point


def best_rows(df: pd.DataFrame, by: Sequence[str], metric: str = "speedup") -> pd.DataFrame:
    """The row with the largest ``metric`` in each ``by`` group (first row wins ties)."""
    ok = df[df[metric].notna()]
    if ok.empty:
        raise SpecsimError(f"no point has a {metric}", field=metric,
                           fix="check the error column of the sweep")
    idx = ok.groupby(list(by), sort=True, dropna=False)[metric].idxmax()
    return ok.loc[idx.to_numpy()].reset_index(drop=True)


def gamma_map(*, hardware: str = "a100-40gb", target: str = "opt-13b",
              draft: str | None = "opt-125m", batches: Sequence[int] = (1, 4, 16, 64),
              contexts: Sequence[float] = (128, 512, 2048), gammas: Sequence[int] = range(0, 17),
              alpha: float = 0.8, acceptance: Mapping | None = None,
              policies: Sequence[str] = ("chain",), tree_widths: Sequence[int] = (1, 2, 4, 8),
              tensor_parallel: int = 1, overheads: bool = True, hardware_dir: str | None = None,
              executor: Any = "serial", workers: int | None = None) -> pd.DataFrame:
    """Best gamma (and tree width) per (policy, batch, context), with its speedup over none."""
    from simulator.planning.sweep import SweepSpec, run_sweep
    fixed = {"hardware": hardware, "target": target, "draft": draft, "alpha": alpha,
             "acceptance": dict(acceptance) if acceptance else None,
             "tensor_parallel": tensor_parallel, "overheads": overheads,
             "hardware_dir": hardware_dir}
    points = []
    for pol in policies:
        widths = tree_widths if pol == "tree" else (1,)
        for b in batches:
            for ctx in contexts:
                for w in widths:
                    for g in gammas:
                        points.append({"policy": pol, "batch": int(b), "context": float(ctx),
                                       "tree_width": int(w), "gamma": int(g)})
    spec = SweepSpec.analytic(points, fixed=fixed, source="gamma-map")
    df = run_sweep(spec, executor=executor, workers=workers)
    failed = df[df["error"].notna()]
    if len(failed):  # a map with holes would silently pick its best among the survivors
        raise SpecsimError(f"{len(failed)} of {len(df)} points failed, e.g. "
                           f"{failed['error'].iloc[0]}", field="gamma-map")
    best = best_rows(df, ["policy", "batch", "context"])
    best = best.rename(columns={"gamma": "best_gamma", "tree_width": "best_tree_width"})
    keep = ["policy", "batch", "context", "best_gamma", "best_tree_width", "speedup",
            "expected_tokens", "c", "draft_s", "verify_s", "decode_s", "tokens_per_s",
            "baseline_tokens_per_s", "kv_fits"]
    return best[keep]


def _pays(params: dict, batch: int, gammas: Sequence[int], widths: Sequence[int]) -> bool:
    return any(analytic_point({**params, "batch": batch, "gamma": g, "tree_width": w})
               ["speedup"] > 1.0 for g in gammas if g > 0 for w in widths)


def crossover_batch(params: Mapping[str, Any], *, gammas: Sequence[int] = range(1, 17),
                    tree_widths: Sequence[int] = (1,), max_batch: int = 4096) -> dict[str, Any]:
    """Smallest batch at which no gamma (and tree width) beats plain decoding, by bisection.

    Doubles the batch until speculation stops paying, then bisects between the last batch
    that paid and the first that did not (one crossing assumed).  ``crossover_batch`` is
    NaN when speculation still pays at ``max_batch`` (long contexts: KV reads dominate).
    """
    params = {k: v for k, v in params.items() if k not in ("batch", "gamma", "tree_width")}

    def pays(batch: int) -> bool:
        return _pays(params, batch, gammas, tree_widths)

    if not pays(1):
        return {"crossover_batch": 1, "last_paying_batch": float("nan")}
    lo, hi = 1, 2
    while hi <= max_batch and pays(hi):
        lo, hi = hi, hi * 2
    if hi > max_batch:
        hi = max_batch
        if pays(hi):
            return {"crossover_batch": float("nan"), "last_paying_batch": hi}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if pays(mid) else (lo, mid)
    return {"crossover_batch": hi, "last_paying_batch": lo}


def crossover_table(params: Mapping[str, Any], contexts: Sequence[float], *,
                    gammas: Sequence[int] = range(1, 17), tree_widths: Sequence[int] = (1,),
                    max_batch: int = 4096) -> pd.DataFrame:
    """The crossover batch for each context length."""
    rows = [{"context": float(ctx), **crossover_batch(
        {**params, "context": float(ctx)}, gammas=gammas, tree_widths=tree_widths,
        max_batch=max_batch)} for ctx in contexts]
    return pd.DataFrame(rows)
