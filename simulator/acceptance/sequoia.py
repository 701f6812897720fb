"""Sequoia's positional acceptance (Chen et al., 2024): rank, not depth, decides.

``rates[k-1]`` = P(the k-th ranked child is accepted | its parent was accepted and its
k-1 earlier siblings were rejected), the same at every depth.  A chain uses rank 1 only,
so it is i.i.d. with alpha = rates[0].  The expected accepted length of a tree is the sum
over nodes of the product of the exclusive per-rank probabilities along the path.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from simulator.acceptance.fields import freeze_rates, model_config, probability_list
from simulator.acceptance.sampling import (
    check_batch,
    sample_geometric,
    tree_node_probs,
)
from simulator.acceptance.tree_kinds import NodeConditionals
from simulator.inputs.errors import SpecsimError
from simulator.speculation.closed_forms import expected_tokens, tree_expected_accepted
from simulator.speculation.token_tree import TokenTree


@dataclass(frozen=True)
class SequoiaAcceptance(NodeConditionals):
    """Positional acceptance vector over child ranks."""

    rates: tuple[float, ...]
    name: ClassVar[str] = "sequoia"

    def __post_init__(self) -> None:
        freeze_rates(self)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], *, source: str) -> "SequoiaAcceptance":
        cfg = model_config(cfg, allowed=("rates",), required=("rates",), source=source)
        return cls(tuple(probability_list(cfg["rates"], source=source, field="rates")))

    def bind(self, num_requests, rng, tasks=None):
        return self

    def node_conditionals(self, tree: TokenTree) -> np.ndarray:
        """P(node accepted | parent accepted, earlier siblings rejected) = rates[rank]."""
        rank = tree.child_rank
        if rank.max() >= self._rates.size:
            raise SpecsimError(f"the tree has a child of rank {int(rank.max()) + 1} but rates "
                               f"lists {self._rates.size}", field="rates",
                               fix="list a rate for every child rank the trees use")
        return self._rates[rank]

    def sample_chain(self, gammas, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        g, _, _ = check_batch(gammas, contexts, request_ids)
        return sample_geometric(np.full(g.shape, self._rates[0]), g, rng)

    def position_rates(self, gamma: int, context: int = 0) -> np.ndarray:
        return self._rates[0] ** np.arange(1, int(gamma) + 1)

    def expected_accepted(self, gamma: int, context: int = 0) -> float | None:
        return expected_tokens(float(self._rates[0]), int(gamma)) - 1.0

    def expected_tree_accepted(self, tree: TokenTree) -> float:
        """Sum over nodes of the product of exclusive per-rank probabilities on its path."""
        probs = tree_node_probs(tree, self.node_conditionals(tree))
        return tree_expected_accepted(tree.parents, probs)

    def listed_ranks(self) -> int:
        """The child ranks the rates list."""
        return len(self.rates)
