"""``lookahead`` (Fu et al., ICML 2024) and its baseline ``jacobi`` (Santilli et al., ACL 2023).

Both run on the workload's real token ids and need the target's prediction after a *guessed*
context.  On the true path it is the workload's next token.  Off it the workload says nothing,
so we extend the rule the way a language model behaves in context (an induction head): after
a guessed context the target predicts the token that followed the most recent occurrence of
the context's last ``OFF_PATH_ORDER`` tokens (backing off to fewer) in the text it can see --
the prompt and the tokens generated so far; an unseen token is repeated.

``jacobi``: a window of ``window_size`` guesses is verified and refined in one forward of
W + 1 tokens: the accepted guesses are those equal to the target's tokens, and the new window
is the forward's predictions beyond them.  Such a window follows copied text one position
behind where the generation is (lecture 000, code 05 demo 3), so it barely beats one token
per step.

``lookahead``: a 2-D window of W lanes keeps each lane's last N - 1 Jacobi guesses (a lane
starts from a random prompt token); each step every lane gets one new token -- the off-path
rule applied to the lane's own guesses, the diagonal its lookahead token attends to -- and
hands its N-gram to a pool keyed by the first token.  The
verification branch checks up to G pooled (N - 1)-token continuations of the last generated
token.  Both branches share one forward of 1 + W (N - 1) + G (N - 1) tokens per request
(fewer while the lanes fill and when the pool has fewer candidates).  The pool bookkeeping
is CPU work: ``cpu_time_per_request_s`` per request per step, 5 us by default -- an
assumption (a handful of Python dict updates, as in the reference implementation), not a
measurement.
"""
from __future__ import annotations

from itertools import chain

import numpy as np

from simulator.engine.plan import (
    AheadDraft,
    BatchView,
    DraftPlan,
    VariedDraft,
    VariedPlan,
    VariedRows,
    emitted_tokens,
)
from simulator.inputs.params import Param
from simulator.cost.spec_work import SpecWork
from simulator.policies.base import PolicyBase, PolicyContext, spec_charge
from simulator.policies.in_context import OFF_PATH_ORDER, FollowIndex, InContextTarget
from simulator.policies.lookahead_lanes import LaneState, longest_prefix
from simulator.policies.token_text import TokenText, require_token_ids

LOOKAHEAD_S_PER_REQUEST = 5e-6  # assumed: a few Python dict updates per request per step


class JacobiDecoding(PolicyBase, VariedDraft):
    """Plain Jacobi decoding: refine a window of guesses, accept its verified prefix."""

    name = "jacobi"
    acceptance_from_tokens = True
    PARAMS = {
        "window_size": Param("int", default=8, minimum=1, maximum=256, aliases=("W",),
                             help="guesses per request per step"),
        "init": Param("str", default="random", choices=("random", "repeat"),
                      help="first window: random prompt tokens, or the last token repeated"),
    }

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        self.text = TokenText(*require_token_ids(ctx.workload, self.name))
        self.target = InContextTarget(self.text)
        self.host = spec_charge(ctx, SpecWork())  # model-free: the verification's work
        self.w = int(params["window_size"])
        self.init = params["init"]
        self._window: dict[int, list[int]] = {}

    @property
    def max_verify_tokens(self) -> int:
        return self.w + 1

    def _initial(self, rid: int, generated: int, rng: np.random.Generator) -> list[int]:
        known = self.text.known(rid, generated)
        if self.init == "repeat":
            return [int(known[-1])] * self.w
        return known[rng.integers(0, self.text.prompt_ids[rid].size, self.w)].tolist()

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        plan = self.plan_counts(batch.request_ids, batch.context, batch.generated,
                                batch.output_len, batch.prompt_len, batch.batch_size, rng)
        # cpu_time_s is 0.0 + the CPU seconds: the same float once draft_time_s is added
        return DraftPlan(num_draft=plan.num_draft, verify_tokens=plan.verify_tokens,
                         cpu_time_s=plan.seconds, payload=plan.payload)

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        return self._accepted(plan.payload, batch.request_ids, batch.generated, plan.num_draft)

    def observe(self, plan: DraftPlan, batch: BatchView, accepted: np.ndarray,
                step_time_s: float) -> None:
        self._observe(batch.request_ids, batch.generated, batch.output_len, plan.num_draft,
                      accepted)

    # ------------------------------------------------------------------ VariedDraft
    def varied_draft(self) -> VariedDraft:
        """Its iterations on arrays (engine/varied_stretch.py): itself."""
        return self

    def plan_counts(self, request_ids, context, generated, output_len, prompt_len,
                    batch_size, rng):
        """``propose``'s plan on arrays: every request verifies its window (a new request's
        drawn from ``rng`` first, in the batch's order)."""
        drafts: dict[int, list[int]] = {}
        for rid, g in zip(request_ids.tolist(), generated.tolist()):
            window = self._window.get(rid)
            if window is None:
                window = self._window[rid] = self._initial(rid, g, rng)
            drafts[rid] = window  # observe replaces a window, never changes it
        k = np.full(request_ids.size, self.w, np.int64)
        return VariedPlan(k, k + 1, 0.0 + self.host(request_ids.size), drafts)

    def draw_counts(self, rng, request_ids, context, generated, plan):
        return self._accepted(plan.payload, request_ids, generated, plan.num_draft)

    def observe_counts(self, request_ids, generated, output_len, plan, accepted,
                       step_time_s):
        self._observe(request_ids, generated, output_len, plan.num_draft, accepted)

    def _accepted(self, drafts: dict, request_ids: np.ndarray, generated: np.ndarray,
                  num_draft: np.ndarray) -> np.ndarray:
        """``accept`` on arrays: each window's prefix that the target's next tokens match."""
        out, text, w = [], self.text, self.w
        for rid, g, k in zip(request_ids.tolist(), generated.tolist(), num_draft.tolist()):
            at = text.prompt_ids[rid].size + g
            out.append(longest_prefix((drafts[rid],), text.tokens(rid)[at:at + w]) if k else 0)
        return np.array(out, np.int64)

    def _observe(self, request_ids: np.ndarray, generated: np.ndarray,
                 output_len: np.ndarray, num_draft: np.ndarray, accepted: np.ndarray) -> None:
        """``observe`` on arrays: finished requests forgotten, the others' windows moved."""
        done = generated + emitted_tokens(accepted, generated, output_len) >= output_len
        for rid, g, d, k, m in zip(request_ids.tolist(), generated.tolist(), done.tolist(),
                                   num_draft.tolist(), accepted.tolist()):
            if d:
                self._window.pop(rid, None)
                self.target.forget(rid)
                self.text.forget(rid)
                continue
            window = self._window.get(rid)
            if window is None:  # never proposed for (a controller kept it off)
                continue
            self.target.see(rid, g)
            self._window[rid] = self._next_window(rid, g, window, k, int(m))

    def _next_window(self, rid: int, g: int, window: list[int], k: int, m: int) -> list[int]:
        """The window after a step that accepted ``m`` of it (``k``: its draft count)."""
        if k:
            # the forward predicted output position g + j from the prefix and guesses
            # 0..j-1; past the accepted m those contexts were off the true path
            at = self.text.prompt_ids[rid].size + g
            ctx = self.text.tokens(rid)[max(at - OFF_PATH_ORDER, 0):at] + window
            base = len(ctx) - self.w
            new = [self.target.predict(rid, ctx[:base + j]) for j in range(m + 1, self.w + 1)]
        else:  # verification was dropped this step: the window only shifts
            new = window[1:]
        while len(new) < self.w:  # fill the freed slots by continuing the guesses
            new.append(self.target.predict(rid, new[-OFF_PATH_ORDER:] or window[-1:]))
        return new


class LookaheadDecoding(PolicyBase, AheadDraft):
    """Lookahead decoding: Jacobi lanes feed an n-gram pool whose hits are verified."""

    name = "lookahead"
    acceptance_from_tokens = True
    PARAMS = {
        "window_size": Param("int", default=5, minimum=1, maximum=256, aliases=("W",),
                             help="lookahead lanes W"),
        "ngram_size": Param("int", default=4, minimum=2, maximum=64, aliases=("N",),
                            help="n-gram size N (lanes keep N - 1 guesses)"),
        "guess_set_size": Param("int", default=5, minimum=1, maximum=256, aliases=("G",),
                                help="pooled n-grams verified per step G"),
        "cpu_time_per_request_s": Param("float", default=LOOKAHEAD_S_PER_REQUEST, minimum=0.0,
                                        maximum=1.0, help="CPU pool time per request"),
    }

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        self.text = TokenText(*require_token_ids(ctx.workload, self.name))
        self.host = spec_charge(ctx, SpecWork())  # model-free: the verification's work
        self.w = int(params["window_size"])
        self.n = int(params["ngram_size"])
        self.g = int(params["guess_set_size"])
        self.cpu_s = float(params["cpu_time_per_request_s"])
        self._lanes: dict[int, LaneState] = {}
        # the last plan_rows' requests: each one's state (marked), the generated count
        # each of its rows starts from, and how many of them it observed
        self._ahead: list[tuple[LaneState, list[int], int]] = []

    @property
    def max_verify_tokens(self) -> int:
        """The root, W lanes of N - 1 guesses and G pooled (N - 1)-grams."""
        return 1 + (self.w + self.g) * (self.n - 1)

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        plan = self.plan_counts(batch.request_ids, batch.context, batch.generated,
                                batch.output_len, batch.prompt_len, batch.batch_size, rng)
        # cpu_time_s is 0.0 + the CPU seconds: the same float once draft_time_s is added
        return DraftPlan(num_draft=plan.num_draft, verify_tokens=plan.verify_tokens,
                         cpu_time_s=plan.seconds, payload=plan.payload)

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        return self._accepted(plan.payload, batch.request_ids, batch.generated, plan.num_draft)

    def observe(self, plan: DraftPlan, batch: BatchView, accepted: np.ndarray,
                step_time_s: float) -> None:
        self._observe(batch.request_ids, batch.generated, batch.output_len, plan.verify_tokens,
                      accepted)

    # ------------------------------------------------------------------ VariedDraft
    def varied_draft(self) -> VariedDraft:
        """Its iterations on arrays (engine/varied_stretch.py): itself."""
        return self

    def plan_counts(self, request_ids, context, generated, output_len, prompt_len,
                    batch_size, rng):
        """``propose``'s plan on arrays (each request's lanes started from random prompt
        tokens on its first iteration, as ``propose`` draws them)."""
        n, width = request_ids.size, self.n - 1
        drafts: dict[int, list[int]] = {}
        counts, lanes_held = [], []
        for rid, g in zip(request_ids.tolist(), generated.tolist()):
            state = self._lanes.get(rid)
            if state is None:
                state = self._lanes[rid] = self._start(rid, rng)
            cands = state.candidates(g)
            drafts[rid] = cands  # (N - 1)-token grams, each an int
            counts.append(len(cands) * width)
            lanes_held.append(state.held())
        num_draft = np.array(counts, np.int64)
        verify = 1 + np.array(lanes_held, np.int64) + num_draft
        return VariedPlan(num_draft, verify, 0.0 + (self.cpu_s * n + self.host(n)), drafts)

    def _start(self, rid: int, rng: np.random.Generator) -> LaneState:
        """A request's lanes, each one random prompt token, and an empty pool."""
        prompt = self.text.prompt_ids[rid]
        picks = rng.integers(0, prompt.size, self.w)
        return LaneState(FollowIndex(self.text.tokens(rid), int(prompt.size),
                                    self.text.full(rid)),
                         int(prompt.size), [int(prompt[j]) for j in picks], self.n - 1, self.g)

    def lanes(self, rid: int) -> list[list[int]]:
        """Request ``rid``'s lanes now (each its last N - 1 guesses at most)."""
        return self._lanes[rid].lanes()

    def draw_counts(self, rng, request_ids, context, generated, plan):
        return self._accepted(plan.payload, request_ids, generated, plan.num_draft)

    def observe_counts(self, request_ids, generated, output_len, plan, accepted,
                       step_time_s):
        self._observe(request_ids, generated, output_len, plan.verify_tokens, accepted)

    def plan_rows(self, request_ids, generated, output_len, steps, rng):
        """``plan_counts`` and ``draw_counts`` of up to ``steps`` iterations, up to the
        first that finishes a request, each request's rows on its own state (marked first)
        observed as they are planned, all but its last (``keep_rows`` then keeps the kept
        ones, or rolls the state back to the mark and replays them).  A request with no
        lanes yet gets them first, drawn from ``rng`` in the batch's order as
        ``plan_counts`` draws them.  A request's rows depend on its own state alone: they
        are planned request by request, the nearest its end first, each no further than
        the first row that finishes one."""
        lanes = self._lanes
        states = []
        for rid in request_ids.tolist():
            state = lanes.get(rid)
            if state is None:
                state = lanes[rid] = self._start(rid, rng)
            states.append(state)
        gens, ends = generated.tolist(), output_len.tolist()
        planned = [None] * len(states)
        for i in sorted(range(len(states)), key=lambda i: ends[i] - gens[i]):
            states[i].mark()
            planned[i] = states[i].plan(gens[i], steps, ends[i])
            steps = min(steps, len(planned[i][1]))
        self._ahead = [(state, at, len(at) - 1) for state, (_, at) in zip(states, planned)]
        # (draft tokens, lookahead tokens, accepted) x rows x requests, each (rows x requests)
        # C-ordered as the engine's arrays are (its float sums follow the memory order); read
        # from the flat rows by one C-level pass
        n = len(states)
        table = np.fromiter(chain.from_iterable(rows[:3 * steps] for rows, _ in planned),
                            np.int64, 3 * steps * n).reshape(n, steps, 3).transpose(2, 1, 0) \
            .copy()
        seconds = np.empty(steps)  # np.full's values, without its Python-level layer
        seconds.fill(0.0 + (self.cpu_s * n + self.host(n)))
        return VariedRows(table[0], 1 + table[1] + table[0], table[2], seconds)

    def keep_rows(self, kept):
        """Each request's state after ``kept`` rows: as plan_rows left it, stepped on to
        ``kept`` rows where it stopped short of them; else rolled back to the mark and the
        kept rows replayed."""
        ahead, self._ahead = self._ahead, []
        for state, gens, stepped in ahead:
            if stepped > kept:
                state.roll_back()
                stepped = 0
            else:
                state.keep()
            for g in gens[stepped:kept]:
                state.step(g)

    def _accepted(self, drafts: dict, request_ids: np.ndarray, generated: np.ndarray,
                  num_draft: np.ndarray) -> np.ndarray:
        """``accept`` on arrays: the longest verified prefix among the pooled candidates."""
        lanes = self._lanes
        return np.array([lanes[rid].verified(g, drafts[rid]) if k else 0 for rid, g, k in
                         zip(request_ids.tolist(), generated.tolist(), num_draft.tolist())],
                        np.int64)

    def _observe(self, request_ids: np.ndarray, generated: np.ndarray,
                 output_len: np.ndarray, verify_tokens: np.ndarray,
                 accepted: np.ndarray) -> None:
        """``observe`` on arrays: every lane steps and hands its n-gram to the pool."""
        done = generated + emitted_tokens(accepted, generated, output_len) >= output_len
        for rid, g, d, v in zip(request_ids.tolist(), generated.tolist(), done.tolist(),
                                verify_tokens.tolist()):
            if d:
                self._lanes.pop(rid, None)
                self.text.forget(rid)
                continue
            state = self._lanes.get(rid)
            if v > 1 and state is not None:  # else trimmed or switched off: no lookahead ran
                state.step(g)
