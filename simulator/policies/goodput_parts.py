"""The goodput search's small parts (``adaptive_controllers.goodput_choice``): its inputs'
checks, its memoised index and step arrays, and its distinct values, each the
same numbers as the numpy expression its docstring names, with fewer calls."""
from __future__ import annotations

import numpy as np


def cap_bounds(cap: np.ndarray) -> tuple[np.ndarray, int, int]:
    """``cap`` as int64, none below 0, with its largest and smallest (0 for no request):
    from one list of whole numbers, cheaper than two reductions."""
    cap = cap if cap.dtype == np.int64 else cap.astype(np.int64)
    caps = cap.tolist()
    if not caps:
        return cap, 0, 0
    if min(caps) < 0:
        cap = np.maximum(cap, 0)
        caps = cap.tolist()
    return cap, max(caps), min(caps)


_OFFSETS: dict[tuple[int, int], np.ndarray] = {}


def flat_offsets(n: int, width: int) -> np.ndarray:
    """Where row i of an (n, width) table starts in its flat buffer, memoised: a
    candidate's entries table[i, k_i] are the flat ones at k_i + that."""
    key = (n, width)
    out = _OFFSETS.get(key)
    if out is None:
        out = _OFFSETS[key] = np.arange(0, n * width, width)
        out.flags.writeable = False
    return out


def clipped_alpha(alpha: np.ndarray) -> tuple[np.ndarray, bool]:
    """``np.clip(alpha, 0, 1)``'s values, and whether all are inside (0, 1): then ``alpha``
    itself (the clip changes nothing; one list instead of three numpy calls)."""
    if alpha.dtype == np.float64:
        values = alpha.tolist()
        if values and 0.0 < min(values) and max(values) < 1.0:
            return alpha, True
    return np.minimum(np.maximum(alpha, 0.0), 1.0), False


def descending_distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)[::-1]`` (finite values, any shape) without its layers."""
    ordered = np.sort(values, axis=None)
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, bool)
    keep[-1] = True
    np.not_equal(ordered[:-1], ordered[1:], out=keep[:-1])
    return ordered[keep][::-1]


_STEPS: dict[int, np.ndarray] = {}


def step_range(k_max: int) -> np.ndarray:
    """``np.arange(1, k_max + 2)``, memoised (read-only: shared by every call)."""
    out = _STEPS.get(k_max)
    if out is None:
        out = _STEPS[k_max] = np.arange(1, k_max + 2)
        out.flags.writeable = False
    return out


_ONES: dict[int, np.ndarray] = {}


def ones_vector(k_max: int) -> np.ndarray:
    """``np.ones(k_max)``, memoised (read-only)."""
    out = _ONES.get(k_max)
    if out is None:
        out = _ONES[k_max] = np.ones(k_max)
        out.flags.writeable = False
    return out


_SINGLE: dict[int, np.ndarray] = {}


def single_candidates(k_max: int) -> np.ndarray:
    """``np.arange(k_max + 1)[:, None]``, memoised (read-only): one request's candidates."""
    out = _SINGLE.get(k_max)
    if out is None:
        out = _SINGLE[k_max] = np.arange(k_max + 1)[:, None]
        out.flags.writeable = False
    return out


_COLUMNS: dict[int, np.ndarray] = {}


def step_column(k_max: int) -> np.ndarray:
    """``step_range(k_max)[:k_max, None]``, memoised (read-only)."""
    out = _COLUMNS.get(k_max)
    if out is None:
        out = _COLUMNS[k_max] = step_range(k_max)[:k_max, None]
    return out


_SPREADS: dict[tuple[int, int], np.ndarray] = {}


def spread_index(size: int, count: int) -> np.ndarray:
    """``count`` indices spread evenly over ``size``, memoised: np.linspace's rounded (numpy
    2's: i times the float step, plus 0.0, the last the stop; ``round`` halves to even)."""
    out = _SPREADS.get((size, count))
    if out is None:
        step = float(size - 1) / (count - 1) if count > 1 and size > 1 else 0.0
        out = _SPREADS[(size, count)] = np.array(
            [round(i * step + 0.0) for i in range(count - 1)] + [size - 1], np.int64) \
            if step else np.linspace(0, size - 1, count).round().astype(np.int64)
    return out
