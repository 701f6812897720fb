"""Arrival processes: Poisson, Gamma (burstiness set by the gaps' CV), and constant rate.

Each is a frozen dataclass with ``sample(n, rng) -> float64 array`` of arrival times in
seconds.  The first request arrives at 0 and the other ``n - 1`` follow after i.i.d. gaps of
mean ``1 / rate_per_s``, so :attr:`Workload.mean_rate_per_s` estimates ``rate_per_s``
(exactly, for the constant process).  ``process:`` picks the class from
:data:`ARRIVAL_PROCESSES`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.inputs.errors import SpecsimError
from workloads.lengths import check_positive

# Burstiness accepted by the Gamma process (docs/limits.md): outside it the Gamma's shape
# 1 / cv^2 overflows or underflows and the gaps turn NaN.
MIN_CV, MAX_CV = 1e-3, 1e3


def _times(gaps: np.ndarray) -> np.ndarray:
    return np.concatenate(([0.0], np.cumsum(gaps)))


@dataclass(frozen=True)
class PoissonArrivals:
    """Exponential gaps: the memoryless open-loop arrivals of many independent users."""

    rate_per_s: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate_per_s", check_positive(self.rate_per_s, "rate_per_s"))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``n`` arrival times."""
        return _times(rng.exponential(1.0 / self.rate_per_s, size=max(n - 1, 0)))


@dataclass(frozen=True)
class GammaArrivals:
    """Gamma gaps with coefficient of variation ``cv``: cv > 1 is bursty, cv = 1 is Poisson.

    A Gamma with shape ``k`` and scale ``theta`` has mean ``k theta`` and CV
    ``1 / sqrt(k)``, so ``k = 1 / cv^2`` and ``theta = cv^2 / rate_per_s``.
    """

    rate_per_s: float
    cv: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate_per_s", check_positive(self.rate_per_s, "rate_per_s"))
        cv = check_positive(self.cv, "cv", maximum=MAX_CV)
        if cv < MIN_CV:
            raise SpecsimError(f"must be at least {MIN_CV:g}, got {cv!r}", field="cv",
                               fix="use process: constant for evenly spaced arrivals")
        object.__setattr__(self, "cv", cv)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``n`` arrival times."""
        shape = 1.0 / self.cv ** 2
        scale = self.cv ** 2 / self.rate_per_s
        return _times(rng.gamma(shape, scale, size=max(n - 1, 0)))


@dataclass(frozen=True)
class ConstantArrivals:
    """Evenly spaced arrivals, one every ``1 / rate_per_s`` seconds."""

    rate_per_s: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate_per_s", check_positive(self.rate_per_s, "rate_per_s"))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Return ``n`` arrival times (``rng`` is unused; it keeps the interface uniform)."""
        return np.arange(n, dtype=np.float64) / self.rate_per_s


ArrivalProcess = PoissonArrivals | GammaArrivals | ConstantArrivals

ARRIVAL_PROCESSES: dict[str, type] = {
    "poisson": PoissonArrivals,
    "gamma": GammaArrivals,
    "constant": ConstantArrivals,
}
