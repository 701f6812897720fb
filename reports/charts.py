"""One Altair chart per function, each a pure function of the DataFrame(s) it draws.

The frames come from reports.frames and reports.model_frames (already aggregated); a chart
never reads a Results object.  ``policies`` fixes the colour of each policy across charts.
"""
from __future__ import annotations

from typing import Sequence

import altair as alt
import numpy as np
import pandas as pd

from reports import uncertainty_marks

WIDTH = 380
HEIGHT = 240


LABEL_PX = 240  # widest policy label drawn (the report shortens labels to fit: frames)
SLO_COLOR = "#d62728"


def _policy_color(df: pd.DataFrame, policies: Sequence[str] | None):
    present = [str(p) for p in pd.unique(df["policy"])]
    domain = list(policies) if policies is not None else present
    # The domain keeps each policy's colour the same on every chart; the legend lists only
    # the policies this chart has data for, in one column when a label is long.
    wide = any(len(p) > 24 for p in present)
    return alt.Color("policy:N", scale=alt.Scale(domain=domain), legend=alt.Legend(
        title="policy (click to select)", orient="bottom", columns=1 if wide else 2,
        labelLimit=LABEL_PX, values=present))


def _legend_selection():
    # A point selection bound to the legend is the policy selector: click to highlight.
    # Named, not numbered: Altair's automatic names come from a global counter, which would
    # make the same report differ from one call to the next.
    return alt.selection_point(name="pick_policy", fields=["policy"], bind="legend")


def latency_cdf_chart(cdf: pd.DataFrame, title: str,
                      policies: Sequence[str] | None = None) -> alt.Chart:
    """CDF of one latency per policy (columns policy, value_ms, quantile); log-scaled x."""
    sel = _legend_selection()
    return alt.Chart(cdf, title=title, width=WIDTH, height=HEIGHT).mark_line(
        interpolate="step-after").encode(
        x=alt.X("value_ms:Q", title=f"{title} (ms)", scale=alt.Scale(type="log")),
        y=alt.Y("quantile:Q", title="fraction of requests", scale=alt.Scale(domain=[0, 1])),
        color=_policy_color(cdf, policies),
        opacity=alt.condition(sel, alt.value(1.0), alt.value(0.15)),
        tooltip=[alt.Tooltip("policy:N"), alt.Tooltip("quantile:Q", format=".3f"),
                 alt.Tooltip("value_ms:Q", title="ms", format=".2f")],
    ).add_params(sel)


def sweep_chart(sweep: pd.DataFrame, metric: str,
                policies: Sequence[str] | None = None) -> alt.Chart:
    """One sweep metric against request rate (columns policy, request_rate, metric, value)."""
    data = sweep[sweep["metric"] == metric]
    sel = _legend_selection()
    return alt.Chart(data, title=f"{metric} vs request rate", width=WIDTH,
                     height=HEIGHT).mark_line(point=True).encode(
        x=alt.X("request_rate:Q", title="request rate (requests/s)"),
        y=alt.Y("value:Q", title=metric),
        color=_policy_color(data, policies),
        opacity=alt.condition(sel, alt.value(1.0), alt.value(0.15)),
        tooltip=[alt.Tooltip("policy:N"), alt.Tooltip("request_rate:Q", format=".3g"),
                 alt.Tooltip("value:Q", title=metric, format=".4g")],
    ).add_params(sel)


def _grid_base(grid: pd.DataFrame, title: str) -> alt.Chart:
    return alt.Chart(grid, title=title, width=WIDTH, height=HEIGHT).encode(
        x=alt.X("context:O", title="context (tokens)"),
        y=alt.Y("batch:O", title="batch size", sort="descending"),
        tooltip=[alt.Tooltip("batch:O"), alt.Tooltip("context:O"),
                 alt.Tooltip("best_gamma:O", title="best gamma"),
                 alt.Tooltip("speedup:Q", format=".3f"), alt.Tooltip("c:Q", format=".3f")])


def _grid_layers(grid: pd.DataFrame, title: str) -> tuple[alt.Chart, list]:
    """The grid's base (its feasible cells) and the layers of cells with no feasible gamma
    (a ``feasible`` column False: grey, marked with a cross)."""
    base = _grid_base(grid, title)
    if "feasible" not in grid.columns or bool(grid["feasible"].all()):
        return base, []
    off = base.transform_filter("!datum.feasible")
    return base.transform_filter("datum.feasible"), [
        off.mark_rect(color="#e0e0e0"),
        off.mark_text(fontSize=10, color="#777").encode(text=alt.value("\u00d7"))]


def gamma_heatmap_chart(grid: pd.DataFrame, title: str = "optimal gamma") -> alt.LayerChart:
    """Best gamma per batch x context (columns batch, context, best_gamma, speedup, c, and
    optionally feasible: cells without a feasible gamma drawn grey with a cross)."""
    base, off = _grid_layers(grid, title)
    rect = base.mark_rect().encode(color=alt.Color("best_gamma:O", title="gamma",
                                                   scale=alt.Scale(scheme="viridis")))
    text = base.mark_text(fontSize=10).encode(
        text=alt.Text("best_gamma:O"),
        color=alt.condition("datum.best_gamma > 4", alt.value("black"), alt.value("white")))
    return alt.layer(rect, text, *off)


def speedup_surface_chart(grid: pd.DataFrame,
                          title: str = "speedup at the best gamma") -> alt.LayerChart:
    """Speedup at the best gamma per batch x context; 1.0 means do not speculate."""
    base, off = _grid_layers(grid, title)
    rect = base.mark_rect().encode(color=alt.Color(
        "speedup:Q", title="speedup", scale=alt.Scale(scheme="blues", domainMin=1.0)))
    text = base.mark_text(fontSize=9).encode(text=alt.Text("speedup:Q", format=".2f"))
    return alt.layer(rect, text, *off)


STAT_COLORS = alt.Scale(domain=["p50", "p99", "mean"], range=["#6baed6", "#08519c", "#31a354"])


def _slo_rule(value_ms: float, channel: str, title: str) -> alt.Chart:
    enc = alt.X if channel == "x" else alt.Y
    data = pd.DataFrame({"slo_ms": [value_ms], "what": [f"SLO {value_ms:g} ms"]})
    return alt.Chart(data).mark_rule(color=SLO_COLOR, strokeDash=[6, 3], size=2).encode(
        **{channel: enc("slo_ms:Q", title=title)}, tooltip=[alt.Tooltip("what:N", title="")])


def policy_comparison_chart(comp: pd.DataFrame, slo_ms: dict[str, float] | None = None,
                            policies: Sequence[str] | None = None) -> alt.HConcatChart:
    """p50/p99 TTFT and TPOT and output throughput per policy, side by side, one row of bars
    per policy (columns policy, panel, stat, value); ``slo_ms`` ({"ttft": ms, "tpot": ms})
    draws each latency target as a dashed red line."""
    order = list(policies) if policies is not None else list(pd.unique(comp["policy"]))
    keys = {"TTFT (ms)": "ttft", "TPOT (ms)": "tpot"}
    panels = []
    for i, panel in enumerate(pd.unique(comp["panel"])):
        data = comp[comp["panel"] == panel]
        axis = alt.Axis(labelLimit=LABEL_PX) if i == 0 else None
        bars = alt.Chart(data).mark_bar().encode(
            y=alt.Y("policy:N", sort=order, title=None, axis=axis,
                    scale=alt.Scale(domain=order)),
            yOffset=alt.YOffset("stat:N"),
            x=alt.X("value:Q", title=panel),
            color=alt.Color("stat:N", title="statistic", scale=STAT_COLORS,
                            legend=alt.Legend(orient="bottom")),
            tooltip=[alt.Tooltip("policy:N"), alt.Tooltip("stat:N"),
                     alt.Tooltip("value:Q", title=panel, format=".4g")])
        layers = [bars]
        if "lo" in data.columns:  # p5-p95 of an uncertainty run
            layers.append(uncertainty_marks.error_bars(data, panel, order))
        slo = (slo_ms or {}).get(keys.get(panel, ""))
        if slo:
            layers.append(_slo_rule(slo, "x", panel))
        panels.append(alt.layer(*layers).properties(
            title=panel, width=200, height=max(90, 34 * len(order))))
    return alt.hconcat(*panels).properties(
        title="policies compared" + (" (dashed: SLO)" if slo_ms else ""))


def latency_throughput_chart(lt: pd.DataFrame, metric: str, slo_ms: float | None = None,
                             policies: Sequence[str] | None = None) -> alt.LayerChart:
    """p99 latency against output throughput per policy or plan candidate (columns policy,
    request_rate, output_tokens_per_s, metric, value_ms), each line in rate order; with
    ``slo_ms`` the band within the SLO is shaded and its edge drawn dashed."""
    data = lt[lt["metric"] == metric]
    name = {"ttft": "TTFT", "tpot": "TPOT"}.get(metric, metric)
    ytitle = f"p99 {name} (ms)"
    sel = _legend_selection()
    lines = alt.Chart(data).mark_line(point=True).encode(
        x=alt.X("output_tokens_per_s:Q", title="output throughput (tokens/s)"),
        y=alt.Y("value_ms:Q", title=ytitle),
        order=alt.Order("request_rate:Q"),
        color=_policy_color(data, policies),
        opacity=alt.condition(sel, alt.value(1.0), alt.value(0.15)),
        tooltip=[alt.Tooltip("policy:N"),
                 alt.Tooltip("request_rate:Q", title="requests/s", format=".3g"),
                 alt.Tooltip("output_tokens_per_s:Q", title="tokens/s", format=".4g"),
                 alt.Tooltip("value_ms:Q", title=ytitle, format=".4g")],
    ).add_params(sel)
    spread = uncertainty_marks.band(data, _policy_color(data, policies))  # p5-p95
    layers = [lines] if spread is None else [spread, lines]
    if slo_ms:
        band = alt.Chart(pd.DataFrame({"lo": [0.0], "hi": [slo_ms]})).mark_rect(
            color="#2ca02c", opacity=0.10).encode(y=alt.Y("lo:Q", title=ytitle), y2="hi:Q")
        layers = [band, _slo_rule(slo_ms, "y", ytitle), *layers]
    title = f"p99 {name} vs throughput" + (" (shaded: within the SLO)" if slo_ms else "")
    return alt.layer(*layers).properties(title=title, width=WIDTH, height=HEIGHT)


def cost_replicas_chart(cost: pd.DataFrame, candidates: Sequence[str] | None = None,
                        title: str = "cost against replicas") -> alt.Chart:
    """Cost per million output tokens against replicas per plan candidate (columns
    candidate, replicas, cost, basis); ``candidates`` fixes their colours."""
    top = int(np.ceil(cost["replicas"].max())) if len(cost) else 1
    ticks = list(range(0, top + 1, max(1, -(-top // 10))))
    domain = list(candidates) if candidates is not None else list(pd.unique(cost["candidate"]))
    return alt.Chart(cost, title=title, width=WIDTH, height=HEIGHT).mark_point(
        filled=True, size=110).encode(
        x=alt.X("replicas:Q", title="replicas", axis=alt.Axis(values=ticks, format="d"),
                scale=alt.Scale(domain=[0, max(top, 1)])),
        y=alt.Y("cost:Q", title="price per million output tokens", scale=alt.Scale(zero=True)),
        color=alt.Color("candidate:N", title="candidate", scale=alt.Scale(domain=domain),
                        legend=alt.Legend(orient="bottom", columns=1, labelLimit=LABEL_PX,
                                          values=[str(c) for c in pd.unique(
                                              cost["candidate"])])),
        shape=alt.Shape("basis:N", title="replicas", legend=alt.Legend(orient="bottom",
                                                                      labelLimit=LABEL_PX)),
        tooltip=[alt.Tooltip("candidate:N"), alt.Tooltip("replicas:Q"),
                 alt.Tooltip("cost:Q", title="per million tokens", format=".4g"),
                 alt.Tooltip("basis:N")])


def acceptance_length_chart(hist: pd.DataFrame,
                            policies: Sequence[str] | None = None) -> alt.Chart:
    """Share of verifications accepting k draft tokens (policy, accepted_tokens, fraction)."""
    sel = _legend_selection()
    return alt.Chart(hist, title="accepted draft tokens per verification", width=WIDTH,
                     height=HEIGHT).mark_bar().encode(
        x=alt.X("accepted_tokens:O", title="accepted draft tokens"),
        xOffset=alt.XOffset("policy:N"),
        y=alt.Y("fraction:Q", title="share of verifications", axis=alt.Axis(format="%")),
        color=_policy_color(hist, policies),
        opacity=alt.condition(sel, alt.value(1.0), alt.value(0.2)),
        tooltip=[alt.Tooltip("policy:N"), alt.Tooltip("accepted_tokens:O", title="accepted"),
                 alt.Tooltip("count:Q"), alt.Tooltip("fraction:Q", format=".1%")],
    ).add_params(sel)


def position_rate_chart(pos: pd.DataFrame, policies: Sequence[str] | None = None) -> alt.Chart:
    """Per-position acceptance rate (policy, position, rate)."""
    sel = _legend_selection()
    return alt.Chart(pos, title="per-position acceptance", width=WIDTH,
                     height=HEIGHT).mark_line(point=True).encode(
        x=alt.X("position:O", title="draft position"),
        y=alt.Y("rate:Q", title="P(first i tokens accepted | drafted)",
                scale=alt.Scale(domain=[0, 1])),
        color=_policy_color(pos, policies),
        opacity=alt.condition(sel, alt.value(1.0), alt.value(0.15)),
        tooltip=[alt.Tooltip("policy:N"), alt.Tooltip("position:O"),
                 alt.Tooltip("rate:Q", format=".3f")],
    ).add_params(sel)


def roofline_chart(ops: pd.DataFrame, roofs: pd.DataFrame,
                   title: str = "roofline of a step") -> alt.LayerChart:
    """Operators at (arithmetic intensity, achieved FLOP/s) under the device's roofs.

    ops: step, op, arithmetic_intensity, flops_per_s, time_s, bound; roofs:
    arithmetic_intensity, flops_per_s, roof.  Colour is the operator, shape the step.
    """
    x = alt.X("arithmetic_intensity:Q", title="arithmetic intensity (FLOP/byte)",
              scale=alt.Scale(type="log"))
    y = alt.Y("flops_per_s:Q", title="FLOP/s per device", scale=alt.Scale(type="log"),
              axis=alt.Axis(format="~s"))
    roof = alt.Chart(roofs).mark_line(color="#555", strokeDash=[4, 3]).encode(
        x=x, y=y, tooltip=[alt.Tooltip("roof:N"),
                           alt.Tooltip("flops_per_s:Q", title="FLOP/s", format=".3s")])
    points = alt.Chart(ops).mark_point(size=90, filled=True).encode(
        x=x, y=y,
        color=alt.Color("op:N", title="operator", legend=alt.Legend(orient="right")),
        shape=alt.Shape("step:N", title="step", legend=alt.Legend(orient="right")),
        tooltip=[alt.Tooltip("step:N"), alt.Tooltip("op:N"), alt.Tooltip("bound:N"),
                 alt.Tooltip("arithmetic_intensity:Q", title="FLOP/byte", format=".3g"),
                 alt.Tooltip("flops_per_s:Q", title="FLOP/s", format=".3s"),
                 alt.Tooltip("time_s:Q", title="time (s)", format=".3e")])
    return alt.layer(roof, points).properties(title=title, width=WIDTH + 60, height=HEIGHT + 40)


def timeline_chart(tl: pd.DataFrame, title: str,
                   policies: Sequence[str] | None = None) -> alt.Chart:
    """A binned step metric against simulated time (policy, time_s, value)."""
    sel = _legend_selection()
    return alt.Chart(tl, title=title, width=WIDTH, height=HEIGHT - 60).mark_line().encode(
        x=alt.X("time_s:Q", title="simulated time (s)"),
        y=alt.Y("value:Q", title=title),
        color=_policy_color(tl, policies),
        opacity=alt.condition(sel, alt.value(1.0), alt.value(0.15)),
        tooltip=[alt.Tooltip("policy:N"), alt.Tooltip("time_s:Q", format=".1f"),
                 alt.Tooltip("value:Q", title=title, format=".3g")],
    ).add_params(sel)


def calibration_chart(fit: pd.DataFrame, title: str = "calibration fit") -> alt.LayerChart:
    """Predicted against measured seconds with the y = x line (columns measured_s,
    predicted_s, and optionally kind)."""
    x = alt.X("measured_s:Q", title="measured (s)", scale=alt.Scale(type="log"))
    y = alt.Y("predicted_s:Q", title="predicted (s)", scale=alt.Scale(type="log"))
    lo = float(min(fit["measured_s"].min(), fit["predicted_s"].min()))
    hi = float(max(fit["measured_s"].max(), fit["predicted_s"].max()))
    diag = alt.Chart(pd.DataFrame({"measured_s": [lo, hi], "predicted_s": [lo, hi]})) \
        .mark_line(color="#888", strokeDash=[4, 3]).encode(x=x, y=y)
    has_kind = "kind" in fit.columns
    tips = [alt.Tooltip("measured_s:Q", format=".3e"), alt.Tooltip("predicted_s:Q", format=".3e")]
    points = alt.Chart(fit).mark_point(filled=True).encode(
        x=x, y=y,
        color=alt.Color("kind:N", title="kind") if has_kind else alt.value("#1f77b4"),
        tooltip=([alt.Tooltip("kind:N")] if has_kind else []) + tips)
    return alt.layer(diag, points).properties(title=title, width=WIDTH, height=HEIGHT)


def efficiency_curve_chart(curves: pd.DataFrame,
                           title: str = "fitted efficiency curves") -> alt.Chart:
    """Calibrated efficiency against operator size (columns curve, size, efficiency)."""
    return alt.Chart(curves, title=title, width=WIDTH, height=HEIGHT).mark_line(
        point=True).encode(
        x=alt.X("size:Q", title="operator FLOPs, FLOPs per byte, or bytes (see legend)",
                scale=alt.Scale(type="log"),
                axis=alt.Axis(format="~s")),
        y=alt.Y("efficiency:Q", title="fraction of peak", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("curve:N", title="curve", legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("curve:N"), alt.Tooltip("size:Q", format=".3s"),
                 alt.Tooltip("efficiency:Q", format=".3f")])


def plan_chart(plan: pd.DataFrame, title: str = "highest sustainable request rate") -> alt.Chart:
    """Max sustainable rate per candidate deployment (columns candidate, max_rate_per_s)."""
    tips = [alt.Tooltip("candidate:N"), alt.Tooltip("max_rate_per_s:Q", format=".3g")]
    tips += [alt.Tooltip(f"{c}:Q", format=".4g") for c in
             ("devices", "cost_per_million_tokens", "min_replicas_for_target")
             if c in plan.columns]
    data = plan[["candidate", "max_rate_per_s"] + [t.shorthand.split(":")[0] for t in tips[2:]]]
    return alt.Chart(data, title=title, width=WIDTH, height=HEIGHT).mark_bar().encode(
        x=alt.X("max_rate_per_s:Q", title="requests/s within the SLO"),
        y=alt.Y("candidate:N", title=None, sort="-x", axis=alt.Axis(labelLimit=260)),
        tooltip=tips)


def verify_ratio_chart(ratio: pd.DataFrame, gamma: int) -> alt.Chart:
    """Verification over decode step time against batch size (columns model, batch, ratio)."""
    return alt.Chart(ratio, title=f"verify (gamma + 1 = {gamma + 1} tokens) / decode step time",
                     width=WIDTH, height=HEIGHT).mark_line(point=True).encode(
        x=alt.X("batch:Q", title="batch size", scale=alt.Scale(type="log", base=2)),
        y=alt.Y("ratio:Q", title="verify / decode", scale=alt.Scale(zero=False)),
        color=alt.Color("model:N", title="model", legend=alt.Legend(orient="bottom",
                                                                      labelLimit=300)),
        tooltip=[alt.Tooltip("model:N"), alt.Tooltip("batch:Q"),
                 alt.Tooltip("ratio:Q", format=".3f")])
