"""Token-tree verification: VerifyGreedy, multi-step speculative sampling, naive sampling.

Every method is a *node schedule*: at a node whose target distribution is ``p``, try the
children in rank order; ``accept[j]`` is P(accept child j | children before it rejected)
and ``stop`` is the distribution of the emitted token when all are rejected (at a leaf:
the bonus token).  One walk (:func:`verify_tree`) samples any schedule and one recursion
(:func:`tree_outcomes`) gives its exact outcome, so enumeration checks what the walk runs.

- ``greedy`` (SpecInfer Algorithm 2, VerifyGreedy): descend into the child equal to
  ``argmax p``, else emit ``argmax p``.
- ``mss`` (multi-step speculative sampling, VerifyStochastic) for children sampled from
  ``q`` *without replacement*: round j tests child j with ``min(1, r(x)/q_j(x))`` where
  ``q_j`` is ``q`` with earlier siblings removed and renormalised; a rejection passes the
  residual ``r <- norm(max(0, r - q_j))`` to the next child; all rejected: sample ``r``.
- ``mss_plain_q``: the same walk with ``q_j = q`` for every child -- SpecInfer's formula
  for children drawn independently.  Over deterministic top-k children it is biased
  (seed 000, section 4.5, TV 0.205): kept as a negative control.
- ``naive`` (naive sampling): sample from ``p``; descend if a child matches.

Arrays may carry a batch axis: ``target_probs``/``draft_probs`` ``(B, n+1, V)`` with row 0
for the root and row i+1 for node i, per-request ``tokens`` ``(B, n)``.  A token of -1 is
a slot the drafter left empty (fewer than k tokens had q > 0): it is never accepted, so
its subtree is never entered.  Siblings must carry distinct tokens
(:func:`simulator.speculation.token_tree.check_distinct_siblings`).

Zero probabilities: a child whose token has ``r(x) = 0`` (the target, or what is left of it,
cannot emit it) is never accepted, also when ``q(x) = 0`` -- 0/0 rejects
(:func:`simulator.speculation.verification.ratio_acceptance`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.speculation.token_tree import TokenTree, check_distinct_siblings
from simulator.speculation.verification import (
    check_probabilities,
    ratio_acceptance,
    residual_distribution,
    sample_categorical,
)


def _gather(probs: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    return np.take_along_axis(probs, np.maximum(tokens, 0)[..., None], axis=-1)[..., 0]


def without_replacement_draft_probs(q, children) -> np.ndarray:
    """Return ``q_j`` per child: ``q`` with earlier children removed, renormalised.

    Shapes: ``q`` (..., V), ``children`` (..., K) with -1 padding -> (..., K, V).
    """
    q = np.asarray(q, dtype=float)
    children = np.asarray(children)
    out = np.empty(children.shape + q.shape[-1:])
    cur = q.copy()
    for j in range(children.shape[-1]):
        total = cur.sum(axis=-1, keepdims=True)
        out[..., j, :] = cur / np.where(total > 0, total, 1.0)
        c = children[..., j]
        hit = (np.arange(q.shape[-1]) == c[..., None]) & (c[..., None] >= 0)
        cur = np.where(hit, 0.0, cur)
    return out


def mss_schedule(p, children, child_draft_probs) -> tuple[np.ndarray, np.ndarray]:
    """Multi-step speculative sampling at one node, each child with its own draft ``q_j``.

    Returns (accept (..., K), stop (..., V)).  ``child_draft_probs`` is (..., K, V): the
    distribution child j was drawn from given the children before it.
    """
    r = np.asarray(p, dtype=float)
    children = np.asarray(children)
    qs = np.asarray(child_draft_probs, dtype=float)
    accept = np.zeros(children.shape)
    for j in range(children.shape[-1]):
        c = children[..., j]
        valid = c >= 0
        qj = qs[..., j, :]
        accept[..., j] = np.where(valid, ratio_acceptance(_gather(r, c), _gather(qj, c)), 0.0)
        r = np.where(valid[..., None], residual_distribution(r, qj), r)
    return accept, r


def naive_schedule(p, children) -> tuple[np.ndarray, np.ndarray]:
    """Naive sampling at one node: P(child j) = p(child j); otherwise the token drawn from p."""
    p = np.asarray(p, dtype=float)
    children = np.asarray(children)
    accept = np.zeros(children.shape)
    left = np.ones(p.shape[:-1])
    rest = p.copy()
    for j in range(children.shape[-1]):
        c = children[..., j]
        valid = c >= 0
        pc = np.where(valid, _gather(p, c), 0.0)
        accept[..., j] = np.where(left > 1e-15, pc / np.where(left > 1e-15, left, 1.0), 0.0)
        left = left - pc
        hit = (np.arange(p.shape[-1]) == c[..., None]) & valid[..., None]
        rest = np.where(hit, 0.0, rest)
    total = rest.sum(axis=-1, keepdims=True)
    stop = np.where(total > 1e-15, rest / np.where(total > 1e-15, total, 1.0), p)
    return np.clip(accept, 0.0, 1.0), stop


def greedy_schedule(p, children) -> tuple[np.ndarray, np.ndarray]:
    """VerifyGreedy at one node: the child equal to argmax p is accepted, else emit argmax p."""
    p = np.asarray(p, dtype=float)
    children = np.asarray(children)
    best = p.argmax(axis=-1)
    accept = ((children == best[..., None]) & (children >= 0)).astype(float)
    stop = (np.arange(p.shape[-1]) == best[..., None]).astype(float)
    return accept, stop


def _mss_rule(p, q, children):
    return mss_schedule(p, children, without_replacement_draft_probs(q, children))


def _mss_plain_rule(p, q, children):
    q = np.asarray(q, dtype=float)
    qs = np.broadcast_to(q[..., None, :], np.shape(children) + q.shape[-1:])
    return mss_schedule(p, children, qs)


TREE_METHODS: dict[str, Callable] = {
    "greedy": lambda p, q, children: greedy_schedule(p, children),
    "mss": _mss_rule,
    "mss_plain_q": _mss_plain_rule,
    "naive": lambda p, q, children: naive_schedule(p, children),
}
NEEDS_DRAFT_PROBS = ("mss", "mss_plain_q")


def tree_method(name: str) -> Callable:
    """Return the node schedule registered as ``name``."""
    try:
        return TREE_METHODS[name]
    except KeyError:
        raise SpecsimError(f"unknown tree verification method {name!r}", field="method",
                           fix="choose one of: " + ", ".join(TREE_METHODS)) from None


@dataclass(frozen=True)
class TreeVerdict:
    """Accepted path length (bonus excluded), last accepted node (-1 = root), next token."""

    accepted: np.ndarray
    last_node: np.ndarray
    next_token: np.ndarray


def _prepare(tree: TokenTree, target_probs, draft_probs, tokens, method: str):
    schedule = tree_method(method)
    if not isinstance(tree, TokenTree):
        raise SpecsimError(f"expected a TokenTree, got {type(tree).__name__}", field="tree")
    p = check_probabilities(target_probs, name="target_probs")
    single = p.ndim == 2
    if single:
        p = p[None]
    n = tree.num_nodes
    if p.ndim != 3 or p.shape[1] != n + 1:
        raise SpecsimError(f"has shape {np.shape(target_probs)}, expected (..., {n + 1}, V): "
                           "one row for the root and one per node", field="target_probs")
    if method in NEEDS_DRAFT_PROBS:
        if draft_probs is None:
            raise SpecsimError(f"method {method!r} needs the draft distributions",
                               field="draft_probs")
        q = check_probabilities(draft_probs, name="draft_probs")
        q = q[None] if q.ndim == 2 else q
        if q.shape != p.shape:
            raise SpecsimError(f"has shape {q.shape}, expected {p.shape}", field="draft_probs")
    else:
        q = p
    given = tokens is not None
    if not given:
        if tree.tokens is None:
            raise SpecsimError("the tree carries no tokens", field="tokens",
                               fix="pass tokens or build the tree with tokens")
        tokens = tree.tokens
    raw = np.asarray(tokens)
    try:
        tok = np.broadcast_to(raw, (p.shape[0], n))
    except ValueError:
        raise SpecsimError(f"has shape {raw.shape}, expected ({n},) or ({p.shape[0]}, {n})",
                           field="tokens") from None
    if not np.issubdtype(tok.dtype, np.integer) or tok.min() < -1 or tok.max() >= p.shape[-1]:
        raise SpecsimError(f"tokens must be integer ids in [0, {p.shape[-1]}) (or -1 for an "
                           f"empty slot)", field="tokens")
    if given:
        check_distinct_siblings(tree.parents, raw)
    return schedule, p, q, tok, single


def _children_tokens(tree: TokenTree, tok: np.ndarray, rows: np.ndarray):
    kids = tree.child_table[rows]                                          # (B, K)
    kid_tok = np.where(kids >= 0, np.take_along_axis(tok, np.maximum(kids, 0), axis=1), -1)
    return kids, kid_tok


def verify_tree(tree: TokenTree, target_probs, rng: np.random.Generator | None,
                method: str, draft_probs=None, tokens=None) -> TreeVerdict:
    """Walk the tree from the root with ``method``'s node schedule, batched over requests."""
    schedule, p, q, tok, single = _prepare(tree, target_probs, draft_probs, tokens, method)
    if rng is None and method != "greedy":  # a 0.5 threshold would silently bias the walk
        raise SpecsimError(f"method {method!r} samples, so it needs a random generator",
                           field="rng", fix="pass a numpy Generator (only greedy takes None)")
    batch = p.shape[0]
    rows = np.zeros(batch, dtype=np.intp)                # row 0 = root, row i+1 = node i
    accepted = np.zeros(batch, dtype=np.intp)
    next_token = np.full(batch, -1, dtype=np.intp)
    active = np.ones(batch, dtype=bool)
    b = np.arange(batch)
    for _ in range(tree.max_depth + 1):
        kids, kid_tok = _children_tokens(tree, tok, rows)
        accept, stop = schedule(p[b, rows], q[b, rows], kid_tok)
        if rng is None:                                  # deterministic (greedy) walk
            ok = accept > 0.5
        else:
            ok = rng.random(accept.shape) < accept
        ok = np.concatenate([ok, np.zeros((batch, 1), dtype=bool)], axis=1)
        first = np.argmin(~ok, axis=1)
        found = ok[b, first]
        descend = active & found
        halt = active & ~found
        if halt.any():
            drawn = stop.argmax(axis=-1) if rng is None else sample_categorical(stop, rng)
            next_token = np.where(halt, drawn, next_token)
        rows = np.where(descend, kids[b, np.minimum(first, kids.shape[1] - 1)] + 1, rows)
        accepted += descend
        active = descend
        if not active.any():
            break
    verdict = TreeVerdict(accepted, rows - 1, next_token)
    if single:
        verdict = TreeVerdict(accepted[0], rows[0] - 1, next_token[0])
    return verdict


def tree_outcomes(tree: TokenTree, target_probs, method: str, draft_probs=None,
                  tokens=None) -> np.ndarray:
    """Exact P(last accepted row r, emitted token t), shape (..., n+1, V); row 0 = root."""
    schedule, p, q, tok, single = _prepare(tree, target_probs, draft_probs, tokens, method)
    batch, rows_n, vocab = p.shape
    reach = np.zeros((batch, rows_n))
    reach[:, 0] = 1.0
    out = np.zeros((batch, rows_n, vocab))
    for row in range(rows_n):                            # depth-first: parents come first
        kids, kid_tok = _children_tokens(tree, tok, np.full(batch, row))
        accept, stop = schedule(p[:, row], q[:, row], kid_tok)
        survive = reach[:, row].copy()
        for j in range(kids.shape[1]):
            valid = kids[:, j] >= 0
            if valid.any():
                node_row = kids[0, j] + 1
                reach[:, node_row] = np.where(valid, survive * accept[:, j], 0.0)
            survive = survive * (1.0 - accept[:, j])
        out[:, row] = survive[:, None] * stop
    return out[0] if single else out


def verify_greedy(tree: TokenTree, target_probs, tokens=None) -> TreeVerdict:
    """VerifyGreedy (SpecInfer Algorithm 2): follow the target's argmax down the tree."""
    return verify_tree(tree, target_probs, None, "greedy", tokens=tokens)


def multi_step_speculative_sampling(tree: TokenTree, target_probs, draft_probs,
                                    rng: np.random.Generator, tokens=None) -> TreeVerdict:
    """MSS for children sampled without replacement from ``draft_probs`` (row per node)."""
    return verify_tree(tree, target_probs, rng, "mss", draft_probs, tokens)


def naive_sampling(tree: TokenTree, target_probs, rng: np.random.Generator,
                   tokens=None) -> TreeVerdict:
    """Naive tree sampling: draw from the target, accept while a child matches."""
    return verify_tree(tree, target_probs, rng, "naive", tokens=tokens)


def mss_over_topk_children(tree: TokenTree, target_probs, draft_probs,
                           rng: np.random.Generator, tokens=None) -> TreeVerdict:
    """WRONG on purpose: SpecInfer's plain-q formula over deterministic top-k children."""
    return verify_tree(tree, target_probs, rng, "mss_plain_q", draft_probs, tokens)
