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

from simulator.engine.requests import RequestTable

# per-request integer state kept in step while a request runs (RequestTable's names)
INT_FIELDS = ("computed", "generated", "output_len", "prompt_len", "blocks", "prefill_target",
              "num_drafts", "num_draft_tokens", "num_accepted")
# written back when a request leaves (its lengths do not change)
_WRITE_BACK = tuple(f for f in INT_FIELDS if f not in ("output_len", "prompt_len"))


class RunningBatch:
    """The running requests of one replica: ``ids`` and their state, aligned by position."""

    def __init__(self) -> None:
        self.ids = np.zeros(0, np.int64)
        for name in INT_FIELDS:
            setattr(self, name, np.zeros(0, np.int64))
        self.in_prefill = np.zeros(0, bool)
        self.last_emit = np.zeros(0, np.float64)
        self.decoding = 0  # how many are past their prefill (``~in_prefill``)

    def __len__(self) -> int:
        return int(self.ids.size)

    def add(self, table: RequestTable, rid: int) -> int:
        """Append request ``rid`` (its state from the table); returns its position."""
        n = int(self.ids.size)
        self.ids = _appended(self.ids, n, rid)
        for name in INT_FIELDS:
            setattr(self, name, _appended(getattr(self, name), n, getattr(table, name)[rid]))
        self.in_prefill = _appended(self.in_prefill, n, table.in_prefill[rid])
        self.last_emit = _appended(self.last_emit, n, table.last_emit_s[rid])
        self.decoding += int(not table.in_prefill[rid])
        return n

    def write_back(self, table: RequestTable, pos) -> None:
        """Copy the state of the requests at ``pos`` (an index or an array) to the table."""
        rows = self.ids[pos]
        for name in _WRITE_BACK:
            getattr(table, name)[rows] = getattr(self, name)[pos]
        table.in_prefill[rows] = self.in_prefill[pos]
        table.last_emit_s[rows] = self.last_emit[pos]

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the requests where ``mask`` is True (order preserved)."""
        self.ids = self.ids[mask]
        for name in INT_FIELDS:
            setattr(self, name, getattr(self, name)[mask])
        self.in_prefill = self.in_prefill[mask]
        self.last_emit = self.last_emit[mask]
        self.decoding = int(self.ids.size - np.count_nonzero(self.in_prefill))

    def pop_last(self, table: RequestTable) -> int:
        """Remove the most recently admitted request (written back first); returns its id."""
        last = int(self.ids.size) - 1
        self.write_back(table, last)
        rid = int(self.ids[last])
        mask = np.ones(self.ids.size, bool)
        mask[last] = False
        self.keep(mask)
        return rid

    def set_prefill_done(self, pos: np.ndarray) -> None:
        """The requests at ``pos`` finished their prefill: they decode from now on."""
        self.in_prefill[pos] = False
        self.decoding = int(self.ids.size - np.count_nonzero(self.in_prefill))


def _appended(values: np.ndarray, n: int, value) -> np.ndarray:
    """A new array: the ``n`` ``values`` then ``value`` (``np.append`` without its layers)."""
    out = np.empty(n + 1, values.dtype)
    out[:n] = values
    out[n] = value
    return out
