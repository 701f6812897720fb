"""suffix: the global trie answered from the outputs' text (output_suffixes.py) gives what
the trie (suffix_index.py, itself checked by exact enumeration in test_suffix.py) gives."""
from __future__ import annotations

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
