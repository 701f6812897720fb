"""Completing a step (``Completion``, mixed into ``Replica``): emit the tokens, roll back the
rejected drafts' KV, retire the finished requests, record the step.

1. ``_emit_prefills``: a chunk advances its request's KV; a finished prefill emits a token;
2. ``_emit_decodes``: the policy accepts, each decode emits accepted + 1 tokens, never past
   its output length;
3. ``_roll_back``: free the KV blocks that held only rejected drafts;
4. ``_retire``: finish the requests that reached their output length, free their blocks;
5. ``_record``: the step's ``StepRow`` (after retirement: KV and queue as the next step finds
   them).
"""
from __future__ import annotations

import numpy as np

from simulator.engine.plan import emitted_tokens
from simulator.engine.requests import FINISHED
from simulator.engine.step import NO_IDS, Step, StepRow

_SUM, _ANY = np.add.reduce, np.logical_or.reduce  # no method layer


class Completion:
    """The completion half of a replica's iteration (see the module docstring)."""

    def _complete(self, step: Step, now: float) -> None:
        """Emit, roll back rejected drafts' KV, retire finished requests, record the step."""
        prefilled = self._emit_prefills(step, now)
        emitted_total = int(prefilled.size)
        emitted = accepted = None
        if step.plan is not None:
            emitted, accepted, decoded = self._emit_decodes(step, now)
            emitted_total += decoded
            self._roll_back(step.decode_pos)
            self.policy.observe(step.plan, step.batch, accepted, step.duration_s)
        if self.rec.record_events:
            self._log_emissions(step, emitted, now)
        if prefilled.size or step.plan is not None:
            self._retire(now)
        self._record(step, emitted_total, accepted)

    def _emit_prefills(self, step: Step, now: float) -> np.ndarray:
        """Advance the prefill chunks; a completed prefill emits a token. Returns the
        positions of those."""
        if not step.prefill_pos.size:
            return NO_IDS
        if step.prefill_pos.size == 1 and self.cache is None:
            return self._emit_prefill_one(step, now)
        return self._emit_prefill_many(step, now)

    def _emit_prefill_many(self, step: Step, now: float) -> np.ndarray:
        """``_emit_prefills`` of any chunks, on arrays."""
        b, pf = self.b, step.prefill_pos
        b.computed[pf] += step.chunks
        self.outstanding_tokens -= step.prefill_tokens
        if self.cache is not None:  # the prompt blocks now full are cached
            for rid, computed in zip(b.ids[pf].tolist(), b.computed[pf].tolist()):
                self.cache.register(rid, computed)
        done = pf[step.completes]
        if done.size:
            b.set_prefill_done(done)
            had = b.generated[done] > 0  # a preempted request resuming: its ITL runs on
            if _ANY(had):
                self.rec.record_itl(now - b.last_emit[done[had]])
            b.generated[done] += 1
            self.outstanding_tokens -= int(done.size)
            t, rids = self.t, b.ids[done]
            first = np.isnan(t.first_token_s[rids])
            t.first_token_s[rids[first]] = now
            b.last_emit[done] = now
        return done

    def _emit_prefill_one(self, step: Step, now: float) -> np.ndarray:
        """``_emit_prefills`` of one chunk (the usual admission) by scalar stores: the same
        integers, and the same float subtraction for a resuming request's gap."""
        b, t, p = self.b, self.t, int(step.prefill_pos[0])
        b.computed[p] += int(step.chunks[0])
        self.outstanding_tokens -= step.prefill_tokens
        if not step.completes[0]:
            return NO_IDS
        if b.in_prefill[p]:  # set_prefill_done: it decodes from now on
            b.in_prefill[p] = False
            b.decoding += 1
        generated = int(b.generated[p])
        if generated > 0:  # a preempted request resuming: its ITL runs on
            self.rec.record_itl(np.array([now - float(b.last_emit[p])]))
        b.generated[p] = generated + 1
        self.outstanding_tokens -= 1
        rid = int(b.ids[p])
        if t.first_token_s[rid] != t.first_token_s[rid]:  # NaN: its first token
            t.first_token_s[rid] = now
        b.last_emit[p] = now
        return step.prefill_pos

    def _emit_decodes(self, step: Step, now: float) -> tuple[np.ndarray, np.ndarray, int]:
        """Accept, then emit accepted + 1 tokens per decode; returns (emitted, accepted) per
        decode and the tokens emitted in all."""
        plan = step.plan
        accepted = np.asarray(self.policy.accept(plan, step.batch, self.rng), np.int64)
        accepted = np.minimum(np.maximum(accepted, 0), plan.num_draft)
        emitted, decoded = self._emit_accepted(step.decode_pos, accepted, plan.num_draft, now)
        return emitted, accepted, decoded

    def _emit_accepted(self, dec, accepted: np.ndarray, num_draft: np.ndarray | int,
                       now: float) -> tuple[np.ndarray, int]:
        """Each decode at ``dec`` emits its ``accepted`` drafts + 1 tokens (never past its
        output length) and counts its ``num_draft`` drafts (an int >= 1: every decode drafted
        that many, as a chain's do); returns (emitted per decode, tokens emitted in all)."""
        b = self.b
        emitted = emitted_tokens(accepted, b.generated[dec], b.output_len[dec])
        self.rec.record_itl_shared(now - b.last_emit[dec])
        b.generated[dec] += emitted
        b.computed[dec] += emitted
        b.last_emit[dec] = now
        decoded = int(_SUM(emitted))
        self.outstanding_tokens -= decoded
        same = num_draft.__class__ is int  # every decode drafted num_draft >= 1
        if same or _ANY(num_draft):
            b.num_drafts[dec] += 1 if same else num_draft > 0
            b.num_draft_tokens[dec] += num_draft
            b.num_accepted[dec] += accepted
            if same:
                self.rec.record_acceptance_of(num_draft, accepted)
            else:
                self.rec.record_acceptance(num_draft, accepted)
        return emitted, decoded

    def _roll_back(self, dec) -> None:
        """Free the KV blocks that held only rejected draft tokens."""
        b, bs = self.b, self.limits.block_size
        keep_blocks = (b.computed[dec] + (bs - 1)) // bs  # ceil(computed / bs): exact
        if dec.__class__ is slice:  # a view: min(blocks, keep) in place, freed by the sums
            blocks = b.blocks[dec]
            held = int(_SUM(blocks))
            np.minimum(blocks, keep_blocks, out=blocks)
            n = held - int(_SUM(blocks))
        else:
            freed = np.maximum(b.blocks[dec] - keep_blocks, 0)
            b.blocks[dec] -= freed
            n = int(_SUM(freed))
        self.used_blocks -= n
        if self.cache is not None:
            self.cache.give_back(n)

    def _retire(self, now: float) -> None:
        """Finish the running requests that reached their output length."""
        b, t = self.b, self.t
        finished = b.generated >= b.output_len
        if not _ANY(finished):
            return
        done = np.flatnonzero(finished)
        if done.size == 1 and self.cache is None:  # the usual case: scalar stores
            return self._retire_one(int(done[0]), now)
        rids = b.ids[done]
        t.finish_s[rids] = now
        t.status[rids] = FINISHED
        if self.cache is None:
            self.used_blocks -= int(_SUM(b.blocks[done]))
        else:  # in batch order, each request's blocks last to first (vLLM's free order)
            for rid, blocks in zip(rids.tolist(), b.blocks[done].tolist()):
                self.used_blocks -= self.cache.release(rid, blocks)
        b.blocks[done] = 0
        if self.rec.record_events:
            self.rec.events.extend((now, "finish", int(r), 0) for r in sorted(rids.tolist()))
        b.write_back(t, done)
        b.keep(~finished)
        if self.on_finish is not None:
            self.on_finish(int(done.size))

    def _retire_one(self, p: int, now: float) -> None:
        """``_retire`` of the one finished request, at position ``p`` (no prefix cache)."""
        b, t = self.b, self.t
        rid = int(b.ids[p])
        t.finish_s[rid] = now
        t.status[rid] = FINISHED
        self.used_blocks -= int(b.blocks[p])
        b.blocks[p] = 0
        if self.rec.record_events:
            self.rec.events.append((now, "finish", rid, 0))
        b.write_back_one(t, p)
        b.remove(p)
        if self.on_finish is not None:
            self.on_finish(1)

    def _record(self, step: Step, emitted_tokens: int, accepted: np.ndarray | None) -> None:
        """Record the step's row (after retirement: KV and queue as the next step finds them)."""
        plan, n_dec, n_pf = step.plan, int(step.decode_ids.size), int(step.prefill_ids.size)
        decoded = plan is not None
        self.rec.record_step(StepRow(
            replica=self.index, start_s=step.start_s, duration_s=step.duration_s,
            draft_s=step.draft_s, verify_s=step.verify_s, batch_size=n_dec + n_pf,
            num_prefill=n_pf, num_decode=n_dec, prefill_tokens=step.prefill_tokens,
            decode_tokens=step.decode_tokens, emitted_tokens=emitted_tokens,
            draft_tokens=int(_SUM(plan.num_draft)) if decoded else 0,
            accepted_tokens=int(_SUM(accepted)) if decoded else 0,
            kv_blocks_used=self.used_blocks,
            kv_occupancy=self.used_blocks / self.limits.kv_blocks,
            queue_len=len(self.waiting), kv_read_tokens=step.kv_read_tokens,
            attn_pairs=step.attn_pairs, preemptions=step.preempted))

    def _log_emissions(self, step: Step, emitted: np.ndarray | None, now: float) -> None:
        """Append first-token and token events of this step (tests assert exact timelines)."""
        b, t, ev = self.b, self.t, self.rec.events
        for p in step.prefill_pos[step.completes].tolist():
            rid = int(b.ids[p])
            kind = "first_token" if t.first_token_s[rid] == now and b.generated[p] == 1 \
                else "token"
            ev.append((now, kind, rid, 1))
        if emitted is not None:
            for rid, n in zip(step.decode_ids.tolist(), emitted.tolist()):
                ev.append((now, "token", int(rid), int(n)))
