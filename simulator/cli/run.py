"""``specsim run [scenario.yaml]``: simulate, print a summary table per policy, write results."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.cli.output import FORMATS, render
from simulator.cli import run_uncertainty as unc
from simulator.cli.progress import PLAIN_INTERVAL_S, Progress
from simulator.inputs.errors import SpecsimError

if TYPE_CHECKING:  # pandas, the scenario and the engine load in main(): `run --help` is fast
    import pandas as pd

    from simulator.scenario import Scenario
    from simulator.summary_rows import SummaryRows

DEFAULT_COMPARE = "none,chain"
# the summary table: latency, then end to end, throughput and acceptance (a block each,
# the policy repeated); times are shown in ms, speedup_vs_none with its footnote
TABLE_COLUMNS = (("policy", "finished", "p50_ttft_s", "p99_ttft_s", "p50_tpot_s", "p99_tpot_s",
                  "speedup_vs_none"),
                 ("p50_e2e_s", "p99_e2e_s", "output_tokens_per_s", "goodput_requests_per_s",
                  "mean_acceptance_length", "acceptance_rate"))


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Arguments of ``run``."""
    p.add_argument("scenario", nargs="?", default=None,
                   help="scenario YAML (default: the built-in OPT-13B/OPT-125M on A100-40GB)")
    p.add_argument("--compare", default=None,
                   help="policies to run on the same trace and seed, e.g. "
                        "none,chain:gamma=4 (default for the built-in scenario: none,chain); "
                        "an entry may carry its own acceptance: chain:acceptance.alpha=0.7, "
                        "eagle3:acceptance={model: iid, alpha: 0.7, source: ...} or "
                        "eagle3:acceptance=FILE.yaml")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a scenario field, e.g. --set seed=3")
    p.add_argument("--vllm-args", default=None, metavar="FILE",
                   help="a vLLM engine-arguments file (YAML or JSON: max_num_seqs, "
                        "tensor_parallel_size, speculative_config, ...) over the scenario")
    p.add_argument("--out", default="specsim-out", help="output folder (default specsim-out)")
    p.add_argument("--results-format", choices=("parquet", "csv"), default="parquet",
                   help="the per-policy requests, steps and acceptance tables: parquet "
                        "(default; fast to write, typed) or csv; summary.csv is CSV either way")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--report", default=None, help="also write an HTML report to this path")
    p.add_argument("--timeline", default=None, metavar="FILE.json",
                   help="also write every engine step as a Chrome trace-event file that "
                        "Perfetto (ui.perfetto.dev) and chrome://tracing open")
    p.add_argument("--overwrite", action="store_true",
                   help="write into an --out folder that is not a specsim results folder "
                        "(specsim's files are added; a file of one of their names that "
                        "specsim did not write is refused; nothing else is touched), and "
                        "replace a --report or --timeline file outside --out that specsim "
                        "did not write")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress display (a bar on a terminal, a line every "
                        f"{PLAIN_INTERVAL_S:g} s elsewhere)")
    unc.add_arguments(p)


def simulate(scenario: Scenario, **kwargs):
    """The engine's ``simulate``, imported on first use (tests replace this name)."""
    from simulator.simulate import simulate as engine_simulate

    return engine_simulate(scenario, **kwargs)


def run_policies(scenario: Scenario, policies, progress: bool = False,
                 labelled: bool = True) -> list:
    """Simulate ``scenario`` once per policy; same trace, same seed.  Every policy is checked
    first (``check_runnable``: the deployment, the policy against the models, a servable
    request), so a bad third entry of --compare fails before the first one runs; its error
    names the entry where ``labelled`` (the user wrote --compare)."""
    from simulator.run_setup import scenario_workload
    from simulator.simulate import check_runnable
    scenarios = [scenario.with_policy(pol) for pol in policies]
    # read first: a bad trace is the trace's error, not the first --compare entry's
    workload = scenario_workload(scenarios[0])
    for pol, sc in zip(policies, scenarios):  # the trace is drawn once
        workload = check_runnable(sc, workload=workload, where=f"--compare {pol.label}"
                                  if labelled and len(policies) > 1 else None)
    out = []
    for pol, sc in zip(policies, scenarios):  # the checked trace: not drawn (read) again
        with Progress(pol.label, unit="requests", enabled=progress) as bar:
            out.append(simulate(sc, workload=workload, progress=bar.set))
    return out


def summary_table(results: list) -> pd.DataFrame:
    """One summary row per policy: specsim's metrics, the speedup of mean TPOT over ``none``
    if present, then the same run under ``vllm bench serve``'s result keys
    (simulator/vllm_metrics.py)."""
    from simulator.summary_rows import summary_rows
    return summary_rows(results).frame()


def _policies(args: argparse.Namespace, scenario) -> list:
    """The policies to run: --compare's (an entry naming the scenario's own method without
    parameters is the scenario's, with its options: `--compare none,eagle3` on a file that
    configures eagle3 with 3 tokens runs 3), the built-in pair, or the scenario's."""
    from simulator.scenario import parse_compare
    if args.compare:  # (an entry whose defaults are the scenario's options keeps its label)
        own = scenario.policy
        return [own if p.name == own.name and not p.raw and p.acceptance is None
                and p.params != own.params else p for p in parse_compare(args.compare)]
    if args.scenario is None and "speculative_config" not in scenario.raw:
        return parse_compare(DEFAULT_COMPARE)
    return [scenario.policy]


def _note_serving_only(path: str | None) -> None:
    """The --vllm-args keys read and ignored, in one line on stderr (so that stdout stays the
    table, machine-readable with --format)."""
    if not path:
        return
    from simulator.vllm_args import serving_only_keys
    ignored = serving_only_keys(path)
    if ignored:
        print(f"--vllm-args: ignored (serving only, no effect on speed): {', '.join(ignored)}",
              file=sys.stderr)


def main(args: argparse.Namespace) -> int:
    """Run the scenario for each policy and print the summary table."""
    from simulator.inputs.yaml_io import clip
    from simulator.output_paths import ResultsFolderWriter
    from simulator.results_dir import require_format, result_names, write_results_tables
    from simulator.scenario import load_scenario

    scenario = load_scenario(args.scenario, args.overrides, args.vllm_args)
    _note_serving_only(args.vllm_args)
    policies = _policies(args, scenario)
    draws = unc.draws_asked(args, scenario, policies)  # checked before any work
    require_format(args.results_format)
    out = Path(args.out).expanduser()
    if args.report and args.report.endswith(("/", os.sep)):
        raise SpecsimError(f"{clip(repr(args.report))} names a folder, not a file",
                           field="--report", fix="give a file name such as report.html")
    report = Path(args.report).expanduser() if args.report else None
    # every path is checked before the first request is simulated
    report_inside = report is not None and _inside(report, out)
    if report is not None and not report_inside:
        from reports.page import check_report_target
        check_report_target(report, overwrite=args.overwrite)
    timeline, timeline_inside = _timeline_target(args, scenario, out)
    _check_not_inputs(args, scenario, [("--out", out), ("--report", report),
                                       ("--timeline", timeline)])
    names = result_names([p.label for p in policies], args.results_format) + \
        ([report.name] if report_inside else []) + ([timeline.name] if timeline_inside else [])
    with ResultsFolderWriter(out, "--out", overwrite=args.overwrite, names=names) as writer:
        results = run_policies(scenario, policies, progress=not args.no_progress,
                               labelled=bool(args.compare))
        summary = _summary(results, args, draws, report is not None)
        if draws:  # the p5/p50/p95 columns (simulator/uncertainty)
            summary = summary.join(unc.interval_columns(
                [scenario.with_policy(p) for p in policies], draws, args,
                progress=not args.no_progress))
        manifest = write_results_tables(writer.path, results, summary, scenario,
                                        args.results_format)
        if report_inside:
            _render_report(results, writer.path / report.name, scenario, summary)
        if timeline_inside:
            from simulator.timeline import write_timeline
            write_timeline(results, writer.path / timeline.name)
        writer.commit(manifest)
    _print_summary(args, scenario, results, summary, out, draws)
    for line in acceptance_warnings(results) + engine_notes(results):  # stderr: stdout
        print(line, file=sys.stderr)                                     # stays the table
    if timeline is not None:
        if not timeline_inside:
            from simulator.timeline import write_timeline
            write_timeline(results, timeline, overwrite=args.overwrite)
        print(f"timeline: {(out / timeline.name if timeline_inside else timeline).resolve()}"
              " (open it in ui.perfetto.dev)")
    if report_inside:
        print(f"report: {(out / report.name).resolve()}")
    elif report is not None:
        path = _render_report(results, report, scenario, summary, overwrite=args.overwrite)
        print(f"report: {path}")
    return 0


def _summary(results: list, args, draws: int, report: bool) -> pd.DataFrame | SummaryRows:
    """The summary rows; as a DataFrame where --uncertainty, --report or --format csv/json
    reads it: the plain table and summary.csv need none (no pandas imported: issue 36)."""
    from simulator.summary_rows import summary_rows
    rows = summary_rows(results)
    plain = not draws and args.format == "table" and not report and rows.kinds() is not None
    return rows if plain else rows.frame()


def _render_report(results: list, path: Path, scenario: Scenario, summary: pd.DataFrame,
                   **kwargs) -> Path:
    """The HTML report; the summary's p5/p95 columns, where --uncertainty gave them, become
    its error bars (reports/uncertainty_marks.py)."""
    from reports import render_report  # only reports/ imports altair
    return render_report(results, path, scenario=scenario, intervals=summary, **kwargs)


def _print_summary(args, scenario: Scenario, results: list, summary: pd.DataFrame, out: Path,
                   draws: int) -> None:
    """The summary on stdout: the table (and the intervals' own), CSV or JSON."""
    if args.format != "table":
        print(render(summary, args.format))
        return
    print_table(scenario, results, summary, out)
    if draws:
        from simulator.cli.output import render_table
        print("\n".join(unc.source_lines(scenario, draws)))
        print(render_table(unc.interval_table(summary), keys=["policy", "metric"]))


def _check_not_inputs(args, scenario: Scenario, outputs: list) -> None:
    """No output may be the scenario, the --vllm-args file or a trace the workload reads."""
    from simulator.input_clash import check_outputs_not_inputs, workload_files
    check_outputs_not_inputs(outputs, [args.scenario, args.vllm_args,
                                       *workload_files(scenario.workload, scenario.base_dir)],
                             folders=("--out",))


def _timeline_target(args, scenario: Scenario, out: Path) -> tuple[Path | None, bool]:
    """The --timeline path, checked before any work; whether it goes into the results folder
    (written with it, atomically)."""
    if not args.timeline:
        return None, False
    from simulator.inputs.yaml_io import clip
    from simulator.timeline import check_timeline_options, check_timeline_target

    check_timeline_options(scenario.engine.steps_table)
    path = Path(args.timeline).expanduser()
    if args.report and Path(args.report).expanduser().absolute() == path.absolute():
        raise SpecsimError("--timeline and --report name the same file", field="--timeline",
                           fix="give the timeline its own name, such as timeline.json")
    if _same(path.absolute().parent, out.absolute()):
        if path.suffix.lower() != ".json":  # never one of the results' own names
            raise SpecsimError(f"a timeline inside the results folder must end in .json, got "
                               f"{clip(repr(path.name))}", field="--timeline",
                               fix=f"write e.g. {out / 'timeline.json'}")
        return path, True
    if _same_or_below(path.absolute().parent, out.absolute()):
        raise SpecsimError("a timeline can go into the results folder, not into a folder "
                           "below it", field="--timeline",
                           fix=f"write e.g. {out / 'timeline.json'}")
    return check_timeline_target(args.timeline, overwrite=args.overwrite), False


def print_table(scenario: Scenario, results: list, summary: pd.DataFrame | SummaryRows,
                out: Path) -> None:
    """The summary table of ``run`` (times in ms) in blocks that fit the table width, its
    headline, the speedup's footnote, the legend of shortened labels, saturation notes."""
    from simulator.cli.output import legend_lines, render_columns, wrap_text

    def shown_name(col: str) -> str:
        if col == "speedup_vs_none":
            return "speedup_vs_none*"
        return col[:-2] + "_ms" if col.endswith("_s") and not col.endswith("per_s") else col

    names, column, kinds = _plain_columns(summary)
    blocks = [[c for c in block if c in names] for block in TABLE_COLUMNS]
    shown = []
    for c in (c for block in blocks for c in block):
        values, kind = column(c), kinds[c]
        if shown_name(c).endswith("_ms"):  # a number column times 1e3: a float column
            values, kind = [None if v is None else v * 1e3 for v in values], "f"
        shown.append((shown_name(c), values, kind))
    d = scenario.disaggregation
    devices = f"x{scenario.parallelism.devices}" if d is None else (
        f"x{d.prefill.replicas * d.prefill.parallelism.devices} prefill + "
        f"x{d.decode.replicas * d.decode.parallelism.devices} decode")
    print(wrap_text(f"scenario {scenario.name}: {scenario.target} on {scenario.hardware}"
                    f" {devices}, {results[0].summary()['requests']} "
                    f"requests, seed {scenario.seed}"))
    print(wrap_text(acceptance_line(results)))
    if results[0].info.get("execution"):
        print(wrap_text(f"execution: {results[0].info['execution']}"))
    rows = len(column(names[0])) if names else 0
    sat = [bool(v) for v in column("saturated")] if "saturated" in names else [False] * rows
    if any(sat) and shown and shown[0][0] == "policy":
        shown[0] = ("policy", [f"{p} (saturated)" if flag else p
                               for p, flag in zip(shown[0][1], sat)], "O")
    legend: dict[str, int] = {}
    groups = [[shown_name(c) for c in block if c != "policy"] for block in blocks]
    print(render_columns(shown, keys=["policy"], groups=groups, legend=legend))
    if "speedup_vs_none" in names:
        has_none = "none" in column("policy")
        print(wrap_text("* speedup_vs_none = mean TPOT of policy none / mean TPOT of the policy "
                        "(decode speed; TTFT not in it)"
                        + ("" if has_none else "; no policy none ran: add none to --compare"),
                        indent="    "))
    for line in legend_lines(legend):
        print(line)
    for i in (i for i, flag in enumerate(sat) if flag):
        print(wrap_text(saturation_note({n: column(n)[i] for n in names}), indent="    "))
    print(f"results: {out}/")


def _plain_columns(summary: pd.DataFrame | SummaryRows) -> tuple[list[str], Any, dict]:
    """The summary's column names, a function from a name to its Python values, and each
    column's dtype kind (b, i, f, O), from summary rows or from a DataFrame."""
    from simulator.summary_rows import SummaryRows
    if isinstance(summary, SummaryRows) and summary.kinds() is not None:
        return summary.columns(), summary.column, summary.kinds()
    from simulator.cli.output import dtype_kind
    df = summary.frame() if isinstance(summary, SummaryRows) else summary
    names = [str(c) for c in df.columns]
    return names, lambda n: df[n].tolist(), {n: dtype_kind(df[n].dtype) for n in names}


def acceptance_line(results: list) -> str:
    """Where the acceptance numbers come from, in one line (``Results.info``)."""
    texts = {r.label: r.info.get("acceptance_source") for r in results}
    texts = {k: v for k, v in texts.items() if v and v != "none (no speculation)"}
    if not texts:
        return "acceptance: none (no speculation)"
    groups: dict[str, list[str]] = {}
    for label, text in texts.items():
        groups.setdefault(text, []).append(label)
    if len(groups) == 1:
        return "acceptance: " + next(iter(groups))
    return "acceptance: " + "; ".join(f"{', '.join(v)}: {k}" for k, v in groups.items())


def acceptance_warnings(results: list) -> list[str]:
    """The runs' acceptance warnings (``Results.info``), one line per policy that has one."""
    return [f"warning: {r.label}: {r.info['acceptance_warning']}" for r in results
            if r.info.get("acceptance_warning")]


def engine_notes(results: list) -> list[str]:
    """What the named engine overrode in the runs' batching (simulator/engine_overrides.py),
    once: the engine logs it at start-up, not per policy."""
    return [f"note: {line}" for line in dict.fromkeys(r.info.get("engine_override", "")
                                                       for r in results) if line]


def saturation_note(row) -> str:
    """What a saturated row's numbers mean, in one line."""
    ttft = float(row.get("p50_ttft_s", float("nan")))
    return (f"  {row['policy']}: saturated: arrivals outpace service (requests waiting to be "
            f"admitted grew from {int(row['waiting_mid'])} at mid-trace to "
            f"{int(row['waiting_last'])} at the last arrival, "
            f"{float(row['waiting_at_last_arrival']):.0%} of the trace); its latencies (p50 "
            f"TTFT {_human_s(ttft)}) are mostly queueing, and grow with the trace's length. "
            f"Lower the rate, add replicas, or use 'specsim plan' for the sustainable rate.")


def _human_s(x: float) -> str:
    if x != x:
        return "n/a"
    if x >= 3600:
        return f"{x / 3600:.1f} h"
    if x >= 60:
        return f"{x / 60:.1f} min"
    return f"{x:.3g} s" if x >= 1 else f"{x * 1e3:.3g} ms"


def _inside(report: Path, out: Path) -> bool:
    """Whether the report goes directly into the results folder (written with it, atomically).

    A report deeper inside ``out`` is refused: the results folder holds no sub-folders.
    """
    from simulator.inputs.yaml_io import clip

    rp, op = report.absolute().parent, out.absolute()
    if report.absolute() == op or _same(report.absolute(), op):
        raise SpecsimError(f"--report and --out name the same path {clip(repr(str(out)))}",
                           field="--report", fix=f"write e.g. {out / 'report.html'}")
    if _same(rp, op):
        if report.suffix.lower() not in (".html", ".htm"):  # never one of the results' names
            raise SpecsimError(f"a report inside the results folder must end in .html, got "
                               f"{clip(repr(report.name))}", field="--report",
                               fix=f"write e.g. {out / 'report.html'}")
        return True
    if op in rp.parents or _same_or_below(rp, op):
        raise SpecsimError(f"{clip(repr(str(report)))} is inside a sub-folder of the results "
                           "folder",
                           field="--report", fix=f"write it as {out / report.name}, or outside "
                           f"{out}")
    return False


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        return False


def _same_or_below(a: Path, b: Path) -> bool:
    try:
        return b.resolve() in a.resolve().parents
    except (OSError, RuntimeError):
        return False
