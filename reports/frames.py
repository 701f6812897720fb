"""Aggregate Results into the small DataFrames the charts draw: pandas first, then Altair.

Every frame here is bounded by the number of policies and a fixed number of points, never by
the number of requests or steps, so that a report of a 20,000-request trace stays small.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from reports import uncertainty_marks
from simulator.inputs.errors import SpecsimError

# CDF points: every percent, then the tail finely (p99.1 ... p99.9 and the maximum).
CDF_QUANTILES = np.unique(np.concatenate([np.linspace(0.0, 0.99, 100),
                                          np.linspace(0.991, 1.0, 10)]))
LATENCY_METRICS = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E", "itl": "ITL"}
TIMELINE_METRICS = {"batch_size": "batch size", "kv_occupancy": "KV-cache occupancy",
                    "queue_len": "queue length"}
SUMMARY_COLUMNS = ("policy", "requests", "finished", "p50_ttft_s", "p99_ttft_s", "p50_tpot_s",
                   "p99_tpot_s", "p50_e2e_s", "p99_e2e_s", "output_tokens_per_s",
                   "goodput_requests_per_s", "slo_attainment", "mean_acceptance_length",
                   "acceptance_rate", "speedup_vs_none")
SWEEP_RATE_COLUMNS = ("request_rate", "workload.rate_per_s", "rate_per_s", "rate", "qps")
SWEEP_POLICY_COLUMNS = ("policy_label", "policy", "label")  # policy_label: specsim sweep
SWEEP_METRICS = {"p50_tpot_s": "p50 TPOT (ms)", "p99_tpot_s": "p99 TPOT (ms)",
                 "output_tokens_per_s": "output tokens/s",
                 "goodput_requests_per_s": "goodput (requests/s)"}


def summary_frame(results: Sequence) -> pd.DataFrame:
    """One row per policy; speedup_vs_none is mean TPOT of ``none`` over the policy's."""
    df = pd.DataFrame([r.summary() for r in results])
    base = df.loc[df["policy"] == "none", "mean_tpot_s"]
    df["speedup_vs_none"] = float(base.iloc[0]) / df["mean_tpot_s"] if len(base) else np.nan
    return df[[c for c in SUMMARY_COLUMNS if c in df.columns]].reset_index(drop=True)


def latency_values_s(result, metric: str) -> np.ndarray:
    """Finite per-request latencies of finished requests (or every ITL kept exactly; a long
    run that kept only its ITL sketch has none: ``latency_quantiles_s`` asks the sketch)."""
    if metric == "itl":
        values = np.asarray(result.itl_s, dtype=np.float64)
    else:
        req = result.requests
        done = req[req["status"] == "finished"]
        values = done[f"{metric}_s"].to_numpy(dtype=np.float64)
    return values[np.isfinite(values)]


def sorted_quantiles(values: np.ndarray, quantiles: np.ndarray) -> np.ndarray:
    """numpy's default (linear) quantiles, from one sort instead of a many-kth partition."""
    s = np.sort(values)
    pos = np.asarray(quantiles, dtype=np.float64) * (s.size - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, s.size - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def latency_quantiles_s(result, metric: str, quantiles: np.ndarray) -> np.ndarray | None:
    """The latency's linear quantiles in seconds (None: no value); a run's ITL sketch, when it
    kept one instead of the samples, answers within its relative accuracy."""
    if metric == "itl" and getattr(result, "itl_sketch", None) is not None:
        return result.itl_sketch.quantiles(quantiles) if result.itl_sketch.count else None
    values = latency_values_s(result, metric)
    return sorted_quantiles(values, quantiles) if values.size else None


def cdf_frame(results: Sequence, metric: str,
              quantiles: np.ndarray = CDF_QUANTILES) -> pd.DataFrame:
    """Empirical CDF of one latency per policy at fixed quantiles: policy, value_ms, quantile."""
    parts = []
    for r in results:
        values_s = latency_quantiles_s(r, metric, quantiles)
        if values_s is None:
            continue
        parts.append(pd.DataFrame({"policy": r.label, "value_ms": values_s * 1e3,
                                   "quantile": quantiles}))
    if not parts:
        return pd.DataFrame(columns=["policy", "value_ms", "quantile"])
    return pd.concat(parts, ignore_index=True)


def timeline_frame(results: Sequence, column: str, max_points: int = 300) -> pd.DataFrame:
    """A step column against time, binned: per bin the duration-weighted mean over its steps.

    Returns policy, time_s (bin centre), value, with at most ``max_points`` rows per policy.
    """
    parts = []
    for r in results:
        steps = r.steps
        if not len(steps):
            continue
        start = steps["start_s"].to_numpy(np.float64)
        w = np.maximum(steps["duration_s"].to_numpy(np.float64), 1e-12)
        v = steps[column].to_numpy(np.float64)
        t0, t1 = float(start.min()), float(start.max())
        nbins = max(1, min(max_points, len(steps)))
        width = (t1 - t0) / nbins if t1 > t0 else 1.0
        idx = np.minimum(((start - t0) / width).astype(np.int64), nbins - 1)
        wsum = np.bincount(idx, weights=w, minlength=nbins)
        vsum = np.bincount(idx, weights=w * v, minlength=nbins)
        keep = wsum > 0
        parts.append(pd.DataFrame({"policy": r.label,
                                   "time_s": t0 + (np.flatnonzero(keep) + 0.5) * width,
                                   "value": vsum[keep] / wsum[keep]}))
    if not parts:
        return pd.DataFrame(columns=["policy", "time_s", "value"])
    return pd.concat(parts, ignore_index=True)


def _speculative(results: Sequence) -> list:
    return [r for r in results if np.asarray(r.drafted_hist).any()]


def acceptance_length_frame(results: Sequence) -> pd.DataFrame:
    """Share of verifications that accepted k draft tokens, per speculative policy."""
    parts = []
    for r in _speculative(results):
        k = int(np.flatnonzero(r.drafted_hist).max())
        counts = np.asarray(r.accepted_hist[:k + 1], dtype=np.float64)
        total = counts.sum()
        if total <= 0:
            continue
        parts.append(pd.DataFrame({"policy": r.label, "accepted_tokens": np.arange(k + 1),
                                   "count": counts.astype(np.int64),
                                   "fraction": counts / total}))
    if not parts:
        return pd.DataFrame(columns=["policy", "accepted_tokens", "count", "fraction"])
    return pd.concat(parts, ignore_index=True)


def position_rate_frame(results: Sequence) -> pd.DataFrame:
    """Per-position acceptance (position 1 = first draft token) per speculative policy."""
    parts = []
    for r in _speculative(results):
        rates = np.asarray(r.position_rates(), dtype=np.float64)
        keep = np.isfinite(rates)
        parts.append(pd.DataFrame({"policy": r.label,
                                   "position": np.arange(1, rates.size + 1)[keep],
                                   "rate": rates[keep]}))
    if not parts:
        return pd.DataFrame(columns=["policy", "position", "rate"])
    return pd.concat(parts, ignore_index=True)


def sweep_frame(sweep: pd.DataFrame) -> pd.DataFrame:
    """A sweep (one row per policy x request rate) as policy, request_rate, metric, value.

    The rate column is the first of SWEEP_RATE_COLUMNS present, the policy column the first
    of SWEEP_POLICY_COLUMNS; latencies ending in ``_s`` are shown in milliseconds.
    """
    rate = next((c for c in SWEEP_RATE_COLUMNS if c in sweep.columns), None)
    pol = next((c for c in SWEEP_POLICY_COLUMNS if c in sweep.columns), None)
    if rate is None:
        return pd.DataFrame(columns=["policy", "request_rate", "metric", "value"])
    parts = []
    for col, name in SWEEP_METRICS.items():
        if col not in sweep.columns:
            continue
        scale = 1e3 if col.endswith("_s") and not col.endswith("per_s") else 1.0
        parts.append(pd.DataFrame({
            "policy": sweep[pol].astype(str).to_numpy() if pol else "policy",
            "request_rate": pd.to_numeric(sweep[rate], errors="coerce").to_numpy(),
            "metric": name,
            "value": pd.to_numeric(sweep[col], errors="coerce").to_numpy() * scale}))
    if not parts:
        return pd.DataFrame(columns=["policy", "request_rate", "metric", "value"])
    out = pd.concat(parts, ignore_index=True).dropna(subset=["request_rate", "value"])
    return out.sort_values(["metric", "policy", "request_rate"]).reset_index(drop=True)


# ---------------------------------------------------------------- planner's charts
COMPARISON_PANELS = {"ttft": "TTFT (ms)", "tpot": "TPOT (ms)"}
THROUGHPUT_PANEL = "output throughput (tok/s)"
LABEL_LIMIT = 32  # characters of a policy label shown in tables and charts


def short_labels(labels: Sequence[str], limit: int = LABEL_LIMIT) -> list[str]:
    """Labels of at most ``limit`` characters, unique: a longer one keeps its head and its
    tail (where parameter values differ) around an ellipsis; a clash gets a number."""
    out: list[str] = []
    tail = max(1, limit // 3)
    for lab in map(str, labels):
        s = lab if len(lab) <= limit else lab[:limit - tail - 1] + "\u2026" + lab[-tail:]
        base, n = s, 2
        while s in out:
            s = f"{base[:limit - len(str(n)) - 1]}#{n}"
            n += 1
        out.append(s)
    return out


def label_legend(full: Sequence[str], short: Sequence[str]) -> pd.DataFrame:
    """Short label -> full label, for the labels that were shortened."""
    rows = [(s, f) for f, s in zip(full, short) if s != f]
    return pd.DataFrame(rows, columns=["label", "policy"])


def slo_targets(slo) -> dict[str, float]:
    """Latency targets in seconds, {"ttft": ..., "tpot": ...}, of whichever are set.

    ``slo`` is a scenario's SLO (ttft_s, tpot_s: per request), a plan's CapacitySLO (its
    p99_ttft_s, p99_tpot_s first), or a mapping with those keys (or ``*_ms``).
    """
    if slo is None:
        return {}

    def get(key):
        return slo.get(key) if isinstance(slo, Mapping) else getattr(slo, key, None)

    out = {}
    for m in COMPARISON_PANELS:
        for key, scale in ((f"p99_{m}_s", 1.0), (f"{m}_s", 1.0), (f"p99_{m}_ms", 1e-3),
                           (f"{m}_ms", 1e-3)):
            v = get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < np.inf:
                out[m] = float(v) * scale
                break
    return out


def policy_comparison_frame(summary: pd.DataFrame) -> pd.DataFrame:
    """p50/p99 TTFT and TPOT (ms) and output throughput (tok/s) per policy, long: policy,
    panel, stat, value (one row per finite value; policy order kept)."""
    rows = []
    for _, r in summary.iterrows():
        for m, panel in COMPARISON_PANELS.items():
            for stat in ("p50", "p99"):
                col = f"{stat}_{m}_s"
                if col in summary.columns:
                    rows.append((r["policy"], panel, stat, float(r[col]) * 1e3))
        if "output_tokens_per_s" in summary.columns:
            rows.append((r["policy"], THROUGHPUT_PANEL, "mean",
                         float(r["output_tokens_per_s"])))
    df = pd.DataFrame(rows, columns=["policy", "panel", "stat", "value"])
    return df[np.isfinite(df["value"].to_numpy(np.float64))].reset_index(drop=True)


def latency_throughput_frame(table: pd.DataFrame) -> pd.DataFrame:
    """p99 latency (ms) against output throughput, from a simulated sweep (one row per
    policy x rate) or a plan (one row per candidate at its highest sustainable rate).

    Columns policy, request_rate, output_tokens_per_s, metric (ttft or tpot), value_ms;
    rows without a finite throughput or latency are left out.
    """
    cols = ["policy", "request_rate", "output_tokens_per_s", "metric", "value_ms"]
    if "output_tokens_per_s" not in table.columns:
        return pd.DataFrame(columns=cols)
    if "candidate" in table.columns and "max_rate_per_s" in table.columns:
        pol, rate = table["candidate"].astype(str), table["max_rate_per_s"]
    else:
        rc = next((c for c in SWEEP_RATE_COLUMNS if c in table.columns), None)
        pc = next((c for c in SWEEP_POLICY_COLUMNS if c in table.columns), None)
        if rc is None:
            return pd.DataFrame(columns=cols)
        pol = table[pc].astype(str) if pc else pd.Series("policy", index=table.index)
        rate = table[rc]
    parts = []
    for m in COMPARISON_PANELS:
        if f"p99_{m}_s" not in table.columns:
            continue
        parts.append(pd.DataFrame({
            "policy": pol.to_numpy(), "request_rate": pd.to_numeric(rate, errors="coerce"),
            "output_tokens_per_s": pd.to_numeric(table["output_tokens_per_s"],
                                                 errors="coerce"),
            "metric": m, "value_ms": pd.to_numeric(table[f"p99_{m}_s"], errors="coerce") * 1e3,
            **uncertainty_marks.bound_columns(table, f"p99_{m}_s", 1e3)}))
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True)
    keep = np.isfinite(out[["output_tokens_per_s", "value_ms"]].to_numpy(np.float64)).all(1)
    return out[keep].sort_values(["metric", "policy", "request_rate"],
                                 kind="stable").reset_index(drop=True)


def plan_cost_frame(plan: pd.DataFrame) -> pd.DataFrame:
    """Cost per million output tokens against replicas, per plan candidate: with a target
    rate, the replicas that hold it and the cost there; else the candidate's own replicas
    at its highest sustainable rate.  Columns candidate, replicas, cost, basis."""
    cols = ["candidate", "replicas", "cost", "basis"]
    rows = []
    for _, r in plan.iterrows():
        n, cost = r.get("min_replicas_for_target"), r.get("cost_per_million_tokens_at_target")
        basis = "replicas to hold the target rate"
        if not (_finite(n) and _finite(cost)):
            n, cost = r.get("replicas"), r.get("cost_per_million_tokens")
            basis = "own replicas, at the highest sustainable rate"
        if _finite(n) and _finite(cost):
            rows.append((str(r.get("candidate")), float(n), float(cost), basis))
    return pd.DataFrame(rows, columns=cols)


def _finite(v) -> bool:
    try:
        return v is not None and bool(np.isfinite(float(v)))
    except (TypeError, ValueError):
        return False


ANALYTIC_RESULTS = ("draft_tokens", "draft_s", "verify_s", "decode_s", "iteration_s",
                    "expected_tokens", "speedup", "tokens_per_s")
GRID_AXES = ("batch", "context", "gamma", "tree_width")


def analytic_gamma_grids(sweep: pd.DataFrame, max_grids: int = 4) -> list[tuple[str,
                                                                             pd.DataFrame]]:
    """Best gamma per batch x context of an analytic sweep, one grid per combination of the
    other swept fields (hardware, alpha, ...), at most ``max_grids``: (title, grid), grid
    with batch, context, best_gamma, speedup, c, feasible (False: no feasible gamma)."""
    need = {"batch", "context", "gamma", "speedup", "feasible"}
    if not need <= set(sweep.columns) or not len(sweep):
        return []
    df = sweep[sweep["error"].isna()] if "error" in sweep.columns else sweep
    first = next((list(df.columns).index(c) for c in ANALYTIC_RESULTS if c in df.columns),
                 len(df.columns))
    fields = [c for c in df.columns[:first] if c not in ("point", "key", *GRID_AXES)]
    by = [c for c in fields if df[c].astype(str).nunique() > 1]
    groups = df.groupby(by, sort=False, dropna=False) if by else [((), df)]
    out = []
    for values, g in groups:
        ok = g[g["feasible"].astype(bool) & g["speedup"].notna()]
        cells = g[["batch", "context"]].drop_duplicates()
        best = (ok.loc[ok.groupby(["batch", "context"])["speedup"].idxmax().to_numpy()]
                if len(ok) else ok)
        grid = cells.merge(best[["batch", "context", "gamma", "speedup"] +
                                (["c"] if "c" in best.columns else [])],
                           on=["batch", "context"], how="left")
        grid = grid.rename(columns={"gamma": "best_gamma"})
        grid["feasible"] = grid["speedup"].notna()
        grid["best_gamma"] = grid["best_gamma"].astype("Int64")
        if "c" not in grid.columns:
            grid["c"] = np.nan
        vals = values if isinstance(values, tuple) else (values,)
        title = ", ".join(f"{k}={v}" for k, v in zip(by, vals))
        out.append((title, grid[["batch", "context", "best_gamma", "speedup", "c",
                                 "feasible"]].sort_values(["batch", "context"])
                    .reset_index(drop=True)))
        if len(out) == max_grids:
            break
    return out


def as_frame(obj: Any) -> pd.DataFrame:
    """A DataFrame from a DataFrame, a list of records, a mapping, or an object with to_frame()."""
    if obj is None:
        return pd.DataFrame()
    if isinstance(obj, pd.DataFrame):
        return obj
    for attr in ("to_frame", "frame", "table"):
        value = getattr(obj, attr, None)
        if callable(value):
            value = value()
        if isinstance(value, pd.DataFrame):
            return value
    if isinstance(obj, Mapping):
        if all(np.isscalar(v) or v is None for v in obj.values()):
            return pd.DataFrame({"field": list(obj), "value": list(obj.values())})
        return pd.DataFrame(obj)
    if isinstance(obj, Sequence) and not isinstance(obj, str):
        return pd.DataFrame(list(obj))
    raise SpecsimError(f"cannot show a {type(obj).__name__} as a table", field="report",
                       fix="pass a DataFrame, a list of dicts or a dict")
