"""The usual trace CSV read without pandas (workloads/traces.py).

A `specsim run` that reads its trace with ``pandas.read_csv`` imports pandas for it (about
0.24 s of CPU, more than the read); the usual file needs none.  ``usual_columns`` reads a
file only when pandas' reading of it (``read_csv(dtype=str, keep_default_na=False,
skip_blank_lines=False)``) cannot differ from splitting its lines on commas: ASCII, no
quote, carriage return, NUL or blank line, a header of distinct non-empty names that
includes the required ones, and every row as many fields as the header.  ``decimal_values``
parses numbers written as plain digits with at most one point and 15 digits in all: as
exact integers over a power of ten up to 10**15, one correctly rounded division, which is
what ``pd.to_numeric`` gives them (pandas' ``precise_xstrtod``: correctly rounded through
fast_float in pandas 3, the same single division before) and Python's ``float``.  For
anything else each returns None, and pandas reads the file as before (the errors it
raises are the readers' own).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from simulator.inputs.csv_rows import check_csv_rows
from workloads.csv_columns import azure_ns_fast, digit_counts
from workloads.trace_rows import check_order, checked_seconds, counts
from workloads.workload import MAX_REQUESTS, Workload

MAX_DIGITS = 15  # digits of a number parsed here: an exact integer and an exact power of 10


def usual_columns(path: Path, required: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """Each column of the file at ``path`` as an object array of its text; None where the
    file is not the usual one (module docstring), or cannot be read (pandas says why)."""
    try:
        text = path.read_bytes().decode("ascii")
    except (OSError, UnicodeDecodeError):
        return None
    if any(ch in text for ch in '"\r\0'):
        return None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if len(lines) < 2 or "" in lines:
        return None
    header = lines[0].split(",")
    commas = len(header) - 1
    if "" in header or len(set(header)) != len(header) or \
            not set(required) <= set(header) or \
            any(line.count(",") != commas for line in lines[1:]):
        return None
    rows = [line.split(",") for line in lines[1:]]
    return {name: np.array(values, dtype=object)
            for name, values in zip(header, zip(*rows))}


def decimal_values(raw: np.ndarray) -> np.ndarray | None:
    """Numbers written as 1 to 15 digits with at most one point between digits (no space,
    sign or exponent) as float64, as ``pd.to_numeric`` parses them; None where any row is
    written otherwise."""
    for cell in raw:
        whole, point, fraction = cell.partition(".")
        if not whole.isdigit() or point and not fraction.isdigit() or \
                len(whole) + len(fraction) > MAX_DIGITS:
            return None
    return np.array([float(cell) for cell in raw], dtype=np.float64)


def read_usual(path: Path, names: tuple[str, ...], only: bool = False,
               azure: bool = False) -> Workload | None:
    """A trace of the usual form read without pandas, its rows checked as the readers of
    workloads/traces.py check them (the same errors): ``names`` the arrival column (seconds,
    or Azure's timestamps where ``azure``) and the prompt and output counts; None for any
    other form, or columns beside ``names`` where ``only``: pandas reads those."""
    check_csv_rows(path, MAX_REQUESTS, what="a trace's requests (its lines)",
                   fix=f"cut the trace to at most {MAX_REQUESTS:,} requests (head -n "
                       f"{MAX_REQUESTS + 1} keeps the header and that many)")
    cols = usual_columns(path, names)
    if cols is None or only and len(cols) != len(names):
        return None
    raw = cols[names[0]]
    times = azure_ns_fast(raw) if azure else decimal_values(raw)
    parsed = [digit_counts(cols[name]) for name in names[1:]]
    if times is None or parsed[0] is None or parsed[1] is None:
        return None
    lines = np.arange(raw.size) + 2
    if azure:
        check_order(times, raw, lines, path, names[0])
        arrival = (times - times[0]) / 1e9
    else:
        arrival = checked_seconds(times, raw, lines, path, names[0])
    prompt, output = (counts(v, cols[n], lines, path, n)
                      for v, n in zip(parsed, names[1:]))
    return Workload(name=path.stem, arrival_s=arrival, prompt_tokens=prompt,
                    output_tokens=output)
