"""One iteration of a plain-decode policy, fused (``PlainSteps``, mixed into ``Replica``).

Under a policy that proposes nothing, draws nothing and learns nothing (``plain_decode``:
``none``), every running decode verifies exactly one token and emits exactly one: a running
request always has ``generated < output_len`` (the step that emits its last token retires
it).  The ordinary path still builds a ``BatchView`` (five copies), asks the policy for its
all-ones plan, clamps its all-zero acceptances, rolls back KV that no rejected draft ever
held and builds a frozen ``Step``; at about two prefill chunks per request those layers are
most of a mixed step's cost.  ``_plain_schedule`` plans, reserves and prices such a step
directly and ``_plain_complete`` completes it, with the same decisions, the same arrays
handed to the cost model and the same floating-point operations in the same order as the
ordinary path, so the results are bit-for-bit those of ``_schedule`` / ``_complete``.

It returns None (the ordinary path runs the step) where the shortcut does not hold: nothing
decodes, the decodes alone exceed the token budget, their KV does not fit (a preemption), a
prefix cache (its hooks) or an event log (its timeline).

The KV reservation is exact without the general formula: a decode holding ``c`` tokens in
``blocks`` blocks has ``c <= blocks * bs`` and, with no drafts and no cached prefix, never
more blocks than its tokens need (prefill chunks and decodes allocate exactly
``ceil(tokens / bs)``, a preemption frees all), so one more token needs a block exactly when
``c == blocks * bs``, and no block is ever freed by a roll-back.
"""
from __future__ import annotations

import numpy as np

from simulator.engine.step import NO_IDS, StepRow

_ALL, _COUNT = np.logical_and.reduce, np.count_nonzero


class PlainStep:
    """A planned and priced plain-decode iteration (what ``Step`` holds, minus the plan)."""

    __slots__ = ("start_s", "duration_s", "draft_s", "verify_s", "decode_pos", "num_decode",
                 "prefill_pos", "chunks", "completes", "prefill_tokens", "kv_read_tokens",
                 "attn_pairs")

    def __init__(self, start_s, draft_s, verify_s, decode_pos, num_decode, prefill_pos,
                 chunks, completes, prefill_tokens, kv_read_tokens, attn_pairs) -> None:
        self.start_s = start_s
        self.draft_s = draft_s
        self.verify_s = verify_s
        self.duration_s = draft_s + verify_s  # Step.duration_s: draft, then verify
        self.decode_pos = decode_pos
        self.num_decode = num_decode
        self.prefill_pos = prefill_pos
        self.chunks = chunks
        self.completes = completes
        self.prefill_tokens = prefill_tokens
        self.kv_read_tokens = kv_read_tokens
        self.attn_pairs = attn_pairs


class PlainSteps:
    """The fused plain-decode iteration of a replica (see the module docstring)."""

    def _plain_schedule(self, now: float) -> PlainStep | None:
        """Plan, reserve and price this iteration; None: the ordinary path must."""
        b, lim = self.b, self.limits
        nd, n = b.decoding, int(b.ids.size)
        budget = lim.max_num_batched_tokens
        if not nd or nd > budget:
            return None
        pos, mid = self._decode_split(nd, n)
        c = b.computed[pos]
        need = c == b.blocks[pos] * lim.block_size  # the decodes that take a new block
        taken = int(_COUNT(need))
        if self.used_blocks + taken > lim.kv_blocks:
            return None  # a preemption: the ordinary path makes it
        ctx = c.astype(np.float64)  # before admissions replace the batch's arrays
        b.blocks[pos] += need
        self.used_blocks += taken
        pf, chunks, prefill_tokens = self._plan_prefills(mid, budget - nd, now)
        # the plan's draft and CPU times are both 0.0
        draft_s, verify_s, completes, kv_read, attn_pairs = self._forward(
            np.ones(nd), ctx, pf, chunks, 0.0)
        return PlainStep(now, draft_s, verify_s, pos, nd, pf, chunks, completes,
                         prefill_tokens, kv_read, attn_pairs)

    def _decode_split(self, nd: int, n: int):
        """The positions of the ``nd`` decodes and of the other ``n - nd`` running requests
        (mid-prefill): slices where the prefilling ones come last (the usual order: admitted
        last), else index arrays."""
        b = self.b
        if nd == n:
            return slice(0, n), NO_IDS
        if _ALL(b.in_prefill[nd:]):
            return slice(0, nd), np.arange(nd, n)
        return np.flatnonzero(~b.in_prefill), np.flatnonzero(b.in_prefill)

    def _plain_complete(self, step: PlainStep, now: float) -> None:
        """Emit (the prefills' tokens, then one per decode), retire, record the step."""
        prefilled = self._emit_prefills(step, now)
        b, dec, nd = self.b, step.decode_pos, step.num_decode
        self.rec.record_itl(now - b.last_emit[dec])
        b.generated[dec] += 1
        b.computed[dec] += 1
        b.last_emit[dec] = now
        self.outstanding_tokens -= nd
        self._retire(now)
        self._plain_row(step, int(step.prefill_pos.size), int(prefilled.size))

    def _plain_row(self, step: PlainStep, n_pf: int, prefilled: int, record=None) -> None:
        """Record the row of a completed plain iteration: its ``n_pf`` prefill chunks, of
        which ``prefilled`` completed (after retirement: KV and queue as the next step finds
        them), through ``record`` (default: the recorder's ``record_step``)."""
        nd, used = step.num_decode, self.used_blocks
        (record or self.rec.record_step)(StepRow(
            self.index, step.start_s, step.duration_s, step.draft_s, step.verify_s,
            nd + n_pf, n_pf, nd, step.prefill_tokens, nd, prefilled + nd, 0, 0,
            used, used / self.limits.kv_blocks, len(self.waiting), step.kv_read_tokens,
            step.attn_pairs, 0))
