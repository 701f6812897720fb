"""The report of a ``specsim run --out`` folder (``specsim report``): the folder is read
back into Results by ``simulator.results_dir.load_results_dir``; optional tables beside it
(sweep, plan, validation, calibration: ``.csv`` or ``.parquet``) are shown when present, and
a report written into the folder is added to its manifest.
"""
from __future__ import annotations

import json
from pathlib import Path

from simulator.results_dir import OPTIONAL_TABLES, load_results_dir, read_table


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
    extra = {}
    for name in OPTIONAL_TABLES:  # CSV or Parquet, whichever the folder holds (CSV first)
        found = [fmt for fmt in ("csv", "parquet") if (d / f"{name}.{fmt}").exists()]
        if found:
            extra[name] = read_table(d / f"{name}.{found[0]}", found[0])
    versions = {**report_versions(), **(manifest.get("versions") or {})}
    out = render_report(results, path, scenario=scenario, versions=versions, field=field,
                        overwrite=overwrite, intervals=_intervals(d), **extra)
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


def _intervals(folder: Path):
    """The folder's summary.csv where ``run --uncertainty N`` gave it intervals, else None."""
    from reports.uncertainty_marks import interval_metrics
    if not (folder / "summary.csv").exists():  # the report does not need it otherwise
        return None
    summary = read_table(folder / "summary.csv", "csv")
    return summary if interval_metrics(summary) else None
