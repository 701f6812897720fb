"""``chain``: Leviathan et al. speculative decoding with a draft model and a fixed gamma.

Each iteration the draft model runs gamma sequential forwards over the decoding requests
(its context grows by one each), then the target verifies gamma + 1 tokens per request in one
forward; acceptance comes from the scenario's acceptance model.  The draft keeps its own KV
in step with the target's, so it also prefills every prompt chunk.

A request too long for the draft model is not speculated (vLLM's rule, see
:func:`simulator.cost.drafting.fits_draft_context`: only while prompt + generated + gamma < the
draft's max_context): it decodes one token per step, and the draft neither drafts for it
nor prefills a chunk after which it could no longer be speculated.
"""
from __future__ import annotations

import numpy as np

from simulator.acceptance.context_free import chain_counts
from simulator.cost.drafting import (
    chain_draft_pricer,
    chain_draft_time,
    draft_max_context,
    draft_prefill_time,
    fits_draft_context,
)
from simulator.cost.spec_work import SpecWork
from simulator.engine.plan import BatchView, ChainStretch, DraftPlan, closed_forms
from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param
from simulator.policies.base import (
    PolicyBase,
    PolicyContext,
    batch_fits_draft,
    draft_spec,
    spec_charge,
)
from simulator.policies.chain_acceptance import accept_chain
from simulator.policies.draft_control import ChainControl


class ChainSpeculation(PolicyBase):
    """A draft model proposes a chain of ``num_speculative_tokens`` tokens per request."""

    name = "chain"
    needs_draft_model = True
    PARAMS = {"num_speculative_tokens": Param("int", default=4, minimum=0, maximum=64,
                                              aliases=("gamma",),
                                              help="draft tokens per iteration")}

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        if ctx.draft_cost is None:
            raise SpecsimError("the chain policy needs a draft model", field="draft",
                               fix="set 'draft: opt-125m' (or another small decoder)")
        self.gamma = int(params["num_speculative_tokens"])
        self.draft_cost = ctx.draft_cost
        self.acceptance = ctx.acceptance
        self.host = spec_charge(ctx, SpecWork(draft_forwards=self.gamma))
        self.draft_max_context = draft_max_context(draft_spec(ctx))

    @property
    def max_verify_tokens(self) -> int:
        return self.gamma + 1

    def speculable(self, batch: BatchView) -> np.ndarray:
        """Requests the draft model can speculate on (the others decode normally)."""
        return batch_fits_draft(batch, self.gamma, self.draft_max_context)

    def speculable_of(self, prompt_len: np.ndarray, generated: np.ndarray) -> np.ndarray:
        """``speculable`` of requests with these prompt and generated lengths, on arrays."""
        return fits_draft_context(prompt_len + generated, self.gamma, self.draft_max_context)

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        return accept_chain(self.acceptance, plan, batch, rng)

    def draw_chain(self, rng: np.random.Generator, request_ids: np.ndarray,
                   context: np.ndarray, num_draft: np.ndarray) -> np.ndarray:
        """``accept`` of requests drafting ``num_draft`` at ``context``, on arrays: the same
        draws (none when nothing was drafted)."""
        if not np.count_nonzero(num_draft):  # (a count: no Python layer, unlike .any())
            return np.zeros(num_draft.size, dtype=np.int64)
        return self.acceptance.sample_chain(num_draft, context, request_ids, rng)

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        k = np.where(self.speculable(batch), self.gamma, 0).astype(np.int64)
        return DraftPlan(num_draft=k, verify_tokens=k + 1,
                         draft_time_s=chain_draft_time(self.draft_cost, batch.context, k)
                         + self.host(int(np.count_nonzero(k))))

    def prefill_time(self, new_tokens: np.ndarray, context: np.ndarray) -> float:
        return draft_prefill_time(self.draft_cost, new_tokens, context, self.gamma,
                                  self.draft_max_context)

    def chain_stretch(self) -> ChainStretch | None:
        """What the engine needs to advance many iterations at once
        (simulator/engine/chain_stretch.py); None where acceptance depends on more than the
        request (its context, its tokens), the draft's time has no closed form over the
        batch's context sum, or nothing is drafted."""
        forms = closed_forms(self.draft_cost)
        counts = chain_counts(self.acceptance, self.gamma) if self.gamma >= 1 else None
        if counts is None or forms is None:
            return None
        g, cost, host = self.gamma, self.draft_cost, self.host
        # sample_chain's draws given its uniforms (context_free.py's chain_counts);
        # chain_draft_time when every request drafts g: the draft cost's chain_decode_time
        times = forms.chain_decode_times
        return ChainStretch(g, self.draft_max_context, counts,
                            lambda n, sums: _plus(times(n, sums, g), host(n)),
                            lambda n: _pricer_plus(chain_draft_pricer(cost, n, g), host(n)))

    def draft_control(self, params: dict) -> ChainControl:
        """Per-request gammas: the draft model catches up on skipped iterations."""
        return ChainControl(self.draft_cost, self.gamma, self.host.execution, chain=self)


def _plus(times, host_s: float):
    """The stretch's draft times with the iteration's host work added, as ``propose`` adds
    it (the same float operation, element by element); None stays None."""
    return None if times is None else times + host_s


def _pricer_plus(pricer, host_s: float):
    """``chain_draft_pricer``'s function with the iteration's host work added."""
    if pricer is None:
        return None
    return lambda x: pricer(x) + host_s
