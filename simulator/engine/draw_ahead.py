"""Uniforms drawn ahead of the iterations that take them (``BatchDraws.ahead``).

A tree walk draws a block of uniforms a level, one ``rng.random`` call each, and stops at a
level no request accepted: how many it takes is known only once it has walked.  Over a
stretch ``DrawAhead`` draws a chunk of them in one call, lets each iteration's walk take
its share in order, and ``settle`` then leaves the generator exactly where the walks'
own calls would have: the state saved before the first chunk restored, and the uniforms
taken drawn again in one call.  Both rest on ``rng.random(a)`` then ``rng.random(b)``
giving the doubles of ``rng.random(a + b)`` (each double one output of the bit generator,
none buffered), and on ``random`` leaving the bit generator's buffered 32-bit half alone
(what the saved state restores); tests/simulator/engine/test_draw_ahead.py checks both
on the real generator.
"""
from __future__ import annotations

from typing import Callable

import numpy as np


class DrawAhead:
    """``rng.random``'s uniforms for a stretch's iterations, drawn ``chunk`` at a time
    (at least ``most``, the most one iteration takes)."""

    def __init__(self, rng: np.random.Generator, most: int, chunk: int) -> None:
        self._rng, self._most, self._chunk = rng, most, max(chunk, most)
        self._saved: dict | None = None  # the generator's state before the first chunk
        self._draws: list = []
        self._at = self._drawn = 0  # the next uniform's index; all drawn so far

    def take(self, walk: Callable[[list, int], tuple[list, int]]) -> list:
        """``walk``'s result from the next uniforms, those it took then behind."""
        at = self._at
        if at + self._most > len(self._draws):
            at = self._refill()
        got, used = walk(self._draws, at)
        self._at = at + used
        return got

    def take_with(self, walk: Callable[[object, list, int], tuple[object, int]], arg) -> object:
        """``take`` of ``walk(arg, draws, at)`` (no closure an iteration)."""
        at = self._at
        if at + self._most > len(self._draws):
            at = self._refill()
        got, used = walk(arg, self._draws, at)
        self._at = at + used
        return got

    def _refill(self) -> int:
        if self._saved is None:
            self._saved = self._rng.bit_generator.state
        more = self._rng.random(self._chunk).tolist()
        self._draws = self._draws[self._at:] + more
        self._drawn += len(more)
        self._at = 0
        return 0

    def settle(self) -> None:
        """Leave the generator where the walks taken so far leave it, and start afresh."""
        left = len(self._draws) - self._at
        if left:  # some drawn and not taken: back to the saved state, the taken drawn again
            self._rng.bit_generator.state = self._saved
            if self._drawn > left:
                self._rng.random(self._drawn - left)
        self._saved, self._draws, self._at, self._drawn = None, [], 0, 0
