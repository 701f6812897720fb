"""Acceptance as a function of sampling temperature, with greedy as the T -> 0 limit.

At temperature T both models sample ``softmax(logits / T)`` and the per-position acceptance
is ``beta(T) = sum_x min(p_T(x), q_T(x))``.  As T -> 0 both become one-hot on their argmax,
so beta -> 1 when the argmaxes agree and 0 otherwise: greedy verification's acceptance.
As T -> infinity both become uniform and beta -> 1.  In between the direction depends on
the shapes (seed 000, section 2.6): flat distributions overlap more as T rises, while a
confident peak plus a long tail (the usual LLM shape, with a flatter draft) overlaps less.
"""
from __future__ import annotations

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.speculation.toy_lm import softmax


def _temperatures(temperatures) -> np.ndarray:
    t = np.atleast_1d(np.asarray(temperatures, dtype=float))
    if t.ndim != 1 or t.size == 0 or not np.all(np.isfinite(t)) or np.any(t < 0):
        raise SpecsimError("temperatures must be finite numbers >= 0", field="temperatures",
                           fix="e.g. [0, 0.5, 1.0]")
    return t


def _logits(logits, name: str) -> np.ndarray:
    arr = np.asarray(logits, dtype=float)
    if arr.ndim == 0 or arr.shape[-1] < 2:
        raise SpecsimError("needs shape (..., vocab_size) with vocab_size >= 2", field=name)
    if np.any(np.isnan(arr)) or np.any(arr == np.inf):
        raise SpecsimError("contains NaN or +inf", field=name,
                           fix="use finite logits (-inf marks an impossible token)")
    return arr


def tempered_probs(logits, temperature: float) -> np.ndarray:
    """``softmax(logits / T)``; T = 0 gives the one-hot argmax (greedy)."""
    arr = _logits(logits, "logits")
    t = float(_temperatures([temperature])[0])
    if t == 0.0:
        return (np.arange(arr.shape[-1]) == arr.argmax(axis=-1)[..., None]).astype(float)
    return softmax(arr / t)


def acceptance_vs_temperature(target_logits, draft_logits, temperatures) -> np.ndarray:
    """Per-position acceptance ``beta(T)`` for each temperature: shape (len(T), ...)."""
    p_logits = _logits(target_logits, "target_logits")
    q_logits = _logits(draft_logits, "draft_logits")
    if p_logits.shape != q_logits.shape:
        raise SpecsimError(f"shapes differ: {p_logits.shape} vs {q_logits.shape}",
                           field="draft_logits", fix="same batch and vocabulary as the target")
    out = []
    for t in _temperatures(temperatures):
        p = tempered_probs(p_logits, t)
        q = tempered_probs(q_logits, t)
        out.append(np.minimum(p, q).sum(axis=-1))
    return np.stack(out)


def greedy_acceptance(target_logits, draft_logits) -> np.ndarray:
    """Greedy verification's acceptance: 1 where the argmaxes agree, else 0."""
    p = _logits(target_logits, "target_logits")
    q = _logits(draft_logits, "draft_logits")
    return (p.argmax(axis=-1) == q.argmax(axis=-1)).astype(float)
