"""A replica's steps-table rows and ITL gaps under the lazy form, kept as Python lists and
handed to the recorder in one vectorised pass (``RowLog``).

A short pure-decode stretch (lazy_stretch.py) is a few iterations; building its rows as an
array costs a dozen numpy calls, more than the stretch's own arithmetic.  The log appends
each stretch's numbers to plain lists instead (a few ``list.extend`` calls) and every
``FLUSH_ROWS`` rows builds all of them at once: the same values, in the same order (the
recorder's ``record_steps`` takes them as consecutive steps of the replica).  A row the lazy
form records one at a time goes in between, in its place; that of an iteration with one
prefill chunk (``chunk_row``) as its eleven varying values only, the rest filled in at the
flush.  A vectorised stretch's rows come as an array, also in their place.  The replica flushes the
log before it records any row another way (an eager iteration) and when it goes idle, so the
recorder sees each replica's rows in order.
"""
from __future__ import annotations

from itertools import chain, repeat

import numpy as np

from simulator.engine.fast_forward import decode_rows
from simulator.engine.step import STEP_FIELDS

FLUSH_ROWS = 4096  # rows held before they are built and recorded (bounds the lists)
_WIDTH = len(STEP_FIELDS)
_DECODE, _SINGLE, _BLOCK, _CHUNK = 0, 1, 2, 3  # where a row is held until the flush
# a chunk row's values as ``chunk`` takes them, and the columns they fill
_CHUNK_FIELDS = ("start_s", "duration_s", "draft_s", "verify_s", "num_decode", "prefill_tokens",
                 "emitted_tokens", "kv_blocks_used", "queue_len", "kv_read_tokens",
                 "attn_pairs")
_CHUNK_COLS = [STEP_FIELDS.index(f) for f in _CHUNK_FIELDS]
_BATCH, _PREFILLS, _DECODE_TOKENS, _OCCUPANCY = (STEP_FIELDS.index(f) for f in (
    "batch_size", "num_prefill", "decode_tokens", "kv_occupancy"))


class RowLog:
    """The rows and ITL gaps a replica's lazy form has not handed to the recorder yet."""

    def __init__(self, rec, index: int, kv_blocks: int) -> None:
        self.rec, self.index, self.kv_blocks = rec, index, kv_blocks
        self.size = 0
        self._clear()

    def _clear(self) -> None:
        self.single: list[tuple] = []  # rows recorded one at a time
        self.blocks: list[np.ndarray] = []  # rows recorded as arrays
        self.chunk: list[tuple] = []  # chunk rows, their ``_CHUNK_FIELDS`` (``chunk_row``)
        self.kind: list[int] = []  # per row, in order: _DECODE, _SINGLE, _BLOCK or _CHUNK
        # decode rows: start, duration, KV blocks after the reservation, end (the ITL gap
        # shared by the row's decodes: end - start); and per call of ``decodes``: (rows,
        # decodes, their context sum before the first, queue length, queue length in the
        # last row)
        self.start: list[float] = []
        self.dur: list[float] = []
        self.used: list[int] = []
        self.end: list[float] = []
        self.runs: list[tuple[int, int, int, int, int]] = []

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
        self.end += ends
        self.runs.append((k, n, ctx, queue, queue if last_queue is None else last_queue))
        self.kind += repeat(_DECODE, k)
        self.size += k
        if self.size >= FLUSH_ROWS:
            self.flush()

    def row(self, row: tuple) -> None:
        """One row in column order (the replica's next)."""
        self.single.append(row)
        self.kind.append(_SINGLE)
        self.size += 1
        if self.size >= FLUSH_ROWS:
            self.flush()

    def chunk_row(self, values: tuple) -> None:
        """The row of an iteration of ``num_decode`` one-token decodes and one prefill chunk
        (the lazy form's ``ChunkStep``), given as its ``_CHUNK_FIELDS``; the other columns
        follow from them (``_chunk_rows``)."""
        self.chunk.append(values)
        self.kind.append(_CHUNK)
        self.size += 1
        if self.size >= FLUSH_ROWS:
            self.flush()

    def block(self, rows: np.ndarray) -> None:
        """The replica's next rows as an array (K, len(STEP_FIELDS))."""
        self.blocks.append(rows)
        self.kind += repeat(_BLOCK, len(rows))
        self.size += len(rows)
        if self.size >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        """Build the rows held and hand them, and the ITL gaps, to the recorder."""
        if not self.size:
            return
        parts = []  # (kind, its rows)
        if self.start:
            decodes, n = self._decode_rows()
            parts.append((_DECODE, decodes))
            # each decode row's gap, once for each of its decodes
            self.rec.record_itl_counts(np.array(self.end, np.float64)
                                       - np.array(self.start, np.float64), n)
        if self.single:
            # the rows' values in one flat pass (a list of tuples is read as nested
            # sequences, about 2.5x slower): the same float64s
            parts.append((_SINGLE, np.fromiter(chain.from_iterable(self.single), np.float64,
                                               len(self.single) * _WIDTH).reshape(-1, _WIDTH)))
        if self.blocks:
            parts.append((_BLOCK, np.concatenate(self.blocks)))
        if self.chunk:
            parts.append((_CHUNK, self._chunk_rows()))
        if len(parts) == 1:
            rows = parts[0][1]
        else:  # interleaved in the order they came
            kind, rows = np.array(self.kind, np.int8), np.empty((self.size, _WIDTH))
            for k, part in parts:
                rows[kind == k] = part
        self.rec.record_steps(rows)
        self.size = 0
        self._clear()

    def _chunk_rows(self) -> np.ndarray:
        """The chunk rows: ``_plain_row``'s of one chunk (``num_prefill`` 1, no drafts, no
        preemption), each column as it computes it (whole numbers exact as floats; the KV
        occupancy the same division of two integers below 2**53)."""
        m = len(self.chunk)
        values = np.fromiter(chain.from_iterable(self.chunk), np.float64,
                             m * len(_CHUNK_FIELDS)).reshape(m, -1)
        rows = np.zeros((m, _WIDTH))
        rows[:, 0] = self.index
        rows[:, _CHUNK_COLS] = values
        nd = values[:, _CHUNK_FIELDS.index("num_decode")]
        rows[:, _BATCH] = nd + 1.0
        rows[:, _PREFILLS] = 1.0
        rows[:, _DECODE_TOKENS] = nd
        rows[:, _OCCUPANCY] = values[:, _CHUNK_FIELDS.index("kv_blocks_used")] \
            / float(self.kv_blocks)
        return rows

    def _decode_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The decode rows (``fast_forward.decode_rows``) and each one's batch size."""
        k, n, ctx, queue, last = np.array(self.runs, np.int64).T
        n = np.repeat(n, k)
        last_row = np.cumsum(k) - 1
        j = np.arange(n.size) - np.repeat(last_row - (k - 1), k)  # the row within its call
        queue = np.repeat(queue, k)
        queue[last_row] = last
        # KV read and attention pairs: one token each, from contexts summing to ctx + n j
        read = (np.repeat(ctx, k) + n * j).astype(np.float64) + n
        return decode_rows(self.index, n, self.start, self.dur, np.array(self.used, np.int64),
                           read, queue, self.kv_blocks), n
