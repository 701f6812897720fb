"""Fast column parsers of the trace CSV readers (workloads/traces.py): token counts written
as plain digits and Azure timestamps in one fixed layout, parsed on numpy arrays without
pandas' string operations; each returns None where any row is written otherwise, and the
general parser then decides (tests compare the two)."""
from __future__ import annotations

import numpy as np


def _lengths(raw: np.ndarray) -> np.ndarray | None:
    """The length of every string of ``raw``; None where a cell is not a string (pandas
    gives strings here, "" for a missing field: a guard, not a path)."""
    if not all(isinstance(cell, str) for cell in raw):
        return None
    return np.fromiter(map(len, raw), np.int64, raw.size)


def _fixed_bytes(raw: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The strings of ``raw`` as fixed-width bytes and as an (n, ``width``) uint8 array (NUL
    after a shorter one); None where one is not ASCII."""
    try:
        fixed = raw.astype(f"S{width}")
    except (UnicodeEncodeError, TypeError, ValueError):
        return None
    return fixed, fixed.view(np.uint8).reshape(raw.size, width)


def digit_counts(raw: np.ndarray) -> np.ndarray | None:
    """Counts written as 1 to 15 plain digits and nothing else (no space, sign or point), as
    float64 (what ``pd.to_numeric`` gives them, exactly: below 2**53); None where any row is
    written otherwise (the general parser then reads the column)."""
    lens = _lengths(raw)
    if lens is None or not raw.size or lens.min() < 1 or lens.max() > 15:
        return None
    got = _fixed_bytes(raw, int(lens.max()))
    if got is None:
        return None
    fixed, u8 = got
    # every byte a digit or the padding, and as many digits as characters (no NUL inside);
    # uint8: a byte below "0" wraps past 9
    if not ((u8 - 48 <= 9) | (u8 == 0)).all() or ((u8 != 0).sum(axis=1) != lens).any():
        return None
    return fixed.astype(np.int64).astype(np.float64)


_STAMP_DIGITS = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]  # YYYY-MM-DD HH:MM:SS


def azure_ns_fast(raw: np.ndarray) -> np.ndarray | None:
    """Integer nanoseconds of timestamps all written ``YYYY-MM-DD HH:MM:SS`` or with the same
    count (1 to 9) of fraction digits after a point, years 1970-2200, as numpy's calendar
    reads them (it rejects a day, hour, minute or second out of range); None for anything
    else (the general parser then decides, and names the bad row)."""
    lens = _lengths(raw)
    width = int(lens[0]) if lens is not None and raw.size else 0
    if not (width == 19 or 21 <= width <= 29) or (lens != width).any():
        return None
    got = _fixed_bytes(raw, width)
    if got is None:
        return None
    u8 = got[1]
    digits = u8[:, _STAMP_DIGITS + list(range(20, width))] - 48
    if (digits > 9).any() or not ((u8[:, [4, 7]] == 45).all() and (u8[:, 10] == 32).all()
                                  and (u8[:, [13, 16]] == 58).all()
                                  and (width == 19 or (u8[:, 19] == 46).all())):
        return None
    year = digits[:, :4].astype(np.int64) @ np.array([1000, 100, 10, 1])
    if year.min() < 1970 or year.max() > 2200:
        return None
    try:
        return raw.astype("datetime64[ns]").astype(np.int64)
    except ValueError:  # a date, hour, minute or second out of range
        return None
