"""Vectorised draws shared by the acceptance models: one call per engine iteration.

The engine asks for a whole running batch at once, so every helper here works on arrays of
requests and draws all its uniforms in one ``rng.random`` call.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.speculation.token_tree import TokenTree


def check_batch(gammas, contexts, request_ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (gammas, contexts, request_ids) as arrays of one length; gammas whole and >= 0."""
    g = np.asarray(gammas)
    if g.ndim != 1 or g.dtype.kind not in "iu":  # np.issubdtype(integer), without its layers
        raise SpecsimError(f"must be a 1-D integer array, got {g.dtype} {g.shape}",
                           field="gammas")
    if g.size and np.minimum.reduce(g) < 0:
        raise SpecsimError("draft lengths must be >= 0", field="gammas")
    c = np.asarray(contexts)
    r = np.asarray(request_ids)
    if c.shape != g.shape:
        raise SpecsimError(f"has shape {c.shape}, expected {g.shape}", field="contexts",
                           fix="one context length per request")
    if r.shape != g.shape:
        raise SpecsimError(f"has shape {r.shape}, expected {g.shape}", field="request_ids",
                           fix="one request id per request")
    return g, c, r


def check_tree(tree, contexts, request_ids) -> tuple[TokenTree, np.ndarray, np.ndarray]:
    """Validate a tree call: a TokenTree and equal-length contexts / request ids."""
    if not isinstance(tree, TokenTree):
        raise SpecsimError(f"expected a TokenTree, got {type(tree).__name__}", field="tree")
    c = np.asarray(contexts)
    r = np.asarray(request_ids)
    if c.ndim != 1 or r.shape != c.shape:
        raise SpecsimError(f"contexts {c.shape} and request_ids {r.shape} must be equal 1-D",
                           field="request_ids")
    return tree, c, r


def sample_from_survival(survival: np.ndarray, gammas: np.ndarray,
                         rng: np.random.Generator) -> np.ndarray:
    """Accepted drafts with P(accepted >= k) = survival[k-1], capped at each gamma.

    ``survival`` is shared by the batch and non-increasing; one uniform per request.
    """
    u = rng.random(gammas.shape)
    n = np.searchsorted(-survival, -u, side="left")        # #{k : survival_k > u}
    return np.minimum(n, gammas)


def sample_geometric(alpha: np.ndarray, gammas: np.ndarray,
                     rng: np.random.Generator) -> np.ndarray:
    """Leading successes of i.i.d. Bernoulli(alpha_i) draws, capped at gamma_i.

    P(n >= k) = alpha^k, drawn as floor(log u / log alpha) from one uniform u in (0, 1] per
    request (alpha = 0 gives 0; alpha = 1 gives gamma).  Few numpy calls: this is the
    engine's per-iteration hot path.
    """
    return geometric_counts(rng.random(gammas.shape), alpha, gammas)


def geometric_counts(draws: np.ndarray, alpha: np.ndarray, gammas) -> np.ndarray:
    """``sample_geometric`` given its uniforms ``draws`` (``rng.random``'s, shape (n,), or
    (K, n) for K iterations of the same n requests: the same floats element by element, as
    the engine's chain stretches need, simulator/engine/chain_stretch.py)."""
    u = 1.0 - draws
    with np.errstate(divide="ignore", invalid="ignore"):
        log_alpha = np.log(alpha)
        n = np.log(u) / log_alpha
    n = np.where(log_alpha == 0.0, gammas, n)
    return np.minimum(n, gammas).astype(np.int64)


def geometric_thresholds(alpha: float, gamma: int) -> np.ndarray:
    """``1 - alpha**j`` for j = 1..``gamma``, ascending: a uniform draw ``u`` in [0, 1) gives
    ``#{j : u >= 1 - alpha**j}`` accepted drafts (``searchsorted(u, "right")``), so
    P(>= j accepted) = alpha**j.  In exact arithmetic this is ``geometric_counts``' count,
    ``floor(log(1 - u) / log alpha)`` capped at gamma (log(1 - u) <= j log alpha iff
    1 - u <= alpha**j); in floats the two can differ only for a draw within a rounding of a
    threshold.  Element j does not depend on ``gamma`` (one power each), so a longer list
    extends a shorter one."""
    return 1.0 - float(alpha) ** np.arange(1, int(gamma) + 1, dtype=np.float64)


def geometric_counter(alpha: float, gamma: int):
    """The accepted drafts of requests all drafting ``gamma`` for one ``alpha`` in (0, 1)
    shared by every request, given their uniforms: one binary search each against
    ``geometric_thresholds`` (one numpy call, against five for the logarithm's form: the
    chain stretches count every iteration's acceptances with it); None for another alpha.
    ``IIDAcceptance.sample_chain`` draws by the same thresholds: the same counts."""
    if not 0.0 < alpha < 1.0:
        return None
    search = geometric_thresholds(alpha, gamma).searchsorted

    def counts(draws: np.ndarray, request_ids=None) -> np.ndarray:
        return search(draws, "right")  # intp: int64 on every 64-bit platform
    return counts


def survival_counter(survival: np.ndarray, gamma: int):
    """``sample_from_survival``'s counts of requests all drafting ``gamma`` against
    ``survival``, given its uniforms (any shape): the same search, element by element."""
    neg = -survival

    def counts(draws: np.ndarray, request_ids=None) -> np.ndarray:
        return np.minimum(neg.searchsorted(-draws, "left"), gamma)
    return counts


def sample_leading(success_prob: np.ndarray, gammas: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
    """Leading successes given per-request, per-position probabilities (B, G)."""
    ok = rng.random(success_prob.shape) < success_prob
    ok = np.concatenate([ok, np.zeros((ok.shape[0], 1), dtype=bool)], axis=1)
    return np.minimum(np.argmin(ok, axis=1), gammas).astype(np.int64)


_FEW = 8  # up to this many requests a walk on Python numbers beats a dozen array operations


def walk_tree(tree: TokenTree, cond: np.ndarray, rng: np.random.Generator,
              batch: int) -> np.ndarray:
    """Accepted path lengths for ``batch`` requests verifying ``tree``.

    ``cond`` (n,) or (B, n): P(node accepted | parent accepted and earlier siblings
    rejected).  Children are tried in rank order; the first accepted is followed.
    """
    if np.ndim(cond) == 1:  # every request alike: the tree's walk bound once
        return tree_walk(tree, cond)(rng, batch)
    return _walk_rows(tree.child_table, None, cond, rng, tree.max_depth, batch)


def _walk_rows(table: np.ndarray, by_row: np.ndarray | None, cond: np.ndarray | None,
               rng: np.random.Generator, depth: int, batch: int) -> np.ndarray:
    """The walk on arrays, a level at a time: each walking request's children's
    probabilities from ``by_row`` (every request alike) or from its own ``cond`` row."""
    if by_row is None:
        cond = np.broadcast_to(cond, (batch, table.shape[0] - 1))
    rows = np.zeros(batch, dtype=np.intp)
    accepted = np.zeros(batch, dtype=np.int64)
    active = np.ones(batch, dtype=bool)
    b = np.arange(batch)[:, None]
    for _ in range(depth):
        kids = table[rows]
        probs = by_row[rows] if by_row is not None else \
            np.where(kids >= 0, cond[b, np.maximum(kids, 0)], 0.0)
        ok = rng.random(probs.shape) < probs
        hit = ok.any(axis=1)
        first = np.argmax(ok, axis=1)
        active &= hit
        if not active.any():
            break
        rows = np.where(active, kids[b[:, 0], first] + 1, rows)
        accepted += active
    return accepted


class TreeWalk:
    """``walk_tree`` of one tree with one conditional vector for every request, bound once
    (a policy walks the same tree with the same conditionals every iteration): called with
    (rng, batch), the same draws in the same order (a (batch, width) block of uniforms a
    level, until no request is walking) and the same accepted lengths.

    Up to 8 requests walk on Python numbers, each tree row's children kept as (rank, P,
    next row) for the children a uniform in [0, 1) can accept (P > 0: the others are never
    taken, nor is a child of P NaN); one request walks without lists of requests.  A
    stretch's walks take uniforms drawn ahead instead (``ahead``: no call a level)."""

    def __init__(self, tree: TokenTree, cond: np.ndarray) -> None:
        table = tree.child_table
        self._table, self._depth, self._width = table, tree.max_depth, table.shape[1]
        by_row = np.where(table >= 0, np.asarray(cond, np.float64)[np.maximum(table, 0)], 0.0)
        by_row.flags.writeable = False  # shared by every walk of this tree
        self._by_row = by_row
        self._steps = [tuple((i, p, kid + 1) for i, (kid, p) in enumerate(zip(krow, prow))
                             if kid >= 0 and p > 0.0)
                       for krow, prow in zip(table.tolist(), by_row.tolist())]

    def __call__(self, rng: np.random.Generator, batch: int) -> np.ndarray:
        if batch == 1:
            return self._one(rng)
        if batch <= _FEW:
            return self._few(rng, batch)
        return _walk_rows(self._table, self._by_row, None, rng, self._depth, batch)

    def most(self, batch: int) -> int:
        """The most uniforms a walk of ``batch`` requests takes: a block a level."""
        return self._depth * batch * self._width

    def ahead(self, batch: int) -> Callable[[list, int], tuple[list, int]]:
        """The walk of ``batch`` requests from uniforms drawn ahead: ``walk(draws, at)``,
        where the walk's ``rng.random`` calls would return ``draws[at], draws[at + 1], ...``
        in order (at least ``most(batch)`` of them there), gives the accepted lengths (a
        list of ints: its caller, chain_short.py, keeps a few requests' counts as lists) and
        how many uniforms the walk takes (its levels' blocks).  Request by request: one
        request's path reads its own cells of each level's block, whoever else walks; the
        walk draws a level more than its deepest path, up to the depth (the level where no
        request accepted ends it)."""
        steps, depth, width = self._steps, self._depth, self._width
        stride = batch * width

        def walk(draws: list, at: int) -> tuple[list, int]:
            out, deepest = [], 0
            for pos in range(at, at + stride, width):
                row = n = 0
                while n < depth:
                    for i, p, after in steps[row]:
                        if draws[pos + i] < p:
                            row, n, pos = after, n + 1, pos + stride
                            break
                    else:  # no child accepted: this request's path ends
                        break
                out.append(n)
                if n > deepest:
                    deepest = n
            return out, stride * (depth if deepest + 1 > depth else deepest + 1)  # min's
        return walk

    def _one(self, rng: np.random.Generator) -> np.ndarray:
        steps, width, random = self._steps, self._width, rng.random
        row = accepted = 0
        for _ in range(self._depth):
            draws = random(width).tolist()
            for i, p, after in steps[row]:
                if draws[i] < p:
                    row, accepted = after, accepted + 1
                    break
            else:  # no child accepted: the walk ends, nothing more drawn
                break
        return np.array([accepted], np.int64)

    def _few(self, rng: np.random.Generator, batch: int) -> np.ndarray:
        steps, width, random = self._steps, self._width, rng.random
        rows, accepted, walking = [0] * batch, [0] * batch, range(batch)
        for _ in range(self._depth):
            draws = random(batch * width).tolist()  # the (batch, width) block, row-major
            still = []
            for r in walking:
                at = r * width
                for i, p, after in steps[rows[r]]:
                    if draws[at + i] < p:
                        rows[r] = after
                        accepted[r] += 1
                        still.append(r)
                        break
            if not still:
                break
            walking = still
        return np.array(accepted, np.int64)


_WALKS: dict[tuple, TreeWalk] = {}


def tree_walk(tree: TokenTree, cond: np.ndarray) -> TreeWalk:
    """``tree``'s walk under the conditionals ``cond`` (one vector for every request),
    memoised by value (the same tree and conditionals every iteration)."""
    cond = np.asarray(cond, np.float64)
    key = (tree.parents.tobytes(), cond.tobytes())
    walk = _WALKS.get(key)
    if walk is None:
        if len(_WALKS) >= 64:
            _WALKS.clear()
        walk = _WALKS[key] = TreeWalk(tree, cond)
    return walk


def tree_node_probs(tree: TokenTree, cond: np.ndarray) -> np.ndarray:
    """P(node accepted | parent reached), siblings exclusive, from the conditional ``cond``."""
    cond = np.asarray(cond, dtype=float)
    out = np.empty(tree.num_nodes)
    survive: dict[int, float] = {}
    for i, parent in enumerate(tree.parents):
        left = survive.get(int(parent), 1.0)
        out[i] = left * cond[i]
        survive[int(parent)] = left * (1.0 - cond[i])
    return out


def chain_depth(tree, model: str) -> int:
    """The number of drafts in a chain-shaped tree; a branching tree is an error."""
    if not isinstance(tree, TokenTree):
        raise SpecsimError(f"expected a TokenTree, got {type(tree).__name__}", field="tree")
    if not tree.is_chain:
        raise SpecsimError(
            f"acceptance model {model!r} has no tree semantics (it describes one draft per "
            "position, not siblings)", field="acceptance.model",
            fix="use 'tree_topk', 'medusa', 'sequoia' or 'token_level' for branching trees")
    return tree.num_nodes


def sample_chain_tree(model, tree, contexts, request_ids,
                      rng: np.random.Generator) -> np.ndarray:
    """``model.sample_chain`` over a chain-shaped ``tree`` (models with no tree semantics)."""
    tree, c, r = check_tree(tree, contexts, request_ids)
    depth = chain_depth(tree, model.name)
    return model.sample_chain(np.full(c.shape, depth), c, r, rng)
