"""Token-length distributions: fixed, uniform, lognormal (from a mean and a median), empirical.

Each is a frozen dataclass with ``sample(n, rng) -> int64 array`` whose values lie in
``[1, max_tokens]``.  Field names are the YAML keys (``dist:`` picks the class from
:data:`LENGTH_DISTRIBUTIONS`), so validation lives here, once, in ``__post_init__``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import short
from workloads.workload import MAX_TOKENS_PER_REQUEST


def check_count(value: Any, field: str, *, minimum: int = 1,
                maximum: int | None = MAX_TOKENS_PER_REQUEST) -> int:
    """Return ``value`` as an int if it is a whole number in ``[minimum, maximum]``, else raise.

    ``maximum`` defaults to MAX_TOKENS_PER_REQUEST (every count here is a token count or
    smaller); None: no upper limit.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or value != int(value) or value < minimum:
        raise SpecsimError(f"expected a whole number >= {minimum}, got {short(value)}",
                           field=field)
    if maximum is not None and value > maximum:
        raise SpecsimError(f"must be at most {maximum:,}, got {short(value)}", field=field,
                           fix="the limit keeps memory bounded (docs/limits.md)")
    return int(value)


def check_positive(value: Any, field: str, *, maximum: float | None = None) -> float:
    """Return ``value`` as a float if it is finite, > 0 and at most ``maximum``, else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or value <= 0:
        raise SpecsimError(f"expected a finite number > 0, got {short(value)}", field=field)
    if maximum is not None and value > maximum:
        raise SpecsimError(f"must be at most {maximum:,.0f}, got {short(value)}", field=field,
                           fix="the limit keeps the draws meaningful (docs/limits.md)")
    return float(value)


def _clip(values: np.ndarray, max_tokens: int | None) -> np.ndarray:
    """Clip draws to ``[1, max_tokens]``, and never above MAX_TOKENS_PER_REQUEST (so a
    lognormal tail cannot overflow int64)."""
    upper = MAX_TOKENS_PER_REQUEST if max_tokens is None else min(max_tokens,
                                                                  MAX_TOKENS_PER_REQUEST)
    return np.clip(values, 1, upper).astype(np.int64)


@dataclass(frozen=True)
class FixedLength:
    """Every request has ``tokens`` tokens."""

    tokens: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", check_count(self.tokens, "tokens"))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Return ``n`` copies of ``tokens``."""
        return np.full(n, self.tokens, dtype=np.int64)


@dataclass(frozen=True)
class UniformLength:
    """Lengths drawn uniformly from the integers ``min_tokens..max_tokens`` inclusive."""

    min_tokens: int
    max_tokens: int

    def __post_init__(self) -> None:
        low = check_count(self.min_tokens, "min_tokens")
        high = check_count(self.max_tokens, "max_tokens")
        if high < low:
            raise SpecsimError(f"max_tokens ({high}) is below min_tokens ({low})",
                               field="max_tokens", fix="swap the two bounds")
        object.__setattr__(self, "min_tokens", low)
        object.__setattr__(self, "max_tokens", high)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``n`` lengths."""
        return rng.integers(self.min_tokens, self.max_tokens, size=n, endpoint=True,
                            dtype=np.int64)


@dataclass(frozen=True)
class LognormalLength:
    """Lognormal lengths fitted to a mean and a median, rounded and clipped to ``[1, max_tokens]``.

    For ``X = exp(mu + sigma Z)`` the median is ``exp(mu)`` and the mean is
    ``exp(mu + sigma^2 / 2)``, hence ``mu = ln(median)`` and
    ``sigma^2 = 2 ln(mean / median)``; the mean must exceed the median.  ``mean_tokens``
    and ``median_tokens`` describe the distribution before the cap.
    """

    mean_tokens: float
    median_tokens: float
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        mean = check_positive(self.mean_tokens, "mean_tokens", maximum=MAX_TOKENS_PER_REQUEST)
        median = check_positive(self.median_tokens, "median_tokens",
                                maximum=MAX_TOKENS_PER_REQUEST)
        if mean <= median:
            raise SpecsimError(f"mean_tokens ({mean:g}) must exceed median_tokens ({median:g}) "
                               "for a lognormal", field="mean_tokens",
                               fix="raise the mean, or use dist: fixed for a constant length")
        object.__setattr__(self, "mean_tokens", mean)
        object.__setattr__(self, "median_tokens", median)
        if self.max_tokens is not None:
            object.__setattr__(self, "max_tokens", check_count(self.max_tokens, "max_tokens"))

    @property
    def mu(self) -> float:
        return math.log(self.median_tokens)

    @property
    def sigma(self) -> float:
        return math.sqrt(2.0 * math.log(self.mean_tokens / self.median_tokens))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``n`` lengths."""
        return _clip(np.rint(rng.lognormal(self.mu, self.sigma, size=n)), self.max_tokens)


@dataclass(frozen=True, eq=False)
class EmpiricalLength:
    """Lengths resampled with replacement from observed ``values`` (say, a trace's column)."""

    values: np.ndarray
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        values = np.asarray(self.values)
        if values.ndim != 1 or values.size == 0:
            raise SpecsimError("expected a non-empty list of lengths", field="values")
        if values.dtype.kind not in "iuf" or not np.all(np.isfinite(values)) \
                or np.any(values < 1) or np.any(values != np.round(values)):
            raise SpecsimError("lengths must be whole numbers >= 1", field="values")
        if np.any(values > MAX_TOKENS_PER_REQUEST):
            raise SpecsimError(f"lengths must be at most {MAX_TOKENS_PER_REQUEST:,}",
                               field="values", fix="check the units of the lengths")
        values = values.astype(np.int64)
        values.flags.writeable = False
        object.__setattr__(self, "values", values)
        if self.max_tokens is not None:
            object.__setattr__(self, "max_tokens", check_count(self.max_tokens, "max_tokens"))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``n`` lengths."""
        return _clip(rng.choice(self.values, size=n, replace=True), self.max_tokens)


LengthDistribution = FixedLength | UniformLength | LognormalLength | EmpiricalLength

LENGTH_DISTRIBUTIONS: dict[str, type] = {
    "fixed": FixedLength,
    "uniform": UniformLength,
    "lognormal": LognormalLength,
    "empirical": EmpiricalLength,
}
