"""One request's lookahead state (lookahead.py): its W Jacobi lanes and its n-gram pool, moved
one iteration at a time, and marked, then kept or rolled back, when iterations are planned
ahead (``plan_rows``).

A run of tokens is held as one int, ``shift`` bits a token, the first token highest
(``t_0 << (k - 1) shift | ... | t_k-1``; every token of the text, so every guess, is below
``2^shift``): a lane (its last N - 1 guesses at most), a pooled n-gram, and the text's next
N - 1 tokens after each output (``truth``).  A lane's last two tokens are then
``FollowIndex``'s pair key as they stand, a step's new lane is a shift and an or, and a
candidate's verified prefix is read from one exclusive or (its leading equal tokens are the
zero bits above the highest set one): no tuple is made, sliced or compared per lane or per
candidate.  The same tokens give the same ints: the pool's order, its evictions and the lanes'
merges are those of the tokens themselves.

A step makes a new list of lanes, so the mark keeps the list it replaced and rolling the lanes
back is taking it back.  The pool is rolled back from copies of the entries that the planned
iterations changed, each taken when first changed.  The in-context target reads the request's
text through a ``FollowIndex`` at the visible length of each iteration: nothing of it moves.
Rolling back and replaying the kept iterations gives the state those iterations would have
given one by one, the same tokens in the same order.  Lanes that come to hold the same guesses
are kept as one (``_merge``): they would guess alike and hand the pool the same n-grams from
then on.
"""
from __future__ import annotations

from bisect import bisect_left

import numpy as np

from simulator.policies.in_context import FollowIndex


class LaneState:
    """A request's lanes, pool and text: what lookahead plans and observes for it."""

    __slots__ = ("index", "prompt", "lanes_now", "copies", "lanes_n", "size", "pool", "width",
                 "most", "shift", "truth", "rule", "_saved", "_mark")

    def __init__(self, index: FollowIndex, prompt: int, starts: list[int], width: int,
                 most: int) -> None:
        self.index = index            # the request's text (prompt + output) and its rule
        self.prompt = prompt          # the prompt's tokens
        self.shift = index.shift      # bits a token (at least 1)
        # each distinct lane's last N - 1 guesses at most (an int, as above; every lane holds
        # ``size`` of them), and how many lanes it stands for
        self.lanes_now, self.copies, self.lanes_n = list(starts), [1] * len(starts), \
            len(starts)
        self.size = 1
        self.pool: dict[int, list[int]] = {}  # first token -> grams, most recent first
        self.width = width            # N - 1: a full lane's guesses, a gram's tokens
        self.most = most              # G: grams kept (and verified) per first token
        # the text's next N - 1 tokens after each count of outputs (read where they are
        # verified: after the prompt)
        self.truth = _runs(index.tokens[prompt:], index.ids[prompt:], width, self.shift)
        s = self.shift  # the rule's dicts, and the masks of a token, a pair, a lane's last
        # N - 2 tokens (what a full lane keeps), and the shift to a full lane's first token
        self.rule = (index.tokens, index.ones, index.twos, index.later_ones, index.later_twos,
                     s, (1 << s) - 1, (1 << 2 * s) - 1, (1 << (width - 1) * s) - 1,
                     (width - 1) * s)
        # first token -> its grams at the mark (None: none); since the last ``keep``
        # where nothing is marked (a step's copies thrown away at the next mark)
        self._saved: dict = {}
        self._mark: tuple = ()

    def _tokens(self, run: int, size: int) -> list[int]:
        """The ``size`` tokens of ``run``, first first."""
        s, low = self.shift, (1 << self.shift) - 1
        return [run >> (size - 1 - j) * s & low for j in range(size)]

    def lanes(self) -> list[list[int]]:
        """Each lane's guesses now (at most N - 1, oldest first; merged lanes repeated)."""
        return [self._tokens(lane, self.size) for lane, c in zip(self.lanes_now, self.copies)
                for _ in range(c)]

    def grams(self) -> dict[int, list[tuple]]:
        """The pool: each first token's n-grams (less that token), most recent first."""
        return {key: [tuple(self._tokens(gram, self.width)) for gram in grams]
                for key, grams in self.pool.items()}

    def held(self) -> int:
        """The lookahead branch's tokens: every lane holds as many (they grow together)."""
        return self.lanes_n * self.size

    def candidates(self, generated: int) -> list[int]:
        """The pooled grams after the last visible token (a copy, at most G)."""
        return self.pool.get(self.index.tokens[self.prompt + generated - 1], [])[:self.most]

    def verified(self, generated: int, cands: list[int]) -> int:
        """The most leading tokens that one of ``cands`` (grams, as ``candidates`` gives
        them) shares with the text after ``generated`` outputs (``plan``'s rule)."""
        at, s, width = self.prompt + generated, self.shift, self.width
        truth, bits, best = self.truth[generated], width * s, 0
        for cand in cands:
            x = cand ^ truth
            if not x >> (width - 1) * s:
                best = max(best, (bits - x.bit_length()) // s)
        return min(best, len(self.index.tokens) - at)

    def plan(self, generated: int, steps: int, end: int) -> tuple[list, list]:
        """Up to ``steps`` iterations from ``generated``, each stepped after it but the last,
        which is the first that reaches ``end`` tokens (or the ``steps``-th): each one's
        draft tokens, lookahead tokens and accepted drafts (the longest verified prefix among
        the candidates), one after another in one list, and the generated count it starts
        from.  While the lanes fill (and for one-token lanes) row by row, then
        ``_plan_full``."""
        rows, gens, g, tokens = [], [], generated, self.index.tokens
        while self.size < self.width or self.width == 1:
            cands = self.pool.get(tokens[self.prompt + g - 1])
            accepted = self.verified(g, cands) if cands else 0
            rows += (len(cands) * self.width if cands else 0, self.held(), accepted)
            gens.append(g)
            steps -= 1
            if g + accepted + 1 >= end or not steps:
                return rows, gens
            self.step(g)
            g += accepted + 1
        self._plan_full(g, steps, end, rows, gens)
        return rows, gens

    def _plan_full(self, g: int, steps: int, end: int, rows: list, gens: list) -> None:
        """``plan``'s rows from ``g`` on, of full lanes of two tokens or more: ``verified``
        and ``step`` inlined (a row is a few dozen operations: calls would be a good part)."""
        tokens, _, twos, _, later_twos, s, low, pair, keep, top = self.rule
        pool, prompt, width, truths = self.pool, self.prompt, self.width, self.truth
        # a candidate whose exclusive or with the truth is ``first`` bits long or less shares
        # (bits - bit_length) // s leading tokens with it: the most, the shortest's
        bits, first, held, last = width * s, (width - 1) * s, self.lanes_n * width, steps - 1
        saved, lanes, cut, size_all = self._saved, self.lanes_now, self.most - 1, len(tokens)
        after, grams = later_twos.get, pool.get  # (an unseen pair's positions: none)
        whole, stop, n = 1 << bits, end - 1, len(lanes)  # (whole: above any exclusive or)
        for j in range(steps):
            at = prompt + g
            cands, accepted = grams(tokens[at - 1]), 0
            if cands:  # the shortest exclusive or is the least one's
                truth, least = truths[g], whole
                for cand in cands:
                    if (x := cand ^ truth) < least:
                        least = x
                if (shortest := least.bit_length()) <= first:
                    accepted = (bits - shortest) // s
                    if accepted > size_all - at:  # the text ends before the candidate does
                        accepted = size_all - at
                rows += (len(cands) * width, held, accepted)
            else:
                rows += (0, held, 0)
            gens.append(g)
            if g + accepted >= stop or j == last:  # (g + accepted + 1 >= end)
                self.lanes_now = lanes
                return
            new = []  # ``step(g)``: the same operations in the same order
            for lane in lanes:
                occ = after(lane & pair, ())
                if i := bisect_left(occ, at):
                    tok = tokens[occ[i - 1]]
                elif (tok := twos[lane & pair]) is None:
                    tok = _follow_one(self.rule, lane & low, at)
                gram = (lane & keep) << s | tok
                new.append(gram)
                key = lane >> top
                entries = grams(key)
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
                        del entries[cut:]  # room for it: at most G
                    entries.insert(0, gram)  # most recent first
            lanes = new  # (``lanes_now`` from here on: set where the plan stops)
            if n > 1 and (new[0] == new[1] if n == 2 else len(set(new)) < n):  # (mostly 2)
                self._merge(new)
                lanes = self.lanes_now
                n = len(lanes)
            g += accepted + 1

    def step(self, generated: int) -> None:
        """Each lane gets its next guess (the rule applied to its own guesses, with the text
        up to ``generated`` visible); a full lane's n-gram enters the pool first."""
        visible, lanes = self.prompt + generated, self.lanes_now
        if self.size < self.width or self.width == 1:
            self._step_short(visible)
            return
        tokens, ones, twos, later_ones, later_twos, s, low, pair, keep, top = self.rule
        add, new = self._add, []
        for lane in lanes:  # ``FollowIndex.advanced``'s rule on the ints (two or more tokens)
            key = lane & pair
            at = later_twos.get(key)
            if at is not None and (i := bisect_left(at, visible)):
                tok = tokens[at[i - 1]]
            else:
                tok = twos[key]
                if tok is None:
                    tok = _follow_one(self.rule, lane & low, visible)
            # the lane drops its first token (the pool's key) as it takes the new one
            gram = (lane & keep) << s | tok
            new.append(gram)
            add(lane >> top, gram)
        self.lanes_now = new
        if len(new) > 1 and len(set(new)) < len(new):
            self._merge(new)

    def _step_short(self, visible: int) -> None:
        """``step`` while the lanes fill (they only grow), or of one-token lanes (N = 2:
        the rule reads the last token alone)."""
        rule, s = self.rule, self.shift
        if self.size < self.width:
            pairs, self.size = self.size >= 2, self.size + 1
            self.lanes_now = [lane << s | (_follow_two(rule, lane, visible) if pairs else
                                           _follow_one(rule, lane, visible))
                              for lane in self.lanes_now]
            return
        lanes = self.lanes_now
        self.lanes_now = [_follow_one(rule, lane, visible) for lane in lanes]
        for key, gram in zip(lanes, self.lanes_now):
            self._add(key, gram)
        if len(lanes) > 1 and len(set(self.lanes_now)) < len(lanes):
            self._merge(self.lanes_now)

    def _add(self, key: int, gram: int) -> None:
        """``gram`` to the front of ``key``'s grams, most recent first, at most G of them
        (``_plan_full`` inlines it); the grams before the first change since ``mark`` saved."""
        entries, saved = self.pool.get(key), self._saved
        if entries is None:
            if key not in saved:
                saved[key] = None
            self.pool[key] = [gram]
        elif entries[0] != gram:  # at the front already: moving it changes nothing
            if key not in saved:
                saved[key] = entries[:]
            if gram in entries:
                entries.remove(gram)
            else:
                del entries[self.most - 1:]  # room for it: at most G
            entries.insert(0, gram)

    def _merge(self, grams: list[int]) -> None:
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
        self._saved, self._mark = {}, (self.lanes_now, self.copies, self.size)

    def keep(self) -> None:
        """The steps since ``mark`` stand."""
        self._saved = {}

    def roll_back(self) -> None:
        """The state at ``mark``, as if the steps since were never taken."""
        self.lanes_now, self.copies, self.size = self._mark
        pool = self.pool
        for key, entries in self._saved.items():
            if entries is None:
                del pool[key]
            else:
                pool[key] = entries
        self._saved = {}


def _follow_two(rule: tuple, lane: int, visible: int) -> int:
    """The rule's token after ``lane`` (two tokens or more) with ``visible`` tokens seen: the
    token after its last two's latest occurrence, else ``_follow_one``."""
    tokens, _, twos, _, later_twos, _, _, pair, _, _ = rule
    key = lane & pair
    at = later_twos.get(key)
    if at is not None and (i := bisect_left(at, visible)):
        return tokens[at[i - 1]]
    tok = twos[key]
    return _follow_one(rule, lane & rule[6], visible) if tok is None else tok


def _follow_one(rule: tuple, lane: int, visible: int) -> int:
    """The rule's token after ``lane``'s last token with ``visible`` tokens seen: the token
    after its latest occurrence (the last token repeated where it has none)."""
    tokens, ones, _, later_ones, _, _, low, _, _, _ = rule
    last = lane & low
    at = later_ones[last]
    if at is not None and (i := bisect_left(at, visible)):
        return tokens[at[i - 1]]
    return ones[last]


def _runs(tokens: list[int], ids: np.ndarray, width: int, shift: int) -> list[int]:
    """The ``width`` tokens from each position of ``tokens`` (``ids``: the same as uint64)
    as one int (zeros past the end: a prefix read from it is capped at the tokens left)."""
    size = len(tokens)
    if width * shift <= 64:  # on the array: a few C loops
        out = ids << np.uint64((width - 1) * shift)
        for j in range(1, min(width, size)):
            out[:size - j] |= ids[j:] << np.uint64((width - 1 - j) * shift)
        return out.tolist()
    runs, run, drop = [0] * size, 0, width * shift
    for p in range(size - 1, -1, -1):  # each the token, then the next one's run less its last
        run = runs[p] = (tokens[p] << drop | run) >> shift
    return runs


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
