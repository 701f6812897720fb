"""Token trees for the model-based policies: what drafting one costs, and what one yields.

Cost (DESIGN.md section 5): a drafter builds a tree one forward per level; forward j carries,
per request, the nodes of level j-1 that get children (the root alone first), attending to
the prefix plus the nodes drafted before it.  The target then verifies n nodes + 1 in one
forward, which the engine prices (tree attention: each request's prefix KV is read once).
Medusa heads and EAGLE's fusing fc are priced from the cost model's own operators of a
one-layer model of the same shapes (``square_linear_s``, ``lm_head_s``).

Yield: an acceptance model with tree semantics gives, per node, the probability that it is
accepted given its parent was and its earlier siblings were not.  For the parametric ones
(tree_topk, medusa, sequoia) that depends on depth and rank only, so one (depth, rank) table
of *exclusive* probabilities ranks any candidate node by its path probability (the product
down its path, which is also its contribution to the expected accepted length).  Medusa
picks its candidate tree that way and EAGLE-2 reranks its draft tree that way.  A selected
node always comes with its parent and its earlier-ranked siblings, so the rank a node has in
the pruned tree is the rank the drafter gave it.
"""
from __future__ import annotations

import heapq
from typing import Any, Sequence

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.speculation.token_tree import TokenTree

MAX_TREE_NODES = 256  # the engine keeps per-position counters up to 257


# ---------------------------------------------------------------- drafting cost
def forward_tokens(tree: TokenTree) -> np.ndarray:
    """Tokens each sequential drafting forward carries per request (the root's forward first)."""
    has_child = np.zeros(tree.num_nodes, bool)
    has_child[tree.parents[tree.parents >= 0]] = True
    per_level = np.bincount(tree.depth[has_child], minlength=tree.max_depth)
    return np.concatenate(([1], per_level[1:tree.max_depth])).astype(np.int64)


def level_draft_time(cost, context: np.ndarray, tokens: Sequence[int], *,
                     logits: Sequence[int] | None = None,
                     first_tokens: np.ndarray | None = None) -> float:
    """Seconds of sequential draft forwards over the batch.

    Forward j carries ``tokens[j]`` tokens per request (``first_tokens`` per request for
    j = 0 when given: EAGLE re-reads the tokens the target accepted) and computes
    ``logits[j]`` distributions per request; its context is the prefix plus every token
    the forwards before it added.  ``tokens = [1] * g`` is a draft model's chain of g.
    """
    ctx = np.asarray(context, dtype=np.float64)
    if ctx.size == 0 or len(tokens) == 0:
        return 0.0
    logits = tokens if logits is None else logits
    total, offset = 0.0, np.zeros(ctx.size)
    for j, (t, lg) in enumerate(zip(tokens, logits)):
        new = np.full(ctx.size, float(t))
        start = ctx + offset
        if j == 0 and first_tokens is not None:
            new = np.maximum(np.asarray(first_tokens, np.float64), 1.0)
            start = np.maximum(ctx - (new - 1.0), 0.0)  # those tokens are not in its KV yet
        total += cost.step_time(new, start, np.full(ctx.size, float(lg)))
        offset += float(t)
    return total


def sharded_time(devices: int, size: int, price) -> float:
    """Data parallel over ``devices``: the batch split evenly, the slowest shard's time."""
    if size == 0:
        return 0.0
    shards = [s for s in np.array_split(np.arange(size), min(max(devices, 1), size)) if s.size]
    return max(price(s) for s in shards)


def policy_hardware(ctx):
    """The (overhead-adjusted) profile the scenario's cost models were built on."""
    for cost in (ctx.draft_cost, ctx.target_cost):
        if getattr(cost, "hardware", None) is not None:
            return cost.hardware
    return ctx.hardware


class OperatorPrices:
    """Per-layer seconds of a model's linear operators, from ``cost.breakdown`` (cached)."""

    def __init__(self, cost) -> None:
        self.cost = cost
        m = cost.model
        self._square = m.hidden_size / m.q_size  # o_proj is q x h; a square h x h layer
        self._cache: dict[int, tuple[float, float]] = {}

    def _ops(self, tokens: int) -> tuple[float, float]:
        hit = self._cache.get(tokens)
        if hit is None:
            t = np.array([float(tokens)])
            ops = {op.name: op.time_s for op in
                   self.cost.breakdown(t, np.zeros(1), logits_tokens=t).ops}
            layers = self.cost.model.num_layers
            hit = (ops["o_proj"] / layers * self._square, ops["lm_head"])
            if len(self._cache) > 1024:
                self._cache.clear()
            self._cache[tokens] = hit
        return hit

    def square_linear_s(self, tokens: int) -> float:
        """An h x h linear over ``tokens`` tokens (Medusa's ResBlock; half of EAGLE's fc)."""
        return self._ops(int(tokens))[0] if tokens > 0 else 0.0

    def lm_head_s(self, tokens: int) -> float:
        """An h x vocab linear over ``tokens`` tokens (an LM head)."""
        return self._ops(int(tokens))[1] if tokens > 0 else 0.0


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


# ---------------------------------------------------------------- yield
def has_tree_semantics(model) -> bool:
    """Whether ``model`` can score branching trees (parametric or by running the algorithm)."""
    return hasattr(model, "node_conditionals") or hasattr(model, "tree_method")


def model_width(model, fallback: int) -> int:
    """How many child ranks a parametric model lists (top-k coverage or Sequoia rates)."""
    if hasattr(model, "coverage"):
        return len(model.coverage[0])
    if hasattr(model, "rates") and hasattr(model, "node_conditionals"):
        return len(model.rates)
    return fallback


def exclusive_table(model, depth: int, width: int, *, field: str) -> np.ndarray:
    """Exclusive P(node accepted | parent reached) by (depth - 1, rank) from ``model``.

    Reads ``model.node_conditionals`` on a probe tree whose rank-0 spine has ``width``
    children at every depth; valid for models whose conditionals depend on depth and rank
    only (tree_topk, medusa, sequoia).
    """
    if not hasattr(model, "node_conditionals"):
        raise SpecsimError(f"acceptance model {getattr(model, 'name', model)!r} gives no "
                           "per-node acceptance to rank candidate nodes by", field=field,
                           fix="use tree_topk, medusa or sequoia acceptance")
    parents, cells = [], []

    def grow(parent: int, d: int) -> None:
        for r in range(width):
            parents.append(parent)
            cells.append((d - 1, r))
            if r == 0 and d < depth:
                grow(len(parents) - 1, d + 1)

    grow(-1, 1)
    cond = np.asarray(model.node_conditionals(TokenTree(np.array(parents, np.intp))), float)
    table = np.zeros((depth, width))
    rows, cols = np.array(cells).T
    table[rows, cols] = cond
    survive = np.cumprod(np.concatenate([np.ones((depth, 1)), 1.0 - table[:, :-1]], axis=1),
                         axis=1)
    return table * survive


class PolicyAcceptance:
    """The acceptance model a policy samples from; a policy's own model is bound on first use."""

    def __init__(self, model, source: str, *, bound: bool, num_requests: int = 0,
                 tasks=None) -> None:
        self.model = model
        self.source = source
        self._bound = bound
        self._n = num_requests
        self._tasks = tasks

    def sample(self, tree: TokenTree, batch, num_draft: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
        """Accepted path length per request; requests the engine trimmed to no draft get 0."""
        out = np.zeros(len(batch), np.int64)
        on = num_draft > 0
        if not on.any():
            return out
        if not self._bound:
            self.model = self.model.bind(self._n, rng, self._tasks)
            self._bound = True
        ctx, ids = batch.context[on], batch.request_ids[on]
        if tree.is_chain:
            got = self.model.sample_chain(np.full(ctx.size, tree.num_nodes, np.int64), ctx,
                                          ids, rng)
        else:
            got = self.model.sample_tree(tree, ctx, ids, rng)
        out[on] = got
        return out

    def check_fits(self, tree: TokenTree) -> "PolicyAcceptance":
        """Raise now (not mid-run) if the model cannot draft ``tree`` (token_level: a node
        with more children than the toy vocabulary has tokens)."""
        check = getattr(self.model, "check_tree_width", None)
        if check is not None:
            where = "policy.acceptance" if self.source == "policy.acceptance" else "acceptance"
            check(tree, field=f"{where}.vocab_size")
        return self

    def expected(self, tree: TokenTree) -> float | None:
        """Closed-form expected accepted length of ``tree`` where the model has one."""
        if tree.is_chain:
            return self.model.expected_accepted(tree.num_nodes)
        if hasattr(self.model, "expected_tree_accepted"):
            return float(self.model.expected_tree_accepted(tree))
        return None


def given(raw: dict, spec: dict, name: str) -> str | None:
    """The key under which ``name`` (or one of its aliases) was given in ``raw``, if any."""
    for key in (name,) + spec[name].aliases:
        if key in raw:
            return key
    return None


def check_acceptance_param(out: dict, source: str, prefix: str) -> None:
    """Validate a policy's own ``acceptance`` mapping at parse time."""
    from simulator.acceptance import acceptance_from_config
    if out.get("acceptance") is None:
        return
    try:
        acceptance_from_config(out["acceptance"], source=source)
    except SpecsimError as exc:
        raise SpecsimError(exc.message, source=source,
                           field=prefix + "acceptance" + ("." + exc.field if exc.field else ""),
                           fix=exc.fix) from None


def resolve_acceptance(params: dict, ctx, tree: TokenTree, *, policy: str,
                       conditionals: bool = False, default=None,
                       only: str | None = None) -> PolicyAcceptance:
    """The policy's ``acceptance`` if set; else the scenario's if it can score ``tree``
    (and is the ``only`` model named, when given); else ``default()``; else an error.

    ``conditionals``: the policy ranks nodes itself, so it needs per-node probabilities.
    """
    from simulator.acceptance import acceptance_from_config
    n = len(ctx.workload) if ctx.workload is not None else 0
    tasks = getattr(ctx.workload, "task", None)
    if params.get("acceptance") is not None:
        model = acceptance_from_config(params["acceptance"], source="policy.acceptance")
        return PolicyAcceptance(model, "policy.acceptance", bound=False, num_requests=n,
                                tasks=tasks).check_fits(tree)
    scen = ctx.acceptance
    if scen is not None:
        fits = hasattr(scen, "node_conditionals") if conditionals else \
            (tree.is_chain or has_tree_semantics(scen))
        fits = fits and (only is None or getattr(scen, "name", None) == only)
        if fits:
            return PolicyAcceptance(scen, "scenario", bound=True).check_fits(tree)
    if default is not None:
        model, label = default()
        return PolicyAcceptance(model, label, bound=False, num_requests=n,
                                tasks=tasks).check_fits(tree)
    name = getattr(scen, "name", "none")
    need = "tree_topk, medusa or sequoia" if conditionals else \
        "tree_topk, medusa, sequoia or token_level"
    raise SpecsimError(f"policy {policy!r} drafts a branching tree, and acceptance model "
                       f"{name!r} describes chains only", field="acceptance.model",
                       fix=f"use {need} acceptance, or give the policy its own "
                           f"'acceptance:' mapping")
