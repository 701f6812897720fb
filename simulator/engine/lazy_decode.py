"""Plain decodes advanced lazily (``LazyDecodes``, mixed into ``Replica``): the fast-forward
loop of a replica under a plain-decode policy (``none``).

Under ``none`` every running decode verifies one token and emits one, every iteration, so
while nothing preempts, the decodes' state moves in lockstep: after ``tick`` iterations each
holds ``tick`` more tokens in its KV, has emitted ``tick`` more, and last emitted at the end
of the previous iteration.  The loop (``_run_lazy``) keeps, instead of touching every decode
every iteration, a few numbers that change in O(1) an iteration:

- each decode's ``computed`` and ``generated`` in the running batch are stored minus the
  ``tick`` at which they were current (``stored + tick`` is the value), and its blocks are
  ``ceil(computed / block_size)`` (plain_step.py's invariant: no drafts, no cached prefix);
- ``_lz_sum``: the decodes' context sum (the cost model prices a decode batch from it);
- ``_lz_hist``: how many decodes hold ``stored mod block_size`` tokens: the decodes that take
  a new KV block in iteration ``tick`` are those holding a multiple of the block size,
  ``_lz_hist[-tick mod block_size]`` of them;
- ``_lz_ends``: a heap of (the tick at which a decode emits its last token: ``output_len``
  minus the stored ``generated``; its id), and ``_lz_fin``, its least tick.

A finish, a completed prefill joining the decodes and an admission touch their own requests
only.  An iteration that carries prefill chunks is planned, priced and completed as the fused
iteration does it (plain_step.py: ``_plan_prefills``, ``_forward``, ``_emit_prefills``, the
same row); a pure-decode stretch, when no admission can happen, in one pass
(lazy_stretch.py: the step times from the context sums, the KV from the histogram).  What
the lockstep does not cover (no decode, more decodes than the token budget, a preemption, a
decode whose last emission was not the previous iteration's end) leaves the lazy form
(``_lazy_exit``: every value written back) for the fused or ordinary iteration, and the next
iteration comes back to it.  The same decisions and floating-point operations in the same
order: results identical to the step-by-step reference (tests/simulator/engine/).
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush
from math import isnan

import numpy as np

from simulator.engine.fast_forward import delay_to
from simulator.engine.lazy_stretch import DecodeRun, LazyStretches
from simulator.engine.plain_step import PlainStep
from simulator.engine.requests import FINISHED
from simulator.engine.row_log import RowLog
from simulator.engine.step import NO_IDS

_ALL, _SUM = np.logical_and.reduce, np.add.reduce
_NEVER = 1 << 62  # no decode: no finish ahead


class ChunkStep(PlainStep):
    """A planned and priced iteration of decodes and one prefill chunk (``_lazy_chunk``): a
    ``PlainStep`` whose prefill position, chunk and completion are Python numbers, with the
    request's ``computed`` tokens before the chunk."""

    __slots__ = ("computed",)

    def __init__(self, start_s, draft_s, verify_s, num_decode, pos, chunk, computed, completes,
                 kv_read_tokens, attn_pairs) -> None:
        # PlainStep.__init__'s stores, written out (one call less on every chunk step)
        self.start_s, self.draft_s, self.verify_s = start_s, draft_s, verify_s
        self.duration_s = draft_s + verify_s  # Step.duration_s: draft, then verify
        self.decode_pos, self.num_decode, self.prefill_pos = None, num_decode, pos
        self.chunks, self.completes, self.prefill_tokens = chunk, completes, chunk
        self.kv_read_tokens, self.attn_pairs = kv_read_tokens, attn_pairs
        self.computed = computed


class LazyDecodes(LazyStretches):
    """The lazily advanced decodes of a replica (see the module docstring)."""

    _lz = False  # whether the decodes are in the lazy form

    def _run_lazy(self):
        """The replica's process under fast-forward with a plain-decode policy."""
        env = self.env
        self._prices = {}  # a short stretch's pricer by batch size (lazy_stretch.py)
        # the policy's prefill_time, where it adds nothing (0.0 whatever the chunk), uncalled
        self._no_prefill_time = not self.policy.prefill_adds_time
        self._log = RowLog(self.rec, self.index, self.limits.kv_blocks)  # flushed when eager
        horizon, index, stats = self.arrivals.horizon, self.index, self.stats  # never rebound
        while True:
            if self.cache is not None:  # a preemption started the prefix cache (own_cache.py):
                self._log.flush()       # the ordinary loop until it stops
                yield from self.run()
                continue
            if not self.b.ids.size and not self.waiting:
                self._lz = False  # nothing runs: nothing is stored lazily
                self._log.flush()
                self.wakeup = env.event()
                yield self.wakeup
                self.now = env.now
                continue
            if self._lz or self._lazy_enter():
                step = self._lazy_stretch()
                if step is True:
                    continue
                step = step or self._lazy_schedule(self.now)
                if step is None:
                    self._lazy_exit()  # the fused or ordinary iteration below takes it
            else:
                step = None
            eager = step is None
            if eager:
                self._log.flush()  # the rows so far before any the eager paths record
                step = self._plain_schedule(self.now) or self._schedule(self.now)
                if step is None:  # cannot happen with valid limits
                    raise RuntimeError("scheduler made no progress")
            end = step.start_s + step.duration_s  # SimPy's now + delay
            if end >= horizon(index):
                yield env.timeout(delay_to(env.now, end))
                stats["timeouts"] += 1
            stats["iterations"] += 1
            self.now = end
            if step.__class__ is ChunkStep:
                self._lazy_chunk_done(step, end)
            elif step.__class__ is DecodeRun:
                self._run_done(step, end)
            elif not eager:
                self._lazy_complete(step, end)
            elif step.__class__ is PlainStep:
                self._plain_complete(step, end)
            else:
                self._complete(step, end)

    # ------------------------------------------------------------------ the lazy form
    def _decode_slice(self):
        """The decodes' positions: a slice when the prefilling ones come last (the usual
        order: admitted last), else a mask."""
        b = self.b
        nd, n = b.decoding, int(b.ids.size)
        if nd == n or _ALL(b.in_prefill[nd:]):
            return slice(0, nd)
        return ~b.in_prefill

    def _lazy_enter(self) -> bool:
        """Take the decodes into the lazy form (tick 0: stored values are the values);
        False where they are not in lockstep: none, or one that did not emit at ``now``."""
        b = self.b
        if not b.decoding:
            return False
        dec = self._decode_slice()
        if not _ALL(b.last_emit[dec] == self.now):
            return False
        c = b.computed[dec]
        bs = self.limits.block_size
        self._lz_tick = 0
        self._lz_sum = int(_SUM(c))
        self._lz_hist = np.bincount(c % bs, minlength=bs).tolist()
        ends = list(zip((b.output_len[dec] - b.generated[dec]).tolist(), b.ids[dec].tolist()))
        heapify(ends)
        self._lz_ends, self._lz_fin = ends, ends[0][0]
        self._lz = True
        return True

    def _lazy_exit(self) -> None:
        """Write every decode's values back (computed, generated, blocks, last emission)."""
        self._lz = False
        b, tick = self.b, self._lz_tick
        if not tick or not b.decoding:
            return
        dec = self._decode_slice()
        b.computed[dec] += tick
        b.generated[dec] += tick
        bs = self.limits.block_size
        b.blocks[dec] = (b.computed[dec] + (bs - 1)) // bs
        b.last_emit[dec] = self.now

    def _lazy_contexts(self) -> np.ndarray:
        """The decodes' contexts in batch order, as floats (what the fused path prices)."""
        b = self.b
        return (b.computed[self._decode_slice()] + self._lz_tick).astype(np.float64)

    # ------------------------------------------------------------------ one iteration
    def _lazy_schedule(self, now: float) -> PlainStep | None:
        """``_plain_schedule`` on the lazy form; None: the eager paths must (no decode, more
        decodes than the budget, a preemption)."""
        b, lim = self.b, self.limits
        nd, n = b.decoding, int(b.ids.size)
        budget = lim.max_num_batched_tokens
        if not nd or nd > budget:
            return None
        taken = self._lz_hist[-self._lz_tick % lim.block_size]
        if self.used_blocks + taken > lim.kv_blocks:
            return None
        self.used_blocks += taken  # the decodes' reservation, before the prefills'
        if n - nd == 1 and (not self.waiting or self.ratio_clock is None):
            # the usual mixed step: no admission (none waits, or the chunk takes the budget)
            step = self._lazy_chunk(now, nd, n, budget - nd, bool(self.waiting))
            if step is not None:
                return step
        if nd == n and self.waiting:  # admissions (``_plan_prefills`` with none mid-prefill)
            pos, sizes = self._admit(budget - nd, now)
            if len(pos) == 1:  # the usual one: priced on Python numbers
                p = pos[0]
                step = self._chunk_step(now, nd, p, sizes[0], int(b.computed[p]),
                                        int(b.prefill_target[p]))
                if step is not None:
                    return step
            pf, chunks = np.asarray(pos, np.int64), np.asarray(sizes, np.int64)
            prefill_tokens = sum(sizes)
        else:
            if nd == n:
                mid = NO_IDS
            elif _ALL(b.in_prefill[nd:]):
                mid = np.arange(nd, n)
            else:
                mid = np.flatnonzero(b.in_prefill)
            pf, chunks, prefill_tokens = self._plan_prefills(mid, budget - nd, now)
        # the decodes keep their positions: admissions append to the batch
        draft_s, verify_s, completes, kv_read, attn_pairs = self._lazy_forward(nd, pf, chunks)
        return PlainStep(now, draft_s, verify_s, None, nd, pf, chunks, completes,
                         prefill_tokens, kv_read, attn_pairs)

    def _lazy_forward(self, nd: int, pf: np.ndarray, chunks: np.ndarray):
        """``_forward(np.ones(nd), self._lazy_contexts(), pf, chunks, 0.0)``: with chunks,
        its ``_mixed_forward`` on Python numbers (the decodes' context sum is ``_lz_sum``,
        whole numbers: exact as the float sum), no per-decode array; ``_forward`` itself
        where ``mixed_step_time`` has no price or nothing prefills."""
        if pf.size and self._mixed is not None:
            b = self.b
            ch, cx = chunks.tolist(), b.computed[pf].tolist()
            done = [x + c >= t for c, x, t in zip(ch, cx, b.prefill_target[pf].tolist())]
            s = float(self._lz_sum)
            verify_s = self._mixed(nd, s, ch, cx, float(nd + sum(done)))
            if verify_s is not None:
                draft_s = 0.0 if self._no_prefill_time else 0.0 + self.policy.prefill_time(
                    chunks.astype(np.float64), np.array(cx, np.float64))
                pairs = sum(c * x + c * (c + 1) // 2 for c, x in zip(ch, cx)) + nd
                return draft_s, verify_s, np.array(done, bool), \
                    s + nd + float(sum(ch) + sum(cx)), s + float(pairs)
        return self._forward(np.ones(nd), self._lazy_contexts(), pf, chunks, 0.0)

    def _lazy_chunk(self, now: float, nd: int, n: int, budget: int,
                    fill: bool = False) -> ChunkStep | None:
        """The fused iteration of ``nd`` decodes and the one prefilling request, when no
        admission follows its chunk: ``_plan_prefills`` and ``_forward`` (its
        ``mixed_step_time``) on Python numbers; None (nothing changed) where it has no chunk,
        no mixed price or, with ``fill`` (a queue waits, no SGLang reservation), a chunk
        short of the budget (``_plan_prefills`` would then try the queue's head; with the
        budget spent, ``admission_chunk`` answers 0 and changes nothing)."""
        b = self.b
        p = n - 1 if b.in_prefill[n - 1] else int(np.flatnonzero(b.in_prefill)[0])
        computed, blocks, target = int(b.computed[p]), int(b.blocks[p]), \
            int(b.prefill_target[p])
        chunk = self._fit_chunk(computed, blocks, target - computed, budget) \
            if budget > 0 else 0
        if chunk <= 0 or (fill and chunk < budget):
            return None
        step = self._chunk_step(now, nd, p, chunk, computed, target)
        if step is not None:
            add = self._blocks_for(computed, blocks, chunk)
            b.blocks[p] = blocks + add
            self.used_blocks += add  # no prefix cache under the lazy form
        return step

    def _chunk_step(self, now: float, nd: int, p: int, chunk: int, computed: int,
                    target: int) -> ChunkStep | None:
        """``_forward`` of ``nd`` decodes and the chunk of the request at ``p`` (``computed``
        tokens in its KV, ``target`` to prefill) by ``mixed_step_time`` (None where it gives
        way); changes nothing."""
        if self._mixed_one is None:
            return None
        completes = computed + chunk >= target
        s = float(self._lz_sum)
        verify_s = self._mixed_one(nd, s, chunk, computed, float(nd + completes))
        if verify_s is None:
            return None
        draft_s = 0.0 if self._no_prefill_time else 0.0 + self.policy.prefill_time(
            np.array([float(chunk)]), np.array([float(computed)]))
        pairs = chunk * computed + chunk * (chunk + 1) // 2
        return ChunkStep(now, draft_s, verify_s, nd, p, chunk, computed, completes,
                         s + nd + float(chunk + computed), s + nd + float(pairs))

    def _lazy_chunk_done(self, step: ChunkStep, now: float) -> None:
        """``_lazy_complete`` of a ``ChunkStep``: ``_emit_prefills`` on Python numbers."""
        b, p, nd, chunk = self.b, step.prefill_pos, step.num_decode, step.chunks
        b.computed[p] = step.computed + chunk
        self.outstanding_tokens -= chunk
        if step.completes:
            self._prefilled(p, now)
        self.rec.record_itl_repeated(now - step.start_s, nd)
        tick = self._lz_tick = self._lz_tick + 1
        self._lz_sum += nd
        self.outstanding_tokens -= nd
        if step.completes:
            self._lazy_join(p)
        if self._lz_fin <= tick:
            self._lazy_retire(now)
        # ``_plain_row(step, 1, int(step.completes), self._log.row)``'s row, by its values
        self._log.chunk_row((step.start_s, step.duration_s, step.draft_s, step.verify_s, nd,
                             chunk, int(step.completes) + nd, self.used_blocks,
                             len(self.waiting), step.kv_read_tokens, step.attn_pairs))

    def _prefilled(self, p: int, now: float) -> None:
        """The request at ``p`` completed its prefill at ``now``: its first token (or, a
        preempted one resuming, its next: its ITL runs on), as ``_emit_prefills`` emits it."""
        b = self.b
        b.in_prefill[p] = False
        b.decoding += 1
        generated = int(b.generated[p])
        if generated:  # a preempted request resuming: its ITL runs on
            self.rec.record_itl(np.array([now - b.last_emit[p]]))
        b.generated[p] = generated + 1
        self.outstanding_tokens -= 1
        rid = int(b.ids[p])
        if isnan(self.t.first_token_s[rid]):
            self.t.first_token_s[rid] = now
        b.last_emit[p] = now

    def _lazy_emit(self, step: PlainStep, now: float) -> list[int]:
        """``_emit_prefills`` of the lazy form's chunks (it runs without a prefix cache) by
        scalar stores, chunk by chunk: the same integers and floats; the positions whose
        prefill completed, in order."""
        b, done = self.b, []
        for p, c, last in zip(step.prefill_pos.tolist(), step.chunks.tolist(),
                              step.completes.tolist()):
            b.computed[p] += c
            if last:
                done.append(p)
        self.outstanding_tokens -= step.prefill_tokens
        for p in done:
            self._prefilled(p, now)
        return done

    def _lazy_complete(self, step: PlainStep, now: float) -> None:
        """``_plain_complete`` on the lazy form: the prefills' tokens, one per decode (all of
        them last emitted when this step started), the finished retired, the row."""
        prefilled = self._lazy_emit(step, now)
        nd = step.num_decode
        self.rec.record_itl_repeated(now - step.start_s, nd)
        self._lz_tick += 1
        self._lz_sum += nd
        self.outstanding_tokens -= nd
        for p in prefilled:
            self._lazy_join(p)
        if self._lz_fin <= self._lz_tick:
            self._lazy_retire(now)
        self._plain_row(step, int(step.prefill_pos.size), len(prefilled), self._log.row)

    def _lazy_join(self, p: int) -> None:
        """The request at ``p`` finished its prefill this iteration: a decode now, its values
        stored minus the tick."""
        b, tick = self.b, self._lz_tick
        c, g = int(b.computed[p]), int(b.generated[p])
        b.computed[p] = c - tick
        b.generated[p] = g - tick
        self._lz_sum += c
        self._lz_hist[(c - tick) % self.limits.block_size] += 1
        heappush(self._lz_ends, (int(b.output_len[p]) - (g - tick), int(b.ids[p])))
        self._lz_fin = self._lz_ends[0][0]

    def _lazy_retire(self, now: float) -> None:
        """Retire the decodes that emitted their last token (the heap's entries at or below
        the tick), last position first (the earlier positions stay put)."""
        ends, tick, done = self._lz_ends, self._lz_tick, []
        while ends and ends[0][0] <= tick:  # the heap's entries at or below the tick
            done.append(heappop(ends)[1])
        ids = self.b.ids.tolist()
        for p in sorted((ids.index(rid) for rid in done), reverse=True):
            self._lazy_retire_one(now, p)
        self._lz_fin = ends[0][0] if ends else _NEVER

    def _lazy_retire_one(self, now: float, p: int) -> None:
        """Retire the decode at ``p`` (``_retire`` on Python numbers): its values written
        back (no blocks), its column removed."""
        t, tick, bs = self.t, self._lz_tick, self.limits.block_size
        rid, c = self.b.retire_one(t, p, tick, now)
        t.finish_s[rid] = now
        t.status[rid] = FINISHED
        self.used_blocks -= -(-c // bs)
        self._lz_sum -= c
        self._lz_hist[(c - tick) % bs] -= 1
        if self.on_finish is not None:
            self.on_finish(1)
