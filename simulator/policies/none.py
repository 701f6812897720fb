"""``none``: incremental decoding, one token per request per iteration."""
from __future__ import annotations

import numpy as np

from simulator.engine.plan import BatchView, DraftPlan
from simulator.policies.base import PolicyBase, PolicyContext


class NoSpeculation(PolicyBase):
    """Plain continuous-batching decode: no proposer, no verification overhead."""

    name = "none"
    max_verify_tokens = 1
    # proposes nothing, draws nothing, learns nothing: the engine may advance a pure-decode
    # stretch of it in one pass (simulator/engine/fast_forward.py)
    plain_decode = True

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        self.params = params

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        n = len(batch)
        return DraftPlan(num_draft=np.zeros(n, dtype=np.int64),
                         verify_tokens=np.ones(n, dtype=np.int64))

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        return np.zeros(len(batch), dtype=np.int64)
