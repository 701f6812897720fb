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


class RowBlocks:
    """Append-only rows in blocks of ``block_rows``: memory grows a block at a time and
    nothing is copied as it grows (a doubling buffer allocates about twice its final size,
    and fresh memory is what costs on a large table).  Each block is stored column by
    column, so reading the table a column at a time (``steps_store._sorted_columns``) reads
    contiguous memory, not one element of every row's cache line."""

    def __init__(self, width: int, block_rows: int = 1 << 15) -> None:
        self.width, self.block_rows = int(width), int(block_rows)
        self._full: list[np.ndarray] = []  # (width, block_rows) each: a row is a column
        self._cur = np.empty((self.width, self.block_rows))
        self._used = 0  # rows of the current block
        self.size = 0

    def _next_block(self) -> None:
        self._full.append(self._cur)
        self._cur, self._used = np.empty((self.width, self.block_rows)), 0

    def append(self, row) -> None:
        if self._used == self.block_rows:
            self._next_block()
        self._cur[:, self._used] = row
        self._used += 1
        self.size += 1

    def extend(self, rows: np.ndarray) -> None:
        done, k = 0, len(rows)
        while done < k:
            if self._used == self.block_rows:
                self._next_block()
            take = min(k - done, self.block_rows - self._used)
            self._cur[:, self._used:self._used + take] = rows[done:done + take].T
            self._used += take
            done += take
        self.size += k

    def blocks(self) -> list[np.ndarray]:
        """The rows, in order, as a list of blocks of shape (rows, width) (views, not
        copies: transposes of the stored blocks, so a block's column is contiguous)."""
        return [b.T for b in self._full] + [self._cur[:, :self._used].T]
