"""One request's lookahead state (lookahead.py): its W Jacobi lanes and its n-gram pool, moved
one iteration at a time, and marked, then kept or rolled back, when iterations are planned
ahead (``plan_rows``).

Each lane is a tuple of its last N - 1 guesses at most, and a step makes new tuples in a new
list, so the mark keeps the list it replaced and rolling the lanes back is taking it back
(a step's lanes are made by ``FollowIndex.advanced`` in one pass).  The pool is
rolled back from copies of the entries that the planned iterations changed, each taken when
first changed.  The in-context target reads the request's text through a ``FollowIndex`` at
the visible length of each iteration: nothing of it moves.  Rolling back and replaying the
kept iterations gives the state those iterations would have given one by one, the same
tokens in the same order.  Lanes that come to hold the same guesses are kept as one
(``_merge``): they would guess alike and hand the pool the same n-grams from then on.
"""
from __future__ import annotations

from simulator.policies.in_context import FollowIndex


class LaneState:
    """A request's lanes, pool and text: what lookahead plans and observes for it."""

    __slots__ = ("index", "prompt", "lanes_now", "copies", "lanes_n", "pool", "width", "most",
                 "_saved", "_mark")

    def __init__(self, index: FollowIndex, prompt: int, starts: list[int], width: int,
                 most: int) -> None:
        self.index = index            # the request's text (prompt + output) and its rule
        self.prompt = prompt          # the prompt's tokens
        # each distinct lane's last N - 1 guesses at most (a tuple: a step makes new ones,
        # so the mark holds the lists it replaced), and how many lanes it stands for
        self.lanes_now, self.copies, self.lanes_n = [(t,) for t in starts], [1] * len(starts), \
            len(starts)
        self.pool: dict[int, list[tuple]] = {}  # first token -> grams, most recent first
        self.width = width            # N - 1: a full lane's guesses, a gram's tokens
        self.most = most              # G: grams kept (and verified) per first token
        # first token -> its grams at the mark (None: none); since the last ``keep``
        # where nothing is marked (a step's copies thrown away at the next mark)
        self._saved: dict = {}
        self._mark: tuple = ()

    def lanes(self) -> list[list[int]]:
        """Each lane's guesses now (at most N - 1, oldest first; merged lanes repeated)."""
        return [list(lane) for lane, c in zip(self.lanes_now, self.copies) for _ in range(c)]

    def held(self) -> int:
        """The lookahead branch's tokens: every lane holds as many (they grow together;
        ``row`` counts them so)."""
        return self.lanes_n * len(self.lanes_now[0])

    def candidates(self, generated: int) -> list[tuple]:
        """The pooled grams after the last visible token (a copy, at most G)."""
        tokens = self.index.tokens
        return self.pool.get(tokens[self.prompt + generated - 1], [])[:self.most]

    def plan(self, generated: int, steps: int, end: int) -> tuple[list, list]:
        """Up to ``steps`` iterations from ``generated``, each stepped after it but the last,
        which is the first that reaches ``end`` tokens (or the ``steps``-th): each one's
        (draft tokens, lookahead tokens, accepted drafts: the longest verified prefix among
        the candidates), and the generated count it starts from."""
        tokens, prompt, pool, width = self.index.tokens, self.prompt, self.pool, self.width
        rows, gens, g, last, lanes_n = [], [], generated, steps - 1, self.lanes_n
        step, size_all = self.step, len(tokens)
        for j in range(steps):
            at = prompt + g
            cands = pool.get(tokens[at - 1])
            held = lanes_n * len(self.lanes_now[0])
            accepted = 0
            if cands:
                # ``longest_prefix``, inlined: most candidates differ at their first token
                size, want = size_all - at, tokens[at] if at < size_all else None
                size = width if size > width else size
                for cand in cands:
                    if cand[0] != want:
                        continue
                    n = 1
                    while n < size and cand[n] == tokens[at + n]:
                        n += 1
                    if n > accepted:
                        accepted = n
                        if n == size:
                            break
                rows.append((len(cands) * width, held, accepted))
            else:
                rows.append((0, held, 0))
            gens.append(g)
            moved = g + accepted + 1
            if moved >= end or j == last:
                break
            step(g)
            g = moved
        return rows, gens

    def step(self, generated: int) -> None:
        """Each lane gets its next guess (the rule applied to its own guesses, with the text
        up to ``generated`` visible); a full lane's n-gram enters the pool first."""
        lanes, width = self.lanes_now, self.width
        # the pool is not read while the lanes step: every lane's guess first
        if len(lanes[0]) < width:  # the lanes were not full: they only grow
            self.lanes_now = self.index.advanced(self.prompt + generated, lanes, 0)
            return
        # each lane's guesses now: its n-gram but the first (the lane, then its token)
        grams = self.lanes_now = self.index.advanced(self.prompt + generated, lanes, 1)
        pool, last, saved = self.pool, self.most - 1, self._saved
        for lane, gram in zip(lanes, grams):
            key = lane[0]
            entries = pool.get(key)
            if entries is None:
                if key not in saved:
                    saved[key] = None
                pool[key] = [gram]
            elif entries[0] != gram:  # at the front already: moving it changes nothing
                if key not in saved:
                    saved[key] = entries[:]
                if gram in entries:
                    entries.remove(gram)
                else:
                    del entries[last:]  # room for it: at most G
                entries.insert(0, gram)  # most recent first
        if len(grams) > 1 and len(set(grams)) < len(grams):
            self._merge(grams)

    def _merge(self, grams: list[tuple]) -> None:
        """Lanes that hold the same guesses (``grams``: each lane's now) become one: from
        here on they guess the same tokens and hand the pool the same n-grams, and of a
        step's equal n-grams the last decides where it stands (each moves to the front), so
        the later lane stands for both."""
        where = {gram: i for i, gram in enumerate(grams)}  # the last lane of each
        copies = [0] * len(grams)
        for gram, c in zip(grams, self.copies):
            copies[where[gram]] += c
        keep = sorted(where.values())
        self.lanes_now, self.copies = [grams[i] for i in keep], [copies[i] for i in keep]

    def mark(self) -> None:
        """Remember the state now: ``steps`` after it are kept or rolled back."""
        self._saved, self._mark = {}, (self.lanes_now, self.copies)

    def keep(self) -> None:
        """The steps since ``mark`` stand."""
        self._saved = {}

    def roll_back(self) -> None:
        """The state at ``mark``, as if the steps since were never taken."""
        self.lanes_now, self.copies = self._mark
        pool = self.pool
        for key, entries in self._saved.items():
            if entries is None:
                del pool[key]
            else:
                pool[key] = entries
        self._saved = {}


def longest_prefix(cands: list[tuple], truth: list[int]) -> int:
    """The most leading tokens that one of ``cands`` shares with ``truth`` (greedy
    verification of each candidate, the longest kept)."""
    best, size = 0, len(truth)
    for cand in cands:
        n = 0
        for a, b in zip(cand, truth):
            if a != b:
                break
            n += 1
        if n > best:
            best = n
            if n == size:
                break
    return best
