"""The target's next token after a guessed context, for ``lookahead`` and ``jacobi``
(lookahead.py): copy what followed it last time in the text the request can see.
``InContextTarget`` keeps the rule's dicts as each request's text grows (jacobi's windows);
``FollowIndex`` answers it at any visible length from a request's whole text (lookahead's
lanes, planned ahead and rolled back)."""
from __future__ import annotations

from bisect import bisect_left

import numpy as np

from simulator.policies.token_text import TokenText

OFF_PATH_ORDER = 2          # tokens of guessed context the off-path rule conditions on


class InContextTarget:
    """The target's next token after a guessed context: copy what followed it last time.

    The k tokens before a position are keyed by one int, ``t_0 << 32 (k - 1) | ... | t_k-1``
    (token ids are below 2^32), in one dict per k: no tuple per lookup, and a whole run of
    new tokens enters by one ``dict.update`` (in order: the latest occurrence wins)."""

    def __init__(self, text: TokenText, order: int = OFF_PATH_ORDER) -> None:
        self.text = text
        self.order = order
        self._follow: dict[int, list[dict]] = {}
        self._seen: dict[int, int] = {}

    def see(self, rid: int, generated: int) -> None:
        """Index the request's visible text (prompt + generated) up to now."""
        follow = self._follow.get(rid)
        if follow is None:
            follow = self._follow[rid] = [dict() for _ in range(self.order + 1)]
        size = self.text.prompt_ids[rid].size + int(generated)
        start = max(self._seen.get(rid, 0), 1)
        self._seen[rid] = size
        if start >= size:
            return
        if self.order == 2 and start >= 2 and size - start <= 8:  # a step's few tokens:
            tokens = self.text.tokens(rid)                        # stored one by one
            ones, twos = follow[1], follow[2]
            for p in range(start, size):
                a, b = tokens[p - 2], tokens[p - 1]
                ones[b] = twos[a << 32 | b] = tokens[p]
            return
        lo = max(start - self.order, 0)  # only the new tokens and the order before them
        text = self.text.tokens(rid)[lo:size]
        for k in range(1, self.order + 1):
            at = max(start, k) - lo  # the first new position with k tokens before it
            if at + lo >= size:
                break
            keys = text[at - k:size - lo - k]  # the windows' first tokens
            for j in range(1, k):
                keys = [key << 32 | t for key, t in zip(keys, text[at - k + j:])]
            follow[k].update(zip(keys, text[at:]))

    def predict(self, rid: int, tail: list[int]) -> int:
        """Next token after ``tail`` (the end of a guessed context)."""
        return self.predict_each(rid, (tail,))[0]

    def predict_each(self, rid: int, tails) -> list[int]:
        """``predict`` of each of ``tails`` (lookahead's lanes: one call a step)."""
        follow, order, out = self._follow[rid], self.order, []
        if order == 2:  # the default: the pair, else the last token alone
            ones, twos = follow[1], follow[2]
            for tail in tails:
                last = tail[-1]
                tok = twos.get(tail[-2] << 32 | last) if len(tail) >= 2 else None
                out.append(ones.get(last, last) if tok is None else tok)
            return out
        pairs = follow[2] if order >= 2 else None
        for tail in tails:
            last, size, tok = tail[-1], len(tail), None
            for k in range(min(order, size), 2, -1):  # the longest seen context first
                key = tail[-k]
                for t in tail[size - k + 1:]:
                    key = key << 32 | t
                tok = follow[k].get(key)
                if tok is not None:
                    break
            if tok is None and pairs is not None and size >= 2:
                tok = pairs.get(tail[-2] << 32 | last)
            out.append(follow[1].get(last, last) if tok is None else tok)
        return out

    def forget(self, rid: int) -> None:
        self._follow.pop(rid, None)
        self._seen.pop(rid, None)


class FollowIndex:
    """``InContextTarget``'s rule (order 2) for one request at any visible length, from its
    whole text indexed once: the token after the latest occurrence of a pair of tokens (else
    of the last token; an unseen token repeats) that ends before the visible end.

    The prompt's followers are two dicts (built as ``see`` builds them, the latest occurrence
    winning); each pair or token that also occurs in the output keeps the sorted positions
    that follow it there, and the latest below the visible end, where there is one, is later
    than any in the prompt.  The visible end is an argument, not a state: lookahead's lanes
    planned ahead and rolled back leave nothing here to copy or undo."""

    def __init__(self, tokens: list[int], prompt: int) -> None:
        self.tokens = tokens
        end1, end2 = max(prompt, 1), max(prompt, 2)  # the positions p with 1 (2) before
        size = len(tokens)
        # pairs[p] keys tokens p, p + 1 (built on an array: a few C loops, not ~size steps)
        ids = np.array(tokens, np.uint64)
        pairs = (ids[:-1] << np.uint64(32) | ids[1:]).tolist()
        self.ones = dict(zip(tokens[:end1 - 1], tokens[1:end1]))
        self.twos = dict(zip(pairs[:end2 - 2], tokens[2:end2]))
        self.later_ones = _positions(tokens[end1 - 1:size - 1], end1)
        self.later_twos = _positions(pairs[end2 - 2:size - 2], end2)

    def next_tokens(self, visible: int, tails: list[list[int]], pairs: bool) -> list[int]:
        """The rule's token after each of ``tails`` (each at least one token; its last two
        read where ``pairs`` and it has two) with the first ``visible`` tokens seen."""
        tokens, ones, twos = self.tokens, self.ones, self.twos
        later_ones, later_twos, out = self.later_ones, self.later_twos, []
        for tail in tails:
            last, tok = tail[-1], None
            if pairs and len(tail) >= 2:
                key = tail[-2] << 32 | last
                at = later_twos.get(key)
                if at is not None and at[0] < visible:
                    tok = tokens[at[bisect_left(at, visible) - 1]]
                else:
                    tok = twos.get(key)
            if tok is None:
                at = later_ones.get(last)
                if at is not None and at[0] < visible:
                    tok = tokens[at[bisect_left(at, visible) - 1]]
                else:
                    tok = ones.get(last, last)
            out.append(tok)
        return out


def _positions(keys: list[int], start: int) -> dict[int, list[int]]:
    """Each key -> the positions ``start + i`` where ``keys[i]`` is it, ascending."""
    out: dict[int, list[int]] = {}
    get = out.get
    for p, key in enumerate(keys, start):
        got = get(key)
        if got is None:
            out[key] = [p]
        else:
            got.append(p)
    return out
