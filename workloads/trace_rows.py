"""The row checks of the trace readers (workloads/traces.py, and the usual CSV read without
pandas, workloads/csv_fast.py): each raises one SpecsimError naming the file, the column and
the first bad row (its line in the file)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import short
from workloads.workload import MAX_ARRIVAL_S, MAX_TOKENS_PER_REQUEST


def bad_row(path: Path, column: str, line: int, raw: object, why: str, fix: str) -> SpecsimError:
    return SpecsimError(f"line {line} has {short(raw)}: {why}", source=str(path), field=column,
                        fix=fix)


def counts(values: np.ndarray, raw, lines: np.ndarray, path: Path, column: str) -> np.ndarray:
    """Validate token counts (float array, NaN where unparsable): whole numbers >= 1."""
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values != np.round(values)) | (values < 1)
        big = values > MAX_TOKENS_PER_REQUEST
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise bad_row(path, column, int(lines[i]), raw[i],
                       "token counts must be whole numbers >= 1 (zero-length outputs are not "
                       "allowed)", "fix or drop that row")
    if big.any():
        i = int(np.flatnonzero(big)[0])
        raise bad_row(path, column, int(lines[i]), raw[i],
                       f"token counts must be at most {MAX_TOKENS_PER_REQUEST:,}",
                       "fix or drop that row")
    return values.astype(np.int64)


def check_order(times: np.ndarray, raw, lines: np.ndarray, path: Path, column: str) -> None:
    back = np.diff(times) < 0
    if back.any():
        i = int(np.flatnonzero(back)[0]) + 1
        raise bad_row(path, column, int(lines[i]), raw[i],
                       f"earlier than the previous line's {short(raw[i - 1])}; the trace must "
                       "be in arrival order", f"sort the file by {column}; specsim rejects "
                       "out-of-order traces rather than reorder them silently")


def too_late(path: Path, column: str, line: int, raw: object, unit: str = "s") -> SpecsimError:
    in_ms = " (this column is in milliseconds)" if unit == "ms" else ""
    return bad_row(path, column, line, raw, f"arrival times must be at most {MAX_ARRIVAL_S:g} s "
                    f"(31.7 years), where float64 still resolves an engine step{in_ms}",
                    "give times relative to the first request")


def checked_seconds(values: np.ndarray, raw, lines: np.ndarray, path: Path, column: str,
                     scale: float = 1.0) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values < 0)
        late = values * scale > MAX_ARRIVAL_S
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        date = isinstance(raw[i], str) and any(mark in raw[i] for mark in ":-T") and \
            np.isnan(values[i])
        raise bad_row(path, column, int(lines[i]), raw[i],
                      "arrival times must be finite numbers >= 0 (seconds)",
                      "give seconds from the trace's start (0, 0.25, ...); dates go in an "
                      "azure trace's TIMESTAMP column (YYYY-MM-DD HH:MM:SS[.fffffff], with "
                      "ContextTokens, GeneratedTokens)" if date else "fix or drop that row")
    if late.any():
        i = int(np.flatnonzero(late)[0])
        raise too_late(path, column, int(lines[i]), raw[i])
    check_order(values, raw, lines, path, column)
    return values * scale
