"""Token-tree shapes: chains, parallel chains, trees from Medusa-style choice lists or
parent/rank arrays, and the trees that maximise the expected accepted length for a table of
exclusive acceptance probabilities (Sequoia's static best tree, EAGLE-2's dynamic tree)."""
from __future__ import annotations

import heapq
from typing import Any, Sequence

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.speculation.token_tree import TokenTree

MAX_TREE_NODES = 256  # the engine keeps per-position counters up to 257


# ---------------------------------------------------------------- tree shapes
def chain_tree(length: int) -> TokenTree:
    """A chain of ``length`` drafts."""
    return TokenTree(np.arange(length) - 1)


def parallel_chains(count: int, length: int) -> TokenTree:
    """``count`` chains of ``length`` hanging from the root (merged drafts, nothing shared)."""
    one = np.arange(length) - 1
    return TokenTree(np.concatenate([np.where(one < 0, -1, one + c * length)
                                     for c in range(count)]))


def from_parent_ranks(parent: Sequence[int], rank: Sequence[int]) -> TokenTree:
    """Nodes given in any order with parent indices (-1 root) and ranks -> depth-first tree."""
    kids: dict[int, list[tuple[int, int]]] = {}
    for i, (p, r) in enumerate(zip(parent, rank)):
        kids.setdefault(int(p), []).append((int(r), i))
    parents: list[int] = []

    def walk(node: int, new_index: int) -> None:
        for _, child in sorted(kids.get(node, [])):
            parents.append(new_index)
            walk(child, len(parents) - 1)

    walk(-1, -1)
    return TokenTree(np.array(parents, dtype=np.intp))


def tree_from_choices(choices: Any, *, field: str) -> TokenTree:
    """Medusa/EAGLE ``choices`` -- each a path of child ranks, e.g. [[0], [0, 0], [1]]."""
    fix = "list paths of child ranks, e.g. [[0], [0, 0], [1]]"
    if isinstance(choices, (str, bytes, dict)) or not hasattr(choices, "__iter__"):
        raise SpecsimError("expected a list of paths", field=field, fix=fix)
    paths: dict[tuple[int, ...], int] = {}
    for i, path in enumerate(choices):
        if isinstance(path, (str, bytes, dict)) or not hasattr(path, "__iter__"):
            raise SpecsimError(f"entry {i} is not a list of ranks", field=f"{field}[{i}]", fix=fix)
        p = tuple(path)
        if not p or any(isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 0
                        for r in p):
            raise SpecsimError(f"entry {i} must be a non-empty list of whole numbers >= 0",
                               field=f"{field}[{i}]", fix=fix)
        if p in paths:
            raise SpecsimError(f"path {list(p)} is listed twice", field=f"{field}[{i}]")
        paths[tuple(int(r) for r in p)] = i
    if not paths:
        raise SpecsimError("is empty", field=field, fix=fix)
    if len(paths) > MAX_TREE_NODES:
        raise SpecsimError(f"{len(paths)} nodes; at most {MAX_TREE_NODES}", field=field)
    order = sorted(paths)
    index = {p: i for i, p in enumerate(order)}
    for p in order:
        for need in ([p[:-1]] if len(p) > 1 else []) + ([p[:-1] + (p[-1] - 1,)] if p[-1] else []):
            if need not in index:
                raise SpecsimError(f"path {list(p)} needs {list(need)} (its parent, or the "
                                   "sibling ranked just before it)", field=field, fix=fix)
    return from_parent_ranks([index[p[:-1]] if len(p) > 1 else -1 for p in order],
                             [p[-1] for p in order])


def expected_from_table(tree: TokenTree, exclusive: np.ndarray) -> float:
    """Expected accepted length: sum over nodes of the product of exclusive probabilities."""
    probs = exclusive[tree.depth - 1, tree.child_rank]
    reach = np.empty(tree.num_nodes)
    for i, p in enumerate(tree.parents):
        reach[i] = probs[i] * (1.0 if p < 0 else reach[p])
    return float(reach.sum())


def best_tree(exclusive: np.ndarray, budget: int) -> TokenTree:
    """The ``budget`` nodes of highest path probability (Medusa's candidate tree).

    Candidates are every path of ranks < width and depth <= rows of ``exclusive`` (the
    Cartesian product of the heads' top-k); found best-first, so the full product is never
    built.  A node's key is capped by its parent's and its previous sibling's keys.
    """
    depth_max, width = exclusive.shape
    heap = [(-float(exclusive[0, 0]), 0, 1, 0, -1, float(exclusive[0, 0]))]
    parent, rank, value, key = [], [], [], []
    seq = 1
    while heap and len(parent) < budget:
        neg_key, _, d, r, p, v = heapq.heappop(heap)
        me = len(parent)
        parent.append(p), rank.append(r), value.append(v), key.append(-neg_key)
        pushes = []
        if d < depth_max:
            pushes.append((d + 1, 0, me, v * exclusive[d, 0]))
        if r + 1 < width:
            base = 1.0 if p < 0 else value[p]
            pushes.append((d, r + 1, p, base * exclusive[d - 1, r + 1]))
        for nd, nr, np_, nv in pushes:
            heapq.heappush(heap, (-min(float(nv), -neg_key), seq, nd, nr, np_, float(nv)))
            seq += 1
    return from_parent_ranks(parent, rank)


def dynamic_tree(exclusive: np.ndarray, steps: int, topk: int, budget: int) -> TokenTree:
    """EAGLE-2's draft tree: expand the top-k nodes per depth, then keep the top ``budget``.

    Depth 1 holds the root's top-k children; each later step gives each of the previous
    depth's ``topk`` best nodes (by path probability) its top-k children.  Reranking keeps
    the ``budget`` best of all the candidates.
    """
    parent, rank, key = [], [], []
    frontier = [(-1, 1.0, 1.0)]                        # (node, value, key)
    for d in range(1, steps + 1):
        born = []
        for node, v, k in frontier:
            prev_key = k
            for r in range(topk):
                nv = v * float(exclusive[d - 1, r])
                prev_key = min(prev_key, nv)
                parent.append(node), rank.append(r), key.append(prev_key)
                born.append((len(parent) - 1, nv, prev_key))
        born.sort(key=lambda b: (-b[2], b[0]))
        frontier = born[:topk]
    chosen = sorted(sorted(range(len(key)), key=lambda i: (-key[i], i))[:budget])
    remap = {old: new for new, old in enumerate(chosen)}
    return from_parent_ranks([remap[parent[i]] if parent[i] >= 0 else -1 for i in chosen],
                             [rank[i] for i in chosen])


def check_expansion_size(config, *, source: str, field: str) -> None:
    """Reject an expansion <k1, k2, ...> whose tree is larger than MAX_TREE_NODES."""
    nodes = int(np.cumprod(config, dtype=float).sum())
    if nodes > MAX_TREE_NODES:
        raise SpecsimError(f"the tree has {nodes} nodes; at most {MAX_TREE_NODES}",
                           source=source, field=field, fix="use fewer or narrower levels")


def check_tree_size(tree: TokenTree, field: str) -> TokenTree:
    """Reject trees larger than the engine's per-position counters."""
    if tree.num_nodes > MAX_TREE_NODES:
        raise SpecsimError(f"the tree has {tree.num_nodes} nodes; at most {MAX_TREE_NODES}",
                           field=field, fix="use a smaller tree")
    return tree
