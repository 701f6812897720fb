"""Data-parallel attention in a scenario: DP 1 is today's deployment exactly, fast-forward on
and off agree, a request's chunk is one rank's share of the budget, bad values are refused
with the field named."""
from __future__ import annotations

import pytest
import yaml

from simulator.deployment import rank_chunk_tokens, resolve_deployment
from simulator.inputs.errors import SpecsimError
from simulator.scenario import PolicyConfig, load_scenario, scenario_from_dict
from simulator.simulate import simulate
from tests.helpers import REPO
from tests.simulator.engine.test_fast_forward import _both, assert_identical

SCENARIO = REPO / "workloads" / "scenarios" / "deepseek_dp_attention.yaml"
SMALL = ["workload.synthetic.num_requests=12", "workload.synthetic.output.tokens=40",
         "workload.synthetic.prompt.tokens=3000", "workload.max_concurrency=12"]


def _data(**changes) -> dict:
    data = yaml.safe_load(SCENARIO.read_text())
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            data[section][name] = value
        else:
            data[section] = value
    return data


def test_dp1_equals_todays_deployment_exactly():
    base = load_scenario(str(REPO / "workloads" / "scenarios" / "mtp_moe.yaml"),
                         ["workload.max_requests=8"])
    dp1 = load_scenario(str(REPO / "workloads" / "scenarios" / "mtp_moe.yaml"),
                        ["workload.max_requests=8", "parallelism.data_parallel_attention=1"])
    assert dp1.parallelism == base.parallelism
    assert_identical(simulate(base), simulate(dp1))


TBO_EPLB = ["parallelism.moe_dispatch=all_to_all", "parallelism.enable_two_batch_overlap=true",
            "parallelism.enable_eplb=true"]


@pytest.mark.parametrize("policy, extra", [("none", []), ("mtp", []), ("mtp", TBO_EPLB)])
def test_fast_forward_on_and_off_identical(policy, extra):
    """(with two-batch overlap and EPLB too: the same seed, the same DataFrames)"""
    sc = load_scenario(str(SCENARIO), SMALL + extra)
    if policy == "none":
        sc = sc.with_policy(PolicyConfig("none", {}))
    on, off = _both(sc)
    assert_identical(on, off)
    assert on.summary()["finished"] == 12


def test_a_chunk_is_one_ranks_share_of_the_budget():
    sc = load_scenario(str(SCENARIO), SMALL)
    assert rank_chunk_tokens(sc) == 16384 // 8
    steps = simulate(sc).steps
    chunks = steps["prefill_tokens"] / steps["num_prefill"].where(steps["num_prefill"] > 0)
    assert chunks.max() <= 2048


@pytest.mark.parametrize("changes, field", [
    ({"parallelism__tensor_parallel": 8}, "data_parallel_attention"),
    ({"parallelism__expert_parallel": False}, "expert_parallel"),
    ({"parallelism__data_parallel_attention": "eight"}, "data_parallel_attention"),
    ({"parallelism__moe_dispatch": "deepep"}, "moe_dispatch"),
    ({"policy": {"name": "eagle3", "num_speculative_tokens": 3}}, "policy"),
    ({"target": "qwen3-30b-a3b", "policy": {"name": "none"}, "acceptance": None}, None),
])
def test_bad_values_name_the_field(changes, field):
    data = _data(**changes)
    if data.get("acceptance") is None:
        data.pop("acceptance", None)
    if field is None:  # a MoE model without MLA is served as well (GQA KV on each rank)
        assert resolve_deployment(scenario_from_dict(data, source="t")).target_cost
        return
    with pytest.raises(SpecsimError) as exc:
        resolve_deployment(scenario_from_dict(data, source="t"))
    assert field in str(exc.value)


def test_dense_target_is_refused():
    data = _data(target="llama-3.1-8b", policy={"name": "none"})
    data.pop("acceptance")
    with pytest.raises(SpecsimError) as exc:
        resolve_deployment(scenario_from_dict(data, source="t"))
    assert "data_parallel_attention" in str(exc.value)


def test_vllm_v0_engine_is_refused_with_dp_attention():
    """vLLM V0 (engines.yaml vllm-v0.7, no_dp_attention) had no DP attention: its V0-only
    terms (the one-block align) have no DP-attention pricing, so the pair is refused."""
    data = _data(execution={"engine": "vllm-v0.7"})
    with pytest.raises(SpecsimError) as exc:
        resolve_deployment(scenario_from_dict(data, source="t"))
    assert "vllm-v0.7" in str(exc.value) and "data_parallel_attention" in str(exc.value)
    data["parallelism"] = {"tensor_parallel": 8}  # the same engine at TP 8 runs
    assert resolve_deployment(scenario_from_dict(data, source="t")).target_cost
