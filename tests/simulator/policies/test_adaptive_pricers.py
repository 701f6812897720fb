"""The adaptive wrapper's shortcuts for a uniform iteration (every request drafting the same
k): the draft chain priced by ``chain_draft_pricer`` at the context sum and the target's
verification by its ``uniform_pricer`` must be, bit for bit, what their definitions give
(``chain_draft_time``; the engine's ``step_time`` of k + 1 tokens each), and a batch that is
not uniform must be left to those definitions."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.cost.drafting import chain_draft_time
from simulator.policies.base import PolicyContext
from simulator.policies.registry import POLICIES
from simulator.scenario import load_scenario
from simulator.simulate import build_deployment
from tests.helpers import REPO

SCENARIO = REPO / "workloads" / "scenarios" / "adaptive_schedule.yaml"


@pytest.fixture(scope="module")
def policy():
    deployment = build_deployment(load_scenario(SCENARIO, ["workload.max_requests=5"]))
    return POLICIES["adaptive"](
        load_scenario(SCENARIO).policy.params,
        PolicyContext(target_cost=deployment.target_cost, draft_cost=deployment.draft_cost))


def test_a_uniform_draft_chain_is_chain_draft_time_bit_for_bit(policy):
    control, rng = policy.control, np.random.default_rng(2)
    for n in (1, 2, 9, 64, 300):
        ctx = rng.integers(20, 8000, n)
        # 1-7 drafts each: the pricer; 8, 12: past it; mixed and none: the definition
        for k in [np.full(n, g, np.int64) for g in (1, 2, 4, 7, 8, 12)] + \
                [rng.integers(0, 5, n), np.zeros(n, np.int64)]:
            time_s, _ = control.draft_seconds(np.arange(n), ctx, k)
            assert time_s == chain_draft_time(control.draft_cost, ctx, k)


def test_a_uniform_verification_is_the_engines_step_time_bit_for_bit(policy):
    stretch, rng = policy.varied_draft(), np.random.default_rng(4)
    target = policy.target_cost
    for n in (1, 3, 17, 128, 256):
        ctx = rng.integers(20, 8000, n)
        for g in (0, 1, 3, 4, 9):
            k = np.full(n, g, np.int64)
            tokens = (k + 1).astype(float)
            want = target.step_time(tokens, ctx.astype(float), tokens)
            assert stretch._uniform_verify(ctx, k) == want
        if n > 1:  # not every request the same: the engine prices it
            assert stretch._uniform_verify(ctx, np.arange(n) % 2) is None


def test_a_varied_draft_chain_is_one_step_time_a_forward_bit_for_bit(policy):
    """``chain_draft_time`` of differing draft lengths (its forwards by the uniform closed
    form at each one's context sum) against its definition: forward j a ``step_time`` of
    the requests drafting more than j, one token each at their context + j, in order."""
    draft, rng = policy.control.draft_cost, np.random.default_rng(6)
    for n in (2, 3, 8, 40, 200):
        for _ in range(6):
            ctx, k = rng.integers(1, 8000, n), rng.integers(0, 10, n)
            k[0], k[1] = 0, 9  # never all alike
            want = 0.0
            for j in range(int(k.max())):
                drafting = k > j
                want += draft.step_time(np.ones(int(drafting.sum())), ctx[drafting] + j)
            assert chain_draft_time(draft, ctx, k) == want
