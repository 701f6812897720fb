"""Kit: ``prompt_lookup``'s n-gram match, kept up to date as a request's text grows.

``ngram_lookup`` (prompt_lookup.py) scans the whole text each iteration: the positions of the
last token, then how far back each one's match reaches.  The answer depends on the text
alone (the earliest occurrence, ending before the last token, of the longest suffix n-gram
with min_n <= n <= max_n), and a request's text only grows (its prompt, then one output
token after another; a preempted request keeps what it emitted), so ``NgramIndex`` keeps,
for every n-gram of those lengths, where its earliest occurrence ends, adding the
occurrences each new token ends, and looks the suffix n-grams up longest first: the same
answer (tests/simulator/policies/test_prompt_lookup.py compares them on random texts), in
time proportional to the tokens added instead of the text's length.  A long run (the prompt,
on the request's first lookup) is indexed by C-level iteration (``zip`` makes the n-grams,
``dict.setdefault`` keeps the earliest end): the same dictionary, 3x less CPU.
``TextNgrams`` answers the same for a text known whole in advance (the policy's: a request's
prompt and output) without indexing its n-grams.
"""
from __future__ import annotations

from collections import deque

import numpy as np


# from this many new tokens on (a prompt) the C-level pass beats the per-token loop, whose
# set-up is cheaper for the few tokens an iteration adds; the index is the same either way
BULK_FROM = 16


class NgramIndex:
    """The earliest end of every n-gram (``min_n`` <= n <= ``max_n``) of a growing text."""

    __slots__ = ("min_n", "max_n", "first", "ends")

    def __init__(self, min_n: int, max_n: int, text: np.ndarray | None = None) -> None:
        """An empty index, or one of the whole of ``text`` at once (by the bulk pass) where
        every text it is asked about is a prefix of it: an earliest end is where it is
        however much of the text follows, and one at or past a lookup's last token
        answers as an n-gram not yet seen."""
        self.min_n, self.max_n = min_n, max_n
        self.first: dict[tuple, int] = {}  # n-gram -> the end of its earliest occurrence
        self.ends = 0  # the occurrences ending before this position are indexed
        if text is not None and text.size:
            _index_run(text.tolist(), 0, 0, min_n, max_n, self.first)
            self.ends = int(text.size)

    def lookup(self, tokens: np.ndarray, k: int) -> np.ndarray:
        """``ngram_lookup(tokens, min_n, max_n, k)``, where ``tokens`` is a prefix of one
        text that every text this index was given before is a prefix of (a shorter one:
        rows planned ahead and not kept)."""
        size, min_n = tokens.size, self.min_n
        if k <= 0 or size < min_n + 1:
            return tokens[:0]
        self._extend(tokens, size - 1)  # occurrences ending before the last token
        longest = min(self.max_n, size - 1)
        tail, first = tuple(tokens[size - longest:].tolist()), self.first
        ends = size - 1  # an earliest end at or past it: the n-gram occurs only later (an
        for n in range(longest, min_n - 1, -1):  # index made ahead, AheadDraft's rows)
            end = first.get(tail[longest - n:], ends)
            if end < ends:
                return tokens[end + 1:end + 1 + k]
        return tokens[:0]

    def span(self, tokens: list[int], size: int, k: int) -> tuple[int, int]:
        """Where ``lookup(tokens[:size], k)``'s draft lies in ``tokens`` (a list), as
        (start, stop), empty where it is: for an index built on the whole of ``tokens``
        (``text``), read without numpy's per-call layers (``plan_rows``' many lookups)."""
        if k <= 0 or size < self.min_n + 1:
            return 0, 0
        longest = min(self.max_n, size - 1)
        tail, first, ends = tuple(tokens[size - longest:size]), self.first, size - 1
        for n in range(longest, self.min_n - 1, -1):
            end = first.get(tail[longest - n:], ends)
            if end < ends:
                return end + 1, min(end + 1 + k, size)
        return 0, 0

    def _extend(self, tokens: np.ndarray, upto: int) -> None:
        """Index the occurrences ending at ``self.ends`` .. ``upto - 1`` (earliest kept)."""
        start = self.ends
        if start >= upto:
            return
        lo = max(0, start - self.max_n + 1)
        text, first = tokens[lo:upto].tolist(), self.first
        if upto - start >= BULK_FROM:
            _index_run(text, lo, start, self.min_n, self.max_n, first)
            self.ends = upto
            return
        lengths = range(self.min_n, self.max_n + 1)
        for end in range(start - lo, upto - lo):
            for n in lengths:
                if n > end + 1:
                    break
                key = tuple(text[end + 1 - n:end + 1])
                if key not in first:
                    first[key] = end + lo
        self.ends = upto


def _index_run(text: list, lo: int, start: int, min_n: int, max_n: int, first: dict) -> None:
    """``_extend`` of a long run (a prompt): each length's n-grams made by ``zip`` and kept
    where new by ``setdefault`` (the earliest end, as the loop keeps), both in C."""
    for n in range(min_n, max_n + 1):
        at = max(start, n - 1) - lo  # the first new end with n tokens up to it
        if at >= len(text):
            break
        grams = zip(*(text[at - n + 1 + j:] for j in range(n)))  # ending at at, at + 1, ..
        deque(map(first.setdefault, grams, range(at + lo, lo + len(text))), maxlen=0)


class TextNgrams:
    """``NgramIndex`` of one whole text (a request's prompt and output), answered from the
    text itself: for any prefix of it, ``ngram_lookup``'s answer on that prefix.

    Nothing is indexed per n-gram: a request asks about a few hundred suffix n-grams, where
    its text holds ``max_n - min_n + 1`` times as many n-grams as tokens, each a tuple and a
    dictionary entry to build (prompt_lookup.yaml, 300 requests: 1.42 -> 1.27 billion
    instructions in ``simulate()``, bench_policies.py).  Every n-gram of two tokens or more
    ends with the pair of tokens that ends the prefix, so its earliest occurrence ending
    before the last token is the earliest of that pair's occurrences (found by one
    comparison of the text's pairs, kept as ints on an array) that the n-gram's earlier
    tokens precede (narrowed one token further back at a time, the longest n-gram's kept):
    the same n-gram and the same end that ``NgramIndex``'s earliest ends give."""

    __slots__ = ("min_n", "max_n", "tokens", "shift", "pairs")

    def __init__(self, min_n: int, max_n: int, text: np.ndarray) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.tokens = text.tolist()
        ids = np.asarray(text).astype(np.uint64)  # token ids: below 2^32, not negative
        self.shift = max(int(ids.max()).bit_length(), 1) if ids.size else 1
        self.pairs = ids[:-1] << np.uint64(self.shift) | ids[1:]  # [i]: tokens i, i + 1

    def lookup(self, tokens: np.ndarray, k: int) -> np.ndarray:
        """``ngram_lookup(tokens, min_n, max_n, k)`` of a prefix ``tokens`` of the text."""
        start, stop = self.span(self.tokens, int(tokens.size), k)
        return tokens[start:stop]

    def span(self, tokens: list[int], size: int, k: int) -> tuple[int, int]:
        """Where ``lookup``'s draft for the first ``size`` of ``tokens`` (the text, a list)
        lies in it, as (start, stop), empty where it is (``NgramIndex.span``)."""
        min_n = self.min_n
        if k <= 0 or size < min_n + 1:
            return 0, 0
        longest, last = min(self.max_n, size - 1), size - 1
        if longest >= 2:  # the pair ending at each end e < last: at pairs[e - 1]
            key = tokens[size - 2] << self.shift | tokens[last]
            starts = (self.pairs[:size - 2] == key).nonzero()[0].tolist()
            if starts:
                # the starts of the suffix n-grams' occurrences, ascending, n = 2, 3, ..:
                # each length's those of the last that the n-gram's first token precedes
                n = 2
                while n < longest:
                    want = tokens[size - 1 - n]
                    longer = [i for i in starts if i >= n - 1 and tokens[i + 1 - n] == want]
                    if not longer:
                        break
                    starts, n = longer, n + 1
                if n < min_n:
                    return 0, 0
                return starts[0] + 2, min(starts[0] + 2 + k, size)
        if min_n <= 1:  # one token: its earliest occurrence before the last
            try:
                end = tokens.index(tokens[last], 0, last)
            except ValueError:
                return 0, 0
            return end + 1, min(end + 1 + k, size)
        return 0, 0
