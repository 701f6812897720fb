"""Maps built from the analytic model (lecture 000, section 2.5, demo 5): per (batch,
context) the best gamma and its speedup over no speculation (``policy: none``, no draft
loaded); the crossover batch beyond which no gamma pays; the best tree width.  Each point is
``analytic.analytic_point``; its gamma 0 is the engine's chain with nothing drafted (draft
loaded, speedup exactly 1: see ``simulator.planning.analytic``), and a tree has no gamma 0.

Only cells that can exist are ranked: a point over the KV budget, past the target's
``max_context`` or past the draft's (``analytic.point_feasibility``) is never a best gamma
and never counts for the crossover.  A cell whose every point is infeasible is kept, with
``feasible`` False, its ``limit`` and ``infeasible_reason`` and no best gamma or speedup; a
cell infeasible only for large gammas keeps its best feasible one (``largest_feasible_gamma``
says where the feasible ones stop).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from simulator.inputs.errors import SpecsimError
from simulator.planning.analytic import analytic_point

if TYPE_CHECKING:  # pandas loads where frames are built: `gamma-map --help` is fast
    import pandas as pd

# Most points one gamma map evaluates (policies x batches x contexts x widths x gammas),
# checked before any point is built: about 150 us each, so 15 s at the limit.
MAX_GAMMA_MAP_POINTS = 100_000

KEEP = ["policy", "batch", "context", "best_gamma", "best_tree_width", "speedup",
        "expected_tokens", "c", "draft_s", "verify_s", "decode_s", "tokens_per_s",
        "baseline_tokens_per_s", "kv_fits", "kv_tokens", "kv_needed_tokens", "feasible",
        "limit", "infeasible_reason", "largest_feasible_gamma", "acceptance_source",
        "acceptance_warning"]


def map_gammas(policy: str, gammas: Sequence[int]) -> list[int]:
    """The gammas a policy's cells try: a tree (the engine's specinfer), mtp and eagle3 have
    no gamma 0."""
    return [int(g) for g in gammas if policy in ("none", "chain") or g > 0]


def check_gamma_map_size(batches: Sequence, contexts: Sequence, gammas: Sequence,
                         policies: Sequence[str], tree_widths: Sequence) -> int:
    """The number of points of the map; refused above MAX_GAMMA_MAP_POINTS, before any
    point is built."""
    points = len(batches) * len(contexts) * sum(
        len(map_gammas(pol, gammas)) * (len(tree_widths) if pol == "tree" else 1)
        for pol in policies)
    if points > MAX_GAMMA_MAP_POINTS:
        raise SpecsimError(f"the map has {points:,} points; the limit is "
                           f"{MAX_GAMMA_MAP_POINTS:,}", field="gamma-map",
                           fix="give fewer batches, contexts, gammas or tree widths, or run "
                               "a sweep YAML with --allow-large")
    return points


def best_rows(df: pd.DataFrame, by: Sequence[str], metric: str = "speedup") -> pd.DataFrame:
    """The row with the largest ``metric`` in each ``by`` group (first row wins ties); rows
    marked infeasible (a ``feasible`` column, as analytic sweeps have) are never picked."""
    ok = df[df[metric].notna()]
    if "feasible" in ok:
        ok = ok[ok["feasible"].astype(bool)]
    if ok.empty:
        raise SpecsimError(f"no feasible point has a {metric}", field=metric,
                           fix="check the error, feasible and infeasible_reason columns")
    idx = ok.groupby(list(by), sort=True, dropna=False)[metric].idxmax()
    return ok.loc[idx.to_numpy()].reset_index(drop=True)


def gamma_map(*, hardware: str = "a100-40gb", target: str = "opt-13b",
              draft: str | None = "opt-125m", batches: Sequence[int] = (1, 4, 16, 64),
              contexts: Sequence[float] = (128, 512, 1024), gammas: Sequence[int] = range(0, 17),
              alpha: float = 0.8, acceptance: Mapping | None = None,
              policies: Sequence[str] = ("chain",), tree_widths: Sequence[int] = (1, 2, 4, 8),
              tensor_parallel: int = 1, overheads: bool = True, hardware_dir: str | None = None,
              draft_tensor_parallel: int | None = None,
              memory: Mapping[str, Any] | None = None, executor: Any = "serial",
              workers: int | None = None) -> pd.DataFrame:
    """Best feasible gamma (and tree width) per (policy, batch, context), with its speedup
    over none; ``memory``: analytic fields of the memory plan (``gpu_memory_utilization``,
    ``block_size``, ``max_num_batched_tokens``; default the scenario's)."""
    from simulator.planning.sweep import SweepSpec, run_sweep
    gammas = list(gammas)
    check_gamma_map_size(batches, contexts, gammas, policies, tree_widths)
    for pol in policies:
        if not map_gammas(pol, gammas):
            raise SpecsimError(f"no gamma for the {pol} policy to try", field="gammas",
                               fix="give gammas >= 1 (a tree has no depth 0)")
    fixed = {"hardware": hardware, "target": target, "draft": draft, "alpha": alpha,
             "acceptance": dict(acceptance) if acceptance else None,
             "tensor_parallel": tensor_parallel, "overheads": overheads,
             **({} if draft_tensor_parallel is None
                else {"draft_tensor_parallel": draft_tensor_parallel}),
             "hardware_dir": hardware_dir, **dict(memory or {})}
    points = [{"policy": pol, "batch": int(b), "context": float(ctx), "tree_width": int(w),
               "gamma": g}
              for pol in policies for b in batches for ctx in contexts
              for w in (tree_widths if pol == "tree" else (1,)) for g in map_gammas(pol, gammas)]
    spec = SweepSpec.analytic(points, fixed=fixed, source="gamma-map")
    check_configurations(spec.payloads)  # a configuration error before any point runs
    df = run_sweep(spec, executor=executor, workers=workers)
    failed = df[df["error"].notna()]
    if len(failed):  # a map with holes would silently pick its best among the survivors
        raise SpecsimError(f"{len(failed)} of {len(df)} points failed, e.g. "
                           f"{failed['error'].iloc[0]}", field="gamma-map")
    return best_cells(df)


def check_configurations(payloads: Sequence[Mapping[str, Any]]) -> None:
    """Evaluate one point per configuration (policy, tree width, gamma: what a configuration
    error depends on), at the smallest batch and context, before the map runs: a policy the
    target cannot run, a tree deeper than its rates or a tensor-parallel split its heads
    refuse is then one line in about a second, where it came after every point had run
    (612 points, 49-65 s).  An infeasible point is a result, not an error: it passes."""
    first: dict[tuple, Mapping[str, Any]] = {}
    for p in payloads:
        key = (p["policy"], p["tree_width"], p["gamma"])
        if key not in first or (p["batch"], p["context"]) < (first[key]["batch"],
                                                             first[key]["context"]):
            first[key] = p
    for (policy, width, gamma), p in first.items():
        try:
            analytic_point(p)
        except SpecsimError as exc:
            where = f"gamma-map: policy {policy}, gamma {gamma}" + \
                (f", tree width {width}" if policy == "tree" else "")
            raise exc.relocated(source=where) from None


def best_cells(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (policy, batch, context) of an analytic sweep: its best feasible point,
    or, where none is feasible, its smallest point (fewest drafted tokens) unranked."""
    import pandas as pd
    cell = ["policy", "batch", "context"]
    df = df.assign(feasible=df["feasible"].astype(bool))
    ok = df[df["feasible"] & df["speedup"].notna()]
    largest = ok.groupby(cell)["gamma"].max().rename("largest_feasible_gamma")
    parts = []
    if len(ok):
        parts.append(best_rows(ok, cell))
    done = set(map(tuple, ok[cell].drop_duplicates().itertuples(index=False)))
    rest = df[[tuple(r) not in done for r in df[cell].itertuples(index=False)]]
    if len(rest):  # nothing feasible: keep why, rank nothing
        first = rest.sort_values(cell + ["draft_tokens", "gamma"], kind="stable")
        first = first.groupby(cell, sort=True).head(1).copy()
        first[["speedup", "expected_tokens", "c", "draft_s", "verify_s", "decode_s",
               "tokens_per_s", "baseline_tokens_per_s"]] = float("nan")
        first["gamma"] = pd.NA
        first["tree_width"] = pd.NA
        parts.append(first)
    best = pd.concat(parts, ignore_index=True).sort_values(cell, kind="stable")
    best = best.join(largest, on=cell).reset_index(drop=True)
    best = best.rename(columns={"gamma": "best_gamma", "tree_width": "best_tree_width"})
    for col in ("best_gamma", "best_tree_width", "largest_feasible_gamma"):
        best[col] = best[col].astype("Int64")
    return best[KEEP]


def _stripped(params: Mapping[str, Any]) -> dict:
    return {k: v for k, v in params.items() if k not in ("batch", "gamma", "tree_width")}


def crossover_batch(params: Mapping[str, Any], *, gammas: Sequence[int] = range(1, 17),
                    tree_widths: Sequence[int] = (1,), max_batch: int = 4096) -> dict[str, Any]:
    """Smallest batch at which no feasible gamma (and tree width) beats plain decoding.

    First the largest batch in [1, max_batch] at which some point fits (``largest_batch``,
    by bisection: KV need grows with the batch, the plan's budget does not); then, up to it,
    doubles the batch until speculation stops paying and bisects between the last batch that
    paid and the first that did not (one crossing assumed).  ``crossover_batch`` is NaN when
    speculation still pays at ``largest_batch``; ``limit`` then says what stopped the search:
    ``kv`` (the largest batch that fits is below max_batch; ``memory`` where the logits of a
    larger batch leave no KV block at all) or ``max_batch``; where not even batch 1 fits it
    is that point's limit (``memory``, ``max_context``...).  ``reason`` says why.
    """
    params = _stripped(params)
    combos = [(int(g), int(w)) for g in gammas if g > 0 for w in tree_widths]
    if not combos:
        raise SpecsimError("no gamma > 0 to try", field="gammas", fix="give gammas >= 1")

    memo: dict[int, list[dict]] = {}

    def points(batch: int) -> list[dict]:
        if batch not in memo:
            memo[batch] = [analytic_point({**params, "batch": batch, "gamma": g,
                                           "tree_width": w}) for g, w in combos]
        return memo[batch]

    def fits(batch: int) -> bool:
        return any(pt["feasible"] for pt in points(batch))

    def pays(batch: int) -> bool:
        return any(pt["feasible"] and pt["speedup"] > 1.0 for pt in points(batch))

    nan = float("nan")
    if not fits(1):
        first = points(1)[0]
        return {"crossover_batch": nan, "last_paying_batch": nan, "largest_batch": 0,
                "limit": first["limit"], "reason": first["infeasible_reason"]}
    top = _last_true(fits, 1, max_batch)
    out = {"largest_batch": top, "limit": None, "reason": None}
    if not pays(1):
        return {"crossover_batch": 1, "last_paying_batch": nan, **out}
    lo, hi = 1, 2
    while hi <= top and pays(hi):
        lo, hi = hi, hi * 2
    if hi > top:
        hi = top
        if pays(hi):
            past = points(top + 1)[0] if top < max_batch else {}  # the smallest gamma
            return {"crossover_batch": nan, "last_paying_batch": hi, **out,
                    "limit": past.get("limit", "max_batch"),
                    "reason": past.get("infeasible_reason")}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if pays(mid) else (lo, mid)
    return {"crossover_batch": hi, "last_paying_batch": lo, **out}


def _last_true(test, lo: int, hi: int) -> int:
    """The largest b in [lo, hi] with test(b), by bisection (test(lo) holds, one crossing)."""
    if test(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if test(mid) else (lo, mid)
    return lo


def crossover_table(params: Mapping[str, Any], contexts: Sequence[float], *,
                    gammas: Sequence[int] = range(1, 17), tree_widths: Sequence[int] = (1,),
                    max_batch: int = 4096) -> pd.DataFrame:
    """The crossover batch for each context length."""
    import pandas as pd
    rows = [{"context": float(ctx), **crossover_batch(
        {**params, "context": float(ctx)}, gammas=gammas, tree_widths=tree_widths,
        max_batch=max_batch)} for ctx in contexts]
    return pd.DataFrame(rows)
