"""The SimPy serving engine: one ``Replica`` per model instance, iteration-level scheduling.

Shaped as SimPy's own examples: ``arrivals`` (router.py) is a plain generator process that
routes each request to a replica; a ``Replica`` starts its own process in ``__init__`` and
sleeps on an ``env.event()`` while it has nothing to do.  An iteration is DESIGN section 5
inside vLLM-style continuous batching, one token budget shared by decodes and prefills:

1. plan the decodes (``_plan_decodes``): the policy drafts for the running decodes; while
   their KV does not fit, the most recently admitted request is preempted (recompute, as vLLM
   does) and the policy asked again; ``_reserve_decodes`` fits them to the budget and grows
   their KV;
2. plan the prefills (``_plan_prefills``): running requests' unfinished prefill chunks
   first, then admissions (``_admit``), FIFO while the token budget, the sequence limit and
   the KV blocks allow (chunked prefill optional);
3. price the step (``_price``): draft (the proposer's time, serial), then verify (one target
   forward over every request's exact token count: 1 + drafts for a decode, the chunk for a
   prefill), the two priced into a frozen ``Step``;
4. advance time by the step's duration, then complete it (``_complete``): emit
   (``_emit_prefills``: a finished prefill emits a token; ``_emit_decodes``: accept, each
   decode emits accepted + 1 tokens, never past its output length), roll back rejected
   drafts' KV (``_roll_back``), retire finished requests and free their blocks (``_retire``),
   record the step's ``StepRow`` (``_record``).

All per-request state lives in numpy arrays of a ``RequestTable`` shared by the replicas; the
hot path is vectorised over the batch.
"""
from __future__ import annotations

from collections import deque
from typing import Callable

import numpy as np
import simpy

from simulator.engine.plan import BatchView, DraftPlan, Policy, StepPricer, emitted_tokens
from simulator.engine.recorder import Recorder
from simulator.engine.requests import FINISHED, RUNNING, WAITING, EngineLimits, RequestTable
from simulator.engine.step import NO_IDS, Step, StepRow


class Replica:
    """One model instance: a waiting queue, a running batch and its own SimPy process."""

    def __init__(self, env: simpy.Environment, index: int, table: RequestTable,
                 limits: EngineLimits, target_cost: StepPricer, policy: Policy,
                 rng: np.random.Generator, recorder: Recorder,
                 on_finish: Callable[[int], None] | None = None) -> None:
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
            yield self.env.timeout(step.duration_s)
            self._complete(step)

    # ------------------------------------------------------------------ KV blocks
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

    def _blocks_needed(self, ids: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Extra KV blocks each of ``ids`` needs to hold ``tokens`` more."""
        t = self.t
        return np.maximum(-(-(t.computed[ids] + tokens) // self.limits.block_size)
                          - t.blocks[ids], 0)

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

    # ------------------------------------------------------------------ schedule
    def _schedule(self) -> Step | None:
        """Plan the decodes, then the prefills, within one token budget; price the step."""
        now = self.env.now
        budget = self.limits.max_num_batched_tokens
        mid_prefill, plan, batch, need, preempted = self._plan_decodes(budget, now)
        decode_tokens = 0
        if plan is not None:
            plan, batch, decode_tokens = self._reserve_decodes(plan, batch, need, budget, now)
        pf, chunks, prefill_tokens = self._plan_prefills(mid_prefill, budget - decode_tokens, now)
        if plan is None and not pf.size:
            return None
        return self._price(plan, batch, pf, chunks, now, preempted, decode_tokens, prefill_tokens)

    def _plan_decodes(self, budget: int, now: float) -> tuple[
            list[int], DraftPlan | None, BatchView | None, np.ndarray | None, int]:
        """The policy's plan for the running decodes, preempting until their KV fits.

        Returns the running requests still mid-prefill, the plan and its batch (None when
        nothing decodes), the KV blocks each decode needs, and the preemptions made.
        """
        t = self.t
        preempted = 0
        while True:
            ids = np.fromiter(self.running, np.int64, len(self.running))
            is_dec = ~t.in_prefill[ids] if ids.size else np.zeros(0, bool)
            dec_ids = ids[is_dec]
            plan = batch = need = None
            if dec_ids.size:
                batch = BatchView(request_ids=dec_ids, context=t.computed[dec_ids],
                                  generated=t.generated[dec_ids],
                                  output_len=t.output_len[dec_ids],
                                  prompt_len=t.prompt_len[dec_ids], batch_size=int(ids.size),
                                  now_s=now)
                plan = self.policy.propose(batch, self.rng)
                if int(plan.verify_tokens.sum()) > budget:
                    plan.trim(~(np.cumsum(plan.verify_tokens) > budget))
                need = self._blocks_needed(dec_ids, plan.verify_tokens)
                if self.used_blocks + int(need.sum()) > self.limits.kv_blocks:
                    if len(self.running) > 1 or not plan.num_draft.any():
                        self._preempt_last()
                        preempted += 1
                        continue
                    # a lone request always fits without drafts (checked at admission)
                    plan.trim(np.zeros(dec_ids.size, bool))
                    need = self._blocks_needed(dec_ids, plan.verify_tokens)
            mid_prefill = ids[~is_dec].tolist() if ids.size else []
            return mid_prefill, plan, batch, need, preempted

    def _reserve_decodes(self, plan: DraftPlan, batch: BatchView, need: np.ndarray,
                         budget: int, now: float) -> tuple[DraftPlan | None, BatchView | None, int]:
        """Drop the decodes past the token budget (not one token each left) and grow the KV
        of the rest; returns the plan, its batch and its target tokens (None, None, 0 if no
        decode is left)."""
        tokens = int(plan.verify_tokens.sum())
        if tokens > budget:
            keep = np.flatnonzero(np.cumsum(plan.verify_tokens) <= budget)
            if not keep.size:
                return None, None, 0
            batch = BatchView(request_ids=batch.request_ids[keep], context=batch.context[keep],
                              generated=batch.generated[keep],
                              output_len=batch.output_len[keep],
                              prompt_len=batch.prompt_len[keep],
                              batch_size=batch.batch_size, now_s=now)
            plan.num_draft = plan.num_draft[keep]
            plan.verify_tokens = plan.verify_tokens[keep]
            need = need[keep]
            tokens = int(plan.verify_tokens.sum())
        self.t.blocks[batch.request_ids] += need
        self.used_blocks += int(need.sum())
        return plan, batch, tokens

    def _plan_prefills(self, mid_prefill: list[int], budget: int,
                       now: float) -> tuple[np.ndarray, np.ndarray, int]:
        """Prefill chunks: running requests' unfinished prefills first, then admissions;
        returns (request ids, chunk lengths, their total)."""
        ids: list[int] = []
        chunks: list[int] = []
        for rid in mid_prefill:
            if budget <= 0:
                break
            chunk = self._fit_chunk(rid, budget)
            if chunk > 0:
                self._allocate(rid, chunk)
                ids.append(rid)
                chunks.append(chunk)
                budget -= chunk
        admitted, admitted_chunks = self._admit(budget, now)
        chunks += admitted_chunks
        return np.asarray(ids + admitted, np.int64), np.asarray(chunks, np.int64), sum(chunks)

    def _admit(self, budget: int, now: float) -> tuple[list[int], list[int]]:
        """Admit waiting requests FIFO while the budget, the sequence limit and the KV allow."""
        t, lim = self.t, self.limits
        ids: list[int] = []
        chunks: list[int] = []
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
            ids.append(rid)
            chunks.append(chunk)
            budget -= chunk
        return ids, chunks

    def _price(self, plan: DraftPlan | None, batch: BatchView | None, pf: np.ndarray,
               chunks: np.ndarray, now: float, preempted: int, decode_tokens: int,
               prefill_tokens: int) -> Step:
        """Draft time, then one target forward over every scheduled token: the ``Step``."""
        t = self.t
        pf_ctx = t.computed[pf]
        completes = (pf_ctx + chunks) >= t.prefill_target[pf]
        if plan is not None:
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
        return Step(start_s=now, draft_s=draft_s, verify_s=verify_s, plan=plan, batch=batch,
                    decode_ids=batch.request_ids if plan is not None else NO_IDS,
                    prefill_ids=pf, chunks=chunks, completes=completes,
                    decode_tokens=decode_tokens, prefill_tokens=prefill_tokens,
                    preempted=preempted,
                    kv_read_tokens=float((ctx + new).sum()),
                    attn_pairs=float((new * (ctx + 0.5 * (new + 1.0))).sum()))

    # ------------------------------------------------------------------ complete
    def _complete(self, step: Step) -> None:
        """Emit, roll back rejected drafts' KV, retire finished requests, record the step."""
        now = self.env.now
        prefilled = self._emit_prefills(step, now)
        emitted_tokens = int(prefilled.size)
        emitted = accepted = None
        if step.plan is not None:
            emitted, accepted, decoded = self._emit_decodes(step, now)
            emitted_tokens += decoded
            self._roll_back(step.decode_ids)
            self.policy.observe(step.plan, step.batch, accepted, step.duration_s)
        if self.rec.record_events:
            self._log_emissions(step, emitted, now)
        self._retire(np.concatenate((prefilled, step.decode_ids)), now)
        self._record(step, emitted_tokens, accepted)

    def _emit_prefills(self, step: Step, now: float) -> np.ndarray:
        """Advance the prefill chunks; a completed prefill emits a token. Returns those."""
        t, pf, chunks = self.t, step.prefill_ids, step.chunks
        if not pf.size:
            return NO_IDS
        t.computed[pf] += chunks
        self.outstanding_tokens -= step.prefill_tokens
        done = pf[step.completes]
        if done.size:
            t.in_prefill[done] = False
            had = t.generated[done] > 0  # a preempted request resuming: its ITL runs on
            if had.any():
                self.rec.itl.extend(now - t.last_emit_s[done[had]])
            t.generated[done] += 1
            self.outstanding_tokens -= int(done.size)
            first = np.isnan(t.first_token_s[done])
            t.first_token_s[done[first]] = now
            t.last_emit_s[done] = now
        return done

    def _emit_decodes(self, step: Step, now: float) -> tuple[np.ndarray, np.ndarray, int]:
        """Accept, then emit accepted + 1 tokens per decode; returns (emitted, accepted) per
        decode and the tokens emitted in all."""
        t, plan, dec = self.t, step.plan, step.decode_ids
        accepted = np.asarray(self.policy.accept(plan, step.batch, self.rng), np.int64)
        accepted = np.clip(accepted, 0, plan.num_draft)
        emitted = emitted_tokens(accepted, t.generated[dec], t.output_len[dec])
        self.rec.itl.extend(now - t.last_emit_s[dec])
        t.generated[dec] += emitted
        t.computed[dec] += emitted
        t.last_emit_s[dec] = now
        decoded = int(emitted.sum())
        self.outstanding_tokens -= decoded
        t.num_drafts[dec] += plan.num_draft > 0
        t.num_draft_tokens[dec] += plan.num_draft
        t.num_accepted[dec] += accepted
        self.rec.record_acceptance(plan.num_draft, accepted)
        return emitted, accepted, decoded

    def _roll_back(self, dec: np.ndarray) -> None:
        """Free the KV blocks that held only rejected draft tokens."""
        t = self.t
        keep_blocks = -(-t.computed[dec] // self.limits.block_size)
        freed = np.maximum(t.blocks[dec] - keep_blocks, 0)
        t.blocks[dec] -= freed
        self.used_blocks -= int(freed.sum())

    def _retire(self, emitters: np.ndarray, now: float) -> None:
        """Finish the requests among ``emitters`` that reached their output length."""
        t = self.t
        done = emitters[t.generated[emitters] >= t.output_len[emitters]]
        if not done.size:
            return
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

    def _record(self, step: Step, emitted_tokens: int, accepted: np.ndarray | None) -> None:
        """Record the step's row (after retirement: KV and queue as the next step finds them)."""
        plan, n_dec, n_pf = step.plan, int(step.decode_ids.size), int(step.prefill_ids.size)
        decoded = plan is not None
        self.rec.record_step(StepRow(
            replica=self.index, start_s=step.start_s, duration_s=step.duration_s,
            draft_s=step.draft_s, verify_s=step.verify_s, batch_size=n_dec + n_pf,
            num_prefill=n_pf, num_decode=n_dec, prefill_tokens=step.prefill_tokens,
            decode_tokens=step.decode_tokens, emitted_tokens=emitted_tokens,
            draft_tokens=int(plan.num_draft.sum()) if decoded else 0,
            accepted_tokens=int(accepted.sum()) if decoded else 0,
            kv_blocks_used=self.used_blocks,
            kv_occupancy=self.used_blocks / self.limits.kv_blocks,
            queue_len=len(self.waiting), kv_read_tokens=step.kv_read_tokens,
            attn_pairs=step.attn_pairs, preemptions=step.preempted))

    def _log_emissions(self, step: Step, emitted: np.ndarray | None, now: float) -> None:
        """Append first-token and token events of this step (tests assert exact timelines)."""
        t, ev = self.t, self.rec.events
        for rid in step.prefill_ids[step.completes].tolist():
            kind = "first_token" if t.first_token_s[rid] == now and t.generated[rid] == 1 \
                else "token"
            ev.append((now, kind, int(rid), 1))
        if emitted is not None:
            for rid, n in zip(step.decode_ids.tolist(), emitted.tolist()):
                ev.append((now, "token", int(rid), int(n)))
