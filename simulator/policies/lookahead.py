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
from simulator.cost.spec_host import SpecWork
from simulator.policies.base import PolicyBase, PolicyContext, spec_charge
from simulator.policies.in_context import OFF_PATH_ORDER, InContextTarget
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
            out.append(_prefix(drafts[rid], text.tokens(rid)[at:at + w]) if k else 0)
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
        self.target = InContextTarget(self.text)
        self.host = spec_charge(ctx, SpecWork())  # model-free: the verification's work
        self.w = int(params["window_size"])
        self.n = int(params["ngram_size"])
        self.g = int(params["guess_set_size"])
        self.cpu_s = float(params["cpu_time_per_request_s"])
        self._lanes: dict[int, list[list[int]]] = {}
        self._pool: dict[int, dict[int, list[tuple]]] = {}
        # plan_rows' states, moved on copies, until keep_rows: rid -> (the state after
        # the rows observed, its own), and each row's generated counts
        self._ahead: dict[int, tuple] = {}
        self._ahead_at: list[list[int]] = []

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
        n, text, width = request_ids.size, self.text, self.n - 1
        drafts: dict[int, list[tuple]] = {}
        counts, lanes_held = [], []
        for rid, g in zip(request_ids.tolist(), generated.tolist()):
            lanes = self._lanes.get(rid)
            if lanes is None:
                prompt = text.prompt_ids[rid]
                picks = rng.integers(0, prompt.size, self.w)
                lanes = self._lanes[rid] = [[int(prompt[j])] for j in picks]
                self._pool[rid] = {}
            last = text.tokens(rid)[text.prompt_ids[rid].size + g - 1]
            cands = self._pool[rid].get(last, [])[:self.g]
            drafts[rid] = cands  # (N - 1)-token tuples
            counts.append(len(cands) * width)
            lanes_held.append(sum(map(len, lanes)))
        num_draft = np.array(counts, np.int64)
        verify = 1 + np.array(lanes_held, np.int64) + num_draft
        return VariedPlan(num_draft, verify, 0.0 + (self.cpu_s * n + self.host(n)), drafts)

    def draw_counts(self, rng, request_ids, context, generated, plan):
        return self._accepted(plan.payload, request_ids, generated, plan.num_draft)

    def observe_counts(self, request_ids, generated, output_len, plan, accepted,
                       step_time_s):
        self._observe(request_ids, generated, output_len, plan.verify_tokens, accepted)

    def plan_rows(self, request_ids, generated, output_len, steps):
        """``plan_counts`` and ``draw_counts`` of up to ``steps`` iterations, up to the
        first that finishes a request, and ``observe_counts`` of all but the last, on a
        copy of each request's lanes, pool and seen text (``keep_rows`` installs the copy,
        or replays the kept rows on the request's own state); None while a request has no
        lanes yet (its first plan draws them)."""
        ids = request_ids.tolist()
        if any(rid not in self._lanes for rid in ids):
            return None
        n, gens = len(ids), generated.tolist()
        real = [self._state(rid) for rid in ids]
        for rid, state in zip(ids, real):
            self._put(rid, self._copy(state))
        drafted, held, accepted = (np.zeros((steps, n), np.int64) for _ in range(3))
        ends, at = (output_len - generated).tolist(), [gens]
        text = self.text  # what each row reads: the copies, moved in place
        reads = [(text.prompt_ids[rid].size, text.tokens(rid), self._pool[rid],
                  self._lanes[rid]) for rid in ids]
        for j in range(steps):
            self._plan_row(reads, at[-1], (drafted[j], held[j], accepted[j]))
            moved = [g + a + 1 for g, a in zip(at[-1], accepted[j].tolist())]
            if j == steps - 1 or any(m - g0 >= e for m, g0, e in zip(moved, gens, ends)):
                steps = j + 1  # the last row: observed by keep_rows where it is kept
                break
            for rid, g in zip(ids, at[-1]):  # observe: the lanes step (verify > 1 always)
                self.target.see(rid, g)
                self._step_lanes(rid)
            at.append(moved)
        self._ahead = {rid: (self._state(rid), state) for rid, state in zip(ids, real)}
        self._ahead_at = at  # each row's generated counts
        for rid, state in zip(ids, real):
            self._put(rid, state)
        seconds = np.full(steps, 0.0 + (self.cpu_s * n + self.host(n)))
        return VariedRows(drafted[:steps], 1 + held[:steps] + drafted[:steps],
                          accepted[:steps], seconds)

    def _plan_row(self, reads: list, gens: list, out: tuple) -> None:
        """One row of ``plan_rows``: ``plan_counts``'s and ``draw_counts``' per request
        (``reads``: its prompt's size, its tokens, its pool and its lanes)."""
        width, most = self.n - 1, self.g
        for i, ((prompt, tokens, pool, lanes), g) in enumerate(zip(reads, gens)):
            cands = pool.get(tokens[prompt + g - 1], [])[:most]
            truth = tokens[prompt + g:prompt + g + width]
            out[0][i] = len(cands) * width
            out[1][i] = sum(map(len, lanes))
            out[2][i] = max([_prefix(c, truth) for c in cands]) if cands else 0

    def keep_rows(self, kept):
        """The state after ``kept`` rows: the copy (which observed all rows but the last),
        with the last row observed where it is kept; else the kept rows replayed on the
        request's own state."""
        ahead, at = self._ahead, self._ahead_at
        self._ahead, self._ahead_at = {}, []
        copied = kept >= len(at) - 1
        for i, (rid, (state, real)) in enumerate(ahead.items() if kept else ()):
            if copied:
                self._put(rid, state)
            for gens in at[len(at) - 1 if copied else 0:kept]:
                self.target.see(rid, gens[i])
                self._step_lanes(rid)

    def _state(self, rid: int) -> tuple:
        return self._lanes[rid], self._pool[rid], self.target.held(rid)

    def _copy(self, state: tuple) -> tuple:
        lanes, pool, target = state
        follow, seen = target
        return ([lane[:] for lane in lanes], {t: grams[:] for t, grams in pool.items()},
                (None if follow is None else [d.copy() for d in follow], seen))

    def _put(self, rid: int, state: tuple) -> None:
        self._lanes[rid], self._pool[rid], target = state
        self.target.put(rid, target)

    def _accepted(self, drafts: dict, request_ids: np.ndarray, generated: np.ndarray,
                  num_draft: np.ndarray) -> np.ndarray:
        """``accept`` on arrays: the longest verified prefix among the pooled candidates."""
        out, text, width = [], self.text, self.n - 1
        for rid, g, k in zip(request_ids.tolist(), generated.tolist(), num_draft.tolist()):
            if k:
                at = text.prompt_ids[rid].size + g  # the target's next tokens, up to N - 1
                truth = text.tokens(rid)[at:at + width]
                out.append(max([_prefix(c, truth) for c in drafts[rid]]))
            else:
                out.append(0)
        return np.array(out, np.int64)

    def _observe(self, request_ids: np.ndarray, generated: np.ndarray,
                 output_len: np.ndarray, verify_tokens: np.ndarray,
                 accepted: np.ndarray) -> None:
        """``observe`` on arrays: every lane steps and hands its n-gram to the pool."""
        done = generated + emitted_tokens(accepted, generated, output_len) >= output_len
        for rid, g, d, v in zip(request_ids.tolist(), generated.tolist(), done.tolist(),
                                verify_tokens.tolist()):
            if d:
                for store in (self._lanes, self._pool):
                    store.pop(rid, None)
                self.target.forget(rid)
                self.text.forget(rid)
                continue
            if v <= 1 or rid not in self._lanes:
                continue  # trimmed or switched off: no lookahead branch ran
            self.target.see(rid, g)
            self._step_lanes(rid)

    def _step_lanes(self, rid: int) -> None:
        """Each lane of ``rid`` gets its next guess; a full lane's n-gram enters the pool."""
        pool, lanes, full, g = self._pool[rid], self._lanes[rid], self.n - 1, self.g
        # the pool is not read while the lanes step: every lane's guess first
        for lane, token in zip(lanes, self.target.predict_each(rid, lanes)):
            if len(lane) == full:
                entries = pool.setdefault(lane[0], [])
                gram = (*lane[1:], token)
                if gram in entries:
                    entries.remove(gram)
                entries.insert(0, gram)      # most recent first
                del entries[g:]
                del lane[0]
            lane.append(token)


def _prefix(draft: tuple, truth: list) -> int:
    """``matched_prefix`` of a pooled candidate (a tuple) against the target's next tokens
    (a list): the leading tokens they share."""
    n = 0
    for a, b in zip(draft, truth):
        if a != b:
            break
        n += 1
    return n
