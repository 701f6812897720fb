"""Exact enumeration of speculative decoding on toy language models.

Every branch -- every draft sequence or sampled tree, every accept/reject, every correction
token -- is followed with its probability, so the output distribution of the first N tokens
is exact (up to float rounding) and can be compared with the target's own distribution.

A *step* maps a context to the distribution of the tokens one speculative iteration emits,
as an :data:`Emission`: ``emission[L]`` holds the probability of each length-L emission,
flattened as a base-V code (first token most significant).  :func:`output_distribution`
chains steps; :func:`chain_step` and :func:`tree_step` build steps from the rules in
:mod:`simulator.speculation.verification` and :mod:`simulator.speculation.tree_verification`.
"""
from __future__ import annotations

import itertools
from typing import Callable, Sequence

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.speculation.token_tree import check_expansion_config
from simulator.speculation.toy_lm import ToyLM
from simulator.speculation.tree_verification import tree_method
from simulator.speculation.verification import chain_rule, stop_probabilities, verdict_outcomes

Emission = list
Step = Callable[[tuple], Emission]

DRAFTING = ("sample", "argmax")
CHILDREN = ("sampled", "top_k")


def total_variation(a, b) -> float:
    """Total variation distance between two distributions over the same outcomes."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise SpecsimError(f"shapes differ: {a.shape} vs {b.shape}", field="b")
    return 0.5 * float(np.abs(a - b).sum())


def expected_length(emission: Emission) -> float:
    """Expected number of tokens one step emits."""
    return float(sum(length * arr.sum() for length, arr in enumerate(emission)))


def _add(emission: Emission, length: int, vocab: int) -> np.ndarray:
    while len(emission) <= length:
        emission.append(np.zeros(vocab ** len(emission)))
    return emission[length]


def output_distribution(step: Step, vocab_size: int, num_tokens: int,
                        context: Sequence[int] = ()) -> np.ndarray:
    """Exact distribution of the first ``num_tokens`` emitted tokens (base-V codes).

    A step that emits nothing leaves the context unchanged and is simply repeated, so its
    mass is folded in exactly by renormalising the non-empty emissions.
    """
    v, n = int(vocab_size), int(num_tokens)
    if n < 1:
        raise SpecsimError(f"must be >= 1, got {num_tokens!r}", field="num_tokens")
    final = np.zeros(v ** n)
    partial = [np.zeros(v ** length) for length in range(n)]
    partial[0][0] = 1.0
    for length in range(n):
        for code in np.flatnonzero(partial[length]):
            mass = partial[length][code]
            prefix = tuple(int(code) // v ** (length - 1 - i) % v for i in range(length))
            emission = step(tuple(context) + prefix)
            silent = float(emission[0].sum()) if emission else 0.0
            if silent >= 1.0 - 1e-15:
                raise SpecsimError("the step never emits a token", field="step")
            scale = mass / (1.0 - silent)
            for e in range(1, len(emission)):
                arr = emission[e]
                if length + e < n:
                    block = v ** e
                    partial[length + e][code * block:(code + 1) * block] += scale * arr
                else:
                    keep = n - length
                    trunc = arr.reshape(v ** keep, v ** (e - keep)).sum(axis=1)
                    block = v ** keep
                    final[code * block:(code + 1) * block] += scale * trunc
    return final


def target_distribution(target: ToyLM, num_tokens: int, context: Sequence[int] = ()) -> np.ndarray:
    """The target's own distribution of the next ``num_tokens`` tokens."""
    return target.sequence_distribution(num_tokens, context)


def _check_pair(target: ToyLM, draft: ToyLM) -> None:
    if not isinstance(target, ToyLM) or not isinstance(draft, ToyLM):
        raise SpecsimError("target and draft must be ToyLM instances", field="draft")
    if target.vocab_size != draft.vocab_size:
        raise SpecsimError(f"vocabularies differ: {target.vocab_size} vs {draft.vocab_size}",
                           field="draft", fix="draft and target must share a vocabulary")


def chain_step(target: ToyLM, draft: ToyLM, gamma: int, rule: str = "speculative_sampling",
               drafting: str = "sample") -> Step:
    """One chain iteration: ``gamma`` drafts (sampled from q, or q's argmax), ``rule`` verifies."""
    _check_pair(target, draft)
    gamma = check_expansion_config([gamma], name="gamma")[0]
    build = chain_rule(rule)
    if drafting not in DRAFTING:
        raise SpecsimError(f"unknown drafting {drafting!r}", field="drafting",
                           fix="choose one of: " + ", ".join(DRAFTING))
    v = target.vocab_size
    memo: dict[tuple[int, int], Emission] = {}

    def step(context: tuple) -> Emission:
        key = target.state(context)
        if key in memo:
            return memo[key]
        if drafting == "sample":
            seqs = np.array(list(itertools.product(range(v), repeat=gamma)), dtype=np.intp)
        else:
            seqs = np.zeros((1, gamma), dtype=np.intp)
        count = seqs.shape[0]
        prev2 = np.empty((count, gamma + 1), dtype=np.intp)
        prev1 = np.empty((count, gamma + 1), dtype=np.intp)
        prev2[:, 0], prev1[:, 0] = key
        for i in range(gamma):
            if drafting == "argmax":
                seqs[:, i] = draft.table[prev2[:, i], prev1[:, i]].argmax(axis=-1)
            prev2[:, i + 1] = prev1[:, i]
            prev1[:, i + 1] = seqs[:, i]
        q = draft.table[prev2[:, :gamma], prev1[:, :gamma]]           # (S, G, V)
        p = target.table[prev2, prev1]                                 # (S, G+1, V)
        weight = np.ones(count)
        if drafting == "sample":
            weight = np.prod(np.take_along_axis(q, seqs[..., None], axis=-1)[..., 0], axis=1)
        verdict = build(seqs, q, p)
        joint = verdict_outcomes(verdict) * weight[:, None, None]      # (S, G+1, V)
        silent = stop_probabilities(verdict) * ~verdict.emits * weight[:, None]
        emission: Emission = [np.zeros(1)]
        for n in range(gamma + 1):
            codes = np.zeros(count, dtype=np.int64)
            for i in range(n):
                codes = codes * v + seqs[:, i]
            arr = _add(emission, n + 1, v)
            full = (codes[:, None] * v + np.arange(v)).ravel()
            arr += np.bincount(full, weights=joint[:, n, :].ravel(), minlength=arr.size)
            if silent[:, n].any():
                _add(emission, n, v)
                emission[n] += np.bincount(codes, weights=silent[:, n],
                                           minlength=emission[n].size)
        memo[key] = emission
        return emission

    return step


def children_tuples(q: np.ndarray, k: int, children: str):
    """All children tuples the drafter can propose at a node, with their probabilities."""
    if children == "top_k":
        order = np.argsort(-q, kind="stable")[:k]
        order = order[q[order] > 0]
        return [(order, 1.0)]
    support = [int(t) for t in np.flatnonzero(q > 0)]
    k = min(k, len(support))
    out = []
    for perm in itertools.permutations(support, k):
        w, left = 1.0, 1.0
        for tok in perm:                               # successive draws without replacement
            w *= q[tok] / left
            left -= q[tok]
        out.append((np.array(perm, dtype=np.intp), w))
    return out


def tree_step(target: ToyLM, draft: ToyLM, config: Sequence[int], method: str = "mss",
              children: str = "sampled") -> Step:
    """One tree iteration: an expansion tree <k1, k2, ...> drafted from q, verified by ``method``.

    ``children="sampled"`` draws each node's children from q without replacement;
    ``"top_k"`` takes q's k most probable tokens.  Subtrees the walk never enters do not
    change the outcome, so a node's children are enumerated only when it is reached.
    """
    _check_pair(target, draft)
    config = check_expansion_config(config)
    schedule = tree_method(method)
    if children not in CHILDREN:
        raise SpecsimError(f"unknown children rule {children!r}", field="children",
                           fix="choose one of: " + ", ".join(CHILDREN))
    v = target.vocab_size
    memo: dict[tuple[int, int, int], Emission] = {}

    def node(a: int, b: int, depth: int) -> Emission:
        key = (a, b, depth)
        if key in memo:
            return memo[key]
        p, q = target.table[a, b], draft.table[a, b]
        emission: Emission = [np.zeros(1), np.zeros(v)]
        tuples = [(np.zeros(0, dtype=np.intp), 1.0)] if depth == len(config) else \
            children_tuples(q, config[depth], children)
        for kids, weight in tuples:
            accept, stop = schedule(p, q, kids)
            survive = weight
            for j, tok in enumerate(kids):
                mass = survive * accept[j]
                if mass > 0:
                    sub = node(b, int(tok), depth + 1)
                    for length, arr in enumerate(sub):
                        if length == 0:
                            continue
                        block = v ** length
                        _add(emission, length + 1, v)[tok * block:(tok + 1) * block] += \
                            mass * arr
                survive *= 1.0 - accept[j]
            emission[1] += survive * stop
        memo[key] = emission
        return emission

    def step(context: tuple) -> Emission:
        a, b = target.state(context)
        return node(a, b, 0)

    return step


def root_acceptance(p, q, k: int, method: str = "mss", children: str = "sampled") -> float:
    """Exact P(the root accepts some child), averaged over the drafted children."""
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    k = check_expansion_config([k], name="k")[0]
    schedule = tree_method(method)
    tuples = children_tuples(q, k, children)
    kids = np.stack([t for t, _ in tuples])
    weights = np.array([w for _, w in tuples])
    accept, _ = schedule(np.broadcast_to(p, (len(tuples),) + p.shape),
                         np.broadcast_to(q, (len(tuples),) + q.shape), kids)
    return float(weights @ (1.0 - np.prod(1.0 - accept, axis=-1)))
