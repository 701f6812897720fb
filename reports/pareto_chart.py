"""The Pareto chart of ``specsim plan --pareto``: output tokens/s per GPU against output
tokens/s per user, as InferenceX and NVIDIA's AIConfigurator draw it.

Four series (aggregated or disaggregated, with or without speculation), each a line through
its frontier points (simulator/planning/pareto.py) over its dominated points drawn faint.
"""
from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd

from reports.html import Page
from simulator.planning.pareto import PER_GPU, PER_USER, frontier
from simulator.planning.pareto_search import SERIES

WIDTH = 560
HEIGHT = 360
# one colour per series, the same on every chart; no speculation dashed
COLORS = ("#1f77b4", "#1f77b4", "#d62728", "#d62728")
DASHES = ([4, 3], [1, 0], [4, 3], [1, 0])
FRONTIER_TABLE = ("series", "candidate", "concurrency", PER_USER, PER_GPU, "p99_ttft_ms",
                  "p99_tpot_ms", "holds")


def pareto_chart(points: pd.DataFrame) -> alt.LayerChart:
    """Frontier lines per series, every point faint beneath (columns: series, candidate,
    concurrency, the two axes, on_frontier)."""
    color = alt.Color("series:N", scale=alt.Scale(domain=list(SERIES), range=list(COLORS)),
                      legend=alt.Legend(title="series", orient="bottom", columns=2))
    x = alt.X(f"{PER_USER}:Q", title="output tokens/s per user (1 / mean TPOT)")
    y = alt.Y(f"{PER_GPU}:Q", title="output tokens/s per GPU")
    tips = [alt.Tooltip("series:N"), alt.Tooltip("candidate:N"),
            alt.Tooltip("concurrency:Q"), alt.Tooltip(f"{PER_USER}:Q", format=",.1f"),
            alt.Tooltip(f"{PER_GPU}:Q", format=",.1f")]
    faint = alt.Chart(points).mark_point(filled=True, size=25, opacity=0.2).encode(
        x=x, y=y, color=color, tooltip=tips)
    front = frontier(points)
    lines = alt.Chart(front).mark_line(point=True).encode(
        x=x, y=y, color=color, order=alt.Order(f"{PER_USER}:Q"),
        strokeDash=alt.StrokeDash("series:N", scale=alt.Scale(domain=list(SERIES),
                                                                range=list(DASHES)),
                                  legend=None), tooltip=tips)
    return alt.layer(faint, lines, title="Pareto frontier").properties(width=WIDTH,
                                                                       height=HEIGHT)


def pareto_page(points: pd.DataFrame, title: str) -> str:
    """The whole page: the chart, then each series' frontier as a table."""
    page = Page("specsim plan --pareto")
    page.section("Pareto frontier")
    page.text("Each point is one deployment at one client concurrency (closed loop). The "
              "lines join each series' undominated points; the faint points are every run.")
    page.charts([("pareto", pareto_chart(points))])
    page.section("Frontier points")
    page.table(frontier(points)[list(FRONTIER_TABLE)])
    return page.to_html(title)


def render_pareto_report(points: pd.DataFrame, path, *, title: str,
                         overwrite: bool = False) -> Path:
    """Write the page to ``path`` (replacing only a specsim report, or with ``overwrite``)."""
    from reports.page import REPORT_MARKS, check_report_target
    from simulator.output_paths import write_text_file
    out = check_report_target(path, overwrite=overwrite)
    write_text_file(out, pareto_page(points, title), "--report", marks=REPORT_MARKS,
                    overwrite=overwrite, what="report")
    return out.resolve()
