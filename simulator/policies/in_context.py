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

    Each pair of the output keeps the sorted positions that follow it there (``later_twos``),
    and the latest below the visible end, where there is one, is later than any in the
    prompt.  The prompt's followers (``twos``, ``ones``: the latest occurrence winning, as
    ``see`` keeps them) and a token's positions in the output (``later_ones``) are looked up
    on first use (``_Latest``, ``_Later``), each key once: a request asks them of a dozen
    keys or so (the pair rule's misses), where building them whole would index every token.
    The visible end is an argument, not a state: lookahead's lanes planned ahead and rolled
    back leave nothing here to copy or undo."""

    def __init__(self, tokens: list[int], prompt: int, ids: np.ndarray | None = None) -> None:
        """The index of ``tokens`` (``ids``: the same as an array, where the caller has one)
        whose first ``prompt`` are the prompt."""
        self.tokens = tokens
        end1, end2 = max(prompt, 1), max(prompt, 2)  # the positions p with 1 (2) before
        size = len(tokens)
        ids = (np.fromiter(tokens, np.uint64, size) if ids is None
               else np.asarray(ids).astype(np.uint64))
        self.ids = ids  # the tokens as uint64 (lookahead_lanes.py's runs are made on it)
        # a pair a, b is keyed a << shift | b, one for each pair of the text's tokens (all
        # below 2^shift), a one-digit int (fast to make and hash) while shift <= 15; at
        # least 1 bit, so that lookahead's runs of tokens in ints (lookahead_lanes.py) keep
        # their length where every token is 0
        self.shift = max(int(ids.max()).bit_length() if size else 0, 1)
        # pairs[p] keys tokens p, p + 1 (built on an array: a few C loops, not ~size steps)
        pairs = ids[:-1] << np.uint64(self.shift) | ids[1:]
        # ``ones[t]``: the token after t's latest occurrence in the prompt (t itself where it
        # has none); ``twos[pair]``: after the pair's (None); ``later_ones[t]``: the positions
        # after t in the output, ascending (None)
        self.ones = _Latest(ids[:end1 - 1], tokens, 1, True)
        self.twos = _Latest(pairs[:end2 - 2], tokens, 2, False)
        self.later_ones = _Later(ids[end1 - 1:size - 1], end1)
        self.later_twos = _positions(pairs[end2 - 2:size - 2], end2)

    def next_tokens(self, visible: int, tails: list[list[int]], pairs: bool) -> list[int]:
        """The rule's token after each of ``tails`` (each at least one token; its last two
        read where ``pairs`` and it has two) with the first ``visible`` tokens seen."""
        top = 1 << self.shift  # a token from there on is not in the text: nor its pairs
        tails = [tuple(tail[-2:]) if pairs and len(tail) >= 2 and max(tail[-2:]) < top
                 else tuple(tail[-1:]) for tail in tails]
        return [tail[-1] for tail in self.advanced(visible, tails, 0)]

    def advanced(self, visible: int, tails: list[tuple], drop: int) -> list[tuple]:
        """Each of ``tails`` (tuples of at least one of the text's tokens: lookahead's lanes
        hold no other) followed by the rule's token after it (its last two read where it
        has two) with the first ``visible`` tokens seen, less its first ``drop`` tokens:
        the lanes stepped in one pass."""
        tokens, ones, twos, shift = self.tokens, self.ones, self.twos, self.shift
        later_ones, later_twos, out = self.later_ones, self.later_twos, []
        append = out.append
        for tail in tails:
            last = tail[-1]
            if len(tail) >= 2:
                key = tail[-2] << shift | last
                at = later_twos.get(key)
                if at is not None:
                    i = bisect_left(at, visible)  # the latest occurrence before it, if any
                    if i:
                        append(tail[drop:] + (tokens[at[i - 1]],))
                        continue
                tok = twos[key]
                if tok is not None:
                    append(tail[drop:] + (tok,))
                    continue
            at = later_ones[last]
            if at is not None:
                i = bisect_left(at, visible)
                if i:
                    append(tail[drop:] + (tokens[at[i - 1]],))
                    continue
            append(tail[drop:] + (ones[last],))
        return out


class _Latest(dict):
    """Key -> the token ``after`` positions on from the key's latest occurrence in ``keys``
    (an array of the text's tokens or pairs from position 0), found on the key's first
    lookup and kept; where it has none, the key itself (``default``) or None."""

    def __init__(self, keys: np.ndarray, tokens: list[int], after: int, default: bool) -> None:
        super().__init__()
        self.keys, self.tokens, self.after, self.default = keys, tokens, after, default

    def __missing__(self, key: int) -> int | None:
        hits = _where(self.keys, key)
        if hits.size:
            found = self[key] = self.tokens[int(hits[-1]) + self.after]
        else:
            found = self[key] = key if self.default else None
        return found


class _Later(dict):
    """Key -> the positions ``start + i`` where ``keys[i]`` is it, ascending (None: none),
    found on the key's first lookup and kept (``_positions``'s entries, one at a time)."""

    def __init__(self, keys: np.ndarray, start: int) -> None:
        super().__init__()
        self.keys, self.start = keys, start

    def __missing__(self, key: int) -> list[int] | None:
        hits = _where(self.keys, key)
        found = self[key] = (hits + self.start).tolist() if hits.size else None
        return found


def _where(keys: np.ndarray, key: int) -> np.ndarray:
    """The indices of ``keys`` (uint64, one axis) equal to ``key`` (none where it is out of
    their range: no token or pair of the text is): ``np.flatnonzero`` by the array's own
    method, without its Python-level layers (ravel, two dispatches)."""
    if not 0 <= key < 1 << 64:
        return keys[:0]
    return (keys == np.uint64(key)).nonzero()[0]


def _positions(keys: np.ndarray, start: int) -> dict[int, list[int]]:
    """Each key -> the positions ``start + i`` where ``keys[i]`` is it, ascending: grouped
    by a stable sort, each group's list cut from one list by C-level ``map``."""
    if not keys.size:
        return {}
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    firsts = np.concatenate(((True,), ordered[1:] != ordered[:-1])).nonzero()[0]
    cuts = firsts.tolist()
    positions = (order + start).tolist()
    return dict(zip(ordered[firsts].tolist(),
                    map(positions.__getitem__, map(slice, cuts, cuts[1:] + [keys.size]))))
