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


class ReadOnlyMemo(dict):
    """Read-only arrays made once per key and shared by every caller: ``memo[key]`` is
    ``make(key)`` (a dict lookup where it is known, cheaper than a call)."""

    def __init__(self, make) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key):
        out = self[key] = self.make(key)
        out.flags.writeable = False
        return out


# FLAT_OFFSETS[(n, width)]: where row i of an (n, width) table starts in its flat buffer (a
# candidate's entries table[i, k_i] are the flat ones at k_i + that)
FLAT_OFFSETS = ReadOnlyMemo(lambda key: np.arange(0, key[0] * key[1], key[1]))


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


STEP_RANGE = ReadOnlyMemo(lambda k_max: np.arange(1, k_max + 2))
ONES = ReadOnlyMemo(np.ones)  # ONES[k_max]: np.ones(k_max)
SINGLE_CANDIDATES = ReadOnlyMemo(lambda k_max: np.arange(k_max + 1)[:, None])  # one request's
STEP_COLUMN = ReadOnlyMemo(lambda k_max: STEP_RANGE[k_max][:k_max, None])


def _spread(key: tuple[int, int]) -> np.ndarray:
    """``count`` indices spread evenly over ``size`` (``key``: the two): np.linspace's
    rounded (numpy 2's: i times the float step, plus 0.0, the last the stop; ``round``
    halves to even)."""
    size, count = key
    step = float(size - 1) / (count - 1) if count > 1 and size > 1 else 0.0
    if not step:
        return np.linspace(0, size - 1, count).round().astype(np.int64)
    return np.array([round(i * step + 0.0) for i in range(count - 1)] + [size - 1], np.int64)


SPREAD_INDEX = ReadOnlyMemo(_spread)  # SPREAD_INDEX[(size, count)]
