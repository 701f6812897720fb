"""i.i.d. acceptance: every draft accepted with one alpha, independently (the formula's world)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from simulator.acceptance.context_free import ContextFree
from simulator.acceptance.fields import model_config, probability
from simulator.acceptance.sampling import (
    check_batch,
    geometric_counter,
    geometric_thresholds,
    sample_chain_tree,
    sample_geometric,
)
from simulator.speculation.closed_forms import expected_tokens


@dataclass(frozen=True)
class IIDAcceptance(ContextFree):
    """Accepted drafts ~ leading successes of Bernoulli(alpha): P(>= k accepted) = alpha^k."""

    alpha: float
    name: ClassVar[str] = "iid"

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], *, source: str) -> "IIDAcceptance":
        cfg = model_config(cfg, allowed=("alpha",), required=("alpha",), source=source)
        return cls(probability(cfg["alpha"], source=source, field="alpha"))

    def bind(self, num_requests: int, rng: np.random.Generator,
             tasks: np.ndarray | None = None) -> "IIDAcceptance":
        return self

    def sample_chain(self, gammas, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        g, _, _ = check_batch(gammas, contexts, request_ids)
        if not 0.0 < self.alpha < 1.0 or not g.size:  # 0 or gamma each: log's guards
            return sample_geometric(np.full(g.shape, self.alpha), g, rng)
        # one uniform each against 1 - alpha**j (geometric_thresholds): P(>= j) = alpha**j
        cut = _thresholds(self.alpha, int(np.maximum.reduce(g)))
        return np.minimum(cut.searchsorted(rng.random(g.shape), "right"), g).astype(
            np.int64, copy=False)

    def chain_alphas(self, request_ids: np.ndarray) -> np.ndarray:
        """The per-request alphas ``sample_chain`` draws with (context-free: a chain
        stretch may draw many iterations at once, simulator/engine/chain_stretch.py)."""
        return np.full(request_ids.shape, self.alpha)

    def chain_counter(self, gamma: int):
        """``sample_chain``'s accepted counts of requests drafting ``gamma`` given its
        uniforms, as ``counts(draws, request_ids)``, where alpha is in (0, 1)
        (``geometric_counter``: the same thresholds); None elsewhere."""
        return geometric_counter(self.alpha, gamma)

    def sample_tree(self, tree, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        return sample_chain_tree(self, tree, contexts, request_ids, rng)

    def position_rates(self, gamma: int, context: int = 0) -> np.ndarray:
        return self.alpha ** np.arange(1, int(gamma) + 1)

    def expected_accepted(self, gamma: int, context: int = 0) -> float | None:
        """alpha (1 - alpha^gamma) / (1 - alpha) = E(alpha, gamma) - 1 (Leviathan Eq. 1)."""
        return expected_tokens(self.alpha, int(gamma)) - 1.0


_CUTS: dict[tuple[float, int], np.ndarray] = {}


def _thresholds(alpha: float, gamma: int) -> np.ndarray:
    """``geometric_thresholds(alpha, gamma)``, memoised (read-only: a pure function of the
    two, read by every iteration's draws)."""
    key = (alpha, gamma)
    cut = _CUTS.get(key)
    if cut is None:
        if len(_CUTS) >= 1024:
            _CUTS.clear()
        cut = _CUTS[key] = geometric_thresholds(alpha, gamma)
        cut.flags.writeable = False
    return cut
