"""A depth-bounded suffix trie with occurrence counts: SuffixDecoding's index (Oliaro et al. 2024).

Every substring of at most ``max_depth`` tokens of the indexed sequences is a path from the
root; a node's ``count`` is how many times its substring occurs, and ``out(node)`` (the sum
of its children's counts) how many of those occurrences a token follows inside the depth
bound, so that ``count(child) / out(node)`` is the empirical probability of the child's
token after the node's substring.  Sequences are indexed online: a ``Cursor`` holds the
nodes of the suffixes that end at the sequence's last token (one per length), and appending
a token moves each of them to its child -- ``max_depth`` dictionary steps per token.
Removing a sequence replays its insertion with the counts taken back (FIFO eviction of the
global tree); nodes whose count reaches zero are unlinked and their ids reused.

Speculation follows the paper: match the longest suffix of the request's context, then
expand a speculation tree best-first by path probability (the product of child
probabilities), keeping nodes whose probability is at least ``min_token_prob``, within a
token budget; the tree's score is the sum of its node probabilities (its expected number of
accepted tokens if the frequencies were the truth).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from simulator.inputs.errors import SpecsimError


@dataclass
class Speculation:
    """A speculation tree: parents (-1: child of the matched node), tokens, path probabilities."""

    parents: list[int]
    tokens: list[int]
    probs: list[float]
    match_len: int = 0

    @property
    def score(self) -> float:
        return float(sum(self.probs))

    def __len__(self) -> int:
        return len(self.tokens)


EMPTY = Speculation([], [], [])


class Cursor:
    """Where an online sequence ends in an index: the nodes of its suffixes, shortest first."""

    __slots__ = ("nodes",)

    def __init__(self) -> None:
        self.nodes: list[int] = []


class SuffixIndex:
    """Suffix trie over token sequences, bounded to ``max_depth`` tokens per path."""

    def __init__(self, max_depth: int) -> None:
        if isinstance(max_depth, bool) or not isinstance(max_depth, (int, np.integer)) \
                or max_depth < 2:
            raise SpecsimError(f"max_depth must be a whole number >= 2, got {max_depth!r}",
                               field="max_depth")
        self.max_depth = int(max_depth)
        self.count = [0]
        # each node's children as a dict token -> child, and its parent and token: a trie
        # holds ~max_depth nodes per token, and dicts of ints (unlike lists) are not tracked
        # by the garbage collector, whose passes over as many live lists were most of a
        # suffix run's CPU once; a step down is one small-int lookup.  The order of
        # children decides nothing (speculation ranks them by count and id, the other
        # readers sum or test for any)
        self.kids: list[dict[int, int]] = [{}]
        self.parent = [-1]
        self.tok = [-1]
        self._free: list[int] = []  # ids of unlinked nodes, reused last freed first

    # ------------------------------------------------------------------ building
    def __len__(self) -> int:
        """Live nodes, the root included."""
        return len(self.count) - len(self._free)

    def token(self, node: int) -> int:
        """The token on the edge into ``node``."""
        return self.tok[node]

    def _new_node(self, parent: int, token: int) -> int:
        if self._free:
            node = self._free.pop()
            self.count[node], self.parent[node], self.tok[node] = 0, parent, token
            self.kids[node] = {}
        else:
            node = len(self.count)
            self.count.append(0)
            self.kids.append({})
            self.parent.append(parent)
            self.tok.append(token)
        self.kids[parent][token] = node
        return node

    def _unlink(self, node: int) -> None:
        del self.kids[self.parent[node]][self.tok[node]]
        self._free.append(node)

    def extend(self, cursor: Cursor, tokens) -> None:
        """Append ``tokens`` to the sequence whose end ``cursor`` marks."""
        count, kids, parent, tok = self.count, self.kids, self.parent, self.tok
        keep, free = self.max_depth - 1, self._free
        nodes = cursor.nodes
        for t in np.asarray(tokens).tolist():
            moved = []
            found = True
            for node in (0, *nodes):
                if found:  # the trie is suffix-closed: past a missing suffix, all are new
                    child = kids[node].get(t)
                    if child is not None:
                        count[child] += 1
                        moved.append(child)
                        continue
                    found = False
                if free:
                    child = self._new_node(node, t)
                    count[child] = 1
                else:  # the hot path of a growing trie, inlined
                    child = len(count)
                    count.append(1)
                    kids.append({})
                    parent.append(node)
                    tok.append(t)
                    kids[node][t] = child
                moved.append(child)
            nodes = moved[:keep]  # the deepest suffix cannot grow further
        cursor.nodes = nodes

    def add(self, tokens) -> None:
        """Index a whole sequence (a finished request's output)."""
        self.extend(Cursor(), tokens)

    def remove(self, tokens) -> None:
        """Undo ``add(tokens)``: the same walk with the counts taken back.

        A node whose count reaches zero is unlinked at once; the walk still passes through
        it, because its descendants occurred only there and are emptied by the next steps
        (a freed node has no children left by the end).
        """
        count, kids, keep = self.count, self.kids, self.max_depth - 1
        nodes: list[int] = []
        for t in np.asarray(tokens).tolist():
            moved = []
            for node in [0, *nodes]:
                child = kids[node].get(t)
                if child is None:
                    raise SpecsimError("removing a sequence that was never added",
                                       field="tokens")
                count[child] -= 1
                if count[child] == 0:
                    self._unlink(child)
                moved.append(child)
            nodes = moved[:keep]

    # ------------------------------------------------------------------ queries
    def children(self, node: int) -> list[int]:
        """``node``'s children (in no particular order)."""
        return list(self.kids[node].values())

    def out(self, node: int) -> int:
        """Occurrences of ``node``'s substring that a token follows (its children's counts)."""
        count = self.count
        return sum([count[c] for c in self.kids[node].values()])

    def find(self, pattern) -> int:
        """The node of ``pattern`` (-1 when it does not occur)."""
        node = 0
        kids = self.kids
        for t in pattern:
            node = kids[node].get(int(t), -1)
            if node == -1:
                return -1
        return node

    def longest_match(self, context: np.ndarray, max_len: int) -> tuple[int, int]:
        """(node, length) of the longest suffix of ``context`` (<= max_len) with a continuation."""
        return self.longest_in(context[-self.max_depth:].tolist(), max_len)

    def longest_in(self, context: list[int], max_len: int) -> tuple[int, int]:
        """``longest_match`` of a context given as Python ints (at least its last
        ``max_depth - 1``).

        Binary search: a suffix that occurs with a following token implies every shorter
        suffix does too.  Each probe reads the last ``mid`` tokens (before 2026-12 it read
        ``tail[hi - mid:]`` with ``hi`` as the search had lowered it: a longer suffix than
        the length it reported, so a 4-token match could be returned as 3 or missed).
        """
        hi = min(int(max_len), len(context), self.max_depth - 1)
        lo, best = 0, (-1, 0)
        tail = context[len(context) - hi:] if hi > 0 else []
        kids = self.kids
        while lo < hi:
            mid = (lo + hi + 1) // 2
            node = 0
            for t in tail[len(tail) - mid:]:  # ``find``, inlined
                node = kids[node].get(t, -1)
                if node == -1:
                    break
            if node != -1 and kids[node]:
                lo, best = mid, (node, mid)
            else:
                hi = mid - 1
        return best

    def matches(self, context: list[int], longest: int,
                roomy: int) -> tuple[tuple[int, int], ...]:
        """``longest_in(context, longest)``, and ``longest_in(context, roomy)`` after it
        where that differs (``roomy <= longest``): one binary search, not two.

        Lengths with a continuation run from 0 to some M, so the roomy match is the deep
        one when that is at most ``roomy`` long, and otherwise the last ``roomy`` tokens'
        node (the deep match reached past them).
        """
        deep = self.longest_in(context, longest)
        if deep[1] <= roomy:
            return (deep,)
        if roomy < 1:
            return deep, (-1, 0)
        node, kids = 0, self.kids
        for t in context[len(context) - roomy:]:  # a suffix of the deep match: it occurs
            node = kids[node][t]
        return deep, (node, roomy)

    def cursor_match(self, cursor: Cursor, max_len: int) -> tuple[int, int]:
        """Like ``longest_match`` for a sequence indexed online through ``cursor``."""
        nodes, kids = cursor.nodes, self.kids
        for length in range(min(int(max_len), len(nodes)), 0, -1):
            node = nodes[length - 1]
            if kids[node]:
                return node, length
        return -1, 0

    def speculate(self, node: int, budget: int, min_prob: float, tree: bool = True,
                  match_len: int = 0) -> Speculation:
        """Best-first speculation below ``node``: at most ``budget`` tokens, each >= min_prob."""
        if node < 0 or budget <= 0 or not self.kids[node]:
            return Speculation([], [], [], match_len)
        if not tree:
            return self._speculate_path(node, budget, min_prob, match_len)
        count, tok, kids = self.count, self.tok, self.kids
        parents: list[int] = []
        tokens: list[int] = []
        probs: list[float] = []
        total = self.out(node)
        heap = [(-count[c] / total, c, -1) for c in kids[node].values()
                if count[c] >= min_prob * total]
        heapq.heapify(heap)
        while heap and len(tokens) < budget:
            neg, c, par = heapq.heappop(heap)
            idx = len(tokens)
            parents.append(par)
            tokens.append(tok[c])
            probs.append(-neg)
            below = kids[c]
            if below:
                scale = neg / sum([count[d] for d in below.values()])
                for d in below.values():
                    p = scale * count[d]  # negative path probability
                    if -p >= min_prob:
                        heapq.heappush(heap, (p, d, idx))
        return Speculation(parents, tokens, probs, match_len)

    def _speculate_path(self, node: int, budget: int, min_prob: float,
                        match_len: int) -> Speculation:
        count, kids = self.count, self.kids
        parents, tokens, probs = [], [], []
        p = 1.0
        while len(tokens) < budget and kids[node]:
            best = max(kids[node].values(), key=lambda c: (count[c], -c))
            p *= count[best] / self.out(node)
            if p < min_prob:
                break
            parents.append(len(tokens) - 1)
            tokens.append(self.tok[best])
            probs.append(p)
            node = best
        return Speculation(parents, tokens, probs, match_len)


def tree_accepted(spec: Speculation, truth: np.ndarray) -> int:
    """Greedy verification of a speculation tree: depth of its deepest node on the true path."""
    return accepted_depth(spec, truth.tolist())


def accepted_depth(spec: Speculation, truth_list: list[int]) -> int:
    """``tree_accepted`` with the true tokens as Python ints.

    A trie's children carry distinct tokens, so the nodes on the true path are one chain,
    each after its parent (best-first order): one pass follows it."""
    on, depth, most = -1, 0, len(truth_list)  # the deepest node on the path so far
    if not most:
        return 0
    want = truth_list[0]
    for i, (par, tok) in enumerate(zip(spec.parents, spec.tokens)):
        if par == on and tok == want:
            on, depth = i, depth + 1
            if depth == most:
                break
            want = truth_list[depth]
    return depth
