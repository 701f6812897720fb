"""What the engine records while it runs: per-step rows, ITL samples, acceptance lengths.

Everything goes into append-only numpy buffers (no Python object kept per step or per token),
so a million-request run stays within a small memory budget.  A step's row arrives as a
``StepRow``, whose fields name the columns in order, and only its values are kept.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.engine.step import FLOAT_FIELDS, STEP_FIELDS, StepRow

MAX_POSITIONS = 257  # per-position acceptance counters (tree nodes can exceed gamma)


class GrowingArray:
    """An append-only numpy buffer that doubles when full (no per-append Python objects)."""

    def __init__(self, dtype, width: int | None = None, capacity: int = 4096) -> None:
        shape = (capacity,) if width is None else (capacity, width)
        self.data = np.empty(shape, dtype)
        self.size = 0

    def _reserve(self, extra: int) -> None:
        need = self.size + extra
        if need > self.data.shape[0]:
            grown = np.empty((max(need, 2 * self.data.shape[0]),) + self.data.shape[1:],
                             self.data.dtype)
            grown[:self.size] = self.data[:self.size]
            self.data = grown

    def extend(self, values: np.ndarray) -> None:
        self._reserve(len(values))
        self.data[self.size:self.size + len(values)] = values
        self.size += len(values)

    def append(self, row) -> None:
        self._reserve(1)
        self.data[self.size] = row
        self.size += 1

    def values(self) -> np.ndarray:
        return self.data[:self.size]


class Recorder:
    """Append-only per-step rows, ITL samples and acceptance lengths, in numpy buffers."""

    STEP_FIELDS = STEP_FIELDS      # the columns of the steps table, in order
    FLOAT_FIELDS = FLOAT_FIELDS    # the columns that are not counts

    def __init__(self, record_events: bool = False) -> None:
        self.record_events = record_events
        self.events: list[tuple[float, str, int, int]] = []  # (time, kind, request, tokens)
        self.steps = GrowingArray(np.float64, width=len(self.STEP_FIELDS))
        self.itl = GrowingArray(np.float32)
        self._drafted = GrowingArray(np.uint16)
        self._accepted = GrowingArray(np.uint16)

    def record_step(self, row: StepRow) -> None:
        """Append one step's row (its values, in column order; the record is not kept)."""
        self.steps.append(row)

    def record_acceptance(self, num_draft: np.ndarray, accepted: np.ndarray) -> None:
        """Keep this step's draft and accepted lengths; histograms are built once, at the end."""
        self._drafted.extend(np.minimum(num_draft, MAX_POSITIONS))
        self._accepted.extend(np.minimum(accepted, MAX_POSITIONS))

    def histograms(self) -> tuple[np.ndarray, np.ndarray]:
        """(accepted-length, draft-length) histograms over every drafting request-step."""
        k = self._drafted.values().astype(np.int64)
        a = self._accepted.values().astype(np.int64)
        mask = k > 0
        return (np.bincount(a[mask], minlength=MAX_POSITIONS + 1),
                np.bincount(k[mask], minlength=MAX_POSITIONS + 1))

    def steps_frame(self):
        """The per-step rows as a DataFrame with integer columns where they are counts."""
        data = self.steps.values()
        return pd.DataFrame({name: (data[:, i] if name in self.FLOAT_FIELDS
                                    else data[:, i].astype(np.int64))
                             for i, name in enumerate(self.STEP_FIELDS)})
