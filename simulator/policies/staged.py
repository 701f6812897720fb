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

import numpy as np

from simulator.acceptance.context_free import chain_counts
from simulator.acceptance.iid import IIDAcceptance
from simulator.cost.drafting import chain_draft_time, draft_max_context, draft_prefill_time
from simulator.cost.spec_host import SpecCharge, SpecWork
from simulator.engine.plan import BatchView, CarriedDraft, ChainStretch, DraftPlan
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

NGRAM = "ngram"


def _draft2(name: str, target=None):
    try:
        spec = load_model(name)
    except SpecsimError as exc:
        raise exc.relocated(source=None, field="policy.draft2") from None
    if spec.kind != "decoder":
        raise SpecsimError(f"{name} is a {spec.kind} model", field="policy.draft2",
                           fix="name a small decoder model or 'ngram'")
    if target is not None:
        check_shared_vocabulary(spec, target, field="policy.draft2")
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
        self.execution = spec_execution(ctx)

    @property
    def max_verify_tokens(self) -> int:
        return self.gamma + 1

    def draft_time(self, context: np.ndarray, request_ids: np.ndarray,
                   rng: np.random.Generator) -> tuple[float, float, int]:
        """(GPU s, CPU s, inner rounds) for the draft to produce gamma tokens per request."""
        n = context.size
        produced = np.zeros(n, np.int64)
        gpu = cpu = 0.0
        rounds = 0
        while True:
            active = np.flatnonzero(produced < self.gamma)
            if not active.size:
                return gpu, cpu, rounds
            rounds += 1
            need = self.gamma - produced[active]
            k = np.minimum(self.gamma2, need - 1)
            ctx = context[active] + produced[active]
            if self.draft2_cost is not None:
                gpu += chain_draft_time(self.draft2_cost, ctx, k)
            else:
                cpu += self.lookup_s * float(k.sum())
            gpu += self.draft_cost.step_time((k + 1).astype(np.float64), ctx,
                                             (k + 1).astype(np.float64))
            accepted = self.inner.sample_chain(k, ctx, request_ids[active], rng)
            produced[active] += accepted + 1

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
        gpu, cpu, rounds = self.draft_time(batch.context[on].astype(np.float64),
                                           batch.request_ids[on], rng)
        # the outer draft runs one forward a round: the draft loop's work
        host = SpecCharge(self.execution, SpecWork(draft_forwards=rounds))
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

    def reread_tokens(self, request_ids: np.ndarray) -> np.ndarray:
        return np.ones(request_ids.size)  # both drafts keep their own KV: nothing re-read

    def iteration_draft_s(self, request_ids: np.ndarray, context: np.ndarray,
                          reread: np.ndarray, rng: np.random.Generator) -> float:
        gpu, cpu, rounds = self.draft_time(context.astype(np.float64), request_ids, rng)
        host = SpecCharge(self.execution, SpecWork(draft_forwards=rounds))
        return gpu + (cpu + host(context.size))  # propose's draft_time_s + cpu_time_s

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
