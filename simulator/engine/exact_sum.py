"""Exact running sums of float64 columns: the correctly rounded total of every value added,
whatever the order of the additions or the size of the blocks they come in.

Why: the recorder receives several replicas' steps and latencies interleaved in an order that
depends on the engine's mode (one step at a time, or many steps in one vectorised block), and a
float sum accumulated in arrival order would differ in its last bits between the two.  Every
finite float64 is an integer multiple of 2**-1074, so a Python integer scaled by 2**1127 holds
any sum of them exactly (no rounding until the one division at the end, which CPython rounds
correctly); numpy splits each block into (mantissa, exponent) pairs and sums the mantissas of
equal exponents with ``bincount``, so the Python work per block is one addition per distinct
(column, exponent), not per value.
"""
from __future__ import annotations

import numpy as np

_EXP_OFFSET = 1074            # frexp's exponent of a nonzero float64 is in [-1073, 1024]
_EXP_SPAN = 2100              # > 1024 + _EXP_OFFSET: one key per (column, exponent)
_SCALE = 1 << (_EXP_OFFSET + 53)  # x = m * 2**(e - 53), m the 53-bit integer mantissa
_HALF = 26                    # mantissas are split in two halves of at most 27 bits, whose
_CHUNK_VALUES = 1 << 16       # bincount sums over a chunk stay exact in float64 (< 2**53);
                              # chunks of this size also keep the temporaries in cache


class ExactSum:
    """Exact sums of ``width`` float64 columns, added in blocks of rows."""

    def __init__(self, width: int = 1) -> None:
        self.width = width
        self._ints = [0] * width                 # sum of the finite values, times _SCALE
        self._special = np.zeros(width)          # sum of the inf and NaN values (0: none)
        self._keys = np.arange(width, dtype=np.int64) * _EXP_SPAN + _EXP_OFFSET

    def add(self, block: np.ndarray) -> None:
        """Add a block of values: shape (n, width), or (n,) when width is 1."""
        block = np.asarray(block, dtype=np.float64).reshape(-1, self.width)
        rows = max(1, _CHUNK_VALUES // self.width)
        for start in range(0, block.shape[0], rows):
            self._add(block[start:start + rows], slice(None))

    def add_column(self, col: int, values: np.ndarray) -> None:
        """Add values to one column (faster than a block when they are contiguous)."""
        values = np.asarray(values, dtype=np.float64).reshape(-1, 1)
        for start in range(0, values.shape[0], _CHUNK_VALUES):
            self._add(values[start:start + _CHUNK_VALUES], slice(col, col + 1))

    def add_counts(self, values: np.ndarray, counts: np.ndarray) -> None:
        """Add each of ``values`` ``counts`` times (one column; whole counts in [1, 2**26)):
        exactly ``add(np.repeat(values, counts))``, without the repeat."""
        values = np.asarray(values, dtype=np.float64).reshape(-1, 1)
        counts = np.asarray(counts, dtype=np.float64).reshape(-1, 1)
        if not values.size:
            return
        # a mantissa half times a count, summed over a chunk, stays below 2**53: exact
        rows = min(_CHUNK_VALUES, max(1, (1 << 26) // int(counts.max())))
        for start in range(0, values.shape[0], rows):
            self._add(values[start:start + rows], slice(0, 1), counts[start:start + rows])

    def _add(self, block: np.ndarray, cols: slice, counts: np.ndarray | None = None) -> None:
        if not block.any():  # empty, or zeros (a plain-decode run's draft_s): nothing to add
            return
        finite = np.isfinite(block)
        if not finite.all():
            with np.errstate(invalid="ignore"):  # inf + -inf is NaN, as in a float sum
                self._special[cols] += np.where(finite, 0.0, block).sum(axis=0)
            block = np.where(finite, block, 0.0)
        mant, exp = np.frexp(block)                  # block = mant * 2**exp, |mant| < 1
        hi = np.floor(mant * 2.0 ** (53 - _HALF))    # integers in float64, no casts:
        lo = mant * 2.0 ** 53 - hi * 2.0 ** _HALF    # |hi| <= 2**27, 0 <= lo < 2**26, exact
        if counts is not None:  # whole numbers below 2**53: exact
            hi, lo = hi * counts, lo * counts
        keys = (exp + self._keys[cols]).ravel()
        size = self.width * _EXP_SPAN
        hi = np.bincount(keys, weights=hi.ravel(), minlength=size)
        lo = np.bincount(keys, weights=lo.ravel(), minlength=size)
        for key in np.flatnonzero((hi != 0) | (lo != 0)).tolist():
            col, shift = divmod(key, _EXP_SPAN)
            self._ints[col] += ((int(hi[key]) << _HALF) + int(lo[key])) << shift

    def merge(self, other: ExactSum) -> None:
        """Add another accumulator's sums (the same width), still exactly."""
        self._ints = [a + b for a, b in zip(self._ints, other._ints)]
        self._special = self._special + other._special

    def totals(self) -> np.ndarray:
        """The correctly rounded sum of each column (inf or NaN when such values were added)."""
        out = np.empty(self.width)
        for col, total in enumerate(self._ints):
            try:
                out[col] = total / _SCALE
            except OverflowError:       # finite values whose exact sum exceeds float64
                out[col] = np.inf if total > 0 else -np.inf
        return out + self._special

    def total(self) -> float:
        """The sum of the first (for width 1: the only) column."""
        return float(self.totals()[0])


def exact_sums(block: np.ndarray) -> np.ndarray:
    """The correctly rounded column sums of a 2-D block (a 1-D array: its one sum)."""
    block = np.asarray(block, dtype=np.float64)
    acc = ExactSum(1 if block.ndim == 1 else block.shape[1])
    acc.add(block)
    return acc.totals()
