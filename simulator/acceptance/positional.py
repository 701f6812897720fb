"""Per-position conditional acceptance: draft i accepted with r_i given drafts 1..i-1 were.

This is what vLLM's per-position counters measure (as ratios of consecutive positions).
Positions past the end of the list reuse the last rate.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from simulator.acceptance.context_free import ChainCounts
from simulator.acceptance.fields import freeze_rates, model_config, probability_list
from simulator.acceptance.sampling import (
    check_batch,
    sample_chain_tree,
    sample_from_survival,
    survival_counter,
)
from simulator.speculation.closed_forms import expected_tokens_per_position


def extend_rates(rates: np.ndarray, gamma: int) -> np.ndarray:
    """The first ``gamma`` conditional rates, repeating the last one past the list."""
    if gamma <= rates.size:
        return rates[:gamma]
    return np.concatenate([rates, np.full(gamma - rates.size, rates[-1])])


@dataclass(frozen=True)
class PositionalAcceptance(ChainCounts):
    """Conditional rates r_1, r_2, ...: P(first k accepted) = r_1 * ... * r_k."""

    rates: tuple[float, ...]
    name: ClassVar[str] = "positional"

    def __post_init__(self) -> None:
        freeze_rates(self)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], *, source: str) -> "PositionalAcceptance":
        cfg = model_config(cfg, allowed=("rates",), required=("rates",), source=source)
        return cls(tuple(probability_list(cfg["rates"], source=source, field="rates")))

    def bind(self, num_requests, rng, tasks=None) -> "PositionalAcceptance":
        return self

    def sample_chain(self, gammas, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        g, _, _ = check_batch(gammas, contexts, request_ids)
        return sample_from_survival(self.position_rates(int(g.max(initial=0))), g, rng)

    def chain_counter(self, gamma: int):
        """``sample_chain``'s counts given its uniforms (context-free: a chain stretch may
        draw many iterations at once, simulator/engine/chain_stretch.py)."""
        return survival_counter(self.position_rates(int(gamma)), int(gamma))

    def sample_tree(self, tree, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        return sample_chain_tree(self, tree, contexts, request_ids, rng)

    def position_rates(self, gamma: int, context: int = 0) -> np.ndarray:
        return np.cumprod(extend_rates(self._rates, int(gamma)))

    def expected_accepted(self, gamma: int, context: int = 0) -> float | None:
        """sum_k prod_{j<=k} r_j = E(rates) - 1."""
        if int(gamma) == 0:
            return 0.0
        return expected_tokens_per_position(extend_rates(self._rates, int(gamma))) - 1.0
