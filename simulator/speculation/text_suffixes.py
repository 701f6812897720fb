"""A request's own suffix trie (suffix_index.py), answered from its text instead of built.

SuffixDecoding's per-request trie holds every substring of at most ``max_depth`` tokens of
one growing text (the prompt, then each generated token): about ``max_depth`` nodes made per
token, most of them never read -- a request's speculation reads the few nodes around the
suffixes of its context.  Every number the trie's queries read is a property of the text:

- the node of a substring ``s`` (``len(s) <= max_depth``) stands for its occurrences; its
  ``count`` is how many there are, its children are the tokens that follow them (an
  occurrence ending at the text's last token has none), each child's count the occurrences
  that token follows;
- node ids only break ties between equal probabilities, and a per-request trie (never
  pruned) makes its nodes in the order of their first occurrence's end, shorter first at
  the same end: that pair orders them as their ids do.

``TextSuffixes`` keeps the text and, per token, the positions where it occurs (one list
append per token), finds a suffix's occurrences by narrowing the last token's positions
one token further back at a time, and expands a speculation from an occurrence list by
grouping it by the token that follows: the same matches and the same ``Speculation`` (the
same floats from the same operations) as the trie, tests/simulator/policies/test_suffix.py
checks them against ``SuffixIndex`` on random texts.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left

from simulator.speculation.suffix_index import Speculation


def index_positions(where: dict, tokens: list[int], start: int) -> None:
    """Record in ``where`` (token -> its positions, ascending) that ``tokens[j]`` sits at
    ``start + j``."""
    for i, t in enumerate(tokens, start):
        got = where.get(t)
        if got is None:
            where[t] = [i]
        else:
            got.append(i)


class TextSuffixes:
    """``SuffixIndex`` + ``Cursor`` of one growing text: its suffix matches and speculations."""

    __slots__ = ("max_depth", "text", "where", "_stride")

    def __init__(self, max_depth: int) -> None:
        self.max_depth = int(max_depth)
        self.text: list[int] = []
        self.where: dict[int, list[int]] = {}  # token -> its positions, ascending
        self._stride = self.max_depth + 1  # node order: first end * stride + depth

    def extend(self, tokens: list[int]) -> None:
        """Append ``tokens`` (Python ints) to the text."""
        index_positions(self.where, tokens, len(self.text))
        self.text.extend(tokens)

    def matches(self, longest: int, roomy: int, size: int) -> tuple[tuple, tuple]:
        """``SuffixIndex.cursor_match`` at ``longest`` and at ``roomy`` (<= longest) tokens
        of the text's first ``size`` tokens (the trie's, had it been given those): each
        (length, the ends of that suffix's occurrences, ascending), (0, ()) where no suffix
        occurs earlier too (one that a token follows)."""
        text = self.text
        last = size - 1
        limit = min(longest, size, self.max_depth - 1)
        if last < 0 or limit < 1:
            return (0, ()), (0, ())
        ends = self.where[text[last]]
        ends = ends[:bisect_left(ends, size)]  # the text may run further (rows planned ahead)
        if len(ends) < 2:  # only the last token itself: nothing follows an occurrence
            return (0, ()), (0, ())
        size, at_roomy = 1, None
        while size < limit:
            if size == roomy:
                at_roomy = ends
            want = text[last - size]
            narrower = [e for e in ends if e >= size and text[e - size] == want]
            if len(narrower) < 2:  # the last token's own occurrence is always there
                break
            ends, size = narrower, size + 1
        deep = (size, ends)
        return deep, (deep if at_roomy is None or size <= roomy else (roomy, at_roomy))

    def _children(self, ends: list[int], depth: int, last: int) -> list[tuple]:
        """The children of the node at ``depth`` whose occurrences end at ``ends``, in a
        text that ends at ``last``: (id, count, token, their ends) each, in no order."""
        if depth >= self.max_depth:
            return []
        text = self.text
        if len(ends) == 1 or (len(ends) == 2 and ends[1] >= last):  # most nodes: one
            e = ends[0]  # (ascending: only the last can end the text)
            return [] if e >= last else [((e + 1) * self._stride + depth + 1, 1, text[e + 1],
                                           [e + 1])]
        groups: dict[int, list[int]] = {}
        for e in ends:
            if e < last:
                t = text[e + 1]
                got = groups.get(t)
                if got is None:
                    groups[t] = [e + 1]
                else:
                    got.append(e + 1)
        depth += 1
        stride = self._stride
        return [(g[0] * stride + depth, len(g), t, g) for t, g in groups.items()]

    def speculate(self, match: tuple, budget: int, min_prob: float, tree: bool,
                  size: int) -> Speculation:
        """``SuffixIndex.speculate`` below the node of ``match`` (``matches``'s at
        ``size``)."""
        match_len, ends = match
        if match_len <= 0 or budget <= 0:
            return Speculation([], [], [], match_len)
        last = size - 1
        if not tree:
            return self._path(match_len, list(ends), budget, min_prob, last)
        children = self._children
        kids = children(ends, match_len, last)
        total = sum(k[1] for k in kids)
        heap = [(-c / total, i, -1, match_len + 1, t, g) for i, c, t, g in kids
                if c >= min_prob * total]
        if not heap:
            return Speculation([], [], [], match_len)
        heapq.heapify(heap)
        # best first: each node's children pushed and the best popped by one heappushpop
        # (the same order as pushes then a pop: ids tell every two entries apart), and the
        # last node's children never read
        item = heapq.heappop(heap)
        parents, tokens, probs = [item[2]], [item[4]], [-item[0]]
        text, stride, deepest = self.text, self._stride, self.max_depth
        while len(tokens) < budget:
            neg, _, _, depth, _, grp = item
            idx = len(tokens) - 1
            nxt = None
            if len(grp) == 1:  # most nodes: one occurrence, ``_children`` inlined
                e = grp[0] + 1
                if depth < deepest and e <= last and text[e] is not None and -neg >= min_prob:
                    nxt = (neg, e * stride + depth + 1, idx, depth + 1, text[e], [e])
                below = ()  # (its child's probability: neg / 1 * 1, the same float)
            else:
                below = children(grp, depth, last)
            if len(below) == 1:
                i, c, t, g = below[0]
                p = neg / c * c  # (the sum of one count: the same floats)
                if -p >= min_prob:
                    nxt = (p, i, idx, depth + 1, t, g)
            elif below:
                scale = neg / sum(k[1] for k in below)
                for i, c, t, g in below:
                    p = scale * c  # negative path probability
                    if -p >= min_prob:
                        if nxt is not None:
                            heapq.heappush(heap, nxt)
                        nxt = (p, i, idx, depth + 1, t, g)
            if nxt is not None:
                item = heapq.heappushpop(heap, nxt) if heap else nxt
            elif heap:
                item = heapq.heappop(heap)
            else:
                break
            parents.append(item[2])
            tokens.append(item[4])
            probs.append(-item[0])
        return Speculation(parents, tokens, probs, match_len)

    def _path(self, match_len: int, ends: list[int], budget: int, min_prob: float,
              last: int) -> Speculation:
        """``SuffixIndex._speculate_path``: the most frequent child each step (the first
        made on ties)."""
        parents, tokens, probs = [], [], []
        p, depth = 1.0, match_len
        while len(tokens) < budget:
            kids = self._children(ends, depth, last)
            if not kids:
                break
            best = max(kids, key=lambda k: (k[1], -k[0]))
            p *= best[1] / sum(k[1] for k in kids)
            if p < min_prob:
                break
            parents.append(len(tokens) - 1)
            tokens.append(best[2])
            probs.append(p)
            ends, depth = best[3], depth + 1
        return Speculation(parents, tokens, probs, match_len)
