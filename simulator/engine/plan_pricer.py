"""The target's cost model as the engine calls it (``StepPricer``) and the closed forms a
pricer may declare (``ClosedFormPricer``; ``closed_forms`` finds them): every fast path is
reached through them, never by probing an object.  Re-exported by plan.py, the socket a
policy imports."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Protocol

import numpy as np


class StepPricer(Protocol):
    """The target's cost model, as the engine calls it once per iteration."""

    def step_time(self, new_tokens: np.ndarray, context: np.ndarray,
                  logits_tokens: np.ndarray) -> float:
        """Seconds of one target forward: per request, ``new_tokens`` over ``context`` tokens
        already in the KV, ``logits_tokens`` of them through the LM head."""


class ClosedFormPricer(ABC):
    """A ``StepPricer`` with closed forms for uniform batches, declared by subclassing: the
    engine's stretches price many iterations at once through them.  Each gives bitwise what
    ``step_time`` gives for the batch it describes (``mixed_*``: within rounding), or None
    where it has no closed form for that batch (the engine then prices by ``step_time``)."""

    @abstractmethod
    def step_time(self, new_tokens, context, logits_tokens=None) -> float:
        """``StepPricer.step_time``."""

    @abstractmethod
    def uniform_step_times(self, n: int, u: int, ctx_sums: np.ndarray,
                           logits: int) -> np.ndarray | None:
        """K forwards of ``n`` requests of ``u`` new tokens each, the k-th with contexts
        summing to ``ctx_sums[k]``, ``logits`` tokens through the LM head in all."""

    @abstractmethod
    def uniform_step_time(self, n: int, u: int, ctx_sum: float, logits: int) -> float | None:
        """``uniform_step_times`` of one batch, on Python numbers."""

    @abstractmethod
    def uniform_pricer(self, n: int, u: int,
                       logits: int) -> Callable[[float], float | None] | None:
        """``uniform_step_time(n, u, x, logits)`` as a function of the context sum ``x``."""

    @abstractmethod
    def mixed_step_time(self, n: int, ctx_sum: float, chunks: list[int],
                        chunk_ctx: list[int], logits: float) -> float | None:
        """``n`` one-token decodes (contexts summing to ``ctx_sum``) and prefill chunks
        (``chunks[i]`` tokens over ``chunk_ctx[i]``) in one forward."""

    def mixed_chunk_pricer(self) -> Callable[[int, float, int, int, float], float | None]:
        """``mixed_step_time(n, s, [c], [x], logits)`` as ``f(n, s, c, x, logits)``."""
        return lambda n, s, c, x, logits: self.mixed_step_time(n, s, [c], [x], logits)

    @abstractmethod
    def mixed_verify_time(self, n: int, u: int, ctx_sum: float, chunks: list[int],
                          chunk_ctx: list[int], logits: float) -> float | None:
        """``mixed_step_time`` of ``n`` verifications of ``u`` > 1 tokens (0: chunks only)."""

    @abstractmethod
    def chain_decode_times(self, n: int, ctx_sums: np.ndarray,
                           steps: int) -> np.ndarray | None:
        """K chains of ``steps`` one-token forwards of ``n`` requests, k-th from ``ctx_sums[k]``."""

    def verify_step_times(self, tokens: np.ndarray, context: np.ndarray) -> np.ndarray:
        """``step_time(tokens[c], context, tokens[c])`` of each row of the (C, n) ``tokens``:
        C candidate verifications of one batch (a controller's search), bitwise, by row."""
        rows = np.asarray(tokens, np.float64)
        return np.array([self.step_time(row, context, row) for row in rows], np.float64)

    def few_uniform_pricer(self, n: int, u: float,
                           head: float) -> Callable[[float], float] | None:
        """``few_step_time`` of ``n`` requests of ``u`` new tokens each (a whole number >= 1)
        over whole-number contexts, ``head`` tokens through the LM head in all, as a function
        of the contexts' sum alone (bitwise the same float); by default None (no such form)."""
        return None

    def few_mixed_time(self, new: list, ctx: list, head: float) -> float | None:
        """``few_step_time(new, ctx, logits)`` of a few requests of whole counts >= 1 as floats
        (different, or alike with no closed form) over whole-number contexts as floats, ``head``
        (``logits``' sum) through the LM head, bitwise; by default None (no such shortcut)."""
        return None

    def few_mixed_pricer(self, new: list, head: float) -> Callable[[list], float] | None:
        """``few_mixed_time(new, ctx, head)`` as a function of ``ctx``; by default None."""
        return None

    def few_step_time(self, new: list, ctx: list, logits_tokens=None) -> float:
        """``step_time`` of a few requests given as lists (``new[i]`` tokens over ``ctx[i]``
        cached ones; ``logits_tokens`` as ``step_time`` takes it), bitwise: a forward of a
        few requests, where numpy's per-call cost is most of the price; by default
        ``step_time`` on arrays."""
        head = logits_tokens if logits_tokens is None or isinstance(logits_tokens, np.ndarray) \
            else np.array(logits_tokens, np.float64)
        return self.step_time(np.array(new, np.float64), np.array(ctx, np.float64), head)

    def few_pricer(self, new: list) -> Callable[[list], float]:
        """``few_step_time(new, ctx, new)`` as a function of the contexts ``ctx`` alone (the
        same float), for a round of forwards with the same token counts ``new``."""
        return lambda ctx: self.few_step_time(new, ctx, new)

    def rows_step_times(self, tokens: np.ndarray, context: np.ndarray,
                        logits: np.ndarray | None = None) -> np.ndarray:
        """``step_time(tokens[j], context[j], logits)`` of each row ``j`` of the (K, n)
        ``tokens`` and ``context`` (``logits``: the requests' LM-head tokens, the same in
        every row; None: each row's tokens): K forwards of one batch's requests, each at
        its own contexts (a stretch's iterations); bitwise, by default one call a row."""
        rows, ctx = np.asarray(tokens, np.float64), np.asarray(context, np.float64)
        return np.array([self.step_time(row, c, row if logits is None else logits)
                         for row, c in zip(rows, ctx)], np.float64)


def closed_forms(cost: StepPricer | None) -> ClosedFormPricer | None:
    """``cost``'s declared closed forms, None where it declares none (``step_time`` only)."""
    return cost if isinstance(cost, ClosedFormPricer) else None
