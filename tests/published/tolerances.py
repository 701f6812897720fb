"""The tolerance kinds of the published check and the ``Case`` record (tests/published/cases.py
lists the cases).  Every tolerance is fixed by what the claim is, before any prediction."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Tolerance:
    """How close a prediction must be: ``rel`` (fraction), ``abs`` (difference), ``range``
    (widening), ``order`` (exactly the published ranking) or ``exact`` (exactly the published
    tuple of signs)."""

    kind: str
    value: float = 0.0

    def ok(self, published: Any, predicted: Any) -> bool:
        if self.kind in ("order", "exact"):
            return tuple(predicted) == tuple(published)
        if self.kind == "range":
            lo, hi = published
            return lo * (1 - self.value) <= predicted <= hi * (1 + self.value)
        if self.kind == "abs":
            return abs(predicted - published) <= self.value
        return abs(predicted - published) <= self.value * abs(published)

    def text(self) -> str:
        if self.kind == "order":
            return "exact order"
        if self.kind == "exact":
            return "exact signs"
        if self.kind == "range":
            return f"range +-{self.value:.0%}"
        if self.kind == "abs":
            return f"+-{self.value:g}"
        return f"+-{self.value:.0%}"


TAU = Tolerance("rel", 0.10)
SPEEDUP = Tolerance("rel", 0.20)
ORDER = Tolerance("order")
RANGE = Tolerance("range", 0.10)
BEST_K = Tolerance("abs", 1)
SIGNS = Tolerance("exact")
# an absolute latency or throughput on a named device and engine: within 25% (the device's
# clocks and the engine build move these more than a ratio of two runs on one machine)
ABSOLUTE = Tolerance("rel", 0.25)


@dataclass(frozen=True)
class Case:
    """One published number, where it is from, and how the simulator predicts it."""

    name: str
    source: str
    published: Any
    tolerance: Tolerance
    predict: Callable[[str], Any]   # called with the engine's name
    engine: str = "hf"
    # False: a ratio of two runs of which neither speculates (an overlap ablation); the
    # coverage's speedup group reads a miss as a factor on the speculative path, which such
    # a ratio lacks (tests/published/coverage.py ``group``)
    speculative: bool = True
