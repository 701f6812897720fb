"""The SimPy serving engine: one ``Replica`` per model instance, iteration-level scheduling.

Shaped as SimPy's own examples: ``arrivals`` is a plain generator process that routes each
request to a replica; a ``Replica`` starts its own process in ``__init__`` and sleeps on an
``env.event()`` while it has nothing to do.  Each iteration (vLLM-style continuous batching):

1. schedule running requests first (decodes with their speculative plan, then unfinished
   prefill chunks), preempting the most recently admitted request (recompute, as vLLM does)
   when KV blocks run out; then admit waiting requests FIFO while the token budget, the
   sequence limit and the KV blocks allow (chunked prefill optional);
2. price the step: the proposer's time, then one target forward over every request's exact
   token count (prefill chunk, or 1 + drafts for a decode);
3. advance time, sample acceptance, emit accepted + 1 tokens (never past the output length),
   roll back rejected tokens' KV, finish requests and free their blocks.

All per-request state lives in numpy arrays of a ``RequestTable`` shared by the replicas; the
hot path is vectorised over the batch.
"""
from __future__ import annotations

from collections import deque

import numpy as np
import simpy

from simulator.engine.plan import BatchView
from simulator.engine.recorder import Recorder
from simulator.engine.requests import FINISHED, RUNNING, WAITING, EngineLimits, RequestTable


class Replica:
    """One model instance: a waiting queue, a running batch and its own SimPy process."""

    def __init__(self, env: simpy.Environment, index: int, table: RequestTable,
                 limits: EngineLimits, target_cost, policy, rng: np.random.Generator,
                 recorder: Recorder, on_finish=None) -> None:
        self.env = env
        self.on_finish = on_finish  # on_finish(n): n requests just finished (progress)
        self.index = index
        self.t = table
        self.limits = limits
        self.target_cost = target_cost
        self.policy = policy
        self.rng = rng
        self.rec = recorder
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self.used_blocks = 0
        self.outstanding_tokens = 0
        self.wakeup = env.event()
        self.process = env.process(self.run())

    # ------------------------------------------------------------------ arrivals
    def submit(self, rid: int) -> None:
        """Queue a request; wake the replica if it is idle."""
        t = self.t
        t.status[rid] = WAITING
        t.replica[rid] = self.index
        self.waiting.append(rid)
        self.outstanding_tokens += int(t.prompt_len[rid] + t.output_len[rid])
        if self.rec.record_events:
            self.rec.events.append((self.env.now, "arrival", rid, 0))
        if not self.wakeup.triggered:
            self.wakeup.succeed()

    # ------------------------------------------------------------------ the loop
    def run(self):
        """The replica's process: iterate while there is work, sleep otherwise."""
        while True:
            if not self.running and not self.waiting:
                self.wakeup = self.env.event()
                yield self.wakeup
                continue
            step = self._schedule()
            if step is None:  # nothing could be scheduled (cannot happen with valid limits)
                raise RuntimeError("scheduler made no progress")
            yield self.env.timeout(step["duration"])
            self._complete(step)

    def _free(self, rid: int) -> None:
        self.used_blocks -= int(self.t.blocks[rid])
        self.t.blocks[rid] = 0

    def _preempt_last(self) -> int:
        """Preempt the most recently admitted running request (recompute)."""
        t = self.t
        victim = self.running.pop()
        self._free(victim)
        self.outstanding_tokens += int(t.computed[victim])
        t.computed[victim] = 0
        t.in_prefill[victim] = True
        t.prefill_target[victim] = t.prompt_len[victim] + t.generated[victim]
        t.status[victim] = WAITING
        t.preemptions[victim] += 1
        self.waiting.appendleft(victim)
        return victim

    def _schedule(self) -> dict | None:
        t, lim = self.t, self.limits
        bs = lim.block_size
        budget = lim.max_num_batched_tokens
        now = self.env.now
        preempted = 0
        # ---- 1. decodes (with the policy's plan), preempting on KV shortage
        plan, batch, dec_ids = None, None, np.zeros(0, np.int64)
        while True:
            ids = np.fromiter(self.running, np.int64, len(self.running))
            is_dec = ~t.in_prefill[ids] if ids.size else np.zeros(0, bool)
            dec_ids = ids[is_dec]
            if not dec_ids.size:
                plan = None
                break
            batch = BatchView(request_ids=dec_ids, context=t.computed[dec_ids],
                              generated=t.generated[dec_ids], output_len=t.output_len[dec_ids],
                              prompt_len=t.prompt_len[dec_ids], batch_size=int(ids.size),
                              now_s=now)
            plan = self.policy.propose(batch, self.rng)
            tokens = plan.verify_tokens
            total = int(tokens.sum())
            if total > budget:
                over = np.cumsum(tokens) > budget
                plan.trim(~over)
                tokens = plan.verify_tokens
            need = -(-(t.computed[dec_ids] + tokens) // bs) - t.blocks[dec_ids]
            need = np.maximum(need, 0)
            if self.used_blocks + int(need.sum()) <= lim.kv_blocks:
                break
            if len(self.running) == 1 and plan.num_draft.any():
                # a lone request always fits without drafts (checked at admission)
                plan.trim(np.zeros(dec_ids.size, bool))
                tokens = plan.verify_tokens
                need = np.maximum(-(-(t.computed[dec_ids] + tokens) // bs) - t.blocks[dec_ids], 0)
                break
            self._preempt_last()
            preempted += 1
        if plan is not None:
            fits = np.cumsum(plan.verify_tokens) <= budget
            if not fits.all():  # not even one token each: drop the tail from this step
                keep = np.flatnonzero(fits)
                dec_ids = dec_ids[keep]
                batch = BatchView(request_ids=dec_ids, context=batch.context[keep],
                                  generated=batch.generated[keep],
                                  output_len=batch.output_len[keep],
                                  prompt_len=batch.prompt_len[keep],
                                  batch_size=batch.batch_size, now_s=now)
                plan.num_draft = plan.num_draft[keep]
                plan.verify_tokens = plan.verify_tokens[keep]
                need = need[keep]
            t.blocks[dec_ids] += need
            self.used_blocks += int(need.sum())
            budget -= int(plan.verify_tokens.sum())
        # ---- 2. unfinished prefills of running requests, then admissions
        pf_ids: list[int] = []
        pf_chunks: list[int] = []
        for rid in (ids[~is_dec].tolist() if ids.size else ()):  # running, mid-prefill
            if budget <= 0:
                break
            chunk = self._fit_chunk(rid, budget)
            if chunk > 0:
                self._allocate(rid, chunk)
                pf_ids.append(rid)
                pf_chunks.append(chunk)
                budget -= chunk
        while self.waiting and budget > 0 and len(self.running) < lim.max_num_seqs:
            rid = self.waiting[0]
            remaining = int(t.prefill_target[rid] - t.computed[rid]) if t.in_prefill[rid] \
                else int(t.prompt_len[rid] + t.generated[rid])
            if not lim.enable_chunked_prefill and remaining > budget:
                break
            if not t.in_prefill[rid]:  # first admission
                t.in_prefill[rid] = True
                t.prefill_target[rid] = t.prompt_len[rid] + t.generated[rid]
            chunk = self._fit_chunk(rid, budget)
            if chunk <= 0 or (not lim.enable_chunked_prefill and chunk < remaining):
                break
            self.waiting.popleft()
            self._allocate(rid, chunk)
            self.running.append(rid)
            t.status[rid] = RUNNING
            if np.isnan(t.first_scheduled_s[rid]):
                t.first_scheduled_s[rid] = now
            pf_ids.append(rid)
            pf_chunks.append(chunk)
            budget -= chunk
        n_dec = int(dec_ids.size)
        if not pf_ids and not n_dec:
            return None
        pf = np.asarray(pf_ids, np.int64)
        chunks = np.asarray(pf_chunks, np.int64)
        # ---- 3. price the step
        pf_ctx = t.computed[pf]
        completes = (pf_ctx + chunks) >= t.prefill_target[pf]
        if n_dec:
            new = np.concatenate((plan.verify_tokens, chunks)).astype(np.float64)
            ctx = np.concatenate((batch.context, pf_ctx)).astype(np.float64)
            logits = np.concatenate((plan.verify_tokens, completes)).astype(np.float64)
            draft_s = plan.draft_time_s + plan.cpu_time_s
        else:
            new, ctx = chunks.astype(np.float64), pf_ctx.astype(np.float64)
            logits = completes.astype(np.float64)
            draft_s = 0.0
        if pf.size:
            draft_s += self.policy.prefill_time(chunks.astype(np.float64),
                                                pf_ctx.astype(np.float64))
        verify_s = self.target_cost.step_time(new, ctx, logits)
        return {"duration": draft_s + verify_s, "draft_s": draft_s, "verify_s": verify_s,
                "plan": plan, "batch": batch, "dec_ids": dec_ids, "pf": pf, "chunks": chunks,
                "completes": completes, "start": now, "preempted": preempted,
                "kv_read": float((ctx + new).sum()),
                "attn_pairs": float((new * (ctx + 0.5 * (new + 1.0))).sum())}

    def _allocate(self, rid: int, chunk: int) -> None:
        """Grow ``rid``'s blocks to hold ``chunk`` more tokens (checked by _fit_chunk)."""
        t = self.t
        need = -(-int(t.computed[rid] + chunk) // self.limits.block_size) - int(t.blocks[rid])
        if need > 0:
            t.blocks[rid] += need
            self.used_blocks += need

    def _fit_chunk(self, rid: int, budget: int) -> int:
        """Largest prefill chunk of ``rid`` within the token budget and the free KV blocks."""
        t, bs = self.t, self.limits.block_size
        remaining = int(t.prefill_target[rid] - t.computed[rid])
        chunk = min(remaining, budget)
        free_tokens = (self.limits.kv_blocks - self.used_blocks) * bs \
            + int(t.blocks[rid]) * bs - int(t.computed[rid])
        return max(0, min(chunk, free_tokens))

    def _complete(self, step: dict) -> None:
        t, now = self.t, self.env.now
        finished: list[np.ndarray] = []
        emitted_total = 0
        # ---- prefills
        pf, chunks, completes = step["pf"], step["chunks"], step["completes"]
        if pf.size:
            t.computed[pf] += chunks
            self.outstanding_tokens -= int(chunks.sum())
            done = pf[completes]
            if done.size:
                t.in_prefill[done] = False
                had = t.generated[done] > 0
                if had.any():
                    self.rec.itl.extend(now - t.last_emit_s[done[had]])
                t.generated[done] += 1
                emitted_total += int(done.size)
                self.outstanding_tokens -= int(done.size)
                first = np.isnan(t.first_token_s[done])
                t.first_token_s[done[first]] = now
                t.last_emit_s[done] = now
                finished.append(done[t.generated[done] >= t.output_len[done]])
        # ---- decodes
        plan, dec = step["plan"], step["dec_ids"]
        draft_tokens = accepted_total = 0
        if plan is not None and dec.size:
            batch = step["batch"]
            accepted = np.asarray(self.policy.accept(plan, batch, self.rng), np.int64)
            accepted = np.clip(accepted, 0, plan.num_draft)
            remaining = t.output_len[dec] - t.generated[dec]
            emitted = np.minimum(accepted + 1, remaining)
            step["emitted"] = emitted
            self.rec.itl.extend(now - t.last_emit_s[dec])
            t.generated[dec] += emitted
            t.computed[dec] += emitted
            t.last_emit_s[dec] = now
            self.outstanding_tokens -= int(emitted.sum())
            emitted_total += int(emitted.sum())
            drafted = plan.num_draft > 0
            t.num_drafts[dec] += drafted
            t.num_draft_tokens[dec] += plan.num_draft
            t.num_accepted[dec] += accepted
            draft_tokens = int(plan.num_draft.sum())
            accepted_total = int(accepted.sum())
            self.rec.record_acceptance(plan.num_draft, accepted)
            # roll back the KV of rejected drafts
            keep_blocks = -(-t.computed[dec] // self.limits.block_size)
            freed = np.maximum(t.blocks[dec] - keep_blocks, 0)
            t.blocks[dec] -= freed
            self.used_blocks -= int(freed.sum())
            self.policy.observe(plan, batch, accepted, step["duration"])
            finished.append(dec[t.generated[dec] >= t.output_len[dec]])
        if self.rec.record_events:
            self._log_emissions(step, now)
        # ---- finish
        done = np.concatenate(finished) if finished else np.zeros(0, np.int64)
        if done.size:
            t.finish_s[done] = now
            t.status[done] = FINISHED
            self.used_blocks -= int(t.blocks[done].sum())
            t.blocks[done] = 0
            if self.rec.record_events:
                self.rec.events.extend((now, "finish", int(r), 0) for r in sorted(done.tolist()))
            gone = set(done.tolist())
            self.running = [r for r in self.running if r not in gone]
            if self.on_finish is not None:
                self.on_finish(int(done.size))
        n_dec = int(dec.size) if plan is not None else 0
        self.rec.steps.append((
            self.index, step["start"], step["duration"], step["draft_s"], step["verify_s"],
            n_dec + int(pf.size), int(pf.size), n_dec, int(chunks.sum()),
            int(plan.verify_tokens.sum()) if plan is not None else 0, emitted_total,
            draft_tokens, accepted_total, self.used_blocks,
            self.used_blocks / self.limits.kv_blocks, len(self.waiting), step["kv_read"],
            step["attn_pairs"], step["preempted"]))

    def _log_emissions(self, step: dict, now: float) -> None:
        """Append first-token and token events of this step (tests assert exact timelines)."""
        t, ev = self.t, self.rec.events
        pf, completes = step["pf"], step["completes"]
        for rid in pf[completes].tolist():
            kind = "first_token" if t.first_token_s[rid] == now and t.generated[rid] == 1 \
                else "token"
            ev.append((now, kind, int(rid), 1))
        if step["plan"] is not None:
            for rid, n in zip(step["dec_ids"].tolist(), step["emitted"].tolist()):
                ev.append((now, "token", int(rid), int(n)))


