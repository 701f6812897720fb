"""Pricing an iteration's target forward (``Forward``, mixed into ``Replica``).

Both the ordinary path (``Replica._price``) and the fused plain-decode iteration
(plain_step.py) price their forward here, with the same arrays in the same order, so the two
give the same floats.  The forward covers the decodes (``verify`` tokens each) then the
prefill chunks.  Under a plain-decode policy every decode verifies one token, and a step that
also carries chunks (about two a request under chunked prefill) is priced by the cost model's
``mixed_step_time`` where it has one: the decodes by the uniform closed form's line in their
context sum, the chunks one by one, without concatenating the batch (simulator/cost/
step_models.py's ``mixed_time``).  So is any policy's step whose decodes all verify the same
count (the cost model's ``mixed_verify_time`` past one).  Everything else: ``step_time``.
"""
from __future__ import annotations

import numpy as np

from simulator.engine.step import NO_FLAGS

_SUM, _COUNT, _ALL = np.add.reduce, np.count_nonzero, np.logical_and.reduce


class Forward:
    """The target forward of a replica's iteration (see the module docstring)."""

    def _forward(self, verify: np.ndarray, dec_ctx: np.ndarray, pf: np.ndarray,
                 chunks: np.ndarray, draft_s: float, uniform: int | None = None):
        """Price the target forward over the decodes (``verify`` tokens each over ``dec_ctx``,
        floats) then the prefill chunks of the requests at ``pf``; the proposer's prefill
        time is added to ``draft_s``.  Returns (draft_s, verify_s, which chunks complete
        their prefill, KV tokens read, attention pairs).  ``uniform``: the caller knows
        every decode verifies that many (>= 1) tokens (``verify`` is all of it)."""
        if not pf.size:  # no prefill: nothing to gather
            verify_s = self.target_cost.step_time(verify, dec_ctx, verify)
            kv_read = float(_SUM(dec_ctx) + _SUM(verify))  # whole numbers: exact
            attn_pairs = float(_SUM(verify * (dec_ctx + 0.5 * (verify + 1.0))))
            return draft_s, verify_s, NO_FLAGS, kv_read, attn_pairs
        b = self.b
        pf_ctx = b.computed[pf]
        completes = (pf_ctx + chunks) >= b.prefill_target[pf]
        chunks_f, pf_ctx_f = chunks.astype(np.float64), pf_ctx.astype(np.float64)
        priced = self._mixed_forward(verify, dec_ctx, chunks, pf_ctx, completes, uniform) \
            if verify.size and (self._mixed or self._mixed_verify) is not None else None
        if priced is None:
            new = np.concatenate((verify, chunks_f))
            ctx = np.concatenate((dec_ctx, pf_ctx_f))
            logits = np.concatenate((verify, completes.astype(np.float64)))
            verify_s = self.target_cost.step_time(new, ctx, logits)
            kv_read = float(_SUM(ctx) + _SUM(new))  # whole numbers: exact
            attn_pairs = float(_SUM(new * (ctx + 0.5 * (new + 1.0))))
        else:
            verify_s, kv_read, attn_pairs = priced
        draft_s += self._proposer_prefill_s(chunks_f, pf_ctx_f)
        return draft_s, verify_s, completes, kv_read, attn_pairs

    def _proposer_prefill_s(self, chunks: np.ndarray, context: np.ndarray) -> float:
        """The proposer's time for the prefill chunks (its KV built beside the target's)."""
        return self.policy.prefill_time(chunks, context)

    def _mixed_forward(self, verify, dec_ctx, chunks, pf_ctx, completes, uniform=None):
        """(verify_s, KV tokens read, attention pairs) of decodes verifying the same ``u``
        tokens each (one under a plain-decode policy: ``mixed_step_time``; more, a
        speculative policy's verification: ``mixed_verify_time``) and chunks; None where it
        gives way or the decodes' counts differ (the caller uses ``step_time``).  The sums are
        whole numbers (``c x + c (c + 1) / 2`` pairs for ``c`` tokens over ``x``), equal to
        the concatenated batch's float sums."""
        n, s = int(verify.size), float(_SUM(dec_ctx))
        if uniform is not None:
            u = uniform
        elif self._one_token:
            u = 1
        else:
            u = int(verify[0])
            if not _ALL(verify == u):
                return None
        price = self._mixed if u == 1 else self._mixed_verify
        if price is None:
            return None
        ch, cx = chunks.tolist(), pf_ctx.tolist()
        logits = float(n * u + int(_COUNT(completes)))
        verify_s = price(n, s, ch, cx, logits) if u == 1 else price(n, u, s, ch, cx, logits)
        if verify_s is None:
            return None
        pairs = sum(c * x + c * (c + 1) // 2 for c, x in zip(ch, cx)) + n * (u * (u + 1) // 2)
        return verify_s, s + n * u + float(sum(ch) + sum(cx)), u * s + float(pairs)
