"""``staged``: staged speculative decoding (Spector & Re, arXiv:2308.04623, 2023).

The draft model's own gamma tokens are themselves speculated: a smaller second-stage draft
(``draft2``: a decoder from the catalog, or ``ngram`` for an n-gram table, as Spector & Re's
Katz backoff trigram) proposes ``inner_speculative_tokens`` tokens, the draft model verifies
them in one forward and keeps the accepted ones plus its own next token, and this repeats
until the draft has its gamma tokens; then the target verifies gamma + 1 as in ``chain``.
Both levels are priced: draft2 forwards (or CPU lookups) and draft forwards from the cost
model, per round, over the requests still drafting.  Inner speculation is lossless, so what
the target sees is exactly the draft's distribution: the outer acceptance is the
scenario's, unchanged; staging only makes drafting cheaper.

Inner acceptance is i.i.d. with ``inner_alpha`` (default: the scenario model's acceptance
of the first draft token, i.e. draft2 assumed to match the draft as well as the draft
matches the target -- an assumption; set it from a measurement, and lower it for ``ngram``).
Each round drafts min(inner_speculative_tokens, still-needed - 1) tokens so that no round
overshoots gamma.  The n-gram lookup costs ``ngram_lookup_s`` of CPU per proposed token (a
hash-table probe; an assumption, small next to any forward).

A request is speculated only while it fits both drafts' contexts (``chain``'s rule, vLLM's:
prompt + generated + gamma < the shorter max_context); the others decode normally.  Both
drafts share the target's vocabulary.

Simplified: Spector & Re also restructure the batch as a tree (that part is ``specinfer``).
(Lecture 003 section 12 credits staging to Chen et al., arXiv:2302.01318; that paper is
DeepMind's speculative sampling, the staged variant is Spector & Re's.)
"""
from __future__ import annotations

from bisect import bisect_right

import numpy as np

from simulator.acceptance.context_free import chain_counts
from simulator.acceptance.iid import IIDAcceptance
from simulator.acceptance.sampling import geometric_thresholds
from simulator.cost.drafting import (
    chain_draft_pricer,
    chain_draft_time,
    chain_round_pricer,
    decode_terms,
    draft_max_context,
    draft_prefill_time,
)
from simulator.cost.spec_host import SpecCharge
from simulator.cost.spec_work import SpecWork
from simulator.engine.plan import (
    BatchDraws,
    BatchView,
    CarriedDraft,
    ChainStretch,
    DraftPlan,
    DrawnDraft,
    closed_forms,
)
from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param
from simulator.models.spec import check_shared_vocabulary, load_model
from simulator.policies.base import (
    PolicyBase,
    PolicyContext,
    batch_fits_draft,
    draft_spec,
    side_cost,
    spec_execution,
)
from simulator.policies.chain_acceptance import accept_chain
from simulator.policies.staged_few import FewRounds

NGRAM = "ngram"
_MIN, _MAX, _SUM = np.minimum.reduce, np.maximum.reduce, np.add.reduce
_ANY, _ALL = np.logical_or.reduce, np.logical_and.reduce
_FEW = 8  # up to this many requests draft_time's rounds run on Python numbers (fewer calls)
_MISSING = object()
_BUILT_IN: dict = {}  # _built_in's specs, by catalog name


def _NOTHING(ctx_sum: float) -> float:
    """``chain_draft_time`` of a round in which no request drafts: no forward, 0 s."""
    return 0.0


def _draft2(name: str, target=None):
    try:
        spec = _built_in(name)
    except SpecsimError as exc:
        raise exc.relocated(source=None, field="policy.draft2") from None
    if spec.kind != "decoder":
        raise SpecsimError(f"{name} is a {spec.kind} model", field="policy.draft2",
                           fix="name a small decoder model or 'ngram'")
    if target is not None:
        check_shared_vocabulary(spec, target, field="policy.draft2")
    return spec


def _built_in(name: str):
    """``load_model(name)``, a built-in catalog file read once a process (a simulation asks
    for draft2 three times: ``memory_models`` twice, then ``__init__``; a ModelSpec is
    frozen); a path (.yaml) is read every time, as ``load_model`` reads it."""
    if name.endswith((".yaml", ".yml")):
        return load_model(name)
    spec = _BUILT_IN.get(name)
    if spec is None:
        spec = _BUILT_IN[name] = load_model(name)
    return spec


class StagedSpeculation(PolicyBase, CarriedDraft):
    """A draft model whose own decoding is sped up by a smaller draft (two stages)."""

    name = "staged"
    needs_draft_model = True
    PARAMS = {
        "num_speculative_tokens": Param("int", default=4, minimum=1, maximum=64,
                                        aliases=("gamma",), help="draft tokens per iteration"),
        "draft2": Param("str", default=NGRAM, help="second-stage draft: a model or 'ngram'"),
        "inner_speculative_tokens": Param("int", default=3, minimum=1, maximum=64,
                                          aliases=("gamma2",),
                                          help="draft2 tokens per inner round"),
        "inner_alpha": Param("float", default=None, minimum=0.0, maximum=1.0,
                             help="draft2 -> draft acceptance (default: the scenario's)"),
        "ngram_lookup_s": Param("float", default=2e-6, minimum=0.0, maximum=1.0,
                                help="CPU seconds per n-gram proposed token"),
    }

    @classmethod
    def memory_models(cls, params: dict, draft, target):
        """Both drafts and their KV caches (an n-gram table lives in host memory)."""
        models = [draft] if draft is not None else []
        if params["draft2"] != NGRAM:
            models.append(_draft2(params["draft2"], target))
        return models, list(models)

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        if ctx.draft_cost is None:
            raise SpecsimError("the staged policy needs a draft model", field="draft",
                               fix="set 'draft: opt-1.3b' (or another decoder)")
        self.gamma = int(params["num_speculative_tokens"])
        self.gamma2 = int(params["inner_speculative_tokens"])
        self.draft_cost = ctx.draft_cost
        draft2 = None if params["draft2"] == NGRAM else _draft2(params["draft2"],
                                                                ctx.target_model)
        self.draft2_cost = None if draft2 is None else side_cost(ctx, draft2)
        self.draft_max_context = draft_max_context(draft_spec(ctx), draft2)
        self.lookup_s = float(params["ngram_lookup_s"])
        self.acceptance = ctx.acceptance
        alpha = params["inner_alpha"]
        if alpha is None:
            alpha = float(np.asarray(ctx.acceptance.position_rates(1))[0])
        self.inner = IIDAcceptance(alpha)
        self._counts = None  # draw_accepted's counter, where acceptance is context-free
        acc = ctx.acceptance  # the outer thresholds, where it is i.i.d. (batch_draws' walk)
        self._outer = geometric_thresholds(acc.alpha, self.gamma).tolist() \
            if isinstance(acc, IIDAcceptance) and 0.0 < acc.alpha < 1.0 else None
        self._outer_search = None if self._outer is None else np.array(self._outer).searchsorted
        self._draws_ahead: dict = {}  # _ahead's, by batch size
        self.execution = spec_execution(ctx)
        self._uniform_rounds: dict = {}  # _round_s' closed forms, by (batch size, count)
        self._charges: dict = {}  # the host work's SpecCharge, by rounds
        self._decoders: dict = {}  # draft2's one-token forwards' closed forms, by batch size
        a = self.inner.alpha  # _inner_counts' thresholds (IIDAcceptance.sample_chain's)
        self._cut = geometric_thresholds(a, self.gamma2) if 0.0 < a < 1.0 else None
        self._cut_list = None if self._cut is None else self._cut.tolist()
        # draft_time's rounds of a few requests on Python numbers
        self._few = FewRounds(self.gamma, self.gamma2, self._cut_list, self.lookup_s,
                              self.draft2_cost is not None, self.draft_cost,
                              self._uniform_round_prices, self._round_s, self._decoder)

    @property
    def max_verify_tokens(self) -> int:
        return self.gamma + 1

    def draft_time(self, context: np.ndarray, request_ids: np.ndarray,
                   rng: np.random.Generator) -> tuple[float, float, int]:
        """(GPU s, CPU s, inner rounds) for the draft to produce gamma tokens per request
        (``context``: whole numbers, as ints or floats: the same prices either way).  Each
        round drafts for the requests still short of gamma, in batch order; their arrays
        shrink as requests finish (a request that has its gamma tokens drafts no more)."""
        n = context.size
        if not n:
            return 0.0, 0.0, 0
        if n <= _FEW and self._cut is not None and context.dtype.kind in "iu":
            return self._few.draft_time(context.tolist(), rng)
        gamma, gpu, cpu, rounds = self.gamma, 0.0, 0.0, 0
        where = None  # the drafting requests' positions in the batch (None: all of them)
        ctx, ids, produced = context, request_ids, np.zeros(n, np.int64)
        same = min(self.gamma2, gamma - 1)  # the first round: every request the same count
        k = np.full(n, same, np.int64)
        while True:
            rounds += 1
            d2, v = self._round_s(ctx, k, same)
            if self.draft2_cost is not None:
                gpu += d2
            else:
                cpu += self.lookup_s * float(k.sum())
            gpu += v
            produced = produced + (self._inner_counts(k, ctx, ids, rng) + 1)
            short = produced < gamma
            if not _ANY(short):
                return gpu, cpu, rounds
            if not _ALL(short):
                where = np.flatnonzero(short) if where is None else where[short]
                produced, ids = produced[short], request_ids[where]
            ctx = (context if where is None else context[where]) + produced
            k = np.minimum(self.gamma2, (gamma - produced) - 1)
            same = int(_MIN(k))
            same = same if same == int(_MAX(k)) else None

    def _decoder(self, n: int) -> tuple:
        """draft2's forward of ``n`` one-token requests as a function of their context sum
        (``uniform_pricer``) and its form's terms (``decode_terms``), each None where it
        has none; memoised by ``n``."""
        got = self._decoders.get(n)
        if got is None:
            forms = closed_forms(self.draft2_cost)
            price = None if forms is None else forms.uniform_pricer(n, 1, n)
            got = self._decoders[n] = (price, None if price is None else
                                       decode_terms(self.draft2_cost, n))
        return got

    def _round_s(self, ctx: np.ndarray, k: np.ndarray, same: int | None) -> tuple[float, float]:
        """(draft2's chain, the draft's verification) seconds of an inner round; one whose
        requests all draft ``same`` tokens (the first, and many later ones) by the closed
        forms as functions of the context sum where they apply (bitwise
        ``chain_draft_time``'s and ``step_time``'s: the same memoised forms at the same
        whole-number sum)."""
        prices = None
        if same is not None:
            prices = self._uniform_rounds.get((ctx.size, same))
            if prices is None:
                prices = self._uniform_round_prices(ctx.size, same)
        d2 = v = None
        if prices is not None and prices[:2] != (None, None):
            s = float(int(_SUM(ctx)))
            d2 = prices[0](s) if prices[0] is not None else None
            v = prices[1](s) if prices[1] is not None else None
        if d2 is None and self.draft2_cost is not None:
            d2 = chain_draft_time(self.draft2_cost, ctx, k)
        if v is None:
            u = (k + 1).astype(np.float64)
            v = self.draft_cost.step_time(u, ctx, u)
        return (0.0 if d2 is None else d2), v

    def _uniform_round_prices(self, n: int, k: int) -> tuple:
        """A round of ``n`` requests each drafting ``k``: (draft2's chain, the draft's
        verification) as functions of the context sum (``chain_draft_pricer``,
        ``uniform_pricer``), each None where none applies, and both added to running
        seconds in one call, ``add(gpu, x)`` (``chain_round_pricer``; None where it has no
        such form, or draft2 drafts nothing); memoised."""
        if len(self._uniform_rounds) >= 1024:
            self._uniform_rounds.clear()
        d2 = joined = None
        if self.draft2_cost is not None:  # no draft2 forward where nothing is drafted
            d2 = chain_draft_pricer(self.draft2_cost, n, k) if k >= 1 else _NOTHING
            joined = chain_round_pricer(self.draft2_cost, n, k, self.draft_cost) \
                if 1 <= k <= 3 else None
        forms = closed_forms(self.draft_cost)
        v = forms.uniform_pricer(n, k + 1, n * (k + 1)) if forms is not None else None
        got = self._uniform_rounds[n, k] = (d2, v, joined)
        return got

    def _inner_counts(self, k: np.ndarray, ctx: np.ndarray, request_ids: np.ndarray,
                      rng: np.random.Generator) -> np.ndarray:
        """``self.inner.sample_chain(k, ...)``: for alpha in (0, 1) the same uniforms against
        the same thresholds, computed once for the most any round drafts (a threshold does
        not depend on how many follow it: the same counts once capped at ``k``)."""
        if self._cut is None:
            return self.inner.sample_chain(k, ctx, request_ids, rng)
        return np.minimum(self._cut.searchsorted(rng.random(k.shape), "right"), k)

    def _host(self, rounds: int) -> SpecCharge:
        """The draft loop's host work of ``rounds`` outer forwards (memoised: SpecCharge
        keeps its own memo by batch size)."""
        got = self._charges.get(rounds)
        if got is None:
            got = self._charges[rounds] = SpecCharge(self.execution,
                                                     SpecWork(draft_forwards=rounds))
        return got

    def expected_accepted(self) -> float | None:
        """Expected accepted tokens per iteration (bonus excluded): the chain's."""
        return self.acceptance.expected_accepted(self.gamma)

    # ---------------------------------------------------------------- policy interface
    def speculable(self, batch: BatchView) -> np.ndarray:
        """Requests both drafts can speculate on (the others decode normally)."""
        return batch_fits_draft(batch, self.gamma, self.draft_max_context)

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        return accept_chain(self.acceptance, plan, batch, rng)

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        on = self.speculable(batch)
        k = np.where(on, self.gamma, 0).astype(np.int64)
        gpu, cpu, rounds = self.draft_time(batch.context[on],
                                           batch.request_ids[on], rng)
        # the outer draft runs one forward a round: the draft loop's work
        host = self._host(rounds)
        return DraftPlan(num_draft=k, verify_tokens=k + 1, draft_time_s=gpu,
                         cpu_time_s=cpu + host(int(np.count_nonzero(on))))

    # ---------------------------------------------------------------- fast-forward
    def chain_stretch(self) -> ChainStretch | None:
        """Stretches of its chain (simulator/engine/chain_short.py, ``CarriedDraft``): each
        iteration's inner rounds drawn and priced as ``propose`` draws and prices them, its
        acceptances drawn as ``accept`` draws them; None where nothing is drafted."""
        if self.gamma < 1:
            return None
        self._counts = chain_counts(self.acceptance, self.gamma)
        return ChainStretch(self.gamma, self.draft_max_context, None, carried=self)

    def batch_draws(self, n: int) -> BatchDraws | None:
        """Where a few requests' inner rounds run on Python numbers (``drawn_draft_s``) and
        the outer acceptance is i.i.d. (``geometric_counter``'s thresholds, searchsorted's
        "right" as bisect's): ``draw_accepted``'s draws, also from uniforms drawn ahead."""
        got = self._ahead(n)
        return None if got is None else got[0]

    def drawn_draft_s(self, n: int) -> DrawnDraft | None:
        """``iteration_draft_s`` of up to 8 requests from uniforms drawn ahead (its inner
        rounds' on Python numbers, ``FewRounds.rounds``: at most gamma rounds of one uniform
        a request), where ``batch_draws`` walks the outer acceptances so too."""
        got = self._ahead(n)
        return None if got is None else got[1]

    def _ahead(self, n: int) -> tuple[BatchDraws, DrawnDraft] | None:
        """``batch_draws`` and ``drawn_draft_s`` of ``n`` requests, memoised by ``n``."""
        got = self._draws_ahead.get(n, _MISSING)
        if got is not _MISSING:
            return got
        if not 1 <= n <= _FEW or self._cut is None or self._outer is None:
            self._draws_ahead[n] = None
            return None
        cut, search = self._outer, self._outer_search
        rounds, host, hosts = self._few.rounds, self._host, {}  # hosts: host(rounds)(n)
        walk = self._few.walker(n)
        cuts = [[-1.0, *cut]] * n  # bisect_right's count + 1 (-1.0: below every uniform)

        def ahead(draws: list, at: int) -> tuple[list, int]:
            return [bisect_right(cut, x) for x in draws[at:at + n]], n

        def price(ctx: list, draws: list, at: int) -> tuple[float, int]:
            gpu, cpu, count, end = rounds(ctx, draws, at)
            return gpu + (cpu + host(count)(n)), end - at  # iteration_draft_s' sum

        def walked(ctx: list, draws: list, at: int) -> tuple[tuple[float, list], int]:
            gpu, cpu, count, end = walk(ctx, draws, at)
            h = hosts.get(count)
            if h is None:
                h = hosts[count] = host(count)(n)
            return (gpu + (cpu + h), list(map(bisect_right, cuts, draws[end:end + n]))), \
                end + n - at
        got = self._draws_ahead[n] = (
            BatchDraws(lambda rng: search(rng.random(n), "right"), n, ahead),
            DrawnDraft(self.gamma * n, price, walked))
        return got

    def reread_tokens(self, request_ids: np.ndarray) -> np.ndarray:
        return np.ones(request_ids.size)  # both drafts keep their own KV: nothing re-read

    def iteration_draft_s(self, request_ids: np.ndarray, context: np.ndarray,
                          reread: np.ndarray, rng: np.random.Generator) -> float:
        gpu, cpu, rounds = self.draft_time(context, request_ids, rng)
        return gpu + (cpu + self._host(rounds)(context.size))  # propose's draft_time_s + cpu_time_s

    def draw_accepted(self, rng: np.random.Generator, request_ids: np.ndarray,
                      context: np.ndarray) -> np.ndarray:
        n = request_ids.size
        if self._counts is not None:  # context-free: the same uniforms, one a request
            return self._counts(rng.random(n), request_ids)
        got = self.acceptance.sample_chain(np.full(n, self.gamma, np.int64), context,
                                           request_ids, rng)
        return np.minimum(np.maximum(np.asarray(got, np.int64), 0), self.gamma)

    def observe_accepted(self, request_ids: np.ndarray, accepted: np.ndarray) -> None:
        """Nothing: the drafts learn nothing from the outcome."""

    def prefill_time(self, new_tokens: np.ndarray, context: np.ndarray) -> float:
        limit = (self.gamma, self.draft_max_context)
        return (draft_prefill_time(self.draft_cost, new_tokens, context, *limit)
                + draft_prefill_time(self.draft2_cost, new_tokens, context, *limit))
