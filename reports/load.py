"""Read a ``specsim run --out`` folder back into Results, and render its report.

The folder holds manifest.json, scenario.yaml, summary.csv and per policy
{stem}.requests/.steps/.acceptance (.csv or .parquet) and {stem}.itl.npy.  Optional tables
beside them are shown when present: sweep.csv, plan.csv, validation.csv, calibration.csv.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.engine.replica import STATUS_NAMES
from simulator.inputs.errors import SpecsimError
from simulator.results import Results
from simulator.scenario import Scenario, parse_compare, scenario_from_dict
from simulator.inputs.yaml_io import load_yaml_file, require_mapping

FIELD = "RESULTS_DIR"
FIX = "give the folder that 'specsim run --out' wrote"
OPTIONAL_TABLES = ("sweep", "plan", "validation", "calibration")


def _read_table(path: Path, fmt: str) -> pd.DataFrame:
    if not path.exists():
        raise SpecsimError(f"missing {path.name}", source=str(path.parent), field=FIELD, fix=FIX)
    try:
        if fmt == "parquet":
            return pd.read_parquet(path)
        return pd.read_csv(path)
    except (ValueError, OSError, ImportError) as exc:
        raise SpecsimError(f"cannot read {path.name}: {exc}", source=str(path.parent),
                           field=FIELD, fix=FIX) from None


def _requests(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["status"] = pd.Categorical(df["status"].astype(str),
                                  categories=list(STATUS_NAMES.values()))
    # an all-empty text column reads back as float NaN: make it text again
    for col in ("reject_reason", "task"):
        if col in df.columns:
            df[col] = df[col].astype("string").fillna("").astype(str)
    return df


def _histograms(acc: pd.DataFrame, source: str) -> tuple[np.ndarray, np.ndarray]:
    missing = [c for c in ("length", "accepted_count", "drafted_count") if c not in acc]
    if missing:
        raise SpecsimError(f"the acceptance table lacks column(s) {', '.join(missing)}",
                           source=source, field=FIELD, fix=FIX)
    size = int(acc["length"].max()) + 1 if len(acc) else 1
    accepted = np.zeros(size, np.int64)
    drafted = np.zeros(size, np.int64)
    idx = acc["length"].to_numpy(np.int64)
    accepted[idx] = acc["accepted_count"].to_numpy(np.int64)
    drafted[idx] = acc["drafted_count"].to_numpy(np.int64)
    return accepted, drafted


def _policy_scenario(scenario: Scenario, label: str) -> Scenario:
    try:
        return scenario.with_policy(parse_compare(label)[0])
    except SpecsimError:  # a label we cannot parse back still names the run
        return scenario


def read_manifest(results_dir: str | Path) -> dict:
    """The folder's manifest.json, checked for the keys a report needs."""
    d = Path(results_dir).expanduser()
    if not d.is_dir():
        raise SpecsimError("not a folder", source=str(d), field=FIELD, fix=FIX)
    path = d / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecsimError("no manifest.json here", source=str(d), field=FIELD, fix=FIX) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecsimError(f"cannot read manifest.json: {exc}", source=str(d), field=FIELD,
                           fix=FIX) from None
    if not isinstance(manifest, dict) or not manifest.get("policies"):
        raise SpecsimError("manifest.json lists no policies", source=str(path), field=FIELD,
                           fix=FIX)
    entries = manifest["policies"]
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and "stem" in e and "label" in e for e in entries):
        raise SpecsimError("every entry of 'policies' needs a 'stem' and a 'label'",
                           source=str(path), field="policies", fix=FIX)
    if manifest.get("format", "csv") not in ("csv", "parquet"):
        raise SpecsimError(f"unknown results format {manifest.get('format')!r}",
                           source=str(path), field="format", fix="expected csv or parquet")
    return manifest


def load_results_dir(results_dir: str | Path) -> tuple[list[Results], Scenario, dict]:
    """Results (one per policy), the scenario and the manifest of a results folder."""
    d = Path(results_dir).expanduser()
    manifest = read_manifest(d)
    fmt = manifest.get("format", "csv")
    raw = require_mapping(load_yaml_file(d / "scenario.yaml") or {},
                          source=str(d / "scenario.yaml"))
    scenario = scenario_from_dict(raw, source=str(d / "scenario.yaml"), base_dir=d.resolve())
    results = []
    for entry in manifest["policies"]:
        stem, label = str(entry["stem"]), str(entry["label"])
        acc_path = d / f"{stem}.acceptance.{fmt}"
        accepted, drafted = _histograms(_read_table(acc_path, fmt), str(acc_path))
        itl_path = d / f"{stem}.itl.npy"
        itl = np.load(itl_path, allow_pickle=False) if itl_path.exists() else np.zeros(0)
        results.append(Results(
            label=label,
            requests=_requests(_read_table(d / f"{stem}.requests.{fmt}", fmt)),
            steps=_read_table(d / f"{stem}.steps.{fmt}", fmt),
            itl_s=itl, accepted_hist=accepted, drafted_hist=drafted,
            scenario=_policy_scenario(scenario, label), info=dict(entry.get("info") or {})))
    return results, scenario, manifest


def render_report_from_dir(results_dir: str | Path, path: str | Path, *,
                           field: str = "--output", overwrite: bool = False) -> Path:
    """Write the HTML report of a ``specsim run --out`` folder to ``path``.

    A report written into the results folder itself is added to its manifest, so that a
    later ``specsim run --out`` on that folder still knows every file in it is specsim's.
    """
    from reports.page import check_report_target, render_report, report_versions
    check_report_target(path, field=field, overwrite=overwrite)
    results, scenario, manifest = load_results_dir(results_dir)
    d = Path(results_dir).expanduser()
    extra = {name: _read_table(d / f"{name}.csv", "csv") for name in OPTIONAL_TABLES
             if (d / f"{name}.csv").exists()}
    versions = {**report_versions(), **(manifest.get("versions") or {})}
    out = render_report(results, path, scenario=scenario, versions=versions, field=field,
                        overwrite=overwrite, **extra)
    add_to_manifest(d, out)
    return out


def add_to_manifest(folder: Path, path: Path) -> None:
    """List ``path`` in ``folder``'s specsim manifest when it sits directly in that folder."""
    from simulator.output_paths import MANIFEST, read_results_manifest, write_file_atomic
    try:
        inside = path.resolve().parent == folder.resolve()
    except OSError:
        return
    manifest = read_results_manifest(folder) if inside else None
    if manifest is None or path.name in manifest["files"]:
        return
    manifest["files"] = sorted([*manifest["files"], path.name])
    text = json.dumps(manifest, indent=2, default=str)
    write_file_atomic(folder / MANIFEST, lambda p: p.write_text(text, encoding="utf-8"),
                      "--output")
