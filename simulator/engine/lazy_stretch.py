"""The pure-decode stretches of the lazy form (``LazyStretches``, lazy_decode.py's base).

When every running request decodes and no admission can happen, a replica under ``none``
repeats the same iteration until a request finishes, the next arrival comes or the KV cache
runs out.  ``_lazy_stretch`` advances every iteration before the first of those (the one that
retires a request included) at once: their step times from the decodes' context sum (one more
token each per iteration), the clock as SimPy would add the timeouts, each one's KV reservation
from the block-residue histogram, the rows and the ITL runs, and the lazy form ``k`` ticks on.
A short stretch (most end at the next arrival within a few iterations) is priced iteration by
iteration on Python numbers (the cost model's ``uniform_pricer``), its rows and gaps left in
the replica's ``RowLog`` (row_log.py); a longer one in vectorised blocks
(``uniform_step_times``); both give the floats ``step_time`` gives.  The iteration that
crosses the next arrival comes out planned and priced, with the short stretch before it, as
one ``DecodeRun``: the caller yields to SimPy until it ends and ``_run_done`` records the
run.
"""
from __future__ import annotations

import numpy as np

from simulator.engine.fast_forward import admission_blocked, reread_kv, stretch_rows

MAX_STRETCH_ITERATIONS = 1 << 16  # iterations per vectorised pass (bounds its arrays)
_FIRST_BLOCK = 32  # iterations priced first (then twice as many, ... up to the bound)
_STEPS = np.arange(MAX_STRETCH_ITERATIONS, dtype=np.float64)  # iteration j of a stretch
_SHORT = 24  # a stretch is first tried iteration by iteration this far (Python numbers)
_MISSING = object()


class DecodeRun:
    """The iterations of a short stretch that precede the next arrival (their durations,
    ends and KV reservations; ``first_s``: when the first started; ``ctx``: the decodes'
    context sum then; ``queue``: the queue's length throughout) and the iteration that
    crosses the arrival, which starts at ``start_s`` and lasts ``verify_s``: advanced when
    planned, recorded when the crossing one completes."""

    __slots__ = ("first_s", "start_s", "verify_s", "duration_s", "n", "durations", "ends",
                 "reserved", "ctx", "queue")

    def __init__(self, first_s, start_s, verify_s, n, durations, ends, reserved, ctx,
                 queue) -> None:
        self.first_s = first_s
        self.start_s = start_s
        self.verify_s = verify_s
        self.duration_s = verify_s  # no draft
        self.n = n
        self.durations = durations
        self.ends = ends
        self.reserved = reserved
        self.ctx = ctx
        self.queue = queue


class LazyStretches:
    """The stretches of the lazy form (see the module docstring)."""

    def _lazy_stretch(self) -> bool | DecodeRun:
        """Advance every iteration of the pure-decode stretch ahead that ends before the
        next arrival, fits the KV cache and precedes the first finish (that one included),
        in one pass (True); when the first one crosses the arrival, that iteration planned
        and priced (its KV reserved; ``uniform_step_times`` is bitwise ``step_time``); False
        (nothing done) where there is no stretch."""
        b, lim = self.b, self.limits
        n = int(b.ids.size)
        if b.decoding != n or n > lim.max_num_batched_tokens:
            return False
        tick, bs = self._lz_tick, lim.block_size
        first = self.used_blocks + self._lz_hist[-tick % bs]
        if first > lim.kv_blocks:
            return False
        if self.waiting and not admission_blocked(self, first, n):
            return False
        forms = self.forms
        if forms is None:
            return False
        horizon = self.arrivals.horizon(self.index)
        k, bound = 0, min(self._lz_fin - tick, MAX_STRETCH_ITERATIONS)
        short = self._short_stretch(n, bound, horizon, first)
        if short is not None:
            return short
        while True:  # a first block, then the rest: most stretches end at an arrival soon
            k = min(bound, max(2 * k, _FIRST_BLOCK))
            # contexts before each: whole numbers below 2**53, exact as floats
            sums = float(self._lz_sum) + float(n) * _STEPS[:k]
            v = forms.uniform_step_times(n, 1, sums, n)
            if v is None:
                return False
            v = np.asarray(v, np.float64)  # a user's pricer may give a list
            clock = np.add.accumulate(np.concatenate(((self.now,), v)))  # now + delay
            if clock[-1] >= horizon or k == bound:
                break
        k = int(clock[1:].searchsorted(horizon, "left"))
        if not k:  # the next iteration crosses the arrival
            return self._decode_run(n, [], [], [], float(v[0]), first)
        # iteration j takes _lz_hist[-(tick + j) mod bs] blocks: the histogram read backwards
        # from -tick mod bs, cyclically
        backwards = np.array(self._lz_hist[::-1] * 2)
        at = bs - 1 - (-tick % bs)
        blocks = backwards[at:at + k] if k <= bs else np.resize(backwards[at:at + bs], k)
        used = self.used_blocks + blocks.cumsum()  # blocks in use after each reservation
        if used[-1] > lim.kv_blocks:  # stop before the first that cannot fit
            k = int(np.argmax(used > lim.kv_blocks))
        self._lazy_commit(v[:k], clock[:k + 1], used[:k], sums[:k])
        return True

    def _short_stretch(self, n: int, bound: int, horizon: float,
                       first: int) -> bool | DecodeRun | None:
        """``_lazy_stretch`` iteration by iteration on Python numbers (the cost model's
        ``uniform_pricer``, bitwise ``uniform_step_times``), for a stretch that ends within
        ``_SHORT`` iterations (most end at the next arrival soon); None where it does not
        (or the pricer has no scalar form): the vectorised pass takes it.  A stretch that
        ends at the arrival comes out with the crossing iteration as one ``DecodeRun``."""
        price = self._pricer(n)
        if price is None:
            return None
        lim, tick, hist = self.limits, self._lz_tick, self._lz_hist
        bs, kv, ctx = lim.block_size, lim.kv_blocks, self._lz_sum
        now, used = self.now, self.used_blocks
        ends, durations, reserved = [], [], []
        x, at = ctx, -tick % bs  # iteration j: contexts summing to ctx + n j, hist[-(tick + j)]
        for _ in range(min(bound, _SHORT)):
            d = price(x)
            if d is None:
                return None
            end = now + d  # SimPy's now + delay
            u = used + hist[at]
            if u > kv:  # stop before the first that cannot fit (never the first one)
                break
            if end >= horizon:  # this iteration crosses the arrival
                return self._decode_run(n, durations, ends, reserved, d, u)
            ends.append(end)
            durations.append(d)
            reserved.append(u)
            now, used, x, at = end, u, x + n, at - 1 if at else bs - 1
        else:
            if bound > _SHORT:
                return None
        self._short_commit(n, durations, ends, reserved, ctx)
        return True

    def _short_commit(self, n: int, durations: list, ends: list, reserved: list,
                      ctx: int) -> None:
        """``_lazy_commit`` of a short stretch's Python numbers: the rows and gaps go to the
        replica's ``RowLog``."""
        k, first_s = len(durations), self.now
        self._lz_tick += k
        self._lz_sum += n * k
        self.used_blocks = reserved[-1]
        self.outstanding_tokens -= n * k
        self.now = ends[-1]
        self.stats["iterations"] += k
        self.stats["vectorised"] += k
        queue = len(self.waiting)
        if self._lz_fin <= self._lz_tick:  # as the last iteration's completion does
            self._lazy_retire(self.now)
            reserved[-1] = self.used_blocks  # the last row reads the KV it left
        self._log.decodes(n, first_s, ends, durations, reserved, ctx, queue)

    def _pricer(self, n: int):
        """The price of a uniform batch of ``n`` one-token decodes as a function of its
        context sum (the cost model's ``uniform_pricer``), None where there is none."""
        price = self._prices.get(n, _MISSING)
        if price is _MISSING:
            price = self.forms.uniform_pricer(n, 1, n)  # _lazy_stretch: forms is not None
            self._prices[n] = price  # at most one per batch size up to max_num_seqs
        return price

    def _decode_run(self, n: int, durations: list, ends: list, reserved: list,
                    verify_s: float, used: int) -> DecodeRun:
        """The iterations of a short stretch before the arrival (``durations``, ``ends``,
        ``reserved``) advanced on the lazy form without their rows, and the one that crosses
        it planned (its KV reserved: ``used`` blocks) and priced at ``verify_s``: one
        ``DecodeRun`` the caller yields to SimPy for, then ``_run_done`` records."""
        j = len(durations)
        run = DecodeRun(self.now, ends[-1] if j else self.now, verify_s, n, durations, ends,
                        reserved, self._lz_sum, len(self.waiting))
        if j:  # nothing retires before the crossing (j < the first finish)
            self._lz_tick += j
            self._lz_sum += n * j
            self.outstanding_tokens -= n * j
            self.now = ends[-1]
            self.stats["iterations"] += j
            self.stats["vectorised"] += j
        self.used_blocks = used
        return run

    def _run_done(self, run: DecodeRun, now: float) -> None:
        """Complete a ``DecodeRun``'s crossing iteration at ``now`` (one token each, the
        finished retired) and record the whole run: its rows (the crossing's reads the KV and
        the queue as they are now) and its ITL runs."""
        n = run.n
        self._lz_tick += 1
        self._lz_sum += n
        self.outstanding_tokens -= n
        if self._lz_fin <= self._lz_tick:
            self._lazy_retire(now)
        run.ends.append(now)
        run.durations.append(run.verify_s)
        run.reserved.append(self.used_blocks)
        self._log.decodes(n, run.first_s, run.ends, run.durations, run.reserved, run.ctx,
                          run.queue, len(self.waiting))

    def _lazy_commit(self, v: np.ndarray, clock: np.ndarray, used: np.ndarray,
                     sums: np.ndarray) -> None:
        """Move the lazy form ``len(v)`` iterations on, retire what the last one finished,
        record the iterations (fast_forward.py's ``_commit`` on the lazy form)."""
        k, n = v.size, int(self.b.ids.size)
        rows = stretch_rows(self, n, v, clock, used, sums, len(self.waiting))
        # each decode's gaps: the first from the last emission (``now``), then step to step
        self.rec.record_itl_repeated(clock[1:] - clock[:-1], n)
        self._lz_tick += k
        self._lz_sum += n * k
        self.used_blocks = int(used[-1])
        self.outstanding_tokens -= n * k
        self.now = float(clock[-1])
        self.stats["iterations"] += k
        self.stats["vectorised"] += k
        if self._lz_fin <= self._lz_tick:  # as the last iteration's completion does
            self._lazy_retire(self.now)
            reread_kv(rows, self)
        self._log.block(rows)
