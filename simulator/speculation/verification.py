"""Chain verification rules over explicit probability vectors: correct ones and known bugs.

A rule turns one speculative iteration -- drafts ``x_1..x_gamma`` drawn from ``q_1..q_gamma``
and the target's ``p_1..p_{gamma+1}`` -- into a :class:`ChainVerdict`: the probability of
accepting draft ``i`` once drafts ``1..i-1`` were accepted, and the distribution of the token
emitted when the walk stops at ``i`` (the correction on a rejection, the bonus token after
the last draft).  The sampler (:func:`sample_verdict`) and the exact outcome
(:func:`verdict_outcomes`) both read the same verdict, so exact enumeration checks the very
rule that the sampler runs.

Rules (Leviathan et al. 2023, Algorithm 1; the seeds' list of wrong implementations):

- ``speculative_sampling``: accept with ``min(1, p/q)``, correct from ``norm(max(0, p - q))``,
  bonus from ``p_{gamma+1}``.  Lossless.
- ``greedy_verification``: accept iff the draft is ``argmax p``; correct/bonus with
  ``argmax p``.  Reproduces the target's greedy decoding.
- Wrong on purpose (negative controls): ``greedy_rule_under_sampling`` (argmax test, then
  sample ``p``), ``resample_from_target`` (no residual: correct from ``p``),
  ``discard_on_reject`` (no resampling at all: a rejection emits nothing),
  ``accept_first_unconditionally`` (draft 1 always kept).

Arrays carry leading batch axes: drafts ``(..., G)``, ``q`` ``(..., G, V)``, ``p``
``(..., G+1, V)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from simulator.inputs.errors import SpecsimError

PROB_ATOL = 1e-6


def check_probabilities(probs, *, name: str, atol: float = PROB_ATOL) -> np.ndarray:
    """Return ``probs`` as float array; raise unless every last-axis row is a distribution."""
    arr = np.asarray(probs, dtype=float)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise SpecsimError("needs at least one probability along the last axis", field=name,
                           fix="pass an array of shape (..., vocab_size)")
    if not np.all(np.isfinite(arr)):
        raise SpecsimError("contains NaN or infinity", field=name,
                           fix="pass finite probabilities")
    if np.any(arr < 0):
        raise SpecsimError(f"has a negative entry ({arr.min():.3g})", field=name,
                           fix="probabilities must be >= 0")
    sums = arr.sum(axis=-1)
    worst = float(np.max(np.abs(sums - 1.0))) if sums.size else 0.0
    if worst > atol:
        raise SpecsimError(f"rows must sum to 1, one is off by {worst:.3g}", field=name,
                           fix=f"normalise each row (tolerance {atol:g})")
    return arr


def _check_tokens(tokens, *, name: str, shape: tuple[int, ...], vocab_size: int) -> np.ndarray:
    arr = np.asarray(tokens)
    if arr.shape != shape:
        raise SpecsimError(f"has shape {arr.shape}, expected {shape}", field=name,
                           fix="one token id per draft position")
    if not np.issubdtype(arr.dtype, np.integer):
        raise SpecsimError(f"must hold integer token ids, got {arr.dtype}", field=name)
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):
        raise SpecsimError(f"token ids must lie in [0, {vocab_size})", field=name)
    return arr.astype(np.intp, copy=False)


def acceptance_rate(p, q) -> np.ndarray:
    """Return ``beta = sum_x min(p, q) = 1 - TV(p, q)`` (Leviathan et al., Theorem 3.5)."""
    p = check_probabilities(p, name="p")
    q = check_probabilities(q, name="q")
    if p.shape != q.shape:
        raise SpecsimError(f"p has shape {p.shape} but q has {q.shape}", field="q",
                           fix="give p and q over the same vocabulary and batch")
    return np.minimum(p, q).sum(axis=-1)


def residual_distribution(p, q) -> np.ndarray:
    """Return ``norm(max(0, p - q))``; where ``p == q`` (never rejected) return ``p``."""
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    if p.shape != q.shape:
        raise SpecsimError(f"p has shape {p.shape} but q has {q.shape}", field="q",
                           fix="give p and q over the same vocabulary and batch")
    diff = np.maximum(p - q, 0.0)
    total = diff.sum(axis=-1, keepdims=True)
    # A residual with (almost) no mass is only reached with (almost) zero probability;
    # falling back to p keeps it a distribution without changing any outcome.
    safe = total > 1e-15
    return np.where(safe, diff / np.where(safe, total, 1.0), p)


def ratio_acceptance(p_x, q_x) -> np.ndarray:
    """Return ``min(1, p(x)/q(x))``: 0 wherever ``p(x) = 0``, 0/0 included; 1 where
    ``q(x) = 0 < p(x)``.

    A token the target gives no mass must never be emitted, so ``p(x) = q(x) = 0`` rejects
    (min(1, 0/0) is undefined, and taking it as 1 would emit an impossible token).  A token
    with ``q(x) = 0`` cannot have been drawn from q, so the value there changes no outcome
    of a correct drafter; the limit q -> 0+ (accept) is kept for ``p(x) > 0``.
    """
    p_x = np.asarray(p_x, dtype=float)
    q_x = np.asarray(q_x, dtype=float)
    p_x, q_x = np.broadcast_arrays(p_x, q_x)
    # Divide only where p < q (so q > 0 and the ratio is below 1): no overflow, no 0/0.
    out = np.array(p_x > 0, dtype=float)
    return np.divide(p_x, q_x, out=out, where=p_x < q_x)


@dataclass(frozen=True)
class ChainVerdict:
    """What a rule decided: conditional accept probabilities and the stop distributions.

    ``accept[..., i]`` is P(accept draft i | drafts before it accepted); ``stop[..., i, :]``
    is the distribution of the token emitted when the walk stops at position i (after i
    accepted drafts); ``emits[..., i]`` is False where stopping at i emits nothing (the
    ``discard_on_reject`` bug).
    """

    accept: np.ndarray
    stop: np.ndarray
    emits: np.ndarray


def _inputs(draft_tokens, draft_probs, target_probs, num_drafts, *, needs_q: bool = True):
    p = check_probabilities(target_probs, name="target_probs")
    if p.ndim < 2:
        raise SpecsimError("needs shape (..., gamma + 1, vocab_size)", field="target_probs")
    gamma = p.shape[-2] - 1
    batch = p.shape[:-2]
    vocab = p.shape[-1]
    x = _check_tokens(draft_tokens, name="draft_tokens", shape=batch + (gamma,),
                      vocab_size=vocab)
    q = None
    if draft_probs is None and needs_q:
        raise SpecsimError("this rule tests each draft against the draft's own distribution",
                           field="draft_probs", fix="pass the draft probabilities q")
    if draft_probs is not None:
        q = check_probabilities(draft_probs, name="draft_probs")
        if q.shape != batch + (gamma, vocab):
            raise SpecsimError(f"has shape {q.shape}, expected {batch + (gamma, vocab)}",
                               field="draft_probs",
                               fix="one draft distribution per draft position")
    if num_drafts is None:
        nd = np.full(batch, gamma, dtype=np.intp)
    else:
        nd = np.broadcast_to(np.asarray(num_drafts), batch).astype(np.intp)
        if nd.size and (nd.min() < 0 or nd.max() > gamma):
            raise SpecsimError(f"must lie in [0, {gamma}]", field="num_drafts")
    return x, q, p, nd


def _token_prob(probs: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    return np.take_along_axis(probs, tokens[..., None], axis=-1)[..., 0]


def _one_hot_argmax(p: np.ndarray) -> np.ndarray:
    return (np.arange(p.shape[-1]) == p.argmax(axis=-1)[..., None]).astype(float)


def _finish(accept, reject_stop, bonus, nd, emits_on_reject: bool) -> ChainVerdict:
    """Assemble a verdict; positions at or past ``num_drafts`` stop with the bonus row."""
    gamma = accept.shape[-1]
    pos = np.arange(gamma + 1)
    exhausted = pos >= nd[..., None]                                   # (..., G+1)
    accept = np.where(exhausted[..., :gamma], 0.0, accept)
    padded = np.concatenate([reject_stop, bonus[..., -1:, :]], axis=-2)
    stop = np.where(exhausted[..., None], bonus, padded)
    emits = exhausted | emits_on_reject
    return ChainVerdict(accept=accept, stop=stop, emits=emits)


def speculative_sampling_verdict(draft_tokens, draft_probs, target_probs,
                                 num_drafts=None) -> ChainVerdict:
    """Leviathan's rule: accept with min(1, p/q), correct from the residual, bonus from p."""
    x, q, p, nd = _inputs(draft_tokens, draft_probs, target_probs, num_drafts)
    gamma = x.shape[-1]
    acc = ratio_acceptance(_token_prob(p[..., :gamma, :], x), _token_prob(q, x))
    return _finish(acc, residual_distribution(p[..., :gamma, :], q), p, nd, True)


def greedy_verdict(draft_tokens, draft_probs, target_probs, num_drafts=None) -> ChainVerdict:
    """Greedy verification: accept iff the draft is argmax p; emit argmax p otherwise."""
    x, _, p, nd = _inputs(draft_tokens, draft_probs, target_probs, num_drafts,
                          needs_q=False)
    gamma = x.shape[-1]
    best = _one_hot_argmax(p)
    acc = (x == p[..., :gamma, :].argmax(axis=-1)).astype(float)
    return _finish(acc, best[..., :gamma, :], best, nd, True)


def greedy_rule_under_sampling_verdict(draft_tokens, draft_probs, target_probs,
                                       num_drafts=None) -> ChainVerdict:
    """WRONG: the greedy argmax test used while sampling; rejections sample p."""
    x, _, p, nd = _inputs(draft_tokens, draft_probs, target_probs, num_drafts,
                          needs_q=False)
    gamma = x.shape[-1]
    acc = (x == p[..., :gamma, :].argmax(axis=-1)).astype(float)
    return _finish(acc, p[..., :gamma, :], p, nd, True)


def resample_from_target_verdict(draft_tokens, draft_probs, target_probs,
                                 num_drafts=None) -> ChainVerdict:
    """WRONG: no residual -- a rejection resamples from p instead of norm(max(0, p - q))."""
    x, q, p, nd = _inputs(draft_tokens, draft_probs, target_probs, num_drafts)
    gamma = x.shape[-1]
    acc = ratio_acceptance(_token_prob(p[..., :gamma, :], x), _token_prob(q, x))
    return _finish(acc, p[..., :gamma, :], p, nd, True)


def discard_on_reject_verdict(draft_tokens, draft_probs, target_probs,
                              num_drafts=None) -> ChainVerdict:
    """WRONG: no resampling at all -- a rejection emits nothing and the next step redrafts."""
    x, q, p, nd = _inputs(draft_tokens, draft_probs, target_probs, num_drafts)
    gamma = x.shape[-1]
    acc = ratio_acceptance(_token_prob(p[..., :gamma, :], x), _token_prob(q, x))
    return _finish(acc, p[..., :gamma, :], p, nd, False)


def accept_first_unconditionally_verdict(draft_tokens, draft_probs, target_probs,
                                         num_drafts=None) -> ChainVerdict:
    """WRONG: the first draft is always kept ("greedy-first"); the rest are verified."""
    x, q, p, nd = _inputs(draft_tokens, draft_probs, target_probs, num_drafts)
    gamma = x.shape[-1]
    acc = ratio_acceptance(_token_prob(p[..., :gamma, :], x), _token_prob(q, x))
    if gamma:
        acc[..., 0] = 1.0
    return _finish(acc, residual_distribution(p[..., :gamma, :], q), p, nd, True)


CHAIN_RULES: dict[str, Callable[..., ChainVerdict]] = {
    "speculative_sampling": speculative_sampling_verdict,
    "greedy_verification": greedy_verdict,
    "greedy_rule_under_sampling": greedy_rule_under_sampling_verdict,
    "resample_from_target": resample_from_target_verdict,
    "discard_on_reject": discard_on_reject_verdict,
    "accept_first_unconditionally": accept_first_unconditionally_verdict,
}
LOSSLESS_CHAIN_RULES = ("speculative_sampling",)
WRONG_CHAIN_RULES = ("greedy_rule_under_sampling", "resample_from_target",
                     "discard_on_reject", "accept_first_unconditionally")


def chain_rule(name: str) -> Callable[..., ChainVerdict]:
    """Return the verdict builder registered as ``name``."""
    try:
        return CHAIN_RULES[name]
    except KeyError:
        raise SpecsimError(f"unknown verification rule {name!r}", field="rule",
                           fix="choose one of: " + ", ".join(CHAIN_RULES)) from None


def stop_probabilities(verdict: ChainVerdict) -> np.ndarray:
    """Return P(the walk stops after exactly i accepted drafts), shape ``(..., G+1)``."""
    acc = verdict.accept
    reach = np.concatenate([np.ones(acc.shape[:-1] + (1,)), np.cumprod(acc, axis=-1)], axis=-1)
    leave = np.concatenate([1.0 - acc, np.ones(acc.shape[:-1] + (1,))], axis=-1)
    return reach * leave


def verdict_outcomes(verdict: ChainVerdict) -> np.ndarray:
    """Return the exact joint P(i accepted, emitted token t), shape ``(..., G+1, V)``.

    Rows where the stop emits nothing are all zero; their mass is ``stop_probabilities``.
    """
    return stop_probabilities(verdict)[..., None] * verdict.stop * verdict.emits[..., None]


def sample_categorical(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draw one index per last-axis row of ``probs`` by inverse CDF."""
    cum = np.cumsum(probs, axis=-1)
    u = (1.0 - rng.random(probs.shape[:-1] + (1,))) * cum[..., -1:]   # in (0, total]
    idx = (cum < u).sum(axis=-1)
    return np.minimum(idx, probs.shape[-1] - 1)


def sample_verdict(verdict: ChainVerdict,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Run the accept/reject walk: (accepted drafts, emitted token or -1 when none)."""
    acc = verdict.accept
    ok = rng.random(acc.shape) < acc
    ok = np.concatenate([ok, np.zeros(acc.shape[:-1] + (1,), dtype=bool)], axis=-1)
    n = np.argmin(ok, axis=-1)                                          # first rejection
    stop = np.take_along_axis(verdict.stop, n[..., None, None], axis=-2)[..., 0, :]
    token = sample_categorical(stop, rng)
    emits = np.take_along_axis(verdict.emits, n[..., None], axis=-1)[..., 0]
    return n, np.where(emits, token, -1)


def speculative_sampling(draft_tokens, draft_probs, target_probs, rng: np.random.Generator,
                         num_drafts=None) -> tuple[np.ndarray, np.ndarray]:
    """Verify drafts by speculative sampling: (accepted drafts, correction or bonus token)."""
    return sample_verdict(
        speculative_sampling_verdict(draft_tokens, draft_probs, target_probs, num_drafts), rng)


def greedy_verification(draft_tokens, target_probs,
                        num_drafts=None) -> tuple[np.ndarray, np.ndarray]:
    """Verify drafts greedily: (accepted drafts, the target's argmax after them)."""
    verdict = greedy_verdict(draft_tokens, None, target_probs, num_drafts)
    n = np.argmin(np.concatenate([verdict.accept > 0.5, np.zeros(
        verdict.accept.shape[:-1] + (1,), dtype=bool)], axis=-1), axis=-1)
    stop = np.take_along_axis(verdict.stop, n[..., None, None], axis=-2)[..., 0, :]
    return n, stop.argmax(axis=-1)


def first_token_distribution(rule: str, p, q) -> np.ndarray:
    """Exact distribution of the first emitted token when one draft ``x ~ q`` is verified.

    ``p`` is used both at the draft position and for the bonus row; a rule that emits
    nothing on rejection is conditioned on emitting (the next step redrafts).
    """
    p = check_probabilities(p, name="p")
    q = check_probabilities(q, name="q")
    if p.shape != q.shape or p.ndim != 1:
        raise SpecsimError(f"p {p.shape} and q {q.shape} must be equal-length vectors",
                           field="q")
    vocab = p.size
    drafts = np.arange(vocab)[:, None]
    verdict = chain_rule(rule)(drafts, np.broadcast_to(q, (vocab, 1, vocab)),
                               np.broadcast_to(p, (vocab, 2, vocab)))
    joint = verdict_outcomes(verdict)                                   # (V, 2, V)
    out = joint[:, 0, :].copy()                              # rejected: the correction
    out[np.arange(vocab), np.arange(vocab)] += joint[:, 1, :].sum(axis=-1)  # accepted: x
    dist = (q[:, None] * out).sum(axis=0)
    return dist / dist.sum()
