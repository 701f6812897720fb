"""``specsim run [scenario.yaml]``: simulate, print a summary table per policy, write results."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator.errors import SpecsimError
from simulator.output import FORMATS, render
from simulator.scenario import Scenario, load_scenario, parse_compare
from simulator.simulate import simulate

DEFAULT_COMPARE = "none,chain"
TABLE_COLUMNS = ("policy", "finished", "p50_ttft_s", "p99_ttft_s", "p50_tpot_s", "p99_tpot_s",
                 "p50_e2e_s", "p99_e2e_s", "output_tokens_per_s", "goodput_requests_per_s",
                 "mean_acceptance_length", "acceptance_rate", "speedup_vs_none")


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Arguments of ``run``."""
    p.add_argument("scenario", nargs="?", default=None,
                   help="scenario YAML (default: the built-in OPT-13B/OPT-125M on A100-40GB)")
    p.add_argument("--compare", default=None,
                   help="policies to run on the same trace and seed, e.g. "
                        "none,chain:gamma=4 (default for the built-in scenario: none,chain)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a scenario field, e.g. --set seed=3")
    p.add_argument("--out", default="specsim-out", help="output folder (default specsim-out)")
    p.add_argument("--results-format", choices=("csv", "parquet"), default="csv")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--report", default=None, help="also write an HTML report to this path")
    p.add_argument("--no-progress", action="store_true")


def _progress_bar(enabled: bool, label: str):
    if not enabled:
        return None, None
    from tqdm import tqdm
    bar = tqdm(total=0, desc=label, unit="req", leave=False, file=sys.stderr,
               mininterval=0.5, disable=None)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()
    return update, bar


def run_policies(scenario: Scenario, policies, progress: bool = False) -> list:
    """Simulate ``scenario`` once per policy; same trace, same seed."""
    out = []
    for pol in policies:
        sc = scenario.with_policy(pol)
        update, bar = _progress_bar(progress, pol.label)
        try:
            out.append(simulate(sc, progress=update))
        finally:
            if bar is not None:
                bar.close()
    return out


def summary_table(results: list) -> pd.DataFrame:
    """One summary row per policy, with the speedup of mean TPOT over ``none`` if present."""
    df = pd.DataFrame([r.summary() for r in results])
    base = df[df["policy"] == "none"]
    if len(base):
        df["speedup_vs_none"] = float(base["mean_tpot_s"].iloc[0]) / df["mean_tpot_s"]
    else:
        df["speedup_vs_none"] = float("nan")
    return df


def software_versions() -> dict:
    """Versions of the packages a result depends on (for reproducibility)."""
    import platform
    from importlib import metadata
    out = {"python": platform.python_version()}
    for pkg in ("specsim", "numpy", "pandas", "simpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def write_results(results: list, summary: pd.DataFrame, scenario: Scenario, out: Path,
                  fmt: str) -> None:
    """Write every table into ``out`` atomically: a temp folder renamed into place."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".specsim-", dir=out.parent))
    try:
        manifest = {"format": fmt, "scenario_name": scenario.name, "seed": scenario.seed,
                    "versions": software_versions(), "policies": []}
        for i, r in enumerate(results):
            safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in r.label)
            stem = f"{i:02d}-{safe[:60]}"  # the manifest keeps the full label
            manifest["policies"].append({"label": r.label, "stem": stem, "info": r.info})
            tables = (("requests", r.requests), ("steps", r.steps),
                      ("acceptance", r.acceptance_frame()))
            for name, df in tables:
                path = tmp / f"{stem}.{name}.{fmt}"
                if fmt == "parquet":
                    df.to_parquet(path, index=False)
                else:
                    df.to_csv(path, index=False)
            np.save(tmp / f"{stem}.itl.npy", r.itl_s)
        summary.to_csv(tmp / "summary.csv", index=False)
        (tmp / "scenario.yaml").write_text(yaml.safe_dump(dict(scenario.raw), sort_keys=False))
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def main(args: argparse.Namespace) -> int:
    """Run the scenario for each policy and print the summary table."""
    scenario = load_scenario(args.scenario, args.overrides)
    if args.compare:
        policies = parse_compare(args.compare)
    elif args.scenario is None:
        policies = parse_compare(DEFAULT_COMPARE)
    else:
        policies = [scenario.policy]
    if args.results_format == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise SpecsimError("parquet needs pyarrow", field="--results-format",
                               fix="pip install pyarrow, or use --results-format csv") from None
    results = run_policies(scenario, policies, progress=not args.no_progress)
    summary = summary_table(results)
    out = Path(args.out)
    write_results(results, summary, scenario, out, args.results_format)
    if args.format == "table":
        shown = summary[[c for c in TABLE_COLUMNS if c in summary.columns]].copy()
        times = [c for c in shown.columns if c.endswith("_s") and not c.endswith("per_s")]
        shown[times] = shown[times] * 1e3
        shown = shown.rename(columns={c: c[:-2] + "_ms" for c in times})
        print(f"scenario {scenario.name}: {scenario.target} on {scenario.hardware}"
              f" x{scenario.parallelism.devices}, {results[0].summary()['requests']} requests, "
              f"seed {scenario.seed}")
        print(render(shown, "table"))
        print(f"results: {out}/")
    else:
        print(render(summary, args.format))
    if args.report:
        from reports import render_report  # only reports/ imports altair
        path = render_report(results, args.report, scenario=scenario)
        print(f"report: {path}")
    return 0
