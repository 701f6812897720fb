"""A relative-error quantile sketch (DDSketch: Masson, Rim & Lee, "DDSketch: a fast and
fully-mergeable quantile sketch with relative-error guarantees", VLDB 2019).

The error bound.  With relative accuracy ``a`` and ``gamma = (1 + a) / (1 - a)``, a value
``x > MIN_VALUE`` is counted in bin ``i = ceil(log_gamma(x))``, which covers
``(gamma**(i-1), gamma**i]``; every value of the bin is within ``a * x`` of the bin's estimate
``2 gamma**i / (gamma + 1)``.  Values ``<= MIN_VALUE`` (zero, or the negative gaps that cannot
occur) are counted in a zero bin estimated as 0, so their error is at most MIN_VALUE.  For
``n`` values sorted as ``x_(0) <= ... <= x_(n-1)``:

* ``rank_quantiles(q)`` estimates the order statistic ``x_(r)``, ``r = floor(q (n - 1))``
  (the sketch's rank definition), by the estimate of the bin holding it:
  ``|q_hat - x_(r)| <= a * x_(r)``;
* ``quantiles(q)`` estimates numpy's default (linear) quantile
  ``(1 - f) x_(r) + f x_(r+1)``, ``f = q (n - 1) - r``, by the same interpolation of the two
  rank estimates; both are within ``a`` relatively and the weights are non-negative, so
  ``|q_hat - q_numpy| <= a * q_numpy`` too.

Both hold up to the rounding of ``log`` at a bin's edge (a relative ``1e-12`` or so) and are
clamped to the exact minimum and maximum (which only brings an estimate closer); ranks 0 and
``n - 1`` are the exact minimum and maximum.  Counts
only, so the sketch is the same whatever the order in which values arrive, and two sketches
merge by adding counts.  Memory: one count per bin between the smallest and largest value
seen, ``ln(max / min) / ln(gamma)`` bins (231 per decade at a = 0.5%).
"""
from __future__ import annotations

import numpy as np

from simulator.engine.exact_sum import ExactSum

RELATIVE_ACCURACY = 0.005   # the default ``a``: every quantile within 0.5 % of the true one
MIN_VALUE = 1e-12           # values at or below it are counted as 0 (1 ps of latency)
_CHUNK = 1 << 16            # values binned per numpy pass


class QuantileSketch:
    """DDSketch counts with exact count, minimum, maximum and (exactly summed) total."""

    def __init__(self, relative_accuracy: float = RELATIVE_ACCURACY) -> None:
        if not 0.0 < relative_accuracy < 1.0:
            raise ValueError(f"relative_accuracy must be in (0, 1), not {relative_accuracy}")
        self.relative_accuracy = float(relative_accuracy)
        self.gamma = (1.0 + relative_accuracy) / (1.0 - relative_accuracy)
        self._log_gamma = float(np.log(self.gamma))
        self.offset = 0                          # bin index of counts[0]
        self.counts = np.zeros(0, np.int64)
        self.zero_count = 0
        self.count = 0
        self.min = np.inf
        self.max = -np.inf
        self._sum = ExactSum(1)

    def add(self, values: np.ndarray) -> None:
        """Count ``values`` (finite float64; NaN and inf are not latencies)."""
        self._add(np.asarray(values, dtype=np.float64).ravel(), None)

    def add_counts(self, values: np.ndarray, counts: np.ndarray) -> None:
        """Count each of ``values`` ``counts`` times (whole counts in [1, 2**26)): the same
        state as ``add(np.repeat(values, counts))`` (counts, extremes, exact total), without
        the repeat."""
        self._add(np.asarray(values, dtype=np.float64).ravel(),
                  np.asarray(counts, dtype=np.int64).ravel())

    def _add(self, values: np.ndarray, counts: np.ndarray | None) -> None:
        """``add`` (``counts`` None: each value once) and ``add_counts``."""
        if values.size > _CHUNK:  # bounded temporaries, and faster in cache
            for start in range(0, values.size, _CHUNK):
                self._add(values[start:start + _CHUNK],
                          None if counts is None else counts[start:start + _CHUNK])
            return
        if not values.size:
            return
        self.count += int(values.size) if counts is None else int(counts.sum())
        self.min = min(self.min, float(values.min()))
        self.max = max(self.max, float(values.max()))
        if counts is None:
            self._sum.add(values)
        else:
            self._sum.add_counts(values, counts)
        keep = values > MIN_VALUE
        positive = values[keep]
        self.zero_count += int(values.size - positive.size) if counts is None \
            else int(counts[~keep].sum())
        if not positive.size:
            return
        idx = np.ceil(np.log(positive) / self._log_gamma).astype(np.int64)
        self._grow(int(idx.min()), int(idx.max()))
        if counts is None:
            self.counts += np.bincount(idx - self.offset, minlength=self.counts.size)
        else:  # float sums of whole counts below 2**53: exact
            self.counts += np.bincount(idx - self.offset, weights=counts[keep],
                                       minlength=self.counts.size).astype(np.int64)

    def _grow(self, lo: int, hi: int) -> None:
        if self.counts.size and self.offset <= lo and hi < self.offset + self.counts.size:
            return
        if self.counts.size:
            lo, hi = min(lo, self.offset), max(hi, self.offset + self.counts.size - 1)
        grown = np.zeros(hi - lo + 1, np.int64)
        grown[self.offset - lo:self.offset - lo + self.counts.size] = self.counts
        self.counts, self.offset = grown, lo

    def merge(self, other: QuantileSketch) -> None:
        """Add another sketch's counts (same relative accuracy)."""
        if other.relative_accuracy != self.relative_accuracy:
            raise ValueError("sketches of different relative accuracy do not merge")
        if other.counts.size:
            self._grow(other.offset, other.offset + other.counts.size - 1)
            start = other.offset - self.offset
            self.counts[start:start + other.counts.size] += other.counts
        self.zero_count += other.zero_count
        self.count += other.count
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)
        self._sum.merge(other._sum)

    @property
    def total(self) -> float:
        """The correctly rounded sum of every value added."""
        return self._sum.total()

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else float("nan")

    def bins(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lower edge, upper edge, count) of every non-empty bin, the zero bin first as
        (0, MIN_VALUE]; a histogram whose edges are within ``a`` of every value in them."""
        nz = np.flatnonzero(self.counts)
        upper = self.gamma ** (nz + self.offset).astype(np.float64)
        lower, counts = upper / self.gamma, self.counts[nz]
        if self.zero_count:
            lower, upper = np.r_[0.0, lower], np.r_[MIN_VALUE, upper]
            counts = np.r_[self.zero_count, counts]
        return lower, upper, counts

    def rank_quantiles(self, q) -> np.ndarray:
        """The estimates of the order statistics of rank ``floor(q (n - 1))`` (0-based)."""
        q = np.asarray(q, dtype=np.float64)
        if not self.count:
            return np.full(q.shape, np.nan)
        return self._at_ranks(np.floor(np.clip(q, 0.0, 1.0) * (self.count - 1)))

    def quantiles(self, q) -> np.ndarray:
        """numpy's default (linear) quantiles, estimated within ``a`` relatively."""
        q = np.asarray(q, dtype=np.float64)
        if not self.count:
            return np.full(q.shape, np.nan)
        pos = np.clip(q, 0.0, 1.0) * (self.count - 1)
        lo = np.floor(pos)
        hi = np.minimum(lo + 1, self.count - 1)
        low, high = self._at_ranks(lo), self._at_ranks(hi)
        return low + (high - low) * (pos - lo)

    def _at_ranks(self, ranks: np.ndarray) -> np.ndarray:
        cum = np.cumsum(np.r_[self.zero_count, self.counts])
        where = np.searchsorted(cum, ranks, side="right")     # first bin with cum > rank
        bin_index = (where - 1 + self.offset).astype(np.float64)
        est = np.where(where == 0, 0.0, 2.0 * self.gamma ** bin_index / (self.gamma + 1.0))
        est = np.where(ranks <= 0, self.min, est)              # the extremes are exact
        est = np.where(ranks >= self.count - 1, self.max, est)
        return np.clip(est, self.min, self.max)

    # ------------------------------------------------------------------ persistence
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The sketch as named arrays (``np.savez``; ``from_arrays`` reads them back)."""
        return {"relative_accuracy": np.float64(self.relative_accuracy),
                "offset": np.int64(self.offset), "counts": self.counts,
                "zero_count": np.int64(self.zero_count), "count": np.int64(self.count),
                "min": np.float64(self.min), "max": np.float64(self.max),
                "total": np.float64(self.total), "min_value": np.float64(MIN_VALUE)}

    @classmethod
    def from_arrays(cls, arrays) -> QuantileSketch:
        """The sketch ``to_arrays`` wrote (its total already summed)."""
        out = cls(float(arrays["relative_accuracy"]))
        out.offset = int(arrays["offset"])
        out.counts = np.asarray(arrays["counts"], dtype=np.int64).copy()
        out.zero_count, out.count = int(arrays["zero_count"]), int(arrays["count"])
        out.min, out.max = float(arrays["min"]), float(arrays["max"])
        out._sum.add(np.array([float(arrays["total"])]))
        return out

    def describe(self) -> dict:
        """What the summary's info says of the sketch."""
        return {"kind": "DDSketch", "relative_accuracy": self.relative_accuracy,
                "bins": int(np.count_nonzero(self.counts)) + (1 if self.zero_count else 0),
                "bound": "|q_hat - q| <= relative_accuracy * q for numpy's linear quantile "
                         "(exact count, min, max, mean)"}
