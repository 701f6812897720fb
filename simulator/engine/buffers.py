"""An append-only numpy buffer: what the recorder keeps instead of a Python object per step."""
from __future__ import annotations

import numpy as np


class GrowingArray:
    """An append-only numpy buffer that doubles when full (no per-append Python objects);
    ``limit`` caps the doubling (a buffer never asked to hold more never holds more)."""

    def __init__(self, dtype, width: int | None = None, capacity: int = 4096,
                 limit: int | None = None) -> None:
        shape = (capacity,) if width is None else (capacity, width)
        self.data = np.empty(shape, dtype)
        self.size = 0
        self.limit = limit

    def _reserve(self, extra: int) -> None:
        need = self.size + extra
        if need > self.data.shape[0]:
            grow = 2 * self.data.shape[0]
            if self.limit is not None:
                grow = min(grow, self.limit)
            grown = np.empty((max(need, grow),) + self.data.shape[1:], self.data.dtype)
            grown[:self.size] = self.data[:self.size]
            self.data = grown

    def extend(self, values: np.ndarray) -> None:
        n = len(values)
        self._reserve(n)
        self.data[self.size:self.size + n] = values
        self.size += n

    def append(self, row) -> None:
        self._reserve(1)
        self.data[self.size] = row
        self.size += 1

    def values(self) -> np.ndarray:
        return self.data[:self.size]

    def keep(self, count: int) -> None:
        """Keep only the first ``count`` values (the caller has written them in place)."""
        self.size = count

    def clear(self) -> None:
        self.size = 0
