"""The results folder that ``specsim run --out`` writes and ``specsim report`` reads back.

Its layout: ``manifest.json`` (specsim's mark, every file it wrote, the scenario name, seed,
format, versions and one entry per policy), ``summary.csv``, ``scenario.yaml``, and per
policy ``NN-<label>.{requests,steps,acceptance}.<fmt>`` (``parquet`` by default: the steps
table of a 10k-request run, about 140k rows, writes in a tenth of CSV's time and reads back
with its types; ``csv`` on request; a folder whose manifest names no format is CSV, as they
were before Parquet was the default), plus ``NN-<label>.itl.npy`` (the
exact ITL samples; empty when the run had too many to keep, and then
``NN-<label>.itl_sketch.npz`` holds their quantile sketch); a policy's manifest entry also
keeps its exact step totals (``step_totals``), which the summary reads when the steps table
was sampled or off; a report written beside the results (``--report`` inside ``--out``) is
listed too.  Folders written before the sketch and the totals existed load as they were.  Writing
goes through :class:`simulator.output_paths.ResultsFolderWriter`, so a folder specsim did
not write is never replaced.
"""
from __future__ import annotations

import json
import os
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import yaml

from simulator.engine.requests import STATUS_NAMES
from simulator.engine.sketch import QuantileSketch
from simulator.engine.step import STEP_FIELDS
from simulator.engine.steps_store import totals_of
from simulator.inputs import json_text
from simulator.inputs.csv_rows import check_csv_rows
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import load_yaml_file, require_mapping
from simulator.results import Results
from simulator.results_arrow import dictionary_names, write_columns, write_requests
from simulator.scenario import Scenario, parse_compare, scenario_from_dict
from simulator.summary_rows import SummaryRows

if TYPE_CHECKING:  # pandas is imported where a frame is read or written as CSV
    import pandas as pd

RESULTS_FORMATS = ("parquet", "csv")  # the first is run's default; cli/run.py spells them too


def software_versions() -> dict:
    """Versions of the packages a result depends on (for reproducibility)."""
    import platform
    from importlib import metadata
    out = {"python": platform.python_version()}
    for pkg in ("specsim", "numpy", "pandas", "pyarrow", "simpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def require_format(fmt: str, field: str = "--results-format") -> None:
    """Parquet needs pyarrow, a core dependency that an environment may still lack (one
    installed by hand, or broken); say so before any work."""
    if fmt not in RESULTS_FORMATS:
        raise SpecsimError(f"unknown results format {fmt!r}", field=field,
                           fix="choose parquet or csv")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise SpecsimError("parquet output needs pyarrow, which is not installed",
                               field=field, fix="pip install 'pyarrow>=14,<27' (a dependency "
                               "of specsim), or use --results-format csv") from None


def policy_stem(index: int, label: str) -> str:
    """``NN-<label>`` with every character outside [A-Za-z0-9-_.] replaced (the manifest
    keeps the full label)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)
    return f"{index:02d}-{safe[:60]}"


def result_names(labels: list[str], fmt: str) -> list[str]:
    """The file names ``write_results_tables`` gives the results of these policy labels."""
    names = ["summary.csv", "scenario.yaml"]
    for i, label in enumerate(labels):
        stem = policy_stem(i, label)
        names += [f"{stem}.{t}.{fmt}" for t in ("requests", "steps", "acceptance")]
        names += [f"{stem}.itl.npy", f"{stem}.itl_sketch.npz"]  # the sketch: long runs only
    return names


def dictionary_columns(df: pd.DataFrame) -> list[str]:
    """The columns a Parquet table dictionary-encodes: all but the floating-point ones.

    A float column of a results table holds times and rates, nearly every value distinct
    (the 10k-request steps table's ``start_s``: 134,956 values in 134,956 rows); pyarrow
    builds its dictionary anyway, gives up at the dictionary page limit
    (``dictionary_pagesize_limit``, 1 MB by default) and writes it plain
    (https://arrow.apache.org/docs/python/generated/pyarrow.parquet.write_table.html,
    ``use_dictionary`` names the columns).  Counts, labels and replica numbers repeat and
    keep it.  Measured on that table: written in 31 ms against 63 ms, 4% larger; the
    requests table 4.1 ms against 7.4 ms, 15% smaller; the tables read back the same."""
    return [str(c) for c in df.columns if df[c].dtype.kind != "f"]


@contextmanager
def _writing(path: Path):
    """An OSError while writing ``path`` names it: pandas' and numpy's writes raise a bare
    ``[Errno 28] No space left on device`` that does not say which file."""
    try:
        yield path
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def write_results_tables(folder: Path, results: list, summary: pd.DataFrame | SummaryRows,
                         scenario, fmt: str) -> dict:
    """Write every table of ``results`` into ``folder``; return the manifest's content."""
    manifest = {"format": fmt, "scenario_name": scenario.name, "seed": scenario.seed,
                "versions": software_versions(), "policies": []}
    for i, r in enumerate(results):
        stem = policy_stem(i, r.label)
        entry = {"label": r.label, "stem": stem, "info": r.info}
        if r.step_totals is not None:
            entry["step_totals"] = r.step_totals
        if r.itl_sketch is not None:
            entry["itl_sketch"] = f"{stem}.itl_sketch.npz"
            with _writing(folder / entry["itl_sketch"]) as path:
                np.savez(path, **r.itl_sketch.to_arrays())
        if fmt == "parquet":
            entry["rows"] = _write_parquet(folder, stem, r)
        else:
            tables = (("requests", r.requests), ("steps", r.steps),
                      ("acceptance", r.acceptance_frame()))
            entry["rows"] = {name: int(len(df)) for name, df in tables}
            for name, df in tables:
                with _writing(folder / f"{stem}.{name}.csv") as path:
                    df.to_csv(path, index=False)
        manifest["policies"].append(entry)  # its rows: checked when read back
        with _writing(folder / f"{stem}.itl.npy") as path:
            np.save(path, r.itl_s)
    with _writing(folder / "summary.csv") as path:
        if isinstance(summary, SummaryRows):
            summary.write_csv(path)  # pandas' CSV, without pandas (summary_rows.py)
        else:
            summary.to_csv(path, index=False)
    with _writing(folder / "scenario.yaml") as path:
        path.write_text(yaml.safe_dump(dict(scenario.raw), sort_keys=False), encoding="utf-8")
    return manifest


def _write_parquet(folder: Path, stem: str, r: Results) -> dict[str, int]:
    """A policy's three tables as Parquet; their row counts.  A table whose DataFrame was
    never read is written from the run's columns by pyarrow alone (results_arrow.py: the
    same columns read back), so that `specsim run` needs no pandas; one that was, from
    the frame, as it is now."""
    req, steps = r.unread_columns()
    acc = r.acceptance_columns()
    with _writing(folder / f"{stem}.requests.parquet") as path:
        if req is not None:
            write_requests(path, req)
        else:
            req = r.requests
            req.to_parquet(path, index=False, use_dictionary=dictionary_columns(req))
    with _writing(folder / f"{stem}.steps.parquet") as path:
        if steps is not None:
            write_columns(path, steps, dictionary_names(steps))
        else:
            df = r.steps
            df.to_parquet(path, index=False, use_dictionary=dictionary_columns(df))
    with _writing(folder / f"{stem}.acceptance.parquet") as path:
        write_columns(path, acc, dictionary_names(acc))  # always the run's own columns
    n_steps = len(r.steps) if steps is None else len(next(iter(steps.values()), ()))
    return {"requests": len(req), "steps": int(n_steps),
            "acceptance": int(len(acc["length"]))}


FIELD = "RESULTS_DIR"

FIX = "give the folder that 'specsim run --out' wrote"

OPTIONAL_TABLES = ("sweep", "plan", "validation", "calibration")
# rows of one results table read back, counted before it is parsed: a requests table has at
# most MAX_REQUESTS rows, a sampled steps table at most 1,000,000; a steps table kept whole
# (engine.steps_table: all) above this is refused rather than parsed into gigabytes
MAX_RESULTS_ROWS = 10_000_000


def read_table(path: Path, fmt: str, rows: int | None = None) -> pd.DataFrame:
    """One table of a results folder; ``rows``: the count its manifest lists (folders since
    issue 37), so that a file cut short or edited is refused, naming it, not reported on."""
    if not path.exists():
        raise SpecsimError(f"missing {path.name}", source=str(path.parent), field=FIELD, fix=FIX)
    if fmt != "parquet":
        check_csv_rows(path, MAX_RESULTS_ROWS, what="a results table", field=FIELD,
                       fix="rerun with engine.steps_table: sampled (a steps table of at most "
                           "1,000,000 rows)")
        _check_last_line(path)
    import pandas as pd
    try:
        df = pd.read_parquet(path) if fmt == "parquet" else pd.read_csv(path)
    except (ValueError, OSError, ImportError) as exc:
        raise SpecsimError(f"cannot read {path.name}: {exc}", source=str(path.parent),
                           field=FIELD, fix=FIX) from None
    if rows is not None and len(df) != rows:
        raise SpecsimError(f"{len(df):,} rows where the manifest lists {rows:,}: the file was "
                           "cut short or edited", source=str(path), field=FIELD, fix=REWRITE)
    return df


REWRITE = "run 'specsim run' again to write the folder whole"


def _check_last_line(path: Path) -> None:
    """pandas ends every CSV it writes with a newline: a last line without one is a file cut
    in the middle of a row (a full disk, a killed copy)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() == 0:
                return
            handle.seek(-1, os.SEEK_END)
            last = handle.read(1)
    except OSError:
        return  # read_csv names the problem
    if last != b"\n":
        raise SpecsimError("the last row is cut off (no newline at the end of the file)",
                           source=str(path), field=FIELD, fix=REWRITE)


def _row_counts(entry: dict, source: str) -> dict[str, int]:
    """The manifest's ``rows`` of a policy (empty for folders written before it existed)."""
    rows = entry.get("rows", {})
    if not isinstance(rows, dict) or not all(
            type(v) is int and v >= 0 for v in rows.values()):
        raise SpecsimError("'rows' must map table names to row counts", source=source,
                           field="rows", fix=REWRITE)
    return rows


def _requests(df: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd
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


def _step_totals(entry: dict, source: str) -> dict | None:
    totals = entry.get("step_totals")
    if totals is None:
        return None
    if not isinstance(totals, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in totals.values()):
        raise SpecsimError("'step_totals' must map names to numbers", source=source,
                           field="step_totals", fix=FIX)
    missing = sorted(set(totals_of(np.zeros((0, len(STEP_FIELDS))))) - set(totals))
    if missing:
        raise SpecsimError(f"'step_totals' lacks {', '.join(missing[:4])}", source=source,
                           field="step_totals", fix=FIX)
    return totals


def _itl(d: Path, stem: str, entry: dict) -> tuple[np.ndarray, QuantileSketch | None]:
    itl_path = d / f"{stem}.itl.npy"
    path = itl_path
    try:
        itl = np.load(itl_path, allow_pickle=False) if itl_path.exists() else np.zeros(0)
        name = entry.get("itl_sketch")
        if name is None:
            return itl, None
        path = d / Path(str(name)).name  # a name in this folder, never a path elsewhere
        with np.load(path, allow_pickle=False) as arrays:
            return itl, QuantileSketch.from_arrays(arrays)
    except (OSError, KeyError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        raise SpecsimError(f"cannot read {path.name}: {exc}", source=str(d), field=FIELD,
                           fix=FIX) from None


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
        manifest = json_text.loads(path.read_text(encoding="utf-8"), source=str(path),
                                   field=FIELD, fix=FIX)
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
    if manifest.get("format", "csv") not in RESULTS_FORMATS:
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
        rows = _row_counts(entry, str(d / "manifest.json"))
        accepted, drafted = _histograms(read_table(acc_path, fmt, rows.get("acceptance")),
                                        str(acc_path))
        itl, sketch = _itl(d, stem, entry)
        results.append(Results(
            label=label,
            requests=_requests(read_table(d / f"{stem}.requests.{fmt}", fmt,
                                          rows.get("requests"))),
            steps=read_table(d / f"{stem}.steps.{fmt}", fmt, rows.get("steps")),
            itl_s=itl, accepted_hist=accepted, drafted_hist=drafted,
            scenario=_policy_scenario(scenario, label), info=dict(entry.get("info") or {}),
            itl_sketch=sketch, step_totals=_step_totals(entry, str(d / "manifest.json"))))
    return results, scenario, manifest
