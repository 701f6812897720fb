"""Vectorised draws shared by the acceptance models: one call per engine iteration.

The engine asks for a whole running batch at once, so every helper here works on arrays of
requests and draws all its uniforms in one ``rng.random`` call.
"""
from __future__ import annotations

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
    table = tree.child_table
    alike = np.ndim(cond) == 1
    if alike:  # every request alike: each tree row's children's probabilities
        by_row, kids, probs = _children_probs(table, np.asarray(cond, np.float64))
        if batch <= _FEW:
            return _walk_few(kids, probs, rng, tree.max_depth, batch)
    cond = np.broadcast_to(cond, (batch, tree.num_nodes))
    rows = np.zeros(batch, dtype=np.intp)
    accepted = np.zeros(batch, dtype=np.int64)
    active = np.ones(batch, dtype=bool)
    b = np.arange(batch)[:, None]
    for _ in range(tree.max_depth):
        kids = table[rows]
        probs = by_row[rows] if alike else \
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


_CHILDREN: dict[tuple, tuple[np.ndarray, list, list]] = {}


def _children_probs(table: np.ndarray, cond: np.ndarray) -> tuple[np.ndarray, list, list]:
    """Each tree row's children's probabilities (0 where no child), and the child table and
    those as lists; memoised by value (a policy walks the same tree with the same
    conditionals every iteration)."""
    key = (table.shape, table.tobytes(), cond.tobytes())
    hit = _CHILDREN.get(key)
    if hit is None:
        by_row = np.where(table >= 0, cond[np.maximum(table, 0)], 0.0)
        by_row.flags.writeable = False  # shared by every walk of this tree
        if len(_CHILDREN) >= 64:
            _CHILDREN.clear()
        hit = _CHILDREN[key] = (by_row, table.tolist(), by_row.tolist())
    return hit


def _walk_few(kids: list, probs: list, rng: np.random.Generator, depth: int,
              batch: int) -> np.ndarray:
    """``walk_tree`` of a few requests alike, on Python numbers (``kids``, ``probs``: the
    child table and its probabilities as lists): the same draws (a row of the children's
    count per request per level, until no request is walking), a request stopping at its
    first level that accepts none."""
    width = len(kids[0])
    rows, accepted, active = [0] * batch, [0] * batch, [True] * batch
    for _ in range(depth):
        draws = rng.random((batch, width)).tolist()
        for r in range(batch):
            if not active[r]:
                continue
            first = next((i for i, (u, p) in enumerate(zip(draws[r], probs[rows[r]]))
                          if u < p), None)
            if first is None:
                active[r] = False
            else:
                rows[r] = kids[rows[r]][first] + 1
                accepted[r] += 1
        if not any(active):
            break
    return np.array(accepted, np.int64)


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
