"""Kit: acceptance of a chain of drafts per request, as the draft-model chain policies
(``chain``, ``staged``) sample it from the scenario's acceptance model."""
from __future__ import annotations

import numpy as np

from simulator.engine.plan import BatchView, DraftPlan


def accept_chain(acceptance, plan: DraftPlan, batch: BatchView,
                 rng: np.random.Generator) -> np.ndarray:
    """Accepted drafts per request of a chain plan, sampled from ``acceptance`` (a bound
    acceptance model); no draws at all when nothing was drafted."""
    if not plan.num_draft.any():
        return np.zeros(len(batch), dtype=np.int64)
    return acceptance.sample_chain(plan.num_draft, batch.context, batch.request_ids, rng)
