"""Per-position conditional acceptance: draft i accepted with r_i given drafts 1..i-1 were.

This is what vLLM's per-position counters measure (as ratios of consecutive positions).
Positions past the end of the list reuse the last rate.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from simulator.acceptance.fields import model_config, probability_list
from simulator.acceptance.sampling import (chain_depth, check_batch, check_tree,
                                           sample_from_survival)
from simulator.errors import SpecsimError
from simulator.spec_math import expected_tokens_per_position


def extend_rates(rates: np.ndarray, gamma: int) -> np.ndarray:
    """The first ``gamma`` conditional rates, repeating the last one past the list."""
    if gamma <= rates.size:
        return rates[:gamma]
    return np.concatenate([rates, np.full(gamma - rates.size, rates[-1])])


@dataclass(frozen=True)
class PositionalAcceptance:
    """Conditional rates r_1, r_2, ...: P(first k accepted) = r_1 * ... * r_k."""

    rates: tuple[float, ...]
    name: ClassVar[str] = "positional"

    def __post_init__(self) -> None:
        arr = np.asarray(self.rates, dtype=float)
        if arr.ndim != 1 or arr.size == 0 or np.any(~np.isfinite(arr)) \
                or np.any((arr < 0) | (arr > 1)):
            raise SpecsimError("must be a non-empty list of numbers in [0, 1]", field="rates")
        object.__setattr__(self, "rates", tuple(float(r) for r in arr))
        object.__setattr__(self, "_rates", arr)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], *, source: str) -> "PositionalAcceptance":
        cfg = model_config(cfg, allowed=("rates",), required=("rates",), source=source)
        return cls(tuple(probability_list(cfg["rates"], source=source, field="rates")))

    def bind(self, num_requests, rng, tasks=None) -> "PositionalAcceptance":
        return self

    def sample_chain(self, gammas, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        g, _, _ = check_batch(gammas, contexts, request_ids)
        return sample_from_survival(self.position_rates(int(g.max(initial=0))), g, rng)

    def sample_tree(self, tree, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        tree, c, r = check_tree(tree, contexts, request_ids)
        depth = chain_depth(tree, self.name)
        return self.sample_chain(np.full(c.shape, depth), c, r, rng)

    def position_rates(self, gamma: int, context: int = 0) -> np.ndarray:
        return np.cumprod(extend_rates(self._rates, int(gamma)))

    def expected_accepted(self, gamma: int, context: int = 0) -> float | None:
        """sum_k prod_{j<=k} r_j = E(rates) - 1."""
        if int(gamma) == 0:
            return 0.0
        return expected_tokens_per_position(extend_rates(self._rates, int(gamma))) - 1.0
