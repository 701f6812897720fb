"""``prompt_lookup``: n-gram matching over the prompt and the generated text (vLLM ``ngram``).

Each iteration, for every decoding request, the proposer takes the longest suffix of the
request's tokens (between ``prompt_lookup_min`` and ``prompt_lookup_max`` tokens) that also
occurs earlier in them, and proposes the up to ``num_speculative_tokens`` tokens that followed
its earliest occurrence -- the rule of vLLM's ``_find_longest_matched_ngram_and_propose_tokens``
(longest n first, earliest position on ties).  No match: no draft this iteration.

It runs on the workload's real token ids (``workload: {tokens: ...}``): request ``rid`` has
emitted the first ``generated`` ids of ``output_ids[rid]``, and the target's next tokens are the
following ones.  A draft token is accepted iff it equals the target's token at its position
(greedy verification), so acceptance is measured on the text, not assumed.  A workload without
token ids is an error: the scenario's acceptance model cannot say when an n-gram matches.

The proposer is CPU work, serial before the verification forward: ``cpu_time_per_request_s``
per request per iteration.  The default, 2 us, is vLLM's own figure: its Numba n-gram matcher
took 1.9 s cumulative over a 5,000-request ShareGPT run (vllm-project/vllm PR #13365), about
10^6 request-iterations.
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
from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param
from simulator.cost.spec_work import SpecWork
from simulator.policies.base import PolicyBase, PolicyContext, spec_charge
from simulator.policies.draft_control import LimitedControl, LimitedDraft
from simulator.policies.ngram_index import TextNgrams
from simulator.policies.token_text import (
    TokenText,
    matched_prefix,
    require_token_ids,
)

PROMPT_LOOKUP_S_PER_REQUEST = 2e-6  # vLLM PR #13365: 1.9 s over ~1e6 request-iterations


def ngram_lookup(tokens: np.ndarray, min_n: int, max_n: int, k: int) -> np.ndarray:
    """Tokens after the earliest occurrence of the longest suffix n-gram (min_n <= n <= max_n).

    The occurrence must end before the last token, so at least one token follows it; up to
    ``k`` of those are returned (empty: no n-gram of ``min_n`` or more recurs).
    """
    size = tokens.size
    if k <= 0 or size < min_n + 1:
        return tokens[:0]
    ends = np.flatnonzero(tokens[:size - 1] == tokens[size - 1])  # candidate match ends
    if not ends.size:
        return tokens[:0]
    length = np.ones(ends.size, np.int64)
    alive = np.ones(ends.size, bool)
    for j in range(1, max_n):
        idx = ends - j
        alive &= idx >= 0
        alive[alive] = tokens[idx[alive]] == tokens[size - 1 - j]
        if not alive.any():
            break
        length += alive
    best = int(length.max())
    if best < min_n:
        return tokens[:0]
    start = int(ends[np.argmax(length == best)]) + 1  # earliest among the longest
    return tokens[start:start + k]


def chain_plan(drafts: dict[int, np.ndarray], batch: BatchView, cpu_time_s: float) -> DraftPlan:
    """A plan verifying each request's draft chain (``drafts`` keyed by request id)."""
    k = chain_counts(drafts, batch.request_ids)
    return DraftPlan(num_draft=k, verify_tokens=k + 1, cpu_time_s=cpu_time_s, payload=drafts)


def chain_counts(drafts: dict[int, np.ndarray], request_ids: np.ndarray) -> np.ndarray:
    """Each request's draft length (``drafts`` keyed by request id)."""
    return np.fromiter((drafts[r].size for r in request_ids.tolist()), np.int64,
                       request_ids.size)


def accept_chains(text: TokenText, plan: DraftPlan, batch: BatchView) -> np.ndarray:
    """Greedy verification of each request's chain against the target's next tokens."""
    return chains_accepted(text, plan.payload, batch.request_ids, batch.generated,
                           plan.num_draft)


def chains_accepted(text: TokenText, drafts: dict, request_ids: np.ndarray,
                    generated: np.ndarray, num_draft: np.ndarray) -> np.ndarray:
    """``accept_chains`` on arrays: each request's first ``num_draft`` drafted tokens
    against the target's next ones."""
    out = np.zeros(request_ids.size, np.int64)
    for i, (rid, g, k) in enumerate(zip(request_ids.tolist(), generated.tolist(),
                                        num_draft.tolist())):
        if k:
            out[i] = matched_prefix(drafts[rid][:k], text.upcoming(rid, g, k))
    return out


class PromptLookup(PolicyBase, LimitedDraft, AheadDraft):
    """Propose the continuation of the longest recurring suffix n-gram of each request."""

    name = "prompt_lookup"
    acceptance_from_tokens = True
    PARAMS = {
        "num_speculative_tokens": Param("int", default=4, minimum=1, maximum=64,
                                        aliases=("gamma",), help="most draft tokens proposed"),
        "prompt_lookup_max": Param("int", default=4, minimum=1, maximum=64,
                                   help="longest n-gram matched"),
        "prompt_lookup_min": Param("int", default=2, minimum=1, maximum=64,
                                   help="shortest n-gram matched"),
        "cpu_time_per_request_s": Param("float", default=PROMPT_LOOKUP_S_PER_REQUEST,
                                        minimum=0.0, maximum=1.0,
                                        help="CPU proposer time per request per iteration"),
    }

    @classmethod
    def check_params(cls, out: dict, *, raw, source: str, prefix: str) -> None:
        """``prompt_lookup_min <= prompt_lookup_max`` (both >= 1 by their Param bounds)."""
        if out["prompt_lookup_min"] > out["prompt_lookup_max"]:
            raise SpecsimError(
                f"prompt_lookup_min ({out['prompt_lookup_min']}) exceeds prompt_lookup_max "
                f"({out['prompt_lookup_max']})", source=source,
                field=prefix + "prompt_lookup_min", fix="make prompt_lookup_min <= "
                                                         "prompt_lookup_max")

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        self.text = TokenText(*require_token_ids(ctx.workload, self.name))
        self.k = int(params["num_speculative_tokens"])
        self.min_n = int(params["prompt_lookup_min"])
        self.max_n = int(params["prompt_lookup_max"])
        self.cpu_s = float(params["cpu_time_per_request_s"])
        # model-free: the verification's work (and the syncs of the engine's n-gram path)
        self.host = spec_charge(ctx, SpecWork(method=self.name))
        self._index: dict[int, TextNgrams] = {}  # each running request's n-grams

    @property
    def max_verify_tokens(self) -> int:
        return self.k + 1

    def draft_control(self, params: dict) -> LimitedControl:
        """Per-request caps: the lookup proposes at most each request's cap."""
        return LimitedControl(self, self.k)

    def propose_limited(self, batch: BatchView, rng: np.random.Generator,
                        max_draft: np.ndarray) -> DraftPlan:
        """Propose at most ``max_draft[i]`` tokens for request i (adaptive controllers' hook)."""
        drafts, cpu_s = self.lookup(batch.request_ids, batch.generated, max_draft)
        return chain_plan(drafts, batch, cpu_s)

    def lookup(self, request_ids: np.ndarray, generated: np.ndarray,
               max_draft: np.ndarray) -> tuple[dict, float]:
        """(each request's draft, keyed by id; the proposer's CPU seconds): at most
        ``max_draft[i]`` tokens for request i, each request's read from its whole text
        (ngram_index.py's ``TextNgrams``: ``ngram_lookup``'s answer)."""
        drafts, looked, index, text = {}, 0, self._index, self.text
        for rid, g, cap in zip(request_ids.tolist(), generated.tolist(),
                               np.minimum(max_draft, self.k).tolist()):
            if cap > 0:
                looked += 1
                grams = index.get(rid)
                if grams is None:
                    grams = index[rid] = TextNgrams(self.min_n, self.max_n, text.full(rid))
                drafts[rid] = grams.lookup(text.known(rid, g), cap)
            else:
                drafts[rid] = text.full(rid)[:0]
        found = sum(1 for d in drafts.values() if d.size)  # requests verifying a draft
        return drafts, looked * self.cpu_s + self.host(found)

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        return self.propose_limited(batch, rng, np.full(len(batch), self.k, np.int64))

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        return accept_chains(self.text, plan, batch)

    def observe(self, plan: DraftPlan, batch: BatchView, accepted: np.ndarray,
                step_time_s: float) -> None:
        self._forget_finished(batch.request_ids, batch.generated, batch.output_len, accepted)

    # ------------------------------------------------------------------ VariedDraft
    def varied_draft(self) -> VariedDraft:
        """Its iterations on arrays (engine/varied_stretch.py): itself."""
        return self

    def plan_limited(self, request_ids, generated, max_draft):
        drafts, cpu_s = self.lookup(request_ids, generated, max_draft)
        k = chain_counts(drafts, request_ids)
        return VariedPlan(k, k + 1, 0.0 + cpu_s, drafts)

    def draw_counts(self, rng, request_ids, context, generated, plan):
        return chains_accepted(self.text, plan.payload, request_ids, generated,
                               plan.num_draft)

    def plan_rows(self, request_ids, generated, output_len, steps, rng):
        """``plan_counts`` and ``draw_counts`` of up to ``steps`` iterations, up to the
        first that finishes a request: each request's lookup at the text it reaches, read
        from its whole text (``TextNgrams``: occurrences at or past the text reached are
        not seen), the draft compared with the text that follows on Python lists."""
        text, index, k = self.text, self._index, self.k
        ids, gens, outs = request_ids.tolist(), generated.tolist(), output_len.tolist()
        reads = []  # each request's index, its tokens (a list) and its prompt's size
        for rid in ids:
            grams = index.get(rid)
            if grams is None:
                grams = index[rid] = TextNgrams(self.min_n, self.max_n, text.full(rid))
            reads.append((grams, text.tokens(rid), text.prompt_ids[rid].size))
        drafted, accepted = [], []
        for _ in range(steps):
            row_k, row_a = [], []
            for i, ((grams, tokens, prompt), g) in enumerate(zip(reads, gens)):
                at = prompt + g  # the text reached; the target's next tokens from there
                start, stop = grams.span(tokens, at, k)
                a = 0
                while start + a < stop and at + a < len(tokens) and \
                        tokens[start + a] == tokens[at + a]:
                    a += 1
                row_k.append(stop - start)
                row_a.append(a)
                gens[i] = g + a + 1
            drafted.append(row_k)
            accepted.append(row_a)
            if any(g >= out for g, out in zip(gens, outs)):  # the last row that can be kept
                break
        # the CPU seconds as ``lookup`` adds them: every request looked, these found a draft
        n = len(ids)
        seconds = np.array([0.0 + (n * self.cpu_s + self.host(len(row) - row.count(0)))
                            for row in drafted])
        drafted_rows = np.array(drafted, np.int64)
        return VariedRows(drafted_rows, drafted_rows + 1, np.array(accepted, np.int64),
                          seconds)

    def keep_rows(self, kept):
        """Nothing to move: observe forgets finished requests only, and the index's
        answers do not depend on how far ahead it was grown."""

    def observe_counts(self, request_ids, generated, output_len, plan, accepted,
                       step_time_s):
        self._forget_finished(request_ids, generated, output_len, accepted)

    def _forget_finished(self, request_ids: np.ndarray, generated: np.ndarray,
                         output_len: np.ndarray, accepted: np.ndarray) -> None:
        """Drop the text and the n-grams of the requests this iteration finishes."""
        emitted = emitted_tokens(accepted, generated, output_len)
        for rid in request_ids[generated + emitted >= output_len].tolist():
            self.text.forget(rid)
            self._index.pop(rid, None)
