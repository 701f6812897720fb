"""Tree acceptance from per-depth top-k coverage of the draft.

``coverage[d][k-1]`` = P(the token the target emits at depth d+1 is among the draft's top k
| the path above was accepted).  Ranks are exclusive -- the target's token is at most one
of them -- so the child of rank r at depth d is the accepted one with probability
``coverage[d][r] - coverage[d][r-1]``, independently across depths (the product rule that
Medusa uses to pick its candidate tree).  A chain uses rank 0 only: conditional rate
``coverage[d][0]``.  Depths past the list repeat the last row; a child ranked past the
listed k is an error.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from simulator.acceptance.context_free import ChainCounts
from simulator.acceptance.fields import model_config, probability_list
from simulator.acceptance.sampling import (
    check_batch,
    sample_from_survival,
    survival_counter,
    tree_node_probs,
)
from simulator.acceptance.tree_kinds import NodeConditionals
from simulator.inputs.errors import SpecsimError
from simulator.speculation.closed_forms import tree_expected_accepted
from simulator.speculation.token_tree import TokenTree


def parse_coverage(value: Any, *, source: str, field: str) -> np.ndarray:
    """A list (one row per depth) of cumulative top-k coverages, padded to equal width."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise SpecsimError("expected a list of per-depth coverage lists", source=source,
                           field=field, fix="write e.g. [[0.6, 0.72, 0.76], [0.36, 0.47]]")
    rows = [probability_list(r, source=source, field=f"{field}[{d}]", non_decreasing=True)
            for d, r in enumerate(value)]
    if not rows:
        raise SpecsimError("is empty", source=source, field=field)
    return np.array([r.tolist() + [r[-1]] * (max(map(len, rows)) - len(r)) for r in rows])


@dataclass(frozen=True)
class TopKCoverageAcceptance(NodeConditionals, ChainCounts):
    """Per-depth cumulative top-k coverage; ``max_depth`` caps how deep a draft may go."""

    coverage: tuple[tuple[float, ...], ...]
    max_depth: int | None = None
    name: ClassVar[str] = "tree_topk"

    def __post_init__(self) -> None:
        cov = np.asarray(self.coverage, dtype=float)
        if cov.ndim != 2 or cov.size == 0 or np.any(~np.isfinite(cov)) \
                or np.any((cov < 0) | (cov > 1)) or np.any(np.diff(cov, axis=1) < -1e-12):
            raise SpecsimError("rows must be non-decreasing cumulative coverages in [0, 1]",
                               field="coverage")
        object.__setattr__(self, "coverage", tuple(tuple(float(x) for x in r) for r in cov))
        object.__setattr__(self, "_cov", cov)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], *, source: str) -> "TopKCoverageAcceptance":
        cfg = model_config(cfg, allowed=("coverage",), required=("coverage",), source=source)
        cov = parse_coverage(cfg["coverage"], source=source, field="coverage")
        return cls(tuple(map(tuple, cov)))

    def bind(self, num_requests, rng, tasks=None):
        return self

    def _depth_rows(self, depth: int) -> np.ndarray:
        if self.max_depth is not None and depth > self.max_depth:
            raise SpecsimError(f"a draft {depth} deep needs {depth} heads; this model has "
                               f"{self.max_depth}", field="gamma",
                               fix=f"draft at most {self.max_depth} tokens")
        idx = np.minimum(np.arange(depth), self._cov.shape[0] - 1)
        return self._cov[idx]

    def node_conditionals(self, tree: TokenTree) -> np.ndarray:
        """P(node accepted | parent accepted, earlier siblings rejected), per node."""
        rows = self._depth_rows(tree.max_depth)
        width = rows.shape[1]
        rank = tree.child_rank
        if rank.max() >= width:
            raise SpecsimError(f"the tree has a child of rank {int(rank.max()) + 1} but coverage "
                               f"lists only top-{width}", field="coverage",
                               fix="list coverage for as many ranks as the widest node")
        cov = rows[tree.depth - 1]                                  # (n, K)
        below = np.where(rank > 0, cov[np.arange(rank.size), np.maximum(rank - 1, 0)], 0.0)
        at = cov[np.arange(rank.size), rank]
        left = 1.0 - below
        return np.where(left > 0, (at - below) / np.where(left > 0, left, 1.0), 0.0)

    def sample_chain(self, gammas, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        g, _, _ = check_batch(gammas, contexts, request_ids)
        return sample_from_survival(self.position_rates(int(g.max(initial=0))), g, rng)

    def chain_counter(self, gamma: int):
        """``sample_chain``'s counts given its uniforms (the top-1 column: context-free);
        None where the chain is deeper than ``max_depth`` (its sampling says why)."""
        if self.max_depth is not None and int(gamma) > self.max_depth:
            return None
        return survival_counter(self.position_rates(int(gamma)), int(gamma))

    def position_rates(self, gamma: int, context: int = 0) -> np.ndarray:
        if int(gamma) == 0:
            return np.zeros(0)
        return np.cumprod(self._depth_rows(int(gamma))[:, 0])

    def expected_accepted(self, gamma: int, context: int = 0) -> float | None:
        return float(self.position_rates(gamma).sum())

    def expected_tree_accepted(self, tree: TokenTree) -> float:
        """Sum over nodes of P(node on the accepted path) (product rule, exclusive ranks)."""
        probs = tree_node_probs(tree, self.node_conditionals(tree))
        return tree_expected_accepted(tree.parents, probs)

    def listed_ranks(self) -> int:
        """The child ranks the coverage lists."""
        return len(self.coverage[0])
