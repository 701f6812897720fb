"""SpecInfer token trees: construction, depth-first linearisation, tree-attention inputs.

A tree stores only its drafted nodes, in depth-first order (every ancestor comes before its
descendants, a subtree is contiguous); the root is the last verified token and is not a
node.  ``parents[i]`` is the index of node i's parent, -1 for a child of the root, and a
node's rank is its position among its siblings (the order the drafter proposed them).

Construction (SpecInfer, Miao et al. ASPLOS 2024, section 3): merge-based from several
drafts' sequences (a shared prefix stored once, Definition 3.2) and expansion-based from a
configuration <k1, k2, ...> (k_d children for every node at depth d-1).  Tree attention
(Definition 4.1) needs the topology-aware causal mask (a node sees itself and its
ancestors) and position ids by depth.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterable, Sequence

import numpy as np

from simulator.inputs.errors import SpecsimError


def check_expansion_config(config: Sequence[int], *, name: str = "config") -> tuple[int, ...]:
    """Validate an expansion configuration <k1, k2, ...>: non-empty, whole numbers >= 1."""
    if isinstance(config, (str, bytes)) or not isinstance(config, Iterable):
        raise SpecsimError(f"expected a list of child counts, got {config!r}", field=name,
                           fix="write e.g. [2, 2, 1]")
    values = list(config)
    if not values:
        raise SpecsimError("is empty: a tree needs at least one level", field=name,
                           fix="write e.g. [2, 2, 1]")
    out = []
    for depth, k in enumerate(values, start=1):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise SpecsimError(f"level {depth} has {k!r} children; every level needs a whole "
                               f"number >= 1", field=name, fix="write e.g. [2, 2, 1]")
        out.append(int(k))
    return tuple(out)


def check_distinct_siblings(parents: np.ndarray, tokens, *, field: str = "tokens") -> None:
    """Raise unless no two children of one node carry the same token id.

    ``tokens`` is ``(n,)`` or per request ``(B, n)``; -1 marks a slot the drafter left
    empty and is ignored.  Two siblings with one token are one candidate counted twice:
    multi-step speculative sampling would test it again against a draft distribution it
    was already removed from, and naive sampling would count its target mass twice.
    """
    tok = np.asarray(tokens)
    if tok.size == 0:
        return
    tok = tok.reshape(-1, tok.shape[-1]).astype(np.int64)
    par = np.asarray(parents, dtype=np.int64)
    if not np.any(np.bincount(par + 1) > 1):
        return                                       # a chain: no node has two children
    width = int(tok.max()) + 2
    key = np.where(tok >= 0, (par + 1) * width + tok, -1 - np.arange(tok.shape[-1]))
    key = np.sort(key, axis=-1)
    twin = (key[:, 1:] == key[:, :-1]) & (key[:, 1:] >= 0)
    if twin.any():
        row, col = np.argwhere(twin)[0]
        k = int(key[row, col + 1])
        parent, token = k // width - 1, k % width
        where = "the root" if parent < 0 else f"node {parent}"
        batch = f" (request row {row})" if np.ndim(tokens) > 1 else ""
        raise SpecsimError(f"two children of {where} carry token {token}{batch}; siblings "
                           f"must be distinct tokens, or multi-step speculative sampling and "
                           f"naive sampling count that token twice", field=field,
                           fix="merge the duplicates into one node (TokenTree.from_sequences "
                               "does), or draw children without replacement")


@dataclass(frozen=True)
class TokenTree:
    """A token tree in depth-first order; ``tokens`` is None for a shape-only tree."""

    parents: np.ndarray
    tokens: np.ndarray | None = None
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parents = np.asarray(self.parents)
        if parents.ndim != 1 or parents.size == 0:
            raise SpecsimError("a token tree needs at least one drafted node", field="tree",
                               fix="give a non-empty tree")
        if not np.issubdtype(parents.dtype, np.integer):
            raise SpecsimError(f"parents must be integers, got {parents.dtype}", field="parents")
        idx = np.arange(parents.size)
        if np.any(parents < -1) or np.any(parents >= idx):
            raise SpecsimError("every parent must come before its child (depth-first order)",
                               field="parents", fix="use -1 for children of the root")
        parents = parents.astype(np.intp)
        # Depth-first order: node i+1 is a child of node i or of one of i's ancestors.
        for i in range(1, parents.size):
            p, a = parents[i], i - 1
            while a != p and a != -1:
                a = parents[a]
            if a != p:
                raise SpecsimError(f"node {i} breaks depth-first order", field="parents",
                                   fix="list every subtree contiguously")
        parents.setflags(write=False)
        object.__setattr__(self, "parents", parents)
        if self.tokens is not None:
            tokens = np.asarray(self.tokens)
            if tokens.shape != parents.shape or not np.issubdtype(tokens.dtype, np.integer):
                raise SpecsimError(f"tokens must be {parents.size} integers", field="tokens")
            tokens = tokens.astype(np.intp)
            check_distinct_siblings(parents, tokens)
            tokens.setflags(write=False)
            object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "_hash", hash(parents.tobytes()))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TokenTree):
            return NotImplemented
        same_tokens = (self.tokens is None and other.tokens is None) or (
            self.tokens is not None and other.tokens is not None
            and np.array_equal(self.tokens, other.tokens))
        return np.array_equal(self.parents, other.parents) and same_tokens

    # ---- construction ----
    @classmethod
    def chain(cls, gamma: int) -> "TokenTree":
        """Return the shape of a chain of ``gamma`` drafts."""
        check_expansion_config([gamma], name="gamma")
        return cls(np.arange(gamma) - 1)

    @classmethod
    def from_config(cls, config: Sequence[int]) -> "TokenTree":
        """Return the shape-only tree of an expansion configuration <k1, k2, ...>."""
        config = check_expansion_config(config)
        return cls._expand(config, lambda path, k: [-1] * k, keep_tokens=False)

    @classmethod
    def from_expansion(cls, config: Sequence[int],
                       propose: Callable[[tuple[int, ...], int], Sequence[int]]) -> "TokenTree":
        """Expansion-based construction: ``propose(path, k)`` gives a node's k children.

        ``path`` is the tuple of tokens from the root's first child down to the node (empty
        at the root).  Use :func:`top_k_children` for greedy verification and
        :func:`sample_children` (without replacement) for stochastic verification.
        """
        return cls._expand(check_expansion_config(config), propose, keep_tokens=True)

    @classmethod
    def _expand(cls, config, propose, *, keep_tokens: bool) -> "TokenTree":
        parents: list[int] = []
        tokens: list[int] = []

        def grow(node: int, path: tuple[int, ...], depth: int) -> None:
            if depth == len(config):
                return
            children = [int(t) for t in propose(path, config[depth])]
            if keep_tokens:
                # A drafter may offer fewer than k tokens (its support is smaller); -1 pads.
                children = [t for t in children if t >= 0]
                if len(children) > config[depth]:
                    raise SpecsimError(f"propose gave {len(children)} children at depth "
                                       f"{depth + 1}, more than {config[depth]}",
                                       field="propose")
            for tok in children:
                parents.append(node)
                tokens.append(tok)
                grow(len(parents) - 1, path + (tok,), depth + 1)

        grow(-1, (), 0)
        return cls(np.array(parents, dtype=np.intp),
                   np.array(tokens, dtype=np.intp) if keep_tokens else None)

    @classmethod
    def from_sequences(cls, sequences: Sequence[Sequence[int]]) -> "TokenTree":
        """Merge-based construction: several drafts' sequences, shared prefixes stored once."""
        if isinstance(sequences, (str, bytes)) or not isinstance(sequences, Iterable):
            raise SpecsimError("expected a list of token sequences", field="sequences")
        seqs = [list(s) for s in sequences]
        if not seqs or any(len(s) == 0 for s in seqs):
            raise SpecsimError("needs at least one non-empty sequence", field="sequences",
                               fix="give each draft's tokens, e.g. [[3, 1], [3, 4, 2]]")
        trie: dict = {}
        for seq in seqs:
            level = trie
            for tok in seq:
                if isinstance(tok, bool) or not isinstance(tok, (int, np.integer)):
                    raise SpecsimError(f"token {tok!r} is not an integer id", field="sequences")
                level = level.setdefault(int(tok), {})
        parents: list[int] = []
        tokens: list[int] = []

        def walk(level: dict, node: int) -> None:
            for tok, sub in level.items():                 # insertion order = draft order
                parents.append(node)
                tokens.append(tok)
                walk(sub, len(parents) - 1)

        walk(trie, -1)
        return cls(np.array(parents, dtype=np.intp), np.array(tokens, dtype=np.intp))

    def with_tokens(self, tokens) -> "TokenTree":
        """Return the same shape carrying ``tokens``."""
        return TokenTree(self.parents, np.asarray(tokens))

    # ---- structure ----
    @property
    def num_nodes(self) -> int:
        return int(self.parents.size)

    @cached_property
    def depth(self) -> np.ndarray:
        """Depth of each node (children of the root have depth 1)."""
        d = np.zeros(self.num_nodes, dtype=np.intp)
        for i, p in enumerate(self.parents):
            d[i] = 1 if p < 0 else d[p] + 1
        return d

    @property
    def max_depth(self) -> int:
        return int(self.depth.max())

    @cached_property
    def child_rank(self) -> np.ndarray:
        """Position of each node among its siblings (0 = first proposed)."""
        rank = np.zeros(self.num_nodes, dtype=np.intp)
        seen: dict[int, int] = {}
        for i, p in enumerate(self.parents):
            rank[i] = seen.get(int(p), 0)
            seen[int(p)] = rank[i] + 1
        return rank

    @cached_property
    def child_table(self) -> np.ndarray:
        """Children of the root (row 0) and of node i (row i+1), in rank order, -1 padded."""
        counts = np.bincount(self.parents + 1, minlength=self.num_nodes + 1)
        table = np.full((self.num_nodes + 1, max(int(counts.max()), 1)), -1, dtype=np.intp)
        table[self.parents + 1, self.child_rank] = np.arange(self.num_nodes)
        return table

    def children(self, node: int) -> np.ndarray:
        """Children of ``node`` (-1 for the root) in rank order."""
        row = self.child_table[node + 1]
        return row[row >= 0]

    @cached_property
    def is_chain(self) -> bool:
        return bool(np.array_equal(self.parents, np.arange(self.num_nodes) - 1))

    @property
    def leaves(self) -> np.ndarray:
        has_child = np.zeros(self.num_nodes, dtype=bool)
        has_child[self.parents[self.parents >= 0]] = True
        return np.flatnonzero(~has_child)

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root's child down to ``node``."""
        out = []
        while node >= 0:
            out.append(int(node))
            node = int(self.parents[node])
        return out[::-1]

    def paths(self) -> list[list[int]]:
        """Every root-to-leaf path as node indices."""
        return [self.path_to(leaf) for leaf in self.leaves]

    # ---- tree attention ----
    def attention_mask(self) -> np.ndarray:
        """Topology-aware causal mask: ``mask[i, j]`` iff node j is node i or its ancestor.

        The verified prefix (the KV cache) is visible to every node and is not included.
        """
        n = self.num_nodes
        mask = np.eye(n, dtype=bool)
        for i in range(n):
            p = self.parents[i]
            if p >= 0:
                mask[i] |= mask[p]
        return mask

    def position_ids(self, start: int = 0) -> np.ndarray:
        """Position ids by depth: the root sits at ``start``, a depth-d node at start + d."""
        return start + self.depth


def top_k_children(q, k: int) -> np.ndarray:
    """The k most probable tokens of ``q`` (last axis), most probable first.

    Right for greedy verification; stochastic verification needs :func:`sample_children`.
    """
    q = np.asarray(q, dtype=float)
    k = check_expansion_config([k], name="k")[0]
    order = np.argsort(-q, axis=-1, kind="stable")[..., :k]
    return np.where(np.take_along_axis(q, order, axis=-1) > 0, order, -1)


def sample_children(q, k: int, rng: np.random.Generator) -> np.ndarray:
    """Sample k tokens from ``q`` without replacement, in draw order (-1 past q's support).

    Gumbel-top-k: sorting ``log q + Gumbel`` gives exactly the order of successive draws
    from q renormalised after each removal, which is what multi-step speculative sampling
    assumes (seed 000, section 4.5).
    """
    q = np.asarray(q, dtype=float)
    k = check_expansion_config([k], name="k")[0]
    with np.errstate(divide="ignore"):
        keys = np.log(q) - np.log(-np.log(1.0 - rng.random(q.shape)))
    order = np.argsort(-keys, axis=-1, kind="stable")[..., :k]
    return np.where(np.take_along_axis(q, order, axis=-1) > 0, order, -1)
