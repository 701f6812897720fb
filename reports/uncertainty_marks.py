"""Error bars, bands and "x (lo-hi)" cells for runs with uncertainty intervals.

``run --uncertainty N`` adds, per policy and metric ``m`` of
``simulator.uncertainty.propagate.METRICS``, the columns ``m_p5``, ``m_p50``, ``m_p95``,
``m_widest`` and ``m_share_<source>`` to the summary (docs/uncertainty.md).  Any table that
carries ``m_p5`` and ``m_p95`` beside ``m`` gets its p5-p95 interval drawn: error bars in the
policy comparison, a band on the latency-throughput chart, "x (lo-hi)" in the summary table.
A table without them is left exactly as it was, so a report without uncertainty does not
change by a byte.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import altair as alt
import numpy as np
import pandas as pd

from simulator.inputs.errors import SpecsimError
from simulator.uncertainty.propagate import METRICS

LO, HI = "p5", "p95"
# the policy comparison's (panel, stat) -> the summary metric it draws, and its scale
PANEL_METRICS = {("TTFT (ms)", "p50"): ("p50_ttft_s", 1e3),
                 ("TTFT (ms)", "p99"): ("p99_ttft_s", 1e3),
                 ("TPOT (ms)", "p50"): ("p50_tpot_s", 1e3),
                 ("TPOT (ms)", "p99"): ("p99_tpot_s", 1e3),
                 ("output throughput (tok/s)", "mean"): ("output_tokens_per_s", 1.0)}
NAMES = {"p50_ttft_s": "p50 TTFT", "p99_ttft_s": "p99 TTFT", "p50_tpot_s": "p50 TPOT",
         "p99_tpot_s": "p99 TPOT", "output_tokens_per_s": "throughput",
         "goodput_requests_per_s": "goodput"}
BAR_COLOR = "#333333"


def interval_metrics(table: pd.DataFrame) -> list[str]:
    """The metrics of ``table`` that carry a p5-p95 interval."""
    return [m for m in METRICS
            if {m, f"{m}_{LO}", f"{m}_{HI}"} <= set(table.columns)]


def attach(summary: pd.DataFrame, intervals: pd.DataFrame | None,
           labels: Sequence[str]) -> pd.DataFrame:
    """``summary`` with the interval columns of ``intervals`` (one row per policy, the run's
    summary with its ``policy`` labels in ``labels``' order); ``summary`` itself without."""
    if intervals is None or not interval_metrics(intervals):
        return summary
    if [str(p) for p in intervals.get("policy", [])] != [str(x) for x in labels]:
        raise SpecsimError("the intervals' policies are not the run's: "
                           f"{list(intervals.get('policy', []))[:4]} against {list(labels)[:4]}",
                           field="intervals",
                           fix="pass the summary table of the same run (one row per policy, "
                               "in the order of the results)")
    mine = tuple(f"{m}_" for m in METRICS)
    cols = [c for c in intervals.columns if (c.startswith(mine) or c == "uncertainty_draws")
            and c not in summary.columns]
    extra = intervals[cols].reset_index(drop=True)
    return pd.concat([summary.reset_index(drop=True), extra], axis=1)


def comparison_bounds(comp: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """The policy comparison frame with ``lo`` and ``hi`` (p5 and p95, the panel's units)
    where ``summary`` has intervals; ``comp`` unchanged where it has none."""
    if not interval_metrics(summary):
        return comp
    by_policy = summary.set_index(summary["policy"].astype(str))
    lo, hi = [], []
    for _, r in comp.iterrows():
        m, scale = PANEL_METRICS.get((r["panel"], r["stat"]), (None, 1.0))
        row = by_policy.loc[str(r["policy"])]
        ok = m is not None and f"{m}_{LO}" in by_policy.columns
        lo.append(float(row[f"{m}_{LO}"]) * scale if ok else np.nan)
        hi.append(float(row[f"{m}_{HI}"]) * scale if ok else np.nan)
    return comp.assign(lo=lo, hi=hi)


def error_bars(data: pd.DataFrame, panel: str, order: Sequence[str]) -> alt.Chart:
    """A p5-p95 rule across each bar of one comparison panel (columns policy, stat, lo,
    hi), drawn on the bar's own row (``yOffset`` by statistic)."""
    rows = data[np.isfinite(data[["lo", "hi"]].to_numpy(np.float64)).all(axis=1)]
    rows = rows[["policy", "stat", "lo", "hi"]].reset_index(drop=True)
    return alt.Chart(rows).mark_rule(color=BAR_COLOR, size=2).encode(
        y=alt.Y("policy:N", sort=list(order), scale=alt.Scale(domain=list(order))),
        yOffset=alt.YOffset("stat:N"),
        x=alt.X("lo:Q", title=panel), x2="hi:Q",
        tooltip=[alt.Tooltip("policy:N"), alt.Tooltip("stat:N"),
                 alt.Tooltip("lo:Q", title="p5", format=".4g"),
                 alt.Tooltip("hi:Q", title="p95", format=".4g")])


def bound_columns(table: pd.DataFrame, metric: str, scale: float) -> dict:
    """``{"lo_ms": ..., "hi_ms": ...}`` of ``metric``'s p5/p95 in a sweep or plan table
    (scaled like its value), or ``{}`` where the table has no interval for it."""
    if f"{metric}_{LO}" not in table.columns or f"{metric}_{HI}" not in table.columns:
        return {}
    return {f"{e}_ms": pd.to_numeric(table[f"{metric}_{q}"], errors="coerce").to_numpy()
            * scale for e, q in (("lo", LO), ("hi", HI))}


def band(data: pd.DataFrame, color) -> alt.Chart | None:
    """The p5-p95 band of each line of a latency-throughput chart (columns policy,
    request_rate, output_tokens_per_s, lo_ms, hi_ms), or None without intervals."""
    if not {"lo_ms", "hi_ms"} <= set(data.columns):
        return None
    rows = data[np.isfinite(data[["lo_ms", "hi_ms"]].to_numpy(np.float64)).all(axis=1)]
    rows = rows[["policy", "request_rate", "output_tokens_per_s", "lo_ms", "hi_ms"]]
    return alt.Chart(rows.reset_index(drop=True)).mark_area(opacity=0.18).encode(
        x=alt.X("output_tokens_per_s:Q"), y=alt.Y("lo_ms:Q"), y2="hi_ms:Q",
        order=alt.Order("request_rate:Q"), color=color,
        tooltip=[alt.Tooltip("policy:N"), alt.Tooltip("lo_ms:Q", title="p5", format=".4g"),
                 alt.Tooltip("hi_ms:Q", title="p95", format=".4g")])


def _interval_cell(fmt):
    def cell(value) -> str:
        point, lo, hi = value
        return f"{fmt(point)} ({fmt(lo)}-{fmt(hi)})"
    return cell


def summary_table(summary: pd.DataFrame, columns: Mapping[str, tuple]) -> tuple[pd.DataFrame,
                                                                                 dict]:
    """The summary and its column map with each interval metric shown as "x (lo-hi)" in
    its own format; both unchanged without intervals."""
    metrics = [m for m in interval_metrics(summary) if m in columns]
    if not metrics:
        return summary, dict(columns)
    shown, cols = summary.copy(), dict(columns)
    for m in metrics:
        shown[m] = list(zip(summary[m], summary[f"{m}_{LO}"], summary[f"{m}_{HI}"]))
        header, fmt = columns[m]
        cols[m] = (f"{header}, p5-p95", _interval_cell(fmt))
    return shown, cols


def widest_sentence(summary: pd.DataFrame) -> str:
    """Which declared input makes each metric's width, per policy, in one sentence."""
    parts = []
    for m in interval_metrics(summary):
        if f"{m}_widest" not in summary.columns:
            continue
        per = []
        for _, r in summary.iterrows():
            src = str(r[f"{m}_widest"])
            share = r.get(f"{m}_share_{src}", np.nan)
            known = isinstance(share, (int, float)) and np.isfinite(share)
            what = "no spread" if src == "none" else src + (f" {share:.0%}" if known else "")
            per.append(f"{r['policy']}: {what}")
        parts.append(f"{NAMES.get(m, m)} ({', '.join(per)})")
    if not parts:
        return ""
    return ("The widest source of each metric's spread (its share of the variance where "
            "several sources vary): " + "; ".join(parts) + ".")


def _draws(table: pd.DataFrame | None) -> int | None:
    col = None if table is None else table.get("uncertainty_draws")
    if col is None or not len(col) or not np.isfinite(float(col.iloc[0])):
        return None
    return int(col.iloc[0])


def draws_flag(intervals: pd.DataFrame | None) -> str:
    """`` --uncertainty N`` for the report's reproduce command; "" without intervals."""
    n = _draws(intervals) if intervals is not None and interval_metrics(intervals) else None
    return "" if n is None else f" --uncertainty {n}"


def interval_note(summary: pd.DataFrame) -> str:
    """What the intervals are, for the text above the summary table; "" without them."""
    if not interval_metrics(summary):
        return ""
    draws = _draws(summary)
    n = "" if draws is None else f" over {draws} Monte Carlo draws"
    return ("In brackets and as error bars: the 5th to 95th percentile of each metric"
            f"{n} of the declared input uncertainty (docs/uncertainty.md); the number "
            "before them is the point estimate.")
