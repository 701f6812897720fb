"""The SimPy serving engine: one ``Replica`` per model instance, iteration-level scheduling.

Shaped as SimPy's own examples: ``Arrivals`` (router.py) is a plain generator process that
routes each request to a replica; a ``Replica`` starts its own process in ``__init__`` and
sleeps on an ``env.event()`` while idle.  An iteration is DESIGN section 5 inside vLLM-style
continuous batching, one token budget shared by decodes and prefills:

1. plan the decodes (``_plan_decodes``): the policy drafts for the running decodes; while their
   KV does not fit, the latest admitted request is preempted (recompute, as vLLM does) and
   the policy asked again; ``_reserve_decodes`` fits them to the budget, grows their KV;
2. plan the prefills (``_plan_prefills``): running requests' unfinished prefill chunks
   first, then admissions (``_admit``), FIFO while the token budget, the sequence limit and
   the KV blocks allow (chunked prefill optional);
3. price the step (``_price``): draft (the proposer's time, serial), then verify (one target
   forward over every request's exact token count) into a frozen ``Step``;
4. advance time by the step's duration, then complete it (completion.py).

Under ``none`` the four run fused (plain_step.py), with the same results; a preemption, a
prefix cache (own_cache.py: only while a preempted request waits) or the event log take the
path above.  The running requests' state is the ``RunningBatch``, the others' the table.

**Fast-forward** (``engine.fast_forward``, the default).  Between two arrivals nothing outside
a replica reads or changes it (its own random stream; the tables ignore the order replicas
report in), so it completes every step ending before the next arrival at once, on its own
clock ``now``, with no SimPy timeout: pure decodes in one vectorised pass (fast_forward.py;
under ``none``, ``_run_lazy``: lazy_decode.py), a ``ChainStretch``'s all-decoding stretches
too (chain_stretch.py; its admissions fused, chain_step.py), a ``VariedDraft``'s on arrays
(varied_stretch.py).  It yields only for a step ending at or after the next arrival.  The
same decisions, draws and float operations in the same order: identical results.
"""
from __future__ import annotations

from collections import deque
from typing import Callable

import numpy as np
import simpy

from simulator.engine.admission import Admission
from simulator.engine.batch import RunningBatch
from simulator.engine.chain_short import advance_chain
from simulator.engine.chain_stretch import ChainCrossing, chain_stretch_of, complete_crossing
from simulator.engine.chain_step import ChainStep, chain_complete, chain_schedule
from simulator.engine.completion import Completion
from simulator.engine.fast_forward import RETIRED, advance_decodes, delay_to
from simulator.engine.forward import Forward
from simulator.engine.lazy_decode import LazyDecodes
from simulator.engine.plain_step import PlainStep, PlainSteps
from simulator.engine.own_cache import OwnCache
from simulator.engine.prefill_first import separate_schedule
from simulator.engine.plan import BatchView, DraftPlan, Policy, StepPricer, closed_forms
from simulator.engine.recorder import Recorder
from simulator.engine.requests import WAITING, EngineLimits, RequestTable
from simulator.engine.reserve import RatioClock
from simulator.engine.step import NO_FLOATS, NO_IDS, Step
from simulator.engine.varied_stretch import advance_varied, varied_draft_of

_SUM = np.add.reduce  # ndarray.sum without its method layer (the same pairwise sum)


class Replica(LazyDecodes, PlainSteps, Admission, Completion, Forward):
    """One model instance: a waiting queue, a running batch and its own SimPy process."""

    lazy_decodes = True  # plain decodes in the lazy form under fast-forward (lazy_decode.py)

    def __init__(self, env: simpy.Environment, index: int, table: RequestTable,
                 limits: EngineLimits, target_cost: StepPricer, policy: Policy,
                 rng: np.random.Generator, recorder: Recorder,
                 on_finish: Callable[[int], None] | None = None, *,
                 arrivals=None, fast_forward: bool = False, prefix_cache=None,
                 own_keys=None) -> None:
        self.env, self.index, self.t, self.limits = env, index, table, limits
        self.target_cost, self.policy, self.rng, self.rec = target_cost, policy, rng, recorder
        self.on_finish = on_finish  # on_finish(n): n requests just finished (progress)
        self.arrivals = arrivals  # the run's Arrivals (its next_time), None: never ahead
        self.fast_forward = bool(fast_forward) and arrivals is not None \
            and not recorder.record_events
        self.cache = prefix_cache  # a PrefixCache (prefix_cache.py), None: caching off
        self.own = None if own_keys is None else OwnCache(own_keys)  # own_cache.py
        plain_decode = policy.plain_decode  # one token per decode
        self.plain_ok = plain_decode and not recorder.record_events and limits.mixed_chunk
        self.plain = self.plain_ok and prefix_cache is None  # applies (plain_step.py)
        self.forms = forms = closed_forms(target_cost)  # its closed forms, None: none
        # a step of decodes verifying the same count (1 under a plain-decode policy) with
        # chunks has a mixed price (forward.py)
        self._mixed, self._mixed_verify, self._mixed_one = (None, None, None) if forms is None \
            else (forms.mixed_step_time, forms.mixed_verify_time, forms.mixed_chunk_pricer())
        self._one_token = plain_decode
        # its stretches: a chain's (chain_stretch.py) or varied drafts' (varied_stretch.py)
        self._chain = chain_stretch_of(self) if self.fast_forward else None
        self._varied = varied_draft_of(self) if self.fast_forward else None
        self._hit = (0, 0)  # the queue head's cached blocks, and how many are free ones
        self.waiting: deque[int] = deque()
        self.b = RunningBatch()
        self.used_blocks = 0
        self.outstanding_tokens = 0
        self.now = 0.0  # this replica's clock (ahead of env.now while it fast-forwards)
        self.stats = {"iterations": 0, "vectorised": 0, "timeouts": 0}  # how it ran
        # SGLang's new_token_ratio (reserve.py), None: no admission-time reservation
        self.ratio_clock = None if limits.token_ratio is None \
            else RatioClock(limits.token_ratio)
        self.wakeup = env.event()
        # async scheduling (EngineLimits.async_scheduling): requests that arrived while a
        # step ran wait in ``pending`` until the step after the next (``_release``)
        self.pending: deque[int] = deque()
        self._idle = False          # sleeping on ``wakeup``: an arrival is scheduled at once
        self._last_start = -np.inf  # the start of the last step completed
        self._lazy = self.fast_forward and self.plain and self.lazy_decodes \
            and not limits.async_scheduling
        self.process = env.process(self._run_lazy() if self._lazy else self.run())

    # ------------------------------------------------------------------ arrivals
    def submit(self, rid: int) -> None:
        """Queue a request; wake the replica if it is idle."""
        t = self.t
        t.status[rid] = WAITING
        t.replica[rid] = self.index
        if self.limits.async_scheduling and not self._idle:
            self.pending.append(rid)  # a step is under way: the next one is already planned
        else:
            self.waiting.append(rid)
        self.outstanding_tokens += int(t.prompt_len[rid] + t.output_len[rid])
        if self.rec.record_events:
            self.rec.events.append((self.env.now, "arrival", rid, 0))
        if not self.wakeup.triggered:
            self.wakeup.succeed()

    # ------------------------------------------------------------------ the loop
    def run(self):
        """The replica's process: iterate while there is work, sleep otherwise."""
        env = self.env
        while True:
            if self._lazy and self.cache is None:  # an own-blocks cache stopped: the lazy
                return                             # form's loop again (lazy_decode.py)
            if self.pending:
                self._release()
            if not self.b.ids.size and not self.waiting:
                if self.ratio_clock is not None:  # SGLang's self_check_during_idle
                    self.ratio_clock.reset(self.stats["iterations"])
                self.wakeup = env.event()
                self._idle = True
                yield self.wakeup
                self._idle = False
                self.now = env.now
                continue
            step = None
            if self.fast_forward and not self.pending:  # one step at a time while any waits
                done, step = advance_chain(self, self._chain) if self._chain is not None \
                    else advance_varied(self, self._varied) if self._varied is not None \
                    else advance_decodes(self)
                if done == RETIRED:
                    continue  # the batch changed: idle now, or another stretch
            if step is None and self.plain:
                step = self._plain_schedule(self.now)
            elif step is None and self._chain is not None and self.limits.mixed_chunk:
                step = chain_schedule(self, self._chain, self.now)  # admissions fused
            if step is None:
                step = self._schedule(self.now)
            if step is None:  # nothing could be scheduled (cannot happen with valid limits)
                raise RuntimeError("scheduler made no progress")
            end = step.start_s + step.duration_s  # SimPy's now + delay
            if not self.fast_forward:
                yield env.timeout(step.duration_s)
                self.stats["timeouts"] += 1
            elif end >= self.arrivals.horizon(self.index):
                yield env.timeout(delay_to(env.now, end))
                self.stats["timeouts"] += 1
            self.stats["iterations"] += 1
            self.now, self._last_start = end, step.start_s
            if step.__class__ is PlainStep:
                self._plain_complete(step, end)
            elif step.__class__ is ChainCrossing:
                complete_crossing(self, step.spec, step, end)  # a varied draft's too
            elif step.__class__ is ChainStep:
                chain_complete(self, self._chain, step, end)
            else:
                self._complete(step, end)

    def _release(self) -> None:
        """Async scheduling (vLLM V1's ``EngineCore.step_with_batch_queue``, a queue of two
        batches: step k+1 is scheduled and launched as soon as step k is, the run loop
        draining new requests only between; vllm/v1/engine/core.py:300-352 and :720-748 in
        the 0.11.0 wheel): the requests that arrived before the last completed
        step started join the queue now, for the step after it; all of them if nothing else
        is left to run (an idle engine schedules at once)."""
        idle, arrival = not self.b.ids.size and not self.waiting, self.t.arrival_s
        while self.pending and (idle or arrival[self.pending[0]] < self._last_start):
            self.waiting.append(self.pending.popleft())

    # ------------------------------------------------------------------ KV blocks
    def _preempt_last(self) -> int:
        """Preempt the most recently admitted running request (recompute)."""
        t, b, blocks, rid = self.t, self.b, int(self.b.blocks[-1]), int(self.b.ids[-1])
        if self.own is not None:  # the ordinary paths while a preempted request waits
            self.own.preempted(self)
        if self.cache is not None:  # its full blocks stay cached until evicted (vLLM V1)
            self.cache.register(rid, int(b.computed[-1]))
        self.used_blocks -= blocks if self.cache is None else self.cache.release(rid, blocks)
        b.blocks[-1] = 0
        self.outstanding_tokens += int(b.computed[-1])
        b.computed[-1] = 0
        b.prefill_target[-1] = b.prompt_len[-1] + b.generated[-1]
        b.in_prefill[-1] = True
        victim = b.pop_last(t)
        t.status[victim] = WAITING
        t.preemptions[victim] += 1
        self.waiting.appendleft(victim)
        return victim

    def _blocks_needed(self, pos, tokens: np.ndarray) -> np.ndarray:
        """Extra KV blocks the running requests at ``pos`` need to hold ``tokens`` more."""
        b = self.b
        return np.maximum(-(-(b.computed[pos] + tokens) // self.limits.block_size)
                          - b.blocks[pos], 0)

    def _take_blocks(self, n: int) -> None:
        """``n`` more KV blocks in use (from the head of the prefix cache's free queue)."""
        self.used_blocks += n
        if self.cache is not None and n:
            self.cache.allocate(n)

    # ------------------------------------------------------------------ schedule
    def _schedule(self, now: float) -> Step | None:
        """Plan the decodes, then the prefills, in one token budget; price the step."""
        if not self.limits.mixed_chunk:
            return separate_schedule(self, now)
        budget = self.limits.max_num_batched_tokens
        mid_prefill, plan, batch, pos, need, preempted = self._plan_decodes(budget, now)
        decode_tokens = 0
        if plan is not None:
            plan, batch, pos, decode_tokens = self._reserve_decodes(plan, batch, pos, need,
                                                                    budget, now)
        pf_pos, chunks, prefill_tokens = self._plan_prefills(mid_prefill,
                                                             budget - decode_tokens, now)
        if plan is None and not pf_pos.size:
            return None
        return self._price(plan, batch, pos, pf_pos, chunks, now, preempted, decode_tokens,
                           prefill_tokens)

    def _decode_positions(self):
        """Positions of the running decodes (a slice when every running request decodes:
        bounded, as admissions append to the batch after the decodes are planned)."""
        b = self.b
        if b.decoding == b.ids.size:
            return slice(0, int(b.ids.size))
        return np.flatnonzero(~b.in_prefill)

    def _plan_decodes(self, budget: int, now: float):
        """The policy's plan for the running decodes, preempting until their KV fits.

        Returns the positions of the running requests still mid-prefill, the plan and its
        batch (None when nothing decodes), the decodes' positions and the KV blocks each
        needs, and the preemptions made.
        """
        b = self.b
        preempted = 0
        while True:
            plan = batch = need = None
            pos = self._decode_positions()
            if b.decoding:  # copies: a policy may keep what it saw
                batch = BatchView(request_ids=b.ids[pos].copy(),
                                  context=b.computed[pos].copy(),
                                  generated=b.generated[pos].copy(),
                                  output_len=b.output_len[pos].copy(),
                                  prompt_len=b.prompt_len[pos].copy(),
                                  batch_size=int(b.ids.size), now_s=now)
                plan = self.policy.propose(batch, self.rng)
                if int(_SUM(plan.verify_tokens)) > budget:
                    plan.trim(~(np.cumsum(plan.verify_tokens) > budget))
                need = self._blocks_needed(pos, plan.verify_tokens)
                if self.used_blocks + int(_SUM(need)) > self.limits.kv_blocks:
                    if b.ids.size > 1 or not plan.num_draft.any():
                        self._preempt_last()
                        preempted += 1
                        continue
                    # a lone request always fits without drafts (checked at admission)
                    plan.trim(np.zeros(len(batch), bool))
                    need = self._blocks_needed(pos, plan.verify_tokens)
            mid = np.flatnonzero(b.in_prefill) if b.decoding < b.ids.size else NO_IDS
            return mid, plan, batch, pos, need, preempted

    def _reserve_decodes(self, plan: DraftPlan, batch: BatchView, pos, need: np.ndarray,
                         budget: int, now: float):
        """Drop the decodes past the token budget (not one token each left) and grow the KV
        of the rest; returns the plan, its batch, their positions and their target tokens
        (None, None, None, 0 if no decode is left)."""
        tokens = int(_SUM(plan.verify_tokens))
        if tokens > budget:
            keep = np.flatnonzero(np.cumsum(plan.verify_tokens) <= budget)
            if not keep.size:
                return None, None, None, 0
            batch = BatchView(batch.request_ids[keep], batch.context[keep], batch.generated[keep],
                              batch.output_len[keep], batch.prompt_len[keep], batch.batch_size, now)
            plan.num_draft = plan.num_draft[keep]
            plan.verify_tokens = plan.verify_tokens[keep]
            need = need[keep]
            pos = np.arange(self.b.ids.size)[pos][keep]
            tokens = int(plan.verify_tokens.sum())
        self.b.blocks[pos] += need
        self._take_blocks(int(_SUM(need)))
        return plan, batch, pos, tokens

    def _price(self, plan: DraftPlan | None, batch: BatchView | None, pos, pf: np.ndarray,
               chunks: np.ndarray, now: float, preempted: int, decode_tokens: int,
               prefill_tokens: int) -> Step:
        """Draft time, then one target forward over every scheduled token: the ``Step``."""
        if plan is None:
            verify = dec_ctx = NO_FLOATS
            draft_s = 0.0
        else:
            verify = plan.verify_tokens.astype(np.float64)
            dec_ctx = batch.context.astype(np.float64)
            draft_s = plan.draft_time_s + plan.cpu_time_s
        draft_s, verify_s, completes, kv_read, attn_pairs = self._forward(
            verify, dec_ctx, pf, chunks, draft_s)
        return Step(start_s=now, draft_s=draft_s, verify_s=verify_s, plan=plan, batch=batch,
                    decode_ids=batch.request_ids if plan is not None else NO_IDS,
                    decode_pos=pos if plan is not None else NO_IDS,
                    prefill_ids=self.b.ids[pf] if pf.size else NO_IDS, prefill_pos=pf,
                    chunks=chunks, completes=completes, decode_tokens=decode_tokens,
                    prefill_tokens=prefill_tokens, preempted=preempted,
                    kv_read_tokens=kv_read, attn_pairs=attn_pairs)
