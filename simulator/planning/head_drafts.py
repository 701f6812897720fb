"""Analytic points of the policies whose drafter is a module inside the target's step, not a
draft model: ``mtp`` (the target's multi-token-prediction modules) and ``eagle3`` (an
EAGLE-3 layer): chains of ``gamma`` draft forwards, ``gamma`` + 1 tokens verified.

The draft time is the engine policy's own ``draft_time``, the policy built exactly as
``simulator.deployment.build_policy`` builds it for a scenario on the point's target cost
model (so an analytic point and a simulated step of the same shape cost the same), with its
first forward re-reading E tokens per request -- the mean of what the target emits per
iteration, the steady state of the engine's per-request re-read.  Such a policy needs no
``draft`` (eagle3's layer is the catalog's eagle3 model of the target); the point's
``draft`` field is ignored for them.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

HEAD_POLICIES = ("mtp", "eagle3")


def point_draft(p: dict):
    """The draft model a point loads: none for ``none`` and the head policies."""
    return None if p["policy"] == "none" or p["policy"] in HEAD_POLICIES else p["draft"]


@lru_cache(maxsize=256)
def _head_policy(policy: str, gamma: int, tcm):
    """The engine's ``policy`` drafting ``gamma`` tokens on the target cost model ``tcm``."""
    from simulator.acceptance import acceptance_from_config
    from simulator.deployment import Resolved, build_policy
    from simulator.scenario import PolicyConfig, Scenario
    sc = Scenario(policy=PolicyConfig(policy, {"num_speculative_tokens": int(gamma)}))
    res = Resolved(tcm.hardware, tcm.model, None, tcm, None, (), ())
    # acceptance is the analytic point's own (closed forms); the policy needs one to build
    iid = acceptance_from_config({"model": "iid", "alpha": 0.5}, source="analytic")
    return build_policy(sc, res, None, iid)


def head_draft_time(policy: str, tcm, batch: int, context: float, gamma: int,
                    expected: float) -> float:
    """Seconds of ``gamma`` draft forwards over ``batch`` requests at ``context``, the first
    re-reading ``expected`` tokens per request."""
    if gamma == 0:
        return 0.0
    pol = _head_policy(policy, int(gamma), tcm)
    return pol.draft_time(np.full(batch, float(context)), np.full(batch, float(expected)))


def head_pass_ratio(policy: str, base, batch: int, context: float) -> float:
    """c: one draft forward (one token per request) over one plain decode step, both on the
    plain-decoding cost model ``base``."""
    return head_draft_time(policy, base, batch, context, 1, 1.0) / base.decode_time(batch,
                                                                                   context)
