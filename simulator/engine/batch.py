"""The running batch of one replica as dense arrays (``RunningBatch``).

The requests a replica is running live here, in admission order, one contiguous array per
field: the hot path reads and updates ``computed``, ``generated``, ``blocks`` ... as whole
arrays, never gathering from the run's ``RequestTable`` (which has one row per request of the
trace).  A request's row is loaded from the table when it is admitted and written back when
it leaves (finishes or is preempted); the table is authoritative for every request that is not
running.  The arrays change shape only when the batch's composition changes.
"""
from __future__ import annotations

import numpy as np

from simulator.engine.requests import PACKED_FIELDS, RequestTable

# per-request integer state kept in step while a request runs: the table's packed rows
INT_FIELDS = PACKED_FIELDS
# written back when a request leaves (its lengths do not change)
_WRITE_BACK = tuple(f for f in INT_FIELDS if f not in ("output_len", "prompt_len"))
_ROWS = ("ids",) + INT_FIELDS  # the rows of the packed integer state
_WRITE_BACK_ROWS = np.array([_ROWS.index(f) for f in _WRITE_BACK])
_TABLE_ROWS = np.array([INT_FIELDS.index(f) for f in _WRITE_BACK])  # the same in the table
_WRITE_BACK_PAIRS = tuple(zip(_TABLE_ROWS.tolist(), _WRITE_BACK_ROWS.tolist()))
_COMPUTED, _GENERATED, _BLOCKS = (_ROWS.index(f) for f in ("computed", "generated", "blocks"))
_VIEW_CACHE = 1024  # batch sizes whose field views are kept (a dozen views each)
_COUNT = np.count_nonzero


class RunningBatch:
    """The running requests of one replica: ``ids`` and their state, aligned by position.

    The integer fields are rows of one preallocated ``(fields, capacity)`` array (the flags
    and emit times two more arrays), and ``ids``, ``computed``, ... are views of their first
    ``len(self)`` columns, rebuilt when the batch's size changes: an admission writes one
    column, a retirement compacts every field in one pass.  Callers change the fields in
    place (``b.blocks[pos] += ...``), never rebind them.
    """

    def __init__(self, capacity: int = 16) -> None:
        self._ints = np.zeros((len(_ROWS), max(1, int(capacity))), np.int64)
        self._flags = np.zeros(self._ints.shape[1], bool)
        self._emit = np.zeros(self._ints.shape[1], np.float64)
        self._rows = list(self._ints)
        self._views: dict[int, tuple] = {}
        self.decoding = 0  # how many are past their prefill (``~in_prefill``)
        self._view(0)

    def _view(self, n: int) -> None:
        """Point the field names at the first ``n`` columns (the views of each size made
        once per buffer, for sizes up to ``_VIEW_CACHE``)."""
        views = self._views.get(n)
        if views is None:
            r = self._rows  # the rows' full-capacity views: one slice each
            views = (r[0][:n], r[1][:n], r[2][:n], r[3][:n], r[4][:n], r[5][:n], r[6][:n],
                     r[7][:n], r[8][:n], r[9][:n], self._flags[:n], self._emit[:n])
            if n <= _VIEW_CACHE:
                self._views[n] = views
        (self.ids, self.computed, self.generated, self.output_len, self.prompt_len, self.blocks,
         self.prefill_target, self.num_drafts, self.num_draft_tokens, self.num_accepted,
         self.in_prefill, self.last_emit) = views

    def __len__(self) -> int:
        return int(self.ids.size)

    def _grow(self) -> None:
        cap = self._ints.shape[1]
        ints = np.zeros((len(_ROWS), 2 * cap), np.int64)
        ints[:, :cap] = self._ints
        flags, emit = np.zeros(2 * cap, bool), np.zeros(2 * cap, np.float64)
        flags[:cap], emit[:cap] = self._flags, self._emit
        self._ints, self._flags, self._emit = ints, flags, emit
        self._rows, self._views = list(ints), {}

    def add(self, table: RequestTable, rid: int) -> int:
        """Append request ``rid`` (its state from the table); returns its position."""
        n = int(self.ids.size)
        if n == self._ints.shape[1]:
            self._grow()
        self._ints[0, n] = rid
        self._ints[1:, n] = table.packed[:, rid]
        self._flags[n] = table.in_prefill[rid]
        self._emit[n] = table.last_emit_s[rid]
        self.decoding += int(not table.in_prefill[rid])
        self._view(n + 1)
        return n

    def write_back(self, table: RequestTable, pos) -> None:
        """Copy the state of the requests at ``pos`` (an index or an array) to the table."""
        if not np.ndim(pos):
            return self.write_back_one(table, int(pos))
        n = int(self.ids.size)
        rows = self.ids[pos]
        table.packed[_TABLE_ROWS[:, None], rows] = self._ints[_WRITE_BACK_ROWS, :n][:, pos]
        table.in_prefill[rows] = self.in_prefill[pos]
        table.last_emit_s[rows] = self.last_emit[pos]

    def write_back_one(self, table: RequestTable, p: int) -> None:
        """``write_back`` of the request at position ``p`` (a Python int)."""
        state = self._ints[:, p].tolist()  # Python ints: a few scalar stores
        rid, packed = state[0], table.packed
        for row, i in _WRITE_BACK_PAIRS:
            packed[row, rid] = state[i]
        table.in_prefill[rid] = self._flags[p]
        table.last_emit_s[rid] = self._emit[p]

    def retire_one(self, table: RequestTable, p: int, grown: int, now: float) -> tuple[int, int]:
        """Write back the request at position ``p`` (a Python int) with ``grown`` more tokens
        computed and generated than its column holds, no KV blocks and its last emission at
        ``now`` (a finished decode of the lazy form), and remove it: its id and computed
        tokens."""
        state = self._ints[:, p].tolist()
        state[_COMPUTED] += grown
        state[_GENERATED] += grown
        state[_BLOCKS] = 0
        rid, packed = state[0], table.packed
        for row, i in _WRITE_BACK_PAIRS:
            packed[row, rid] = state[i]
        table.in_prefill[rid] = self._flags[p]
        table.last_emit_s[rid] = now
        self.remove(p)
        return rid, state[_COMPUTED]

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the requests where ``mask`` is True (order preserved)."""
        n = int(self.ids.size)
        m = int(_COUNT(mask))
        self._ints[:, :m] = self._ints[:, :n][:, mask]  # the gather copies first
        self._flags[:m] = self._flags[:n][mask]
        self._emit[:m] = self._emit[:n][mask]
        self._view(m)
        self.decoding = m - int(_COUNT(self.in_prefill))

    def remove(self, p: int) -> None:
        """Remove the request at position ``p`` (order preserved; written back already)."""
        n = int(self.ids.size)
        self.decoding -= not self._flags[p]
        # overlapping slices: numpy copies as if through a buffer
        self._ints[:, p:n - 1] = self._ints[:, p + 1:n]
        self._flags[p:n - 1] = self._flags[p + 1:n]
        self._emit[p:n - 1] = self._emit[p + 1:n]
        self._view(n - 1)

    def pop_last(self, table: RequestTable) -> int:
        """Remove the most recently admitted request (written back first); returns its id."""
        last = int(self.ids.size) - 1
        self.write_back(table, last)
        rid = int(self.ids[last])
        self._view(last)  # no compaction: it is the last column
        self.decoding = last - int(_COUNT(self.in_prefill))  # the caller may set its flag
        return rid

    def set_prefill_done(self, pos: np.ndarray) -> None:
        """The requests at ``pos`` finished their prefill: they decode from now on."""
        self.in_prefill[pos] = False
        self.decoding = int(self.ids.size - _COUNT(self.in_prefill))
