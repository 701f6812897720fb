"""What the engine records while it runs: per-step rows, ITL samples, acceptance lengths.

Everything goes into numpy buffers or running counts (no Python object kept per step or per
token), and memory is bounded for long runs: the steps table follows ``steps_table`` (see
``steps_store``: every row, a deterministic sample, or none, with exact totals over every
step in all cases), ITL samples are kept exactly up to ``ITL_EXACT_CAP`` and summarised in a
relative-error sketch beyond (``sketch.QuantileSketch``), and acceptance lengths go straight
into histograms.

Nothing the recorder returns depends on the order in which different replicas' calls
arrive, only on each replica's own order: the table is sorted by (start_s, replica), ITL
samples are sorted (or counted in bins), and every sum is exact (``exact_sum``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simulator.engine.buffers import GrowingArray
from simulator.engine.sketch import RELATIVE_ACCURACY, QuantileSketch
from simulator.engine.step import FLOAT_FIELDS, STEP_FIELDS, StepRow
from simulator.engine.steps_store import ALL_ROWS_CAP, SAMPLED_ROWS_CAP, StepsStore, steps_policy

if TYPE_CHECKING:  # pandas is imported where a frame is built (cold start)
    import pandas as pd

__all__ = ["ITL_EXACT_CAP", "MAX_POSITIONS", "ItlSamples", "Recorder"]

MAX_POSITIONS = 257  # per-position acceptance counters (tree nodes can exceed gamma)
ITL_EXACT_CAP = 1 << 22  # exact ITL samples kept up to this many (32 MiB, 48 MiB at worst as
#                          (value, count) pairs); a sketch beyond
_SKETCH_CHUNK = 1 << 16  # ITL samples buffered before they are counted in the sketch
_ACCEPTANCE_CHUNK = 1 << 16  # drafting request-steps buffered before they are binned


class ItlSamples:
    """Inter-token latencies in bounded memory: every sample while there are at most ``cap``
    of them, then a ``QuantileSketch`` of all of them (the exact samples are dropped)."""

    def __init__(self, cap: int = ITL_EXACT_CAP,
                 relative_accuracy: float = RELATIVE_ACCURACY) -> None:
        self.cap = int(cap)
        self.relative_accuracy = relative_accuracy
        # exactly, while at most ``cap`` samples: single samples, and (value, count) pairs,
        # with room for the cap from the start (untouched memory costs nothing until written;
        # a doubling buffer copies and touches about twice what it ends with)
        room = max(1, self.cap)
        self._exact: GrowingArray | None = GrowingArray(np.float64, capacity=room, limit=room)
        self._pair_values = GrowingArray(np.float64, capacity=room, limit=room)
        self._pair_counts = GrowingArray(np.int32, capacity=room, limit=room)
        self._exact_count = 0
        self._sketch: QuantileSketch | None = None
        self._runs: list = []  # samples added as (value or values, times each), not yet stored
        self._times: list[int] = []
        self._in_runs = 0
        self._parts: list[np.ndarray] = []  # single samples added, not yet stored
        self._in_parts = 0

    def repeat(self, values, times: int) -> None:
        """Add each of ``values`` (a float or an array) ``times`` times: the gaps every
        request of a batch shares (stored when a chunk of them has come; the samples are
        sorted or binned, so the order they are stored in does not show)."""
        self._runs.append(values)
        self._times.append(times)
        self._in_runs += times * (values.size if values.__class__ is np.ndarray else 1)
        if self._in_runs >= _SKETCH_CHUNK:
            self._store_runs()

    def _store_runs(self) -> None:
        runs, times = self._runs, self._times
        if not runs:
            return
        self._runs, self._times, self._in_runs = [], [], 0
        arrays = [i for i, v in enumerate(runs) if v.__class__ is np.ndarray]
        scalars = [i for i, v in enumerate(runs) if v.__class__ is not np.ndarray]
        values = np.concatenate([np.array([runs[i] for i in scalars], np.float64)]
                                + [runs[i] for i in arrays])
        counts = np.concatenate([np.array([times[i] for i in scalars], np.int64),
                                 np.repeat(np.array([times[i] for i in arrays], np.int64),
                                           [runs[i].size for i in arrays])])
        self.extend_counts(values, counts)

    def extend_counts(self, values: np.ndarray, counts: np.ndarray) -> None:
        """Add each of ``values`` ``counts`` (>= 1) times: as ``extend(np.repeat(values,
        counts))``, without the repeat (kept as pairs, or counted in the sketch)."""
        if self._exact is not None:
            added = int(counts.sum())
            if self._exact_count + added <= self.cap:
                self._pair_values.extend(values)
                self._pair_counts.extend(counts)
                self._exact_count += added
                return
            self._to_sketch()
        self._sketch.add_counts(values, counts)

    def extend(self, values: np.ndarray) -> None:
        """Add ITL samples (seconds) of one replica: a 1-d array the caller does not change
        afterwards (it is kept until a chunk of samples has come, then stored at once: the
        samples are sorted or binned, so the order they are stored in does not show)."""
        self._parts.append(values)
        self._in_parts += len(values)
        if self._in_parts >= _SKETCH_CHUNK:
            self._store_parts()

    def _store_parts(self) -> None:
        parts = self._parts
        if not parts:
            return
        values = np.concatenate(parts) if len(parts) > 1 else parts[0]
        self._parts, self._in_parts = [], 0
        exact = self._exact
        if exact is not None:
            if self._exact_count + len(values) <= self.cap:
                exact.extend(values)
                self._exact_count += len(values)
                return
            self._to_sketch()
        self._sketch.add(values)

    def _to_sketch(self) -> None:
        """Past the cap: every sample kept so far goes into a new sketch."""
        self._sketch = QuantileSketch(self.relative_accuracy)
        self._sketch.add(self._exact.values())
        if self._pair_values.size:
            self._sketch.add_counts(self._pair_values.values(), self._pair_counts.values())
        self._exact = self._pair_values = self._pair_counts = None

    def _sorted(self) -> np.ndarray:
        """Every exactly kept sample, sorted.  Fewer singles than pairs: the singles join the
        pairs (count 1 each), the pairs are sorted, then repeated, so the only array of
        every sample is the result (fresh memory is what costs on a large one); else every
        sample is sorted at once.  Equal floats are the same bits: the order among them
        does not show."""
        values, counts = self._pair_values.values(), self._pair_counts.values()
        singles = self._exact.values()
        if singles.size > values.size:
            return np.sort(np.concatenate((singles, np.repeat(values, counts))))
        if singles.size:
            values = np.concatenate((values, singles))
            counts = np.concatenate((counts, np.ones(singles.size, counts.dtype)))
        order = np.argsort(values, kind="stable")
        return np.repeat(values[order], counts[order])

    @property
    def count(self) -> int:
        if self._exact is not None:
            return self._exact_count + self._in_runs + self._in_parts
        return self._sketch.count + self._in_runs + self._in_parts

    def finish(self) -> tuple[np.ndarray, QuantileSketch | None]:
        """(every sample sorted, None) within the cap; (no samples, the sketch) beyond it."""
        self._store_runs()
        self._store_parts()
        if self._exact is not None:
            return self._sorted(), None
        return np.zeros(0), self._sketch


class Recorder:
    """Per-step rows, ITL samples and acceptance histograms, in bounded memory.

    ``steps_table``: auto, all, sampled or off (``steps_store``; auto decides from
    ``num_requests``); ``replicas`` splits the sampled table's row cap among them.
    """

    STEP_FIELDS = STEP_FIELDS      # the columns of the steps table, in order
    FLOAT_FIELDS = FLOAT_FIELDS    # the columns that are not counts

    def __init__(self, record_events: bool = False, steps_table: str = "auto",
                 num_requests: int = 0, replicas: int = 1, *,
                 itl_exact_cap: int = ITL_EXACT_CAP, rows_cap: int = SAMPLED_ROWS_CAP,
                 all_rows_cap: int = ALL_ROWS_CAP,
                 relative_accuracy: float = RELATIVE_ACCURACY) -> None:
        self.record_events = record_events
        self.events: list[tuple[float, str, int, int]] = []  # (time, kind, request, tokens)
        self.steps_option = steps_table
        self.steps = StepsStore(steps_policy(steps_table, num_requests), replicas, rows_cap,
                                all_rows_cap if steps_table == "auto" else None)
        self.itl = ItlSamples(itl_exact_cap, relative_accuracy)
        self._drafted = GrowingArray(np.uint16, capacity=_ACCEPTANCE_CHUNK)
        self._accepted = GrowingArray(np.uint16, capacity=_ACCEPTANCE_CHUNK)
        self._accepted_of: list[np.ndarray] = []  # record_acceptance_of's, not yet binned
        self._in_accepted_of = 0
        self._accepted_hist = np.zeros(MAX_POSITIONS + 1, np.int64)
        self._drafted_hist = np.zeros(MAX_POSITIONS + 1, np.int64)

    def record_step(self, row: StepRow) -> None:
        """One step's row (its values, in column order; the record is not kept)."""
        self.steps.add_row(row)

    def record_steps(self, rows: np.ndarray) -> None:
        """Consecutive steps of one replica: shape (K, len(STEP_FIELDS)), in time order."""
        self.steps.add_rows(rows)

    def record_itl(self, values: np.ndarray) -> None:
        """ITL samples (seconds) of one replica: a 1-d array, kept (not copied) until a chunk
        of samples has come, so one that is not changed afterwards."""
        self.itl.extend(values)

    def record_itl_shared(self, gaps: np.ndarray) -> None:
        """``record_itl`` of gaps that are usually all equal (decodes of a batch that last
        emitted together): kept as one value and its count where they are (fewer samples to
        sort at the end), else one by one."""
        if gaps.size > 1:
            values = gaps.tolist()  # a list's count beats two array reductions on a batch
            if values.count(values[0]) == len(values):  # (NaN: never equal, one by one)
                self.itl.repeat(values[0], len(values))
                return
        self.itl.extend(gaps)

    def record_itl_counts(self, values: np.ndarray, counts: np.ndarray) -> None:
        """ITL samples of one replica: each of ``values`` ``counts`` (>= 1) times."""
        self.itl.extend_counts(values, counts)

    def record_itl_repeated(self, values, times: int) -> None:
        """ITL samples of one replica: each of ``values`` (a float or an array) ``times``
        times (every decode of a batch has the same gap)."""
        self.itl.repeat(values, times)

    def record_acceptance(self, num_draft: np.ndarray, accepted: np.ndarray) -> None:
        """Count this step's draft and accepted lengths (request-steps that drafted)."""
        if not np.count_nonzero(num_draft):  # (a count: no Python layer, unlike .any())
            return
        self._drafted.extend(np.minimum(num_draft, MAX_POSITIONS))
        self._accepted.extend(np.minimum(accepted, MAX_POSITIONS))
        if self._drafted.size >= _ACCEPTANCE_CHUNK:
            self._bin_acceptance()

    def record_acceptance_of(self, gamma: int, accepted: np.ndarray) -> None:
        """``record_acceptance`` of request-steps that all drafted ``gamma`` >= 1 tokens (a
        chain's): the same histograms, the drafted length counted at once; ``accepted`` (a
        1-d array of counts >= 0) is kept, not copied, until it is binned: pass one that is
        not changed afterwards."""
        self._drafted_hist[min(gamma, MAX_POSITIONS)] += accepted.size
        self._accepted_of.append(accepted)  # kept (not copied) until a chunk has come
        self._in_accepted_of += accepted.size
        if self._in_accepted_of >= _ACCEPTANCE_CHUNK:
            self._bin_acceptance()

    def _bin_acceptance(self) -> None:
        k = self._drafted.values().astype(np.int64)
        mask = k > 0
        a = self._accepted.values().astype(np.int64)[mask]
        self._accepted_hist += np.bincount(a, minlength=MAX_POSITIONS + 1)
        self._drafted_hist += np.bincount(k[mask], minlength=MAX_POSITIONS + 1)
        if self._accepted_of:
            of = np.concatenate(self._accepted_of).astype(np.int64, copy=False)
            self._accepted_hist += np.bincount(np.minimum(of, MAX_POSITIONS),
                                               minlength=MAX_POSITIONS + 1)
        self._drafted.clear()
        self._accepted.clear()
        self._accepted_of, self._in_accepted_of = [], 0

    def histograms(self) -> tuple[np.ndarray, np.ndarray]:
        """(accepted-length, draft-length) histograms over every drafting request-step."""
        self._bin_acceptance()
        return self._accepted_hist.copy(), self._drafted_hist.copy()

    def steps_frame(self) -> pd.DataFrame:
        """The kept per-step rows, sorted by (start_s, replica), counts as integers (the
        recorder's buffers are released: this and the totals are what remains)."""
        import pandas as pd
        return pd.DataFrame(self.steps_columns(), copy=False)

    def steps_columns(self) -> dict[str, np.ndarray]:
        """The kept per-step rows as columns, in ``steps_frame``'s order."""
        return self.steps.finish()[0]

    def step_totals(self) -> dict:
        """Exact totals over every step, kept or not (``steps_store.StepTotals``)."""
        return self.steps.finish()[1]

    def steps_info(self) -> dict:
        """The steps policy used and how many rows were kept of how many."""
        return {"option": self.steps_option, **self.steps.describe()}

    def itl_samples(self) -> tuple[np.ndarray, QuantileSketch | None]:
        """(sorted samples, None) up to the cap, else (empty, the sketch of them all)."""
        return self.itl.finish()
