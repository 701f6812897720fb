"""suffix: the per-request trie answered from the text (text_suffixes.py) gives what the
trie (suffix_index.py, itself checked by exact enumeration in test_suffix.py) gives."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.speculation.suffix_index import Cursor, SuffixIndex
from simulator.speculation.text_suffixes import TextSuffixes


def _same_answers(trie: SuffixIndex, cursor: Cursor, text: TextSuffixes, size: int,
                  cap: int, min_prob: float) -> None:
    """Both matches and every speculation from them, tree and path, at a few budgets, of
    the first ``size`` tokens of ``text`` (those the trie holds)."""
    depth = trie.max_depth
    roomy = max(1, depth - cap)
    got = text.matches(depth, roomy, size)
    for (node, length), match in zip((trie.cursor_match(cursor, depth),
                                      trie.cursor_match(cursor, roomy)), got):
        assert match[0] == length
        if length:  # the occurrences: every end of the matched suffix
            assert trie.count[node] == len(match[1])
        for budget in (0, 1, cap, 2 * cap):
            for tree in (True, False):
                want = trie.speculate(node, budget, min_prob, tree, length)
                spec = text.speculate(match, budget, min_prob, tree, size)
                assert (spec.parents, spec.tokens, spec.probs, spec.match_len) == \
                    (want.parents, want.tokens, want.probs, want.match_len)


@pytest.mark.parametrize("depth,alphabet", [(2, 2), (3, 3), (6, 2), (8, 4), (24, 3),
                                            (24, 12)])
def test_same_matches_and_speculations_as_the_trie(depth, alphabet):
    rng = np.random.default_rng(depth * 100 + alphabet)
    for _ in range(6):
        tokens = rng.integers(0, alphabet, size=int(rng.integers(1, 120)))
        trie, cursor, text = SuffixIndex(depth), Cursor(), TextSuffixes(depth)
        ahead = TextSuffixes(depth)  # grown ahead (rows planned and not kept): the same
        ahead.extend(tokens.tolist())
        at = 0
        while at < tokens.size:  # the prompt in one piece, then a few tokens at a time
            step = int(rng.integers(1, 4)) if at else int(rng.integers(1, 60))
            piece = tokens[at:at + step]
            trie.extend(cursor, piece)
            text.extend(piece.tolist())
            at += piece.size
            cap = int(rng.integers(1, depth + 4))
            for grown in (text, ahead):
                _same_answers(trie, cursor, grown, at, cap, float(rng.choice([0.0, 0.1, 0.3])))


def test_ties_go_to_the_earlier_occurrence():
    # after "1 2 5 1 3 6 1" the tokens 2 and 3 each follow "1" once: equal
    # probabilities, and the trie ranks the node made first ahead: "1 2", then "1 2 5"
    # (made at position 2) and "1 2 5 1" (position 3) before "1 3" (position 4)
    text = TextSuffixes(4)
    text.extend([1, 2, 5, 1, 3, 6, 1])
    deep, _ = text.matches(4, 2, 7)
    assert deep[0] == 1 and deep[1] == [0, 3, 6]
    spec = text.speculate(deep, 3, 0.0, True, 7)
    assert spec.tokens == [2, 5, 1] and spec.parents == [-1, 0, 1]
    assert spec.probs == [0.5, 0.5, 0.5]
    path = text.speculate(deep, 2, 0.0, False, 7)
    assert path.tokens == [2, 5] and path.probs == [0.5, 0.5]
