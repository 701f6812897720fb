"""The summary of a run's policies as rows, before (or without) a DataFrame.

``specsim run`` prints the summary and writes ``summary.csv``; neither needs pandas (about
0.24 s of CPU of the process, issue 36), so the rows are kept as dicts, each column's type
is the one ``pandas.DataFrame(rows)`` infers, and the CSV is the one ``to_csv(index=False)``
writes: floats by NumPy's ``astype(str)``, a missing value as an empty field, through the
csv module (pandas/core/internals/blocks.py, ``get_values_for_csv``; pandas/io/formats/
csvs.py: ``csv.writer`` with ``lineterminator=os.linesep``).  A column whose type this does
not know (text beside numbers, a bool beside a missing value) gives ``kinds()`` None, and
the caller builds the DataFrame instead.
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


def _kind(values: list) -> str | None:
    """pandas' dtype kind of a column of these Python values: ``b``, ``i``, ``f`` (an int or
    None beside a float, or None beside an int, is a float), ``O`` (text, or all missing);
    None where another mix would need pandas' own rules."""
    present = [v for v in values if v is not None]
    if not present:
        return "O"
    if all(isinstance(v, bool) for v in present):
        return "b" if len(present) == len(values) else None
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "i" if len(present) == len(values) else "f"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "f"
    if all(isinstance(v, str) for v in present):
        return "O"
    return None


@dataclass
class SummaryRows:
    """One row per policy (a dict each), the columns in the order pandas gives them."""

    rows: list[dict[str, Any]]

    def columns(self) -> list[str]:
        """Every key of the rows, in the order first seen (``DataFrame(rows).columns``)."""
        return list(dict.fromkeys(k for row in self.rows for k in row))

    def column(self, name: str) -> list:
        return [row.get(name) for row in self.rows]

    def kinds(self) -> dict[str, str] | None:
        """Each column's dtype kind as pandas infers it; None if any is not known here."""
        out = {name: _kind(self.column(name)) for name in self.columns()}
        return None if None in out.values() else out  # type: ignore[return-value]

    def frame(self) -> pd.DataFrame:
        """The rows as the DataFrame ``summary_table`` has always returned."""
        import pandas as pd
        return pd.DataFrame(self.rows, columns=self.columns())

    def csv_cells(self) -> list[list[str]] | None:
        """The header and the rows as ``to_csv(index=False)`` writes them; None when a
        column's type is not known here."""
        kinds = self.kinds()
        if kinds is None:
            return None
        names = self.columns()
        cols = [_csv_column(self.column(n), kinds[n]) for n in names]
        return [names] + [list(r) for r in zip(*cols)] if cols else [names]

    def write_csv(self, path: Path) -> None:
        """``summary.csv``: this file's own writer where it knows every column, else
        pandas'."""
        cells = self.csv_cells()
        if cells is None:
            self.frame().to_csv(path, index=False)
            return
        with open(path, "w", encoding="utf-8", newline="") as handle:
            csv.writer(handle, lineterminator=os.linesep).writerows(cells)


def _csv_column(values: list, kind: str) -> list[str]:
    if kind == "f":
        floats = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        text = floats.astype(str).tolist()
        return ["" if f != f else t for f, t in zip(floats.tolist(), text)]
    if kind in "bi":
        return [str(v) for v in values]
    return ["" if v is None else str(v) for v in values]


def summary_rows(results: list) -> SummaryRows:
    """One summary row per policy: specsim's metrics, the speedup of mean TPOT over ``none``
    if present (the first ``none`` row's over each row's, as float64: pandas' division),
    then the same run under ``vllm bench serve``'s result keys (simulator/vllm_metrics.py).
    ``specsim run``'s ``summary_table`` is these rows' ``frame()``."""
    from simulator.vllm_metrics import bench_serve_metrics

    rows = [r.summary() for r in results]
    base = next((row["mean_tpot_s"] for row in rows if row["policy"] == "none"), None)
    for row, r in zip(rows, results):
        with np.errstate(divide="ignore", invalid="ignore"):
            row["speedup_vs_none"] = float("nan") if base is None else \
                float(np.float64(base) / np.float64(row["mean_tpot_s"]))
        row.update(bench_serve_metrics(r))
    return SummaryRows(rows)
