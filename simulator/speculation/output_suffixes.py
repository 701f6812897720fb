"""SuffixDecoding's global trie (suffix_index.py) over finished outputs, answered from their
text until the first eviction.

Building the trie makes or counts about ``max_depth`` nodes per output token (most of a
suffix run's CPU in indexing once), and a request's speculation reads a few of them.  As for
the per-request trie (text_suffixes.py), every number its queries read is a property of the
outputs' text: a substring's node stands for its occurrences inside one output, its count is
how many there are, its children the tokens that follow them in the same output, and -- the
trie never pruned -- its id ranks it by (end of its first occurrence, length), in the order
the outputs were added (test_suffix.py's test_node_ids_follow_first_occurrences...).  So
``OutputSuffixes`` keeps the outputs one after another, each behind a ``None`` that no token
equals (a suffix never runs across two outputs), and per token the positions where it is
followed by one of its own output's, and answers what ``SuffixIndex.matches`` and
``speculate`` answer, with the same floats from the same operations.

A match narrows the last token's occurrences one token further back at a time, and the
same narrowings recur (requests that follow one earlier output match its substrings again),
so each is kept: under its list, the token before and the narrowed list, brought up to date
when asked again by narrowing only the ends added since (the lists only grow, in text
order, and the text behind an end never changes: the same list as narrowing afresh).  Kept
only for the substrings that are searched: filing every end under the tokens before it as
outputs are added cost more than the search saved (tens of thousands of nodes, measured).

A removal (FIFO eviction) makes the trie reuse freed ids, which no text order gives:
``GlobalIndex`` then builds the trie once, by the same adds and that removal, and keeps it.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import deque

from simulator.speculation.suffix_index import Speculation, SuffixIndex
from simulator.speculation.text_suffixes import TextSuffixes, index_positions

NO_MATCH = (-1, 0, -1)  # (key, length, handle) of no match
_NEXT = (1).__add__  # a position -> the next one, in C-level ``map``


class OutputSuffixes(TextSuffixes):
    """``SuffixIndex`` of added sequences, never removed, answered from their text."""

    __slots__ = ("_narrowed", "_grouped")

    def __init__(self, max_depth: int) -> None:
        super().__init__(max_depth)
        self.text.append(None)  # each output sits between two of these
        # last token -> {token before: [the narrowed ends, {token before: ...}, the length
        # of the list they were narrowed from]}, for the narrowings searched so far
        self._narrowed: dict[int, dict[int, list]] = {}
        # a node's key -> (the last end grouped, its children as ``_children`` gives them,
        # the groups by token), for the nodes of two or more ends that speculations read.
        # By the last end, not a count: a match's ends leave out those that end an output
        # (``where``'s), a child's hold them; neither has a child there, so the groups agree
        self._grouped: dict[int, tuple] = {}

    def add(self, tokens: list[int]) -> None:
        """Index one sequence (Python ints): each position a token of it follows."""
        index_positions(self.where, tokens[:-1], len(self.text))
        self.text.extend(tokens)
        self.text.append(None)

    def matches(self, context: list[int], longest: int,
                roomy: int) -> tuple[tuple, ...]:
        """``SuffixIndex.matches(context, longest, roomy)``, each match as (a key unique
        to its node, its length, the ends of its occurrences that a token follows)."""
        last = len(context) - 1
        limit = min(longest, last + 1, self.max_depth - 1)
        ends = self.where.get(context[last]) if limit >= 1 else None
        if not ends:
            return (NO_MATCH,)
        text, size, at_roomy = self.text, 1, None
        kids = self._narrowed.get(context[last])
        if kids is None:
            kids = self._narrowed[context[last]] = {}
        while size < limit:
            if size == roomy:
                at_roomy = ends
            want = context[last - size]  # (a ``None`` before an output stops the search)
            kept = kids.get(want)
            if kept is None:
                kept = kids[want] = [[e for e in ends if text[e - size] == want], {}, len(ends)]
            elif kept[2] < len(ends):  # outputs added since: narrow the new ends alone
                kept[0] += [e for e in ends[kept[2]:] if text[e - size] == want]
                kept[2] = len(ends)
            narrower, kids = kept[0], kept[1]
            if not narrower:
                break
            ends, size = narrower, size + 1
        stride = self._stride
        deep = (ends[0] * stride + size, size, ends)
        if size <= roomy:
            return (deep,)
        if roomy < 1:
            return deep, NO_MATCH
        return deep, (at_roomy[0] * stride + roomy, roomy, at_roomy)

    def speculate_at(self, ends: list[int], length: int, budget: int, min_prob: float,
                     tree: bool) -> Speculation:
        """``SuffixIndex.speculate`` below the node of a match (``matches``'s)."""
        return self.speculate((length, ends), budget, min_prob, tree, len(self.text))

    def _children(self, ends: list[int], depth: int, last: int) -> list[tuple]:
        """The children of the node at ``depth`` whose occurrences end at ``ends``: (id,
        count, token, their ends) each, in no order (``last`` is not read: an output's
        end is the ``None`` after it).  A node of two or more ends keeps them grouped by
        the token after (its children), and groups only the ends added since."""
        if depth >= self.max_depth:
            return []
        text, stride = self.text, self._stride
        if len(ends) == 1:  # most nodes
            e = ends[0] + 1
            t = text[e]
            return [] if t is None else [(e * stride + depth + 1, 1, t, [e])]
        key = ends[0] * stride + depth
        kept = self._grouped.get(key)
        if kept is None:
            after = list(map(_NEXT, ends))
            groups = {}
        elif kept[0] >= ends[-1]:  # no output added this node an occurrence since
            return kept[1]
        else:
            after = list(map(_NEXT, ends[bisect_right(ends, kept[0]):]))
            groups = kept[2]
        toks = list(map(text.__getitem__, after))
        first = toks[0]
        if toks.count(first) == len(toks):  # one token follows every new end (C loops)
            if first is not None:
                got = groups.get(first)
                if got is None:
                    groups[first] = after
                else:
                    got += after
        else:
            for e, t in zip(after, toks):
                if t is not None:
                    got = groups.get(t)
                    if got is None:
                        groups[t] = [e]
                    else:
                        got.append(e)
        depth += 1
        kids = [(g[0] * stride + depth, len(g), t, g) for t, g in groups.items()]
        self._grouped[key] = (ends[-1], kids, groups)
        return kids


class GlobalIndex:
    """The global trie: ``OutputSuffixes`` until the first removal, a ``SuffixIndex`` from
    then on (built by replaying the adds), the same answers either way."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = int(max_depth)
        self._text: OutputSuffixes | None = OutputSuffixes(max_depth)
        self._trie: SuffixIndex | None = None
        self._added: deque[list[int]] = deque()  # while answered from the text

    def empty(self) -> bool:
        """Whether no match is possible (the trie: no node but the root is live)."""
        return len(self._trie) <= 1 if self._trie is not None else not self._text.where

    def add(self, tokens: list[int]) -> None:
        """Index a finished output (Python ints)."""
        if self._trie is not None:
            self._trie.add(tokens)
        else:
            self._text.add(tokens)
            self._added.append(tokens)

    def remove(self, tokens: list[int]) -> None:
        """Undo ``add(tokens)`` (FIFO eviction)."""
        self.trie().remove(tokens)

    def trie(self) -> SuffixIndex:
        """The trie itself (built at the first call, by the same adds, and answering from
        then on: its caller may change it)."""
        if self._trie is None:
            self._text = None
            self._trie = SuffixIndex(self.max_depth)
            for tokens in self._added:
                self._trie.add(tokens)
            self._added.clear()
        return self._trie

    def matches(self, context: list[int], longest: int, roomy: int) -> tuple[tuple, ...]:
        """``SuffixIndex.matches``, each as (a key unique to its node, length, handle)."""
        if self._text is not None:
            return self._text.matches(context, longest, roomy)
        return tuple((node, m, node) for node, m in self._trie.matches(context, longest, roomy))

    def speculate(self, handle, length: int, budget: int, min_prob: float,
                  tree: bool) -> Speculation:
        """``SuffixIndex.speculate`` below a match's node (``handle``: ``matches``'s)."""
        if self._text is not None:
            return self._text.speculate_at(handle, length, budget, min_prob, tree)
        return self._trie.speculate(handle, budget, min_prob, tree, length)
