"""Exact timelines with a constant-time cost model, asserted event by event (SimPy style)."""
import numpy as np
import pytest

from simulator.simulate import simulate
from tests.helpers import ConstantCost, scenario, workload


def events(res):
    return [(round(t, 9), kind, rid, n) for t, kind, rid, n in
            res.events.itertuples(index=False, name=None)]


def test_three_requests_none_policy():
    # every forward takes 1 s. r0 arrives at 0 (prompt 4, 3 tokens), r1 at 0.5 (2 tokens),
    # r2 at 3 (1 token). Step [0,1): prefill r0 -> first token at 1. Step [1,2): decode r0 +
    # prefill r1 -> r0 token 2, r1 first token at 2. Step [2,3): decode both -> r0 done (3
    # tokens), r1 done (2 tokens) at 3. r2 arrives at 3: prefill [3,4) -> its only token at 4.
    wl = workload([0.0, 0.5, 3.0], [4, 4, 4], [3, 2, 1])
    res = simulate(scenario("none"), workload=wl, target_cost=ConstantCost(1.0),
                   record_events=True)
    assert events(res) == [
        (0.0, "arrival", 0, 0),
        (0.5, "arrival", 1, 0),
        (1.0, "first_token", 0, 1),
        (2.0, "first_token", 1, 1),
        (2.0, "token", 0, 1),
        (3.0, "arrival", 2, 0),
        (3.0, "token", 0, 1),
        (3.0, "token", 1, 1),
        (3.0, "finish", 0, 0),
        (3.0, "finish", 1, 0),
        (4.0, "first_token", 2, 1),
        (4.0, "finish", 2, 0),
    ]
    req = res.requests
    assert req["first_token_s"].tolist() == [1.0, 2.0, 4.0]
    assert req["finish_s"].tolist() == [3.0, 3.0, 4.0]
    assert req["ttft_s"].tolist() == [1.0, 1.5, 1.0]
    assert req["queueing_s"].tolist() == [0.0, 0.5, 0.0]
    # TPOT = (E2E - TTFT) / (output - 1): r0 (3 - 1) / 2 = 1, r1 (2.5 - 1.5) / 1 = 1
    assert req["tpot_s"].iloc[:2].tolist() == [1.0, 1.0]
    assert np.isnan(req["tpot_s"].iloc[2])
    assert sorted(res.itl_s.tolist()) == [1.0, 1.0, 1.0]


def test_chain_alpha_one_emits_gamma_plus_one():
    # alpha = 1: every draft accepted; gamma = 3 -> 4 tokens per decode iteration; each
    # iteration costs 3 draft forwards + 1 verification = 4 s with the constant model.
    wl = workload([0.0], [8], [9])
    res = simulate(scenario("chain:num_speculative_tokens=3", alpha=1.0), workload=wl,
                   target_cost=ConstantCost(1.0), draft_cost=ConstantCost(1.0),
                   record_events=True)
    ev = events(res)
    # the chain policy also prefills the draft model's KV: prefill step = 1 (target) + 1 (draft)
    assert ev == [
        (0.0, "arrival", 0, 0),
        (2.0, "first_token", 0, 1),
        (6.0, "token", 0, 4),
        (10.0, "token", 0, 4),
        (10.0, "finish", 0, 0),
    ]


def test_chain_alpha_zero_emits_one_per_iteration():
    wl = workload([0.0], [8], [5])
    res = simulate(scenario("chain:num_speculative_tokens=2", alpha=0.0), workload=wl,
                   target_cost=ConstantCost(1.0), draft_cost=ConstantCost(0.25),
                   record_events=True)
    toks = res.events[res.events["event"] == "token"]
    assert toks["tokens"].tolist() == [1, 1, 1, 1]
    # each decode iteration: 2 draft forwards of 0.25 s + 1 verification of 1 s
    assert np.diff(toks["time_s"].to_numpy()) == pytest.approx([1.5, 1.5, 1.5])
