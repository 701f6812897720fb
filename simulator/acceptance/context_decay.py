"""Acceptance that decays with context length: alpha(c) = max(floor, alpha0 exp(-c / scale)).

``c`` is the number of tokens already in the request's KV cache when the iteration starts;
alpha is held for the iteration's gamma drafts (the scale is meant to be far longer than a
draft).  Within an iteration drafts are i.i.d., so every closed form of the i.i.d. model
holds with alpha(c).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from simulator.acceptance.fields import model_config, probability
from simulator.acceptance.sampling import check_batch, sample_chain_tree, sample_geometric
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number
from simulator.speculation.closed_forms import expected_tokens


@dataclass(frozen=True)
class ContextDecayAcceptance:
    """alpha0 at an empty context, falling by e every ``scale_tokens``, never below ``floor``."""

    alpha0: float
    scale_tokens: float
    floor: float = 0.0
    name: ClassVar[str] = "context_decay"

    def __post_init__(self) -> None:
        if not 0.0 <= self.floor <= self.alpha0 <= 1.0:
            raise SpecsimError("need 0 <= floor <= alpha0 <= 1", field="floor")
        if not self.scale_tokens > 0:
            raise SpecsimError("must be > 0", field="scale_tokens")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], *, source: str) -> "ContextDecayAcceptance":
        cfg = model_config(cfg, allowed=("alpha0", "scale_tokens", "floor"),
                           required=("alpha0", "scale_tokens"), source=source)
        alpha0 = probability(cfg["alpha0"], source=source, field="alpha0")
        floor = probability(cfg.get("floor", 0.0), source=source, field="floor")
        if floor > alpha0:
            raise SpecsimError(f"floor {floor} is above alpha0 {alpha0}", source=source,
                               field="floor", fix="floor must be <= alpha0")
        scale = float(as_number(cfg["scale_tokens"], source=source, field="scale_tokens",
                                strictly_positive=True))
        return cls(alpha0, scale, floor)

    def alpha_at(self, context) -> np.ndarray:
        """alpha for each context length."""
        c = np.asarray(context, dtype=float)
        return np.maximum(self.floor, self.alpha0 * np.exp(-c / self.scale_tokens))

    def bind(self, num_requests, rng, tasks=None):
        return self

    def sample_chain(self, gammas, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        g, c, _ = check_batch(gammas, contexts, request_ids)
        return sample_geometric(self.alpha_at(c), g, rng)

    def sample_tree(self, tree, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        return sample_chain_tree(self, tree, contexts, request_ids, rng)

    def position_rates(self, gamma: int, context: int = 0) -> np.ndarray:
        return float(self.alpha_at(context)) ** np.arange(1, int(gamma) + 1)

    def expected_accepted(self, gamma: int, context: int = 0) -> float | None:
        return expected_tokens(float(self.alpha_at(context)), int(gamma)) - 1.0
