"""lookahead's planned lanes (lookahead_lanes.py) against a plain reference of the method:
lanes as lists of tokens, the pool as lists of tuples, the off-path rule by its definition
on the visible text, no merged lanes, nothing marked or rolled back."""
from __future__ import annotations

import copy

import numpy as np

from simulator.policies.in_context import FollowIndex
from simulator.policies.lookahead_lanes import LaneState


def _follower(text: list[int], tail: list[int]) -> int:
    """The off-path rule (order 2): what followed the latest occurrence of the tail's last
    two tokens, else of its last one; an unseen token repeats."""
    for k in range(min(2, len(tail)), 0, -1):
        for i in range(len(text) - 1, k - 1, -1):
            if text[i - k:i] == tail[-k:]:
                return text[i]
    return tail[-1]


class _Reference:
    """Fu et al.'s 2-D window as lookahead.py describes it, every lane stepped on its own."""

    def __init__(self, tokens: list[int], prompt: int, starts: list[int], width: int,
                 most: int) -> None:
        self.tokens, self.prompt, self.width, self.most = tokens, prompt, width, most
        self.lanes = [[t] for t in starts]
        self.pool: dict[int, list[tuple]] = {}

    def row(self, g: int) -> tuple[int, int, int]:
        """Draft tokens, lookahead tokens and accepted drafts of the iteration after ``g``."""
        at = self.prompt + g
        cands = self.pool.get(self.tokens[at - 1], [])[:self.most]
        truth, best = self.tokens[at:at + self.width], 0
        for cand in cands:
            n = 0
            while n < len(truth) and cand[n] == truth[n]:
                n += 1
            best = max(best, n)
        return len(cands) * self.width, sum(map(len, self.lanes)), best

    def step(self, g: int) -> None:
        """Every lane takes the rule's token; a full lane hands its n-gram to the pool."""
        seen, full = self.tokens[:self.prompt + g], len(self.lanes[0]) == self.width
        for k, lane in enumerate(self.lanes):
            gram = lane + [_follower(seen, lane)]
            if full:
                key, gram = gram[0], tuple(gram[1:])
                entries = self.pool.setdefault(key, [])
                if gram in entries:
                    entries.remove(gram)
                entries.insert(0, gram)  # most recent first, at most G kept
                del entries[self.most:]
                gram = list(gram)
            self.lanes[k] = gram


def _planned_and_kept(state: LaneState, g: int, end: int, rng) -> tuple[list, list, int]:
    """One ``plan_rows`` round on ``state``: its rows, their generated counts, and how many
    are kept (``keep_rows``: rolled back and replayed, or stepped on)."""
    state.mark()
    rows, gens = state.plan(g, int(rng.integers(1, 12)), end)
    kept, stepped = int(rng.integers(1, len(gens) + 1)), len(gens) - 1
    if stepped > kept or rng.random() < 0.2:
        state.roll_back()
        stepped = 0
    else:
        state.keep()
    for gen in gens[stepped:kept]:
        state.step(gen)
    return rows, gens, kept


def test_planned_lanes_are_the_reference_over_many_rounds():
    """Rounds of planned rows, some kept in part (rolled back and replayed), some taken one
    at a time (``step``), on random texts: every row is the reference's, and the lanes (as
    many lanes as the reference once merged ones are counted) and the pool after."""
    rng = np.random.default_rng(36)
    for case in range(120):
        width, most, lanes = int(rng.integers(1, 5)), int(rng.integers(1, 6)), 5
        prompt_n, output_n = int(rng.integers(1, 30)), int(rng.integers(20, 120))
        vocab = int(rng.integers(2, 9))
        tokens = rng.integers(0, vocab, prompt_n + output_n).tolist()
        starts = rng.integers(0, vocab, lanes).tolist()
        state = LaneState(FollowIndex(tokens, prompt_n), prompt_n, starts, width, most)
        ref = _Reference(tokens, prompt_n, starts, width, most)
        g = int(rng.integers(0, 3))
        while g + 1 < output_n:
            if rng.random() < 0.15:  # an iteration on its own (``observe``'s step)
                want = ref.row(g)
                state.step(g)
                ref.step(g)
                g += want[2] + 1
                continue
            rows, gens, kept = _planned_and_kept(state, g, output_n, rng)
            ahead, want = copy.deepcopy(ref), []  # the plan's rows, past the kept ones too
            for j, gen in enumerate(gens):
                assert gen == g, case
                want += ahead.row(g)
                ahead.step(g)
                if j < kept:
                    ref.step(g)
                g += want[-1] + 1
            assert rows == want, case
            g = gens[kept - 1] + rows[3 * kept - 1] + 1
            assert sorted(state.lanes()) == sorted(ref.lanes), case
            assert state.grams() == {k: v for k, v in ref.pool.items() if v}, case
