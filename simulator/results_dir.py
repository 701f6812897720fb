"""The results folder that ``specsim run --out`` writes and ``specsim report`` reads back.

Its layout: ``manifest.json`` (specsim's mark, every file it wrote, the scenario name, seed,
format, versions and one entry per policy), ``summary.csv``, ``scenario.yaml``, and per
policy ``NN-<label>.{requests,steps,acceptance}.<fmt>`` plus ``NN-<label>.itl.npy``; a
report written beside the results (``--report`` inside ``--out``) is listed too.  Writing
goes through :class:`simulator.output_paths.ResultsFolderWriter`, so a folder specsim did
not write is never replaced.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator.inputs.errors import SpecsimError

RESULTS_FORMATS = ("csv", "parquet")


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


def require_format(fmt: str, field: str = "--results-format") -> None:
    """Parquet needs pyarrow, which is the ``parquet`` extra; say so before any work."""
    if fmt not in RESULTS_FORMATS:
        raise SpecsimError(f"unknown results format {fmt!r}", field=field,
                           fix="choose csv or parquet")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise SpecsimError("parquet output needs pyarrow, which is not installed",
                               field=field, fix="pip install 'specsim[parquet]', or use "
                               "--results-format csv") from None


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
        names.append(f"{stem}.itl.npy")
    return names


def write_results_tables(folder: Path, results: list, summary: pd.DataFrame, scenario,
                         fmt: str) -> dict:
    """Write every table of ``results`` into ``folder``; return the manifest's content."""
    manifest = {"format": fmt, "scenario_name": scenario.name, "seed": scenario.seed,
                "versions": software_versions(), "policies": []}
    for i, r in enumerate(results):
        stem = policy_stem(i, r.label)
        manifest["policies"].append({"label": r.label, "stem": stem, "info": r.info})
        tables = (("requests", r.requests), ("steps", r.steps),
                  ("acceptance", r.acceptance_frame()))
        for name, df in tables:
            path = folder / f"{stem}.{name}.{fmt}"
            if fmt == "parquet":
                df.to_parquet(path, index=False)
            else:
                df.to_csv(path, index=False)
        np.save(folder / f"{stem}.itl.npy", r.itl_s)
    summary.to_csv(folder / "summary.csv", index=False)
    (folder / "scenario.yaml").write_text(yaml.safe_dump(dict(scenario.raw), sort_keys=False),
                                          encoding="utf-8")
    return manifest
