"""The policy contract (simulator/policies/base.py): every registered policy keeps it, the
scenario parses a policy's parameters once, and the memory plan is made once, for the built
policy's verification width."""
from __future__ import annotations

import dataclasses
import inspect

import pytest

from simulator.cost.memory_plan import plan_memory
from simulator.inputs.errors import SpecsimError
from simulator.policies.base import PolicyBase
from simulator.policies.registry import BASES, POLICIES
from simulator.scenario import PolicyConfig, parse_compare
from simulator.simulate import build_deployment, simulate
from tests.helpers import scenario, workload


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_registered_policy_keeps_the_contract(name):
    cls = POLICIES[name]
    assert issubclass(cls, PolicyBase) and not inspect.isabstract(cls)
    assert cls.name == name
    assert isinstance(cls.needs_draft_model, bool)
    assert all(p.kind for p in cls.PARAMS.values())


def test_the_adaptive_wrapper_wraps_the_registrys_bases():
    assert POLICIES["adaptive"].BASES == BASES
    assert set(POLICIES) == {"none", "adaptive", *BASES}
    with pytest.raises(SpecsimError) as err:
        PolicyConfig("adaptive", {"base": "none"})
    assert err.value.field == "policy.base.name" and "chain" in str(err.value)


def test_a_policy_config_parses_once_and_keeps_what_was_written():
    pol = PolicyConfig("chain", {"gamma": 2})
    assert pol.raw == {"gamma": 2} and pol.params == {"num_speculative_tokens": 2}
    assert pol.label == "chain:gamma=2"
    [again] = parse_compare(pol.label)  # results folders read the label back
    assert again == pol and again.params == pol.params
    with pytest.raises(SpecsimError) as err:
        PolicyConfig("chain", {"gamma": -1})
    assert err.value.field == "policy.gamma"


def test_simulate_does_not_parse_again(monkeypatch):
    sc = scenario("chain:num_speculative_tokens=3")
    calls = []
    cls = POLICIES["chain"]
    monkeypatch.setattr(cls, "parse_params", classmethod(
        lambda c, *a, **k: calls.append(a) or {}))
    res = simulate(sc, workload=workload([0.0, 0.1], [20, 30], [8, 8]))
    assert calls == [] and res.info["kv_blocks"] > 0


def test_the_memory_plan_holds_logits_for_the_built_policys_width():
    # a SpecInfer tree verifies 1 + nodes tokens per request; no knob names that width
    sc = dataclasses.replace(scenario("none", target="llama-2-7b", draft="llama-68m"),
                             policy=PolicyConfig("specinfer", {"expansion": [2, 2, 1]}),
                             acceptance={"model": "tree_topk", "coverage": [[0.6, 0.8]]})
    dep = build_deployment(sc)
    nodes = 2 + 4 + 4
    assert dep.max_verify_tokens == nodes + 1
    b = sc.batching
    expected = plan_memory(dep.hardware, dep.target, sc.parallelism,
                           extra_models=[dep.draft], kv_models=[dep.draft],
                           gpu_memory_utilization=b.gpu_memory_utilization,
                           block_size=b.block_size, max_batched_tokens=b.max_num_batched_tokens,
                           logits_tokens=b.max_num_seqs * (nodes + 1))
    assert dep.memory == expected
