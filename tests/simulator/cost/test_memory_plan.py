"""Memory plan: weights + activations + KV blocks against capacity x utilisation."""
import math

import pytest

from hardware.profile import GIB, load_profile
from simulator.cost.memory_plan import activation_bytes, plan_memory
from simulator.cost.parallelism import Parallelism
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model


def test_opt13b_on_a100_by_hand():
    hw, m = load_profile("a100-40gb"), load_model("opt-13b")
    plan = plan_memory(hw, m, Parallelism(), gpu_memory_utilization=0.9, block_size=16,
                       max_batched_tokens=2048, logits_tokens=256)
    # by hand: 0.9 x 40 GiB - weights - (2048 x (4h + 2f) x 2 B + 256 x 50272 x 4 B)
    act = 2048 * (4 * 5120 + 2 * 20480) * 2 + 256 * 50272 * 4
    budget = 0.9 * 40 * GIB - m.param_count() * 2 - act
    assert plan.activation_bytes == pytest.approx(act)
    assert plan.kv_blocks == math.floor(budget / (819_200 * 16))
    assert plan.kv_tokens == plan.kv_blocks * 16
    assert plan.kv_tokens * 819_200 <= plan.kv_budget_bytes


def test_draft_model_takes_weights_and_kv_space():
    hw, t, d = load_profile("a100-40gb"), load_model("opt-13b"), load_model("opt-125m")
    alone = plan_memory(hw, t, Parallelism())
    both = plan_memory(hw, t, Parallelism(), extra_models=[d], kv_models=[d])
    assert both.kv_bytes_per_token == t.kv_bytes_per_token() + d.kv_bytes_per_token()
    assert both.kv_tokens < alone.kv_tokens


def test_does_not_fit_says_by_how_much_and_what_to_do():
    hw, m = load_profile("a100-40gb"), load_model("llama-2-70b")
    with pytest.raises(SpecsimError) as exc:
        plan_memory(hw, m, Parallelism())
    text = str(exc.value)
    assert "does not fit" in text and "GiB" in text and "tensor_parallel >= 4" in text
    # the suggested fix works
    plan_memory(hw, m, Parallelism(tensor_parallel=4))


def test_tensor_parallel_and_offload_free_memory():
    hw, m = load_profile("a100-40gb"), load_model("opt-30b")
    with pytest.raises(SpecsimError):
        plan_memory(hw, m, Parallelism())
    tp2 = plan_memory(hw, m, Parallelism(tensor_parallel=2))
    off = plan_memory(hw, m, Parallelism(offload_fraction=0.7))
    assert tp2.kv_tokens > 0 and off.kv_tokens > 0


def test_bad_arguments():
    hw, m = load_profile("a100-40gb"), load_model("opt-13b")
    with pytest.raises(SpecsimError, match="gpu_memory_utilization"):
        plan_memory(hw, m, Parallelism(), gpu_memory_utilization=0.0)
    with pytest.raises(SpecsimError, match="block_size"):
        plan_memory(hw, m, Parallelism(), block_size=0)
    assert activation_bytes(m, Parallelism(), 100, logits_tokens=1000) == \
        activation_bytes(m, Parallelism(), 100)


def test_replicated_weights_split_over_stages_only():
    from simulator.cost.memory_plan import replicated_bytes, weights_per_device
    assert replicated_bytes(load_model("opt-13b")) == (0.0, 0.0)   # dense, no MLA: all split
    v3 = load_model("deepseek-v3")                                 # fp8 weights, 16-bit router
    down, router = 61 * 7168 * (1536 + 512 + 64), 58 * 7168 * 256
    assert replicated_bytes(v3) == (down + router, down + 2 * router)
    got = weights_per_device(v3, Parallelism(tensor_parallel=4, pipeline_parallel=2))
    assert got == (v3.weight_bytes() - down - router) / 8 + (down + 2 * router) / 2
