"""``specsim validate-serving PATH [PATH ...] --profile NAME``: replay measured serving runs
request by request and print predicted against measured TTFT, TPOT, E2E (mean, p50, p90,
p99) and output throughput per run, then ``median APE: TTFT x% TPOT y% E2E z% over N runs``.

A PATH is one run or a folder of runs (in name order).  A run is vLLM's OpenTelemetry
request spans as inference-sim publishes them (a folder with ``exp-config.yaml``,
``profile.yaml``, ``traces.json``: simulator/sim2real/otel.py), or a ``*.run.yaml`` manifest
of a ``vllm bench serve --save-result`` file or of a published aggregate
(simulator/sim2real/manifest.py), or an inference-perf experiment (``exp-config.yaml``,
``results/config.yaml`` and per-stage lifecycle metrics: simulator/sim2real/inference_perf.py),
compared stage by stage.  Each run says where it was measured: vLLM's spans at the server
(compared with the simulated engine interval), a load generator at the client (compared
with that plus the engine's frontend: simulator/engine/frontend.py).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from simulator.cli.args import bounded_int
from simulator.inputs.errors import SpecsimError
from simulator.uncertainty.spec import MAX_UNCERTAINTY_DRAWS

MAX_RUNS = 200  # runs one call replays (docs/limits.md)


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="a measured run's folder, or a folder of them")
    p.add_argument("--profile", default=None,
                   help="hardware profile of the GPU the runs were measured on (for runs "
                        "that do not name theirs), e.g. h100-sxm")
    p.add_argument("--stats", choices=("mean", "all"), default="all",
                   help="which statistics to print per run (default: mean, p50, p90, p99)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--uncertainty", type=bounded_int(MAX_UNCERTAINTY_DRAWS), default=None,
                   metavar="N", help="instead, replay each run N times under the cost "
                   "model's declared error and report how often the 90%% interval holds the "
                   "measured value (docs/uncertainty.md)")


def _is_run(path: Path) -> bool:
    from simulator.sim2real.inference_perf import is_inference_perf_run
    from simulator.sim2real.manifest import SUFFIX
    from simulator.sim2real.otel import is_otel_run
    if path.is_dir():
        return is_inference_perf_run(path) or is_otel_run(path)
    return path.name.endswith(SUFFIX)


def read_runs(path: Path) -> list:
    """The measured runs of one found PATH: an inference-perf experiment gives one per
    load stage."""
    from simulator.sim2real.inference_perf import is_inference_perf_run, \
        read_inference_perf_runs
    from simulator.sim2real.manifest import read_manifest
    from simulator.sim2real.otel import read_otel_run
    if not path.is_dir():
        return [read_manifest(path)]
    return read_inference_perf_runs(path) if is_inference_perf_run(path) \
        else [read_otel_run(path)]


def find_runs(paths: list[str]) -> list[Path]:
    """The runs named by ``paths``: a run (a span folder or a ``*.run.yaml`` manifest), or a
    folder of them (in name order)."""
    found: list[Path] = []
    for text in paths:
        path = Path(text).expanduser()
        if not path.exists():
            raise SpecsimError(f"{text!r} does not exist", field="PATH",
                               fix="give a measured run, or a folder of runs")
        runs = [path] if _is_run(path) else sorted(p for p in path.iterdir() if _is_run(p)) \
            if path.is_dir() else []
        if not runs:
            raise SpecsimError(f"{text!r} holds no measured run (a folder with "
                               "exp-config.yaml and traces.json or results/config.yaml, or "
                               "a *.run.yaml manifest)",
                               field="PATH")
        found.extend(runs)
        if len(found) > MAX_RUNS:
            raise SpecsimError(f"more than {MAX_RUNS} runs", field="PATH",
                               fix="validate fewer runs per call")
    return found


def main(args: argparse.Namespace) -> int:
    import pandas as pd

    from simulator.cli.output import render, wrap_text
    from simulator.sim2real.compare import compare_run, headline, run_scenario
    from simulator.uncertainty.coverage import check_distinct

    runs = []
    for path in find_runs(args.paths):
        runs.extend(read_runs(path))
        if len(runs) > MAX_RUNS:  # an inference-perf experiment: one run per stage
            raise SpecsimError(f"more than {MAX_RUNS} runs (after each experiment's "
                               "stages)", field="PATH", fix="validate fewer runs per call")
    for run in runs:  # every run resolves before any is simulated
        run_scenario(run, args.profile)
    check_distinct(runs)
    if args.uncertainty:
        return _coverage(runs, args)
    # one frame per run, printed by position: two runs may share a name (run_key)
    parts = [compare_run(run, args.profile) for run in runs]
    if args.stats == "mean":
        parts = [p[p["metric"].str.contains("mean|throughput")] for p in parts]
    table = pd.concat(parts, ignore_index=True)
    if args.format != "table":
        print(render(table, args.format))
        return 0
    for run, frame in zip(runs, parts):
        part = frame.drop(columns=["run", "saturated"]).copy()
        sat = bool(frame["saturated"].any())
        print(wrap_text(f"{run.name}: {run.model} TP{run.tensor_parallel} on "
                        f"{run.hardware or args.profile}, {run.engine}, "
                        f"{len(run.workload):,} requests, measured at the {run.measured_at}"
                        + "".join(f"; {n}" for n in run.report_notes())
                        + ("; SATURATED in the simulation" if sat else "")))
        part["error_%"] = [f"{e:+.1f}%" for e in part["error_%"]]
        print(render(part, "table"))
        print()
    print(headline(table, runs=len(runs)))
    return 0


def _coverage(runs: list, args: argparse.Namespace) -> int:
    """``--uncertainty N``: each metric's 90% interval from the cost factor (the shipped
    sigma, calibrated on other runs: simulator/uncertainty/coverage.py), and coverage."""
    from simulator.cli.output import render
    from simulator.uncertainty.coverage import coverage, sigma_note

    table = coverage(runs, args.profile, args.uncertainty)
    print(render(table, args.format))
    if args.format == "table":
        n, k = len(table), int(table["covered"].sum())
        print(f"coverage of the 90% intervals: {k}/{n} ({k / n:.0%}) over {len(runs)} runs, "
              f"{args.uncertainty} draws each; " + sigma_note(runs))
    return 0
