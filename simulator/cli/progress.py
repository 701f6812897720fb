"""Progress reporting for long commands: a tqdm bar on a terminal, a few plain lines elsewhere.

One implementation for every command (run, sweep, plan, calibrate, validate).  Nothing here
drives a simulation: callers tick it from events (a request finished, a point settled), so a
progress display can never keep a loop alive.  On a terminal (``stderr.isatty()``) it is a
tqdm bar; on a non-terminal (CI logs, pipes) it prints at most one plain line every
``PLAIN_INTERVAL_S`` seconds, and none for work that ends sooner.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

PLAIN_INTERVAL_S = 15.0  # a CI log gets at most one progress line per this many seconds


class Progress:
    """``update(n)`` / ``set(done, total)`` / ``close()``; a no-op when disabled."""

    def __init__(self, desc: str, total: int = 0, *, unit: str = "it", enabled: bool = True,
                 stream: TextIO | None = None, interval_s: float = PLAIN_INTERVAL_S) -> None:
        self.desc = desc
        self.total = int(total)
        self.unit = unit
        self.done = 0
        self.label = ""
        self.stream = stream if stream is not None else sys.stderr
        self._bar = None
        self._plain = False
        self._interval = interval_s
        self._start = time.monotonic()
        self._last = self._start
        if not enabled:
            return
        try:
            tty = bool(self.stream.isatty())
        except (AttributeError, ValueError):  # a closed or odd stream
            tty = False
        if tty:
            from tqdm import tqdm
            self._bar = tqdm(total=self.total or None, desc=desc, unit=unit, leave=False,
                             file=self.stream, mininterval=0.5)
        else:
            self._plain = True

    def set(self, done: int, total: int | None = None, label: str | None = None) -> None:
        """Absolute progress: ``done`` of ``total`` units (the one callback style of every
        library function: ``progress(done, total)``, calibration adding a ``label``)."""
        if total is not None:
            self.total = int(total)
        if label is not None:
            self.label = str(label)[:40]
            if self._bar is not None:
                self._bar.set_postfix_str(self.label)
        self.update(int(done) - self.done)

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        self.done += int(n)
        if self._bar is not None:
            if self.total and self._bar.total != self.total:
                self._bar.total = self.total
            self._bar.update(int(n))
        elif self._plain:
            now = time.monotonic()
            if now - self._last >= self._interval:
                self._last = now
                self._line(now)

    def _line(self, now: float) -> None:
        of = f"/{self.total:,}" if self.total else ""
        pct = f" ({100.0 * self.done / self.total:.0f}%)" if self.total else ""
        try:
            label = f" [{self.label}]" if self.label else ""
            self.stream.write(f"specsim: {self.desc}: {self.done:,}{of} {self.unit}{pct}, "
                              f"{now - self._start:.0f} s{label}\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed pipe: progress is never worth a crash
            self._plain = False

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        self._plain = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
