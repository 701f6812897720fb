"""A CSV's size in rows, counted before it is parsed.

``pd.read_csv`` holds the whole table (and its string cells) in memory: a 1,000,000-row
measurements CSV ran past 500 s at 3.5 GB before ``calibrate --from-measurements`` said a
word.  Every CSV the project reads is first counted here, newline by newline in 1 MiB
blocks, stopping as soon as the limit is passed, so an oversized file costs a fraction of
a second and one error line (the limits: docs/limits.md).  A quoted field spanning
lines counts once per line, so the count is an upper bound of the rows: a file is never
let through above its limit.
"""
from __future__ import annotations

from pathlib import Path

from simulator.inputs.errors import SpecsimError

BLOCK_BYTES = 2**20


def count_data_lines(path: str | Path, stop_after: int) -> int:
    """Lines after the header (a last line without a newline counts), counted up to
    ``stop_after + 1``; OSError if the file cannot be read."""
    lines = 0
    last = b"\n"
    with open(path, "rb") as handle:
        while lines <= stop_after + 1:
            block = handle.read(BLOCK_BYTES)
            if not block:
                break
            lines += block.count(b"\n")
            last = block[-1:]
    if last != b"\n":
        lines += 1
    return max(lines - 1, 0)


def check_csv_rows(path: str | Path, limit: int, *, what: str, field: str | None = None,
                   fix: str) -> None:
    """Refuse the CSV at ``path`` when it holds more than ``limit`` data lines, before it is
    parsed.  A missing or unreadable file passes: its reader names that problem."""
    try:
        rows = count_data_lines(path, limit)
    except OSError:
        return
    if rows > limit:
        raise SpecsimError(f"more than {limit:,} rows; the limit of {what} is {limit:,} "
                           "(checked before reading it)", source=str(path), field=field,
                           fix=fix)
