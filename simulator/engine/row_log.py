"""A replica's steps-table rows and ITL gaps under the lazy form, kept as Python lists and
handed to the recorder in one vectorised pass (``RowLog``).

A short pure-decode stretch (lazy_stretch.py) is a few iterations; building its rows as an
array costs a dozen numpy calls, more than the stretch's own arithmetic.  The log appends
each stretch's numbers to plain lists instead (a few ``list.extend`` calls) and every
``FLUSH_ROWS`` rows builds all of them at once: the same values, in the same order (the
recorder's ``record_steps`` takes them as consecutive steps of the replica).  A row the lazy
form records one at a time (an iteration with a prefill chunk) goes in between, in its place.
The replica flushes the log before it records any row another way (an eager iteration, a
vectorised stretch) and when it goes idle, so the recorder sees each replica's rows in order.
"""
from __future__ import annotations

from itertools import repeat
from operator import sub

import numpy as np

from simulator.engine.step import STEP_FIELDS

FLUSH_ROWS = 4096  # rows held before they are built and recorded (bounds the lists)
_COL = {name: i for i, name in enumerate(STEP_FIELDS)}
_WIDTH = len(STEP_FIELDS)
_REPLICA, _START, _QUEUE = _COL["replica"], _COL["start_s"], _COL["queue_len"]
_DURATION, _VERIFY = _COL["duration_s"], _COL["verify_s"]
_KV_USED, _KV_OCCUPANCY = _COL["kv_blocks_used"], _COL["kv_occupancy"]
_KV_READ, _PAIRS = _COL["kv_read_tokens"], _COL["attn_pairs"]
_N_COLS = [_COL[name] for name in ("batch_size", "num_decode", "decode_tokens",
                                   "emitted_tokens")]  # n each: one token per decode


class RowLog:
    """The rows and ITL gaps a replica's lazy form has not handed to the recorder yet."""

    def __init__(self, rec, index: int, kv_blocks: int) -> None:
        self.rec, self.index, self.kv_blocks = rec, index, kv_blocks
        self.size = 0
        self._clear()

    def _clear(self) -> None:
        self.single: list[tuple] = []  # rows recorded one at a time
        self.is_single: list[bool] = []  # per row, in order: which list it is in
        # decode rows: start, duration, KV blocks after the reservation, the decodes'
        # context sum before the iteration, batch size, queue length
        self.start: list[float] = []
        self.dur: list[float] = []
        self.used: list[int] = []
        self.ctx: list[int] = []
        self.n: list[int] = []
        self.queue: list[int] = []
        self.gaps: list[float] = []  # ITL gaps, each shared by ``counts`` decodes
        self.counts: list[int] = []

    def decodes(self, n: int, first_s: float, ends: list, durations: list, used: list,
                ctx: int, queue: int, last_queue: int | None = None) -> None:
        """K = len(durations) iterations of ``n`` one-token decodes, back to back from
        ``first_s``: the k-th ends at ``ends[k]``, lasts ``durations[k]``, leaves ``used[k]``
        KV blocks in use and starts from contexts summing to ``ctx + n k``; ``queue``
        requests wait (``last_queue`` in the last row, where given).  Each decode's gaps:
        from ``first_s`` (its last emission), then from end to end."""
        k = len(durations)
        starts = [first_s, *ends[:-1]]
        self.start += starts
        self.dur += durations
        self.used += used
        self.ctx += range(ctx, ctx + n * k, n)
        self.n += repeat(n, k)
        self.queue += repeat(queue, k)
        if last_queue is not None:
            self.queue[-1] = last_queue
        self.is_single += repeat(False, k)
        self.gaps += map(sub, ends, starts)
        self.counts += repeat(n, k)
        self.size += k
        if self.size >= FLUSH_ROWS:
            self.flush()

    def row(self, row: tuple) -> None:
        """One row in column order (the replica's next)."""
        self.single.append(row)
        self.is_single.append(True)
        self.size += 1
        if self.size >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        """Build the rows held and hand them, and the ITL gaps, to the recorder."""
        if not self.size:
            return
        decodes = self._decode_rows() if self.start else None
        if not self.single:
            rows = decodes
        else:
            rows = np.array(self.single, np.float64)
            if decodes is not None:
                mask = np.array(self.is_single, bool)
                both = np.empty((mask.size, _WIDTH))
                both[mask] = rows
                both[~mask] = decodes
                rows = both
        self.rec.record_steps(rows)
        if self.gaps:
            self.rec.record_itl(np.repeat(np.array(self.gaps, np.float64),
                                          np.array(self.counts, np.int64)))
        self.size = 0
        self._clear()

    def _decode_rows(self) -> np.ndarray:
        """The decode rows (as ``fast_forward.stretch_rows`` builds them)."""
        rows = np.zeros((len(self.start), _WIDTH))
        rows[:, _REPLICA] = self.index
        rows[:, _START] = self.start
        rows[:, _DURATION] = rows[:, _VERIFY] = self.dur  # no draft
        n = np.array(self.n, np.float64)
        for c in _N_COLS:
            rows[:, c] = n
        used = np.array(self.used, np.int64)
        rows[:, _KV_USED] = used
        np.divide(used, float(self.kv_blocks), out=rows[:, _KV_OCCUPANCY])
        rows[:, _QUEUE] = self.queue
        read = np.array(self.ctx, np.float64) + n  # KV read and attention pairs: one token each
        rows[:, _KV_READ] = read
        rows[:, _PAIRS] = read
        return rows
