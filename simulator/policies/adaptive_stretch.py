"""The ``adaptive`` wrapper around ``chain`` on arrays: its ``VariedDraft`` (engine.plan).

Each iteration the controller's gammas differ per request (the caps of the schedule and the
switches, the draft model's context, the goodput search), so a stretch cannot draw and price
many iterations at once as a chain's does; the engine takes them one by one instead
(simulator/engine/varied_stretch.py), and this class gives it ``propose``, ``accept`` and
``observe`` on the batch's arrays: the same controller evaluated on the same numbers in the
same order (``AdaptiveSpeculation.cap``, ``goodput``, ``learn``; ``ChainControl``'s
``draft_seconds``, ``predictor`` and ``observe_arrays``; ``ChainSpeculation``'s
``speculable_of`` and ``draw_chain``), so the results are bitwise the step-by-step path's.
The wrapped chain observes nothing (its ``observe`` is the base class's): only the
controllers and the draft model's catch-up learn from an iteration.
"""
from __future__ import annotations

import numpy as np

from simulator.engine.plan import VariedDraft, VariedPlan, emitted_tokens


class AdaptiveStretch(VariedDraft):
    """``policy`` (an ``AdaptiveSpeculation`` around ``chain``), its per-request gammas set
    through ``control`` (the chain's ``ChainControl``), on arrays."""

    def __init__(self, policy, control) -> None:
        self.policy, self.control, self.chain = policy, control, control.chain

    @property
    def max_verify_tokens(self) -> int:
        return self.policy.max_verify_tokens

    def plan_counts(self, request_ids, context, generated, output_len, prompt_len,
                    batch_size, rng):
        policy, control = self.policy, self.control
        top = policy.cap(batch_size)
        k = np.full(request_ids.size, top, np.int64)
        if top:  # requests past the draft model's context
            k[~self.chain.speculable_of(prompt_len, generated)] = 0
        if policy.estimate is not None and k.any():
            k = policy.goodput(k, request_ids, context, generated, output_len,
                               control.predictor(request_ids, context))
        time_s, cpu_s = control.draft_seconds(request_ids, context, k)
        return VariedPlan(k, k + 1, time_s + cpu_s)

    def draw_counts(self, rng, request_ids, context, generated, plan):
        return self.chain.draw_chain(rng, request_ids, context, plan.num_draft)

    def observe_counts(self, request_ids, generated, output_len, plan, accepted,
                       step_time_s):
        emitted = emitted_tokens(accepted, generated, output_len)
        done = generated + emitted >= output_len
        self.control.observe_arrays(request_ids, emitted, done)
        self.policy.learn(request_ids, plan.num_draft, accepted, done)
