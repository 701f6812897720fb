"""``render_report``: Results, and optionally a sweep, plan, validation or calibration -> HTML."""
from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import yaml

from reports import charts, frames, uncertainty_marks
from reports.acceptance_notes import frame_acceptance, run_acceptance
from reports.html import REPORT_GENERATOR, Page, format_number
from reports.html import format_percent as _pct
from reports.model_frames import (
    default_grid_axes,
    gamma_grid_frame,
    operating_point,
    roofline_frames,
    scenario_alpha,
    scenario_pricing,
    verify_ratio_frame,
)
from reports.frames import as_frame
from reports.gpu_sections import calibration_section, validation_section
from reports.prefix_section import prefix_cache_section
from simulator.inputs.errors import SpecsimError
from simulator.output_paths import check_file_target, write_text_file


def _ms(value) -> str:
    return format_number(float(value) * 1e3)


def _times(value) -> str:
    v = float(value)
    return "-" if not np.isfinite(v) else f"{v:.2f}x"


SUMMARY_TABLE = {
    "policy": ("policy", str),
    "finished": ("finished", format_number),
    "p50_ttft_s": ("p50 TTFT (ms)", _ms), "p99_ttft_s": ("p99 TTFT (ms)", _ms),
    "p50_tpot_s": ("p50 TPOT (ms)", _ms), "p99_tpot_s": ("p99 TPOT (ms)", _ms),
    "p50_e2e_s": ("p50 E2E (ms)", _ms), "p99_e2e_s": ("p99 E2E (ms)", _ms),
    "output_tokens_per_s": ("throughput (tok/s)", format_number),
    "goodput_requests_per_s": ("goodput (req/s)", format_number),
    "slo_attainment": ("SLO met", _pct),
    "mean_acceptance_length": ("tau", format_number),
    "acceptance_rate": ("acceptance rate", _pct),
    "speedup_vs_none": ("speedup vs none (TPOT)", _times),
}


def report_versions() -> dict:
    """Software versions behind a report: the run's packages plus the charting stack."""
    from importlib import metadata

    import altair as alt
    import vl_convert

    from simulator.results_dir import software_versions
    out = software_versions()
    for pkg in ("altair", "vl-convert-python"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    out["vega-lite"] = alt.SCHEMA_VERSION.lstrip("v")
    out["vega"] = vl_convert.get_vega_version()
    out["vega-embed"] = vl_convert.get_vega_embed_version()
    return out


def _latency_section(page: Page, results: Sequence, policies: list[str]) -> None:
    page.section("Latency")
    page.text("Empirical CDFs over finished requests (ITL: over every emitted step). "
              "Click a legend entry to pick out one policy; hover for values.")
    named = []
    for metric, title in frames.LATENCY_METRICS.items():
        cdf = frames.cdf_frame(results, metric)
        if len(cdf):
            named.append((f"cdf-{metric}", charts.latency_cdf_chart(cdf, title, policies)))
    page.charts(named)
    prefix_cache_section(page, results)


def _slo_text(slo_ms: Mapping[str, float]) -> str:
    return f"SLO: {', '.join(f'{k.upper()} {v:g} ms' for k, v in slo_ms.items())}." \
        if slo_ms else "No latency SLO given."


def _comparison_section(page: Page, summary: pd.DataFrame, policies: list[str],
                        slo_ms: Mapping[str, float]) -> None:
    comp = uncertainty_marks.comparison_bounds(frames.policy_comparison_frame(summary), summary)
    if not len(comp):
        return
    page.text("Policies side by side: p50 and p99 TTFT and TPOT, and output throughput. "
              + _slo_text(slo_ms) + " Hover a bar for its value.")
    page.charts([("policy-comparison", charts.policy_comparison_chart(comp, dict(slo_ms),
                                                                      policies))])


def _label_legend(page: Page, full: Sequence[str], short: Sequence[str]) -> None:
    legend = frames.label_legend(full, short)
    if len(legend):
        page.text("Long policy labels are shortened in the tables and charts; in full:")
        page.table(legend, {"label": ("label", str), "policy": ("policy", str)})


def _latency_throughput(page: Page, table: pd.DataFrame, policies: list[str],
                        slo_ms: Mapping[str, float], prefix: str, text: str) -> None:
    lt = frames.latency_throughput_frame(table)
    if not len(lt):
        return
    page.text(text + " " + _slo_text(slo_ms))
    page.charts([(f"{prefix}-latency-throughput-{m}", charts.latency_throughput_chart(
        lt, m, slo_ms.get(m), policies)) for m in frames.COMPARISON_PANELS
        if m in set(lt["metric"])])


def _analytic_sweep(page: Page, table: pd.DataFrame) -> bool:
    grids = frames.analytic_gamma_grids(table)
    if not grids:
        return False
    page.text("Analytic sweep: per batch x context the gamma with the largest speedup over "
              "no speculation among the feasible points, and that speedup; a grey cell with "
              "a cross has no feasible gamma (over the KV budget or a model's context: see "
              "the infeasible_reason column of the results file).")
    named = []
    for i, (title, grid) in enumerate(grids):
        suffix = f" ({title})" if title else ""
        named += [(f"sweep-gamma-heatmap-{i}", charts.gamma_heatmap_chart(
                      grid, "optimal gamma" + suffix)),
                  (f"sweep-speedup-{i}", charts.speedup_surface_chart(
                      grid, "speedup at the best gamma" + suffix))]
    page.charts(named)
    best = pd.concat([g.assign(grid=t) for t, g in grids], ignore_index=True)
    page.table(best, {**({"grid": ("grid", str)} if len(grids) > 1 else {}),
                      **GRID_TABLE})
    return True


def _cell(value) -> str:
    return "-" if value is None or pd.isna(value) else format_number(value)


GRID_TABLE = {"batch": ("batch", format_number), "context": ("context", format_number),
              "best_gamma": ("best gamma", _cell), "speedup": ("speedup", _cell),
              "c": ("c (draft / target step)", _cell)}


def _sweep_section(page: Page, sweep: Any, policies: list[str],
                   slo_ms: Mapping[str, float]) -> None:
    table = as_frame(sweep)
    page.section("Sweep")
    frame_acceptance(page, table, "point")
    if _analytic_sweep(page, table):
        return
    pol = next((c for c in frames.SWEEP_POLICY_COLUMNS if c in table.columns), None)
    if pol is not None:  # long labels shortened as in the summary, with their legend
        full = [str(p) for p in pd.unique(table[pol].astype(str))]
        short = frames.short_labels(full)
        table = table.assign(**{pol: table[pol].astype(str).map(dict(zip(full, short)))})
        _label_legend(page, full, short)
    long = frames.sweep_frame(table)
    if not len(long):
        page.text("No request-rate column or no known metric to chart; the table:")
        page.table(as_frame(sweep))
        return
    names = list(pd.unique(long["policy"]))
    domain = policies + [p for p in names if p not in policies]
    page.charts([(f"sweep-{i}", charts.sweep_chart(long, m, domain))
                 for i, m in enumerate(pd.unique(long["metric"]))])
    _latency_throughput(page, table, domain, slo_ms, "sweep",
                        "The latency-throughput curve: each policy's p99 latency against the "
                        "output throughput it reached, in request-rate order.")


def _gamma_section(page: Page, scenario, results: Sequence, pricing) -> None:
    page.section("When to speculate")
    if pricing is None or pricing.draft_cost is None:
        page.text("No draft model in the scenario: nothing to tune.")
        return
    alpha, source = scenario_alpha(scenario, results)
    batches, contexts = default_grid_axes(scenario.batching.max_num_seqs,
                                          pricing.target.max_context)
    grid = gamma_grid_frame(pricing.target_cost, pricing.draft_cost, alpha=alpha,
                            batches=batches, contexts=contexts)
    page.text(f"Chain speculation priced by the cost model with alpha = {alpha:.3f} (from "
              f"{source}): the gamma in 0..8 that maximises E(alpha, gamma) x decode time / "
              "(draft time + verification time), and that speedup.")
    page.charts([("gamma-heatmap", charts.gamma_heatmap_chart(grid)),
                 ("speedup-surface", charts.speedup_surface_chart(grid))])


def _acceptance_section(page: Page, results: Sequence, policies: list[str]) -> None:
    hist = frames.acceptance_length_frame(results)
    if not len(hist):
        return
    page.section("Acceptance")
    page.text("tau (mean acceptance length) = 1 + accepted / drafts; per-position "
              "acceptance is P(first i draft tokens accepted | at least i drafted).")
    run_acceptance(page, results)
    page.charts([("acceptance-length", charts.acceptance_length_chart(hist, policies)),
                 ("position-rate", charts.position_rate_chart(
                     frames.position_rate_frame(results), policies))])


def _roofline_section(page: Page, results: Sequence, pricing, error: str | None) -> None:
    page.section("Roofline")
    if pricing is None:
        page.text(f"No roofline: {error}")
        return
    point = operating_point(results, pricing.target.max_context)
    ops, roofs = roofline_frames(pricing, point)
    hw = pricing.hardware
    page.text(f"{pricing.target.name} on one {hw.name} device: a decode step and a "
              f"verification step of gamma + 1 = {point.gamma + 1} tokens per request, "
              f"batch {point.batch}, context {point.context} (the run's medians). Roofs: "
              f"{hw.peak_flops(pricing.target.dtype) / 1e12:.0f} TFLOP/s "
              f"{pricing.target.dtype}, {hw.memory_bandwidth_bytes_per_s / 1e9:.0f} GB/s.")
    ratio = verify_ratio_frame(pricing, point)
    page.text("Verification against decoding by batch size: on a dense model a verification "
              "is nearly free while decoding is memory-bound; on a mixture-of-experts model "
              "its extra tokens touch more distinct experts, so it costs more until a decode "
              "step alone touches nearly all of them"
              + (" (the dense counterpart has the MoE model's active size)."
                 if pricing.target.is_moe else "."))
    page.charts([("roofline", charts.roofline_chart(ops, roofs)),
                 ("verify-ratio", charts.verify_ratio_chart(ratio, point.gamma))])


def _timeline_section(page: Page, results: Sequence, policies: list[str]) -> None:
    page.section("Timelines")
    page.text("Per engine step, binned over simulated time (duration-weighted mean per bin).")
    points = max(60, min(300, 2400 // max(1, len(results))))
    page.charts([(f"timeline-{col}", charts.timeline_chart(
        frames.timeline_frame(results, col, points), title, policies))
        for col, title in frames.TIMELINE_METRICS.items()])


PLAN_TABLE = {
    "rank": ("rank", format_number), "candidate": ("candidate", str),
    "devices": ("devices", format_number), "replicas": ("replicas", format_number),
    "max_rate_per_s": ("max rate (req/s)", format_number),
    "p99_ttft_s": ("p99 TTFT (ms)", _ms), "p99_tpot_s": ("p99 TPOT (ms)", _ms),
    "goodput_fraction": ("goodput", _pct),
    "output_tokens_per_s": ("throughput (tok/s)", format_number),
    "cost_per_million_tokens": ("price per M tokens", format_number),
    "min_replicas_for_target": ("replicas for the target", lambda v: _cell(
        int(v) if isinstance(v, float) and v == v else v)),
    "cost_per_million_tokens_at_target": ("price per M tokens at the target", format_number),
    "limited_by": ("limited by", str),
}


def _plan_section(page: Page, plan, slo_ms: Mapping[str, float]) -> None:
    page.section("Capacity plan")
    table = as_frame(plan)
    if not ({"candidate", "max_rate_per_s"} <= set(table.columns) and len(table)):
        page.table(table)
        return
    named = [("plan", charts.plan_chart(table))]
    candidates = [str(c) for c in pd.unique(table["candidate"])]
    cost = frames.plan_cost_frame(table)
    if len(cost):
        named.append(("plan-cost", charts.cost_replicas_chart(cost, candidates)))
    page.charts(named)
    page.table(table, PLAN_TABLE)
    notes = [f"{r['candidate']}: {r['note']}" for _, r in table.iterrows()
             if isinstance(r.get("note"), str) and r["note"]]
    notes += [f"{r['candidate']}: failed: {r['error']}" for _, r in table.iterrows()
              if isinstance(r.get("error"), str) and r["error"]]
    for note in notes:
        page.text(note)
    frame_acceptance(page, table, "candidate")
    _latency_throughput(page, table, candidates, slo_ms, "plan",
                        "Each candidate at its highest sustainable rate: p99 latency against "
                        "output throughput.")


def _reproduce_section(page: Page, scenario, labels: Sequence[str],
                       versions: Mapping, flags: str = "") -> None:
    page.section("Reproduce")
    if scenario is not None:
        compare = f" --compare {shlex.quote(','.join(labels))}" if labels else ""
        page.text(f"Seed {scenario.seed}. Save the scenario below as scenario.yaml and run:")
        page.pre(f"specsim run scenario.yaml{compare}{flags} --report report.html")
    page.table(pd.DataFrame({"package": list(versions), "version": list(versions.values())}))
    if scenario is not None:
        raw = dict(getattr(scenario, "raw", {}) or {})
        page.pre(yaml.safe_dump(raw, sort_keys=False) if raw else "(built from Python objects)")


def _subtitle(scenario, results: Sequence, labels: Sequence[str] = ()) -> str:
    if scenario is None:
        return ""
    draft = f" with draft {scenario.draft}" if scenario.draft else ""
    runs = ""
    if results:  # the full labels
        runs = (f", {len(results[0].requests)} requests; policies: "
                + ", ".join(labels or [r.label for r in results]))
    return (f"{scenario.target}{draft} on {scenario.hardware} x{scenario.parallelism.devices}, "
            f"{scenario.replicas} replica(s), seed {scenario.seed}{runs}.")


def build_report_html(results: Sequence, scenario=None, sweep=None, plan=None,
                      validation=None, calibration=None, versions: Mapping | None = None,
                      slo=None, intervals: pd.DataFrame | None = None) -> str:
    """The whole report as one HTML string.

    ``results`` may be empty when a sweep, plan, validation or calibration is given (the
    sections about simulated runs are then left out).  ``slo`` (a scenario's SLO, a plan's
    CapacitySLO or a mapping: ``frames.slo_targets``) sets the SLO lines; by default the
    scenario's.  Policy labels over ``frames.LABEL_LIMIT`` characters are shortened on the
    page, with a table of the full labels.  ``intervals`` (the summary of ``run
    --uncertainty N``, one row per result) adds p5-p95 error bars and "x (lo-hi)" cells.
    """
    results = list(results or [])
    if not results and all(x is None for x in (sweep, plan, validation, calibration)):
        raise SpecsimError("nothing to report", field="results",
                           fix="pass the list simulate() returned (one Results per policy), "
                               "or a sweep, plan, validation or calibration")
    if scenario is None and results:
        scenario = results[0].scenario
    slo_ms = {k: v * 1e3 for k, v in frames.slo_targets(
        slo if slo is not None else getattr(scenario, "slo", None)).items()}
    full = [r.label for r in results]
    policies = frames.short_labels(full)
    shown = [dataclasses.replace(r, label=s) if s != r.label else r
             for r, s in zip(results, policies)]
    page = Page("specsim report" + (f": {scenario.name}" if scenario is not None else ""))
    if results:
        page.section("Summary")
        summary = uncertainty_marks.attach(frames.summary_frame(shown), intervals, full)
        for note in (uncertainty_marks.interval_note(summary),
                     uncertainty_marks.widest_sentence(summary)):
            if note:  # only a run with uncertainty intervals
                page.text(note)
        page.table(*uncertainty_marks.summary_table(summary, SUMMARY_TABLE))
        _label_legend(page, full, policies)
        _comparison_section(page, summary, policies, slo_ms)
        _latency_section(page, shown, policies)
    results = shown
    if sweep is not None:
        _sweep_section(page, sweep, policies, slo_ms)
    pricing, error = None, "no scenario"
    if scenario is not None:
        try:
            pricing, error = scenario_pricing(scenario), None
        except SpecsimError as exc:  # e.g. a custom hardware_dir that moved: skip, say why
            error = str(exc)
        _gamma_section(page, scenario, results, pricing)
    if results:
        _acceptance_section(page, results, policies)
        _roofline_section(page, results, pricing, error)
        _timeline_section(page, results, policies)
    if plan is not None:
        _plan_section(page, plan, slo_ms)
    calibration_section(page, calibration, pricing)
    if validation is not None:
        validation_section(page, validation)
    _reproduce_section(page, scenario, full, versions or report_versions(),
                       uncertainty_marks.draws_flag(intervals))
    return page.to_html(_subtitle(scenario, results, full))


REPORT_MARKS = (f'<meta name="generator" content="{REPORT_GENERATOR}">'.encode(),)


def render_report(results: Sequence, path, scenario=None, sweep=None, plan=None,
                  validation=None, calibration=None, *, versions: Mapping | None = None,
                  field: str = "--report", overwrite: bool = False, slo=None,
                  intervals: pd.DataFrame | None = None) -> Path:
    """Write the self-contained HTML report of ``results`` (one Results per policy) to ``path``.

    The path is checked before the page is built: an existing file is replaced only if it is
    a specsim report (or with ``overwrite``); see :mod:`simulator.output_paths`.
    """
    out = check_report_target(path, field=field, overwrite=overwrite)
    text = build_report_html(results, scenario, sweep, plan, validation, calibration, versions,
                             slo=slo, intervals=intervals)
    write_text_file(out, text, field, marks=REPORT_MARKS, overwrite=overwrite, what="report")
    return out.resolve()


def check_report_target(path, field: str = "--report", overwrite: bool = False) -> Path:
    """Check a report path before any work (commands call it first, then render_report)."""
    return check_file_target(path, field, marks=REPORT_MARKS, overwrite=overwrite, what="report")

