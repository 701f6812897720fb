"""suffix: the global trie answered from the outputs' text (output_suffixes.py) gives what
the trie (suffix_index.py, itself checked by exact enumeration in test_suffix.py) gives."""
from __future__ import annotations

import heapq

import numpy as np
import pytest

from simulator.speculation.output_suffixes import GlobalIndex, OutputSuffixes
from simulator.speculation.suffix_index import SuffixIndex


def _same_answers(trie: SuffixIndex, index, context: list[int], cap: int,
                  min_prob: float) -> None:
    """Both matches of ``context`` and every speculation from them, tree and path, at a few
    budgets; the keys of distinct nodes differ."""
    depth = trie.max_depth
    for longest in (depth, cap):
        roomy = max(0, min(longest, depth - cap))
        want = trie.matches(context, longest, roomy)
        got = index.matches(context, longest, roomy)
        assert [m for _, m in want] == [m for _, m, _ in got], (context, longest, roomy)
        for (node, m), (key, _, handle) in zip(want, got):
            assert (node < 0) == (key < 0)
            if node < 0:
                continue
            assert isinstance(index, GlobalIndex) or len(handle) == trie.out(node)
            for budget in (1, cap, 2 * cap):
                for tree in (True, False):
                    spec = trie.speculate(node, budget, min_prob, tree, m)
                    if isinstance(index, GlobalIndex):
                        mine = index.speculate(handle, m, budget, min_prob, tree)
                    else:
                        mine = index.speculate_at(handle, m, budget, min_prob, tree)
                    assert (mine.parents, mine.tokens, mine.probs, mine.match_len) == \
                        (spec.parents, spec.tokens, spec.probs, spec.match_len)


@pytest.mark.parametrize("depth,alphabet", [(2, 2), (3, 3), (6, 2), (8, 4), (24, 3),
                                            (24, 12)])
def test_same_matches_and_speculations_as_the_trie(depth, alphabet):
    """Outputs added one by one (some of one token or none): after each, random contexts
    and suffixes of the outputs themselves match and speculate as in the trie."""
    rng = np.random.default_rng(depth * 100 + alphabet)
    trie, text = SuffixIndex(depth), OutputSuffixes(depth)
    keys: dict[int, tuple] = {}
    for _ in range(8):
        out = rng.integers(0, alphabet, size=int(rng.integers(0, 60))).tolist()
        trie.add(out)
        text.add(out)
        for _ in range(10):
            context = rng.integers(0, alphabet, size=int(rng.integers(1, 30))).tolist()
            if out and rng.random() < 0.5:
                context = out[:int(rng.integers(1, len(out) + 1))]
            _same_answers(trie, text, context, int(rng.integers(1, depth + 4)),
                          float(rng.choice([0.0, 0.1, 0.3])))
            for node, m in trie.matches(context, depth, 1):
                if node >= 0:  # one key per node
                    key = text.matches(context[len(context) - m:], m, m)[0][0]
                    assert keys.setdefault(key, (node, m)) == (node, m)
        keys.clear()  # (a key holds until the next add)


def test_the_first_removal_builds_the_trie_and_answers_stay_the_same():
    """FIFO eviction: the trie's freed ids decide ties from then on, so ``GlobalIndex``
    answers from a trie built by the same adds and removals."""
    rng = np.random.default_rng(3)
    trie, index = SuffixIndex(5), GlobalIndex(5)
    outs = [rng.integers(0, 3, size=int(rng.integers(1, 20))).tolist() for _ in range(6)]
    for i, out in enumerate(outs):
        trie.add(out)
        index.add(out)
        if i >= 3:
            trie.remove(outs[i - 3])
            index.remove(outs[i - 3])
        assert index.empty() == (len(trie) <= 1)
        for _ in range(10):
            context = rng.integers(0, 3, size=int(rng.integers(1, 12))).tolist()
            _same_answers(trie, index, context, int(rng.integers(1, 8)), 0.1)
    assert index.trie().count == trie.count and index.trie().kids == trie.kids


# ---------------------------------------------------------------- a reference, from scratch
# OutputSuffixes keeps its searched narrowings and its nodes' children from one query to
# the next, brought up to date as outputs are added; this reference recomputes every answer
# from the outputs' text alone (the layout OutputSuffixes documents: each output between
# two ``None``), so any state kept wrongly across adds shows as a difference.

def _text(outputs: list[list[int]]) -> list:
    text: list = [None]
    for out in outputs:
        text += [*out, None]
    return text


def _ref_matches(text: list, context: list[int], longest: int, roomy: int,
                 depth: int) -> list[tuple]:
    """(key, length, ends) of the longest suffix of ``context`` (<= the bounds) that occurs
    followed by a token of its output, and of the ``roomy``-token one where it is shorter."""
    limit = min(longest, len(context), depth - 1)
    found = {}
    for size in range(1, limit + 1):
        pattern = context[len(context) - size:]
        ends = [e for e in range(size, len(text) - 1) if text[e + 1] is not None
                and text[e - size + 1:e + 1] == pattern]
        if not ends:
            break
        found[size] = ends
    if not found:
        return [(-1, 0)]
    stride = depth + 1
    deep = max(found)
    out = [(found[deep][0] * stride + deep, deep, found[deep])]
    if deep > roomy:
        out.append((found[roomy][0] * stride + roomy, roomy, found[roomy]) if roomy >= 1
                   else (-1, 0))
    return out


def _ref_children(text: list, ends: list[int], depth: int, max_depth: int) -> list[tuple]:
    """(id, count, token, ends) of each token that follows an occurrence, by first sight."""
    groups: dict[int, list[int]] = {}
    for e in ends if depth < max_depth else ():
        if text[e + 1] is not None:
            groups.setdefault(text[e + 1], []).append(e + 1)
    return [(g[0] * (max_depth + 1) + depth + 1, len(g), t, g) for t, g in groups.items()]


def _ref_speculate(text: list, ends: list[int], m: int, budget: int, min_prob: float,
                   tree: bool, max_depth: int) -> tuple:
    """Best-first by path probability (ties by id), or the most frequent child each step."""
    parents, tokens, probs = [], [], []
    if not tree:
        p, depth = 1.0, m
        while len(tokens) < budget:
            kids = _ref_children(text, ends, depth, max_depth)
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
        return parents, tokens, probs
    kids = _ref_children(text, ends, m, max_depth)
    total = sum(k[1] for k in kids)
    heap = [(-c / total, i, -1, m + 1, t, g) for i, c, t, g in kids if c >= min_prob * total]
    heapq.heapify(heap)
    while heap and len(tokens) < budget:
        neg, _, par, depth, t, ends = heapq.heappop(heap)
        at = len(tokens)
        parents.append(par)
        tokens.append(t)
        probs.append(-neg)
        below = _ref_children(text, ends, depth, max_depth)
        if below:
            scale = neg / sum(k[1] for k in below)
            for i, c, t, g in below:
                if -(scale * c) >= min_prob:
                    heapq.heappush(heap, (scale * c, i, at, depth + 1, t, g))
    return parents, tokens, probs


@pytest.mark.parametrize("depth,alphabet,seed", [(3, 2, 0), (6, 2, 1), (8, 3, 2),
                                                 (24, 2, 3), (24, 5, 4)])
def test_kept_narrowings_and_children_agree_with_a_reference_from_scratch(depth, alphabet,
                                                                           seed):
    """Outputs added one by one, many repeating earlier ones (templates): after each add,
    contexts cut from the outputs and random ones match and speculate as recomputed from
    the text alone, at several budgets, tree and path."""
    rng = np.random.default_rng(seed)
    index, outputs = OutputSuffixes(depth), []
    for _ in range(12):
        if outputs and rng.random() < 0.6:  # an earlier output again, maybe changed
            out = list(outputs[int(rng.integers(len(outputs)))])
            for i in rng.integers(0, max(len(out), 1), size=int(rng.integers(0, 3))):
                if out:
                    out[i] = int(rng.integers(alphabet))
        else:
            out = rng.integers(0, alphabet, size=int(rng.integers(0, 40))).tolist()
        outputs.append(out)
        index.add(out)
        text = _text(outputs)
        for _ in range(12):
            source = outputs[int(rng.integers(len(outputs)))]
            context = (source[:int(rng.integers(1, len(source) + 1))] if source
                       and rng.random() < 0.7 else
                       rng.integers(0, alphabet, size=int(rng.integers(1, 30))).tolist())
            cap = int(rng.integers(1, depth + 3))
            longest = depth if rng.random() < 0.7 else cap
            roomy = max(0, min(longest, depth - cap))
            got = index.matches(context, longest, roomy)
            want = _ref_matches(text, context, longest, roomy, depth)
            assert [g[:2] for g in got] == [w[:2] for w in want], context
            for (key, m, ends), w in zip(got, want):
                if key < 0:
                    continue
                assert ends == w[2]
                for budget in (1, cap, 2 * cap):
                    for tree in (True, False):
                        min_prob = float(rng.choice([0.0, 0.1, 0.3]))
                        spec = index.speculate_at(ends, m, budget, min_prob, tree)
                        assert (spec.parents, spec.tokens, spec.probs) == _ref_speculate(
                            text, ends, m, budget, min_prob, tree, depth)
