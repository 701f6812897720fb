"""The steps table in bounded memory: every row, a deterministic per-replica sample, or none;
in every case exact totals over every step, which is what ``Results.summary`` reads.

Policies (``engine.steps_table``): ``all`` keeps every row; ``sampled`` keeps a replica's
step ``i`` (counted from 0 in that replica's order) when ``i % stride == 0``, the stride a
power of two that doubles, thinning the kept rows to every other one, whenever the replica
keeps more than ``SAMPLED_ROWS_CAP / replicas`` rows (so the kept rows are exactly the
multiples of the smallest stride that fits, however the steps arrived); ``off`` keeps none;
``auto`` is ``all`` up to ``ALL_ROWS_MAX_REQUESTS`` requests and ``sampled`` beyond, and
turns ``sampled`` as soon as it holds more than ``ALL_ROWS_CAP`` rows (memory that grows with
the steps of long outputs is bounded too): the rows kept are then those ``sampled`` would have
kept from the start, since a replica's sample depends on that replica's rows alone.

The totals are sums of float columns computed exactly (``ExactSum``: the correctly rounded
sum, whatever the order in which replicas' steps arrive or how they are blocked) and of
count columns as integers, so the summary is identical with every policy and in both engine
modes.  The table itself is returned sorted by (start_s, replica), stable.
"""
from __future__ import annotations

import numpy as np

from simulator.engine.buffers import GrowingArray, RowBlocks
from simulator.engine.exact_sum import ExactSum
from simulator.engine.step import FLOAT_FIELDS, STEP_FIELDS

ALL_ROWS_MAX_REQUESTS = 200_000   # ``auto`` keeps every step row up to this many requests
SAMPLED_ROWS_CAP = 1_000_000      # rows a sampled table keeps at most, split among replicas
ALL_ROWS_CAP = 2_000_000          # rows ``auto`` keeps in full (about 300 MB) before sampling
STEPS_POLICIES = ("all", "sampled", "off")
_PENDING_ROWS = 4096              # rows buffered before their totals are added
# rows per block of the ``all`` table: 2.5 MB, under the 4 MB from which NumPy asks Linux for
# huge pages (faults that can stall on fragmented memory: a 100k run's blocks took 0.43-0.76 s
# at 5 MB, 0.16-0.17 s at 2.5 MB)
_BLOCK_ROWS = 1 << 14
_GATHER_ROWS = 8192               # rows re-added per call when ``auto`` turns sampled

SUMMED = ("duration_s", "draft_s", "verify_s", "kv_read_tokens", "attn_pairs")
WEIGHTED = ("kv_occupancy",)      # summed weighted by duration_s
COUNTED = tuple(f for f in STEP_FIELDS if f not in FLOAT_FIELDS and f != "replica")
_COL = {name: i for i, name in enumerate(STEP_FIELDS)}
_SUM_IDX = [_COL[f] for f in SUMMED]
_WEIGHTED_IDX = [_COL[f] for f in WEIGHTED]
_COUNT_IDX = [_COL[f] for f in COUNTED]
_DUR, _START = _COL["duration_s"], _COL["start_s"]


def steps_policy(option: str, num_requests: int) -> str:
    """The policy ``option`` (auto, all, sampled, off) means for a run of this many requests."""
    if option == "auto":
        return "all" if num_requests <= ALL_ROWS_MAX_REQUESTS else "sampled"
    if option not in STEPS_POLICIES:
        raise ValueError(f"steps_table must be auto, all, sampled or off, not {option!r}")
    return option


class StepTotals:
    """Exact sums over steps: count columns as integers, float columns correctly rounded,
    ``duration_weighted_<col>`` = sum of duration_s * col; first start and last end."""

    def __init__(self) -> None:
        self.steps = 0
        self._floats = ExactSum(len(SUMMED) + len(WEIGHTED))
        self._counts = [0] * len(COUNTED)
        self.first_start_s = np.inf
        self.last_end_s = -np.inf

    def add(self, rows: np.ndarray) -> None:
        """Add a block of rows, shape (n, len(STEP_FIELDS)) in column order."""
        if not len(rows):
            return
        self.steps += len(rows)
        floats = np.empty((len(rows), len(SUMMED) + len(WEIGHTED)))
        floats[:, :len(SUMMED)] = rows[:, _SUM_IDX]
        floats[:, len(SUMMED):] = rows[:, _WEIGHTED_IDX] * rows[:, _DUR, None]
        self._floats.add(floats)
        sums = rows[:, _COUNT_IDX].astype(np.int64).sum(axis=0).tolist()
        self._counts = [a + b for a, b in zip(self._counts, sums)]
        self.first_start_s = min(self.first_start_s, float(rows[:, _START].min()))
        self.last_end_s = max(self.last_end_s, float((rows[:, _START] + rows[:, _DUR]).max()))

    def add_columns(self, cols: dict[str, np.ndarray]) -> None:
        """Add a table given column by column (``_sorted_columns``): the same sums as
        ``add`` of its rows, faster on contiguous columns."""
        n = len(cols["duration_s"])
        if not n:
            return
        self.steps += n
        dur = cols["duration_s"]
        for j, name in enumerate(SUMMED):
            self._floats.add_column(j, cols[name])
        for j, name in enumerate(WEIGHTED, start=len(SUMMED)):
            self._floats.add_column(j, cols[name] * dur)
        self._counts = [a + int(cols[f].sum()) for a, f in zip(self._counts, COUNTED)]
        self.first_start_s = min(self.first_start_s, float(cols["start_s"].min()))
        self.last_end_s = max(self.last_end_s, float((cols["start_s"] + dur).max()))

    def as_dict(self) -> dict:
        """Plain numbers (JSON-ready): steps, each summed column, the weighted sums."""
        floats = self._floats.totals().tolist()
        out: dict = {"steps": self.steps}
        out.update(zip(SUMMED, floats[:len(SUMMED)]))
        out.update((f"duration_weighted_{f}", v) for f, v in zip(WEIGHTED, floats[len(SUMMED):]))
        out.update(zip(COUNTED, self._counts))
        out["first_start_s"] = self.first_start_s if self.steps else float("nan")
        out["last_end_s"] = self.last_end_s if self.steps else float("nan")
        return out


def totals_of(rows: np.ndarray) -> dict:
    """``StepTotals.as_dict`` of a table that holds every step (rows in column order)."""
    t = StepTotals()
    t.add(np.asarray(rows, dtype=np.float64).reshape(-1, len(STEP_FIELDS)))
    return t.as_dict()


class _Sample:
    """One replica's sampled rows: the multiples of ``stride`` among its steps seen so far."""

    def __init__(self, cap: int, stride: int = 1, seen: int = 0, room: bool = True) -> None:
        # ``room``: for the cap and one more call's rows from the start (untouched memory
        # costs nothing until rows are written; a buffer doubling from small copies and
        # touches about twice the rows it ends with)
        self.rows = GrowingArray(np.float64, width=len(STEP_FIELDS),
                                 capacity=cap + _GATHER_ROWS if room else 1)
        self.seen = seen
        self.stride = stride
        self.cap = cap

    def thin(self) -> None:
        while self.rows.size > self.cap:
            kept = self.rows.values()[::2].copy()
            self.rows.data[:len(kept)] = kept
            self.rows.keep(len(kept))
            self.stride *= 2


class StepsStore:
    """The steps the engine reports, kept as ``policy`` says, with exact totals over all."""

    def __init__(self, policy: str, replicas: int = 1, rows_cap: int = SAMPLED_ROWS_CAP,
                 all_rows_cap: int | None = None) -> None:
        if policy not in STEPS_POLICIES:
            raise ValueError(f"steps policy must be all, sampled or off, not {policy!r}")
        self.policy = policy
        self.replicas = max(1, int(replicas))
        self.rows_cap = int(rows_cap)
        self.width = len(STEP_FIELDS)
        self._totals = StepTotals()
        self._all = RowBlocks(self.width, _BLOCK_ROWS) if policy == "all" else None
        self._pending = GrowingArray(np.float64, width=self.width, capacity=_PENDING_ROWS)
        self._samples: dict[int, _Sample] = {}
        self._finished: tuple[dict, dict] | None = None
        self.all_rows_cap = all_rows_cap  # ``all`` turns ``sampled`` past it (``auto``)

    def _to_sampled(self) -> None:
        """Past ``all_rows_cap``: keep what ``sampled`` would have kept from the start."""
        blocks = self._all.blocks()
        self._all, self.policy = None, "sampled"
        for r in np.unique(np.concatenate([b[:, 0] for b in blocks])):
            for block in blocks:  # each replica's rows, in its own order, a block at a time
                mine = block[block[:, 0] == r]
                for start in range(0, len(mine), _GATHER_ROWS):
                    self.add_rows(mine[start:start + _GATHER_ROWS])

    def _sample(self, replica: int) -> _Sample:
        s = self._samples.get(replica)
        if s is None:
            s = self._samples[replica] = _Sample(max(1, self.rows_cap // self.replicas))
        return s

    def add_row(self, row) -> None:
        """One step's row (a tuple or array in column order; column 0 the replica)."""
        if self._all is not None:
            self._all.append(row)
            if self.all_rows_cap is not None and self._all.size > self.all_rows_cap:
                self._to_sampled()
            return
        pending = self._pending
        pending.append(row)
        if self.policy == "sampled":
            s = self._sample(int(row[0]))
            if s.seen % s.stride == 0:
                s.rows.append(pending.data[pending.size - 1])  # converted once, above
                if s.rows.size > s.cap:
                    s.thin()
            s.seen += 1
        if pending.size >= _PENDING_ROWS:
            self._flush()

    def add_rows(self, rows: np.ndarray) -> None:
        """Consecutive steps of one replica, shape (K, width), in time order."""
        rows = np.asarray(rows, dtype=np.float64)
        if not len(rows):
            return
        if self._all is not None:
            self._all.extend(rows)
            if self.all_rows_cap is not None and self._all.size > self.all_rows_cap:
                self._to_sampled()
            return
        if len(rows) >= _PENDING_ROWS:
            self._totals.add(rows)
        else:
            if self._pending.size + len(rows) > _PENDING_ROWS:
                self._flush()
            self._pending.extend(rows)
        if self.policy == "sampled":
            s = self._sample(int(rows[0, 0]))
            s.rows.extend(rows[-s.seen % s.stride::s.stride])  # the multiples of the stride
            s.seen += len(rows)
            if s.rows.size > s.cap:
                s.thin()

    def _flush(self) -> None:
        self._totals.add(self._pending.values())
        self._pending.clear()

    @property
    def rows_total(self) -> int:
        """Steps reported so far, kept or not."""
        if self._finished is not None:
            return self._finished[1]["steps"]
        if self._all is not None:
            return self._all.size
        return self._totals.steps + self._pending.size

    @property
    def rows_kept(self) -> int:
        """Rows the table keeps."""
        if self._finished is not None:
            return len(self._finished[0]["start_s"])
        if self._all is not None:
            return self._all.size
        return sum(s.rows.size for s in self._samples.values())

    def finish(self) -> tuple[dict[str, np.ndarray], dict]:
        """(the kept rows column by column, the exact totals), computed once; the row buffers
        are released, so the columns are the only copy (the caller may wrap them uncopied)."""
        if self._finished is None:
            if self._all is not None:
                cols = _sorted_columns(self._all.blocks())
                self._totals.add_columns(cols)
            else:
                self._flush()
                cols = _sorted_columns([np.zeros((0, self.width))] + [
                    self._samples[r].rows.values() for r in sorted(self._samples)])
            self._finished = (cols, self._totals.as_dict())
            self._all, self._pending = None, None
            self._samples = {r: _Sample(s.cap, s.stride, s.seen, room=False)
                             for r, s in self._samples.items()}  # counts kept, rows dropped
        return self._finished

    def describe(self) -> dict:
        """What ``Results.info["steps_table"]`` says: the policy and rows kept of how many."""
        out = {"policy": self.policy, "rows_kept": int(self.rows_kept),
               "rows_total": int(self.rows_total)}
        if self.policy == "sampled":
            out["rows_cap"] = self.rows_cap
            out["stride_by_replica"] = {str(r): self._samples[r].stride
                                        for r in sorted(self._samples)}
        return out


def _sorted_columns(blocks: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The rows of ``blocks`` (in order) column by column (counts as int64), sorted by
    (start_s, replica), stable: each replica's own order is kept, the interleaving of
    replicas forgotten.  A column at a time, through two scratch columns (the fresh memory
    is the table's columns and those two)."""
    n = sum(len(b) for b in blocks)
    column, scratch = np.empty(n), np.empty(n)
    np.concatenate([b[:, 0] for b in blocks], out=column)
    np.concatenate([b[:, _START] for b in blocks], out=scratch)
    order = np.lexsort((column, scratch))  # by start, then replica, then row: stable
    cols = {}
    for i, name in enumerate(STEP_FIELDS):
        np.concatenate([b[:, i] for b in blocks], out=column)
        if name in FLOAT_FIELDS:
            cols[name] = column.take(order)
        else:
            np.take(column, order, out=scratch)
            cols[name] = scratch.astype(np.int64)  # counts: exact integers
    return cols
