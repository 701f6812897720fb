"""Kit: acceptance of a chain of drafts per request, as the draft-model chain policies
(``chain``, ``staged``) sample it from the scenario's acceptance model."""
from __future__ import annotations

import numpy as np

from simulator.engine.plan import BatchView, DraftPlan
from simulator.policies.base import PolicyBase


class ChainAcceptance(PolicyBase):
    """Accept a chain of drafts per request with ``self.acceptance``; no adaptive state."""

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        if not plan.num_draft.any():
            return np.zeros(len(batch), dtype=np.int64)
        return self.acceptance.sample_chain(plan.num_draft, batch.context, batch.request_ids,
                                            rng)
