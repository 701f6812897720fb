"""The adaptive policy: parameters, equivalences with its base, caps, switches and controllers."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator.engine.plan import BatchView
from simulator.inputs.errors import SpecsimError
from simulator.policies.base import PolicyContext
from simulator.policies.registry import POLICIES
from simulator.scenario import PolicyConfig, load_scenario
from simulator.simulate import build_deployment, simulate
from tests.helpers import REPO

SCENARIOS = REPO / "workloads" / "scenarios"
CHAIN4 = {"name": "chain", "num_speculative_tokens": 4}


ADAPTIVE = POLICIES["adaptive"]  # the wrapper over the registry's bases


def parse(**params):
    return ADAPTIVE.parse_params(params, source="test")


@pytest.mark.parametrize("params, field", [
    ({}, "policy.base"),
    ({"base": {"num_speculative_tokens": 4}}, "policy.base.name"),
    ({"base": "none"}, "policy.base.name"),
    ({"base": "adaptive"}, "policy.base.name"),
    ({"base": {"name": "chain", "gamma": -1}}, "policy.base.gamma"),
    ({"base": CHAIN4, "controller": "pid"}, "policy.controller.kind"),
    ({"base": CHAIN4, "controller": {"kind": "goodput", "alpha": 0.5}},
     "policy.controller.alpha"),
    ({"base": CHAIN4, "controller": {"kind": "acceptance_ema", "ema_alpha": 2}},
     "policy.controller.ema_alpha"),
    ({"base": CHAIN4, "num_speculative_tokens_per_batch_size": [[1, 4, 4], [6, 9, 1]]},
     "policy.num_speculative_tokens_per_batch_size[1]"),
    ({"base": CHAIN4, "draft_len_schedule": [[8, 4], [8, 1]]}, "policy.draft_len_schedule[1]"),
    ({"base": CHAIN4, "draft_len_schedule": [[8, 4]],
      "num_speculative_tokens_per_batch_size": [[1, 8, 4]]}, "policy.draft_len_schedule"),
    ({"base": CHAIN4, "acceptance_rate_window_size": 8}, "policy.acceptance_rate_threshold"),
    ({"base": CHAIN4, "acceptance_rate_threshold": 0.3}, "policy.acceptance_rate_window_size"),
    ({"base": CHAIN4, "speculative_disable_by_batch_size": 0},
     "policy.speculative_disable_by_batch_size"),
    ({"base": CHAIN4, "disable_by_batch_size": 8}, "policy.disable_by_batch_size"),
])
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(SpecsimError) as err:
        parse(**params)
    assert err.value.field == field


def _default(policy: dict, **overrides):
    sc = load_scenario(None, ["workload.max_requests=30"])
    sc = dataclasses.replace(sc, policy=PolicyConfig(policy["name"], {
        k: v for k, v in policy.items() if k != "name"}))
    return dataclasses.replace(sc, **overrides)


def test_a_fixed_controller_is_the_base_policy():
    chain = simulate(_default(CHAIN4))
    wrapped = simulate(_default({"name": "adaptive", "base": CHAIN4}))
    assert chain.requests.equals(wrapped.requests) and chain.steps.equals(wrapped.steps)


def test_the_wrapped_draft_model_takes_its_memory():
    chain = build_deployment(_default(CHAIN4))
    wrapped = build_deployment(_default({"name": "adaptive", "base": CHAIN4}))
    assert wrapped.memory.kv_blocks == chain.memory.kv_blocks
    assert wrapped.memory.kv_blocks < build_deployment(_default({"name": "none"})).memory.kv_blocks


def test_caps_follow_the_schedule_and_the_switches():
    sc = _default({"name": "adaptive", "base": {"name": "chain", "num_speculative_tokens": 5},
                   "draft_len_schedule": [[4, 6], [16, 3], [64, 1]],
                   "speculative_disable_by_batch_size": 48,
                   "acceptance_rate_window_size": 2, "acceptance_rate_threshold": 0.5})
    dep = build_deployment(sc)
    pol = ADAPTIVE(sc.policy.params, PolicyContext(
        target_cost=dep.target_cost, draft_cost=dep.draft_cost))

    def caps(batch_size):
        view = BatchView(np.arange(2), np.full(2, 100), np.full(2, 5), np.full(2, 50),
                         np.full(2, 95), batch_size, 0.0)
        return int(pol.caps(view)[0])

    # the schedule's 6 is capped at the base's 5; >= 48 running: off; above 64: off
    assert [caps(b) for b in (1, 4, 5, 16, 17, 47, 48, 64, 65)] == [5, 5, 3, 3, 1, 1, 0, 0, 0]
    pol.kill.update(0, 5)
    pol.kill.update(1, 5)  # 1 of 10 accepted over the window: off for good
    assert caps(1) == 0


def test_goodput_refuses_a_base_without_per_request_lengths():
    sc = _default({"name": "adaptive", "base": {"name": "jacobi"}, "controller": "goodput"},
                  workload={"tokens": {"kind": "code_edit", "num_requests": 2,
                                       "arrival": {"process": "poisson", "rate_per_s": 1}}})
    with pytest.raises(SpecsimError) as err:
        simulate(sc)
    assert err.value.field == "policy.base"


def test_a_gated_base_switched_off_sends_no_drafts():
    sc = _default({"name": "adaptive", "base": {"name": "jacobi"},
                   "speculative_disable_by_batch_size": 1},
                  draft=None,
                  workload={"tokens": {"kind": "code_edit", "num_requests": 4,
                                       "arrival": {"process": "poisson", "rate_per_s": 1}}})
    steps = simulate(sc).steps
    assert steps.draft_tokens.sum() == 0 and (steps.decode_tokens == steps.num_decode).all()


def test_goodput_around_a_model_free_base():
    sc = _default({"name": "adaptive", "base": {"name": "prompt_lookup",
                                                "num_speculative_tokens": 8},
                   "controller": "goodput"}, draft=None,
                  workload={"tokens": {"kind": "code_edit", "num_requests": 6,
                                       "arrival": {"process": "poisson", "rate_per_s": 0.5},
                                       "code": {"dist": "uniform", "min_tokens": 100,
                                                "max_tokens": 200}}})
    res = simulate(sc)
    assert (res.requests.status == "finished").all()
    assert res.summary()["mean_acceptance_length"] > 2.0
    assert (res.steps.draft_tokens <= 8 * res.steps.num_decode).all()


def _alpha_run(policy, alpha):
    sc = dataclasses.replace(_default(policy), acceptance={"model": "iid", "alpha": alpha})
    return simulate(sc).steps


def test_kill_switch_stops_drafting_when_acceptance_is_low():
    policy = {"name": "adaptive", "base": CHAIN4, "acceptance_rate_window_size": 20,
              "acceptance_rate_threshold": 0.3}
    steps = _alpha_run(policy, 0.1)
    drafting = np.flatnonzero(steps.draft_tokens.to_numpy() > 0)
    assert drafting.size == 20  # the window fills, the rate is ~0.1 < 0.3, then never again
    assert steps.draft_tokens.iloc[drafting[-1] + 1:].sum() == 0
    high = _alpha_run(policy, 0.9)
    assert high.draft_tokens.iloc[-20:].sum() > 0


def test_ema_controller_moves_gamma_with_acceptance():
    policy = {"name": "adaptive", "base": {"name": "chain", "num_speculative_tokens": 6},
              "controller": "acceptance_ema"}

    def late_gamma(alpha):
        steps = _alpha_run(policy, alpha)
        late = steps.iloc[len(steps) // 2:]
        return late.draft_tokens.sum() / late.num_decode.sum()

    assert late_gamma(0.95) > 5.0
    assert late_gamma(0.2) < 1.0


@pytest.mark.parametrize("name", ["adaptive", "adaptive_schedule"])
def test_shipped_scenarios_run(name):
    res = simulate(load_scenario(SCENARIOS / f"{name}.yaml",
                                 ["workload.synthetic.num_requests=30"]))
    assert (res.requests.status == "finished").all()
    assert res.summary()["num_drafts"] > 0


def test_drafts_stop_at_the_last_token_as_numpys_minimum():
    """``_within_output`` (k itself where every request has room) is numpy's
    minimum(k, max(output - generated - 1, 0)) on every small case (exact enumeration)."""
    from itertools import product

    from simulator.policies.adaptive import _within_output
    for ks in product(range(0, 4), repeat=2):
        for left in product(range(0, 5), repeat=2):
            k, output = np.array(ks), np.array([10, 10])
            generated = output - np.array(left)
            want = np.minimum(k, np.maximum(output - generated - 1, 0))
            assert _within_output(k, generated, output).tolist() == want.tolist()
    empty = np.zeros(0, np.int64)
    assert _within_output(empty, empty, empty).size == 0
