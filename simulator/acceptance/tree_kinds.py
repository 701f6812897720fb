"""The two ways an acceptance model scores a branching tree, declared by subclassing.

``NodeConditionals``: a parametric model (tree_topk, medusa, sequoia) gives each node's
probability of acceptance given its parent was accepted and its earlier siblings were not,
by depth and rank, and a closed form of a tree's expected accepted length; a policy ranks
candidate nodes by it.  Such a model samples a tree by walking it under those
conditionals (``tree_walk``, the one walk every request takes alike, bound once a tree).  ``TreeAlgorithm``: a model that runs a verification algorithm over
drafted tokens (token_level) at a ``temperature`` by a ``tree_method``.  The policies'
kit (simulator/policies/tree_acceptance.py) asks ``isinstance``, never for a member.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from simulator.acceptance.sampling import TreeWalk, check_tree, tree_walk
from simulator.speculation.token_tree import TokenTree


class NodeConditionals(ABC):
    """Per-node acceptance by depth and rank (see the module docstring)."""

    @abstractmethod
    def node_conditionals(self, tree: TokenTree) -> np.ndarray:
        """P(node accepted | parent accepted, earlier siblings not), per node of ``tree``."""

    @abstractmethod
    def expected_tree_accepted(self, tree: TokenTree) -> float:
        """Expected accepted path length of ``tree`` (bonus excluded)."""

    @abstractmethod
    def listed_ranks(self) -> int:
        """How many child ranks the model's parameters list."""

    def tree_walk(self, tree: TokenTree) -> TreeWalk:
        """``sample_tree``'s walk of ``tree``: (rng, batch) -> accepted path lengths, the
        conditionals read once a tree shape (memoised: a policy samples one tree every
        iteration, and the model is frozen)."""
        memo = self.__dict__.setdefault("_walks", {})
        key = tree.parents.tobytes()
        walk = memo.get(key)
        if walk is None:
            if len(memo) >= 64:
                memo.clear()
            walk = memo[key] = tree_walk(tree, self.node_conditionals(tree))
        return walk

    def sample_tree(self, tree, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        """Accepted path length per request: every request walks ``tree`` alike."""
        tree, c, _ = check_tree(tree, contexts, request_ids)
        return self.tree_walk(tree)(rng, c.size)


class TreeAlgorithm(ABC):
    """Acceptance by running a verification algorithm (see the module docstring)."""

    temperature: float  # 0: greedy verification
    tree_method: str    # how a tree is verified at temperature > 0 (mss, naive)

    @abstractmethod
    def check_tree_width(self, tree: TokenTree, *, field: str = "vocab_size") -> None:
        """Raise where ``tree`` cannot be drafted (a node with more children than tokens)."""
