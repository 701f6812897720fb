"""SGLang's KV pool: capacity x mem_fraction_static - weights, the fraction from SGLang
0.5.3's server_args.py heuristic (simulator/cost/memory_plan.py), checked by hand."""
import math

import pytest

from hardware.profile import GIB, load_profile
from simulator.cost.memory_plan import (
    plan_memory,
    sglang_cuda_graph_max_bs,
    sglang_mem_fraction_static,
)
from simulator.cost.parallelism import Parallelism
from simulator.deployment import kv_fraction, resolve_deployment
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.scenario import scenario_from_dict

MIB = 1 << 20
H200_MIB = 143_771      # nvidia-smi memory.total of an H200 SXM (what SGLang reads)


def test_cuda_graph_max_bs_follows_the_memory_table():
    # server_args.py _handle_gpu_memory_settings at v0.5.3: (tp < 4, tp >= 4) by GPU memory
    assert [sglang_cuda_graph_max_bs(g * 1024, 1) for g in (16, 24, 40, 80, 141, 180)] == \
        [8, 16, 32, 256, 256, 512]
    assert [sglang_cuda_graph_max_bs(g * 1024, 8) for g in (16, 24, 40, 80, 141, 180)] == \
        [8, 80, 160, 512, 512, 512]


def test_h200_tp8_fraction_by_hand():
    cap = H200_MIB * MIB
    # 512 + 8192 x 1.5 + 512 x 2 + 8 / 8 x 1024 = 14,848 MiB reserved
    plain = sglang_mem_fraction_static(cap, chunked_prefill_size=8192, tp=8)
    assert plain == round((H200_MIB - 14_848) / H200_MIB, 3) == 0.897
    # --enable-dp-attention adds 512 x dp x 3 and, as 512 > 300, 512 x dp x 1.5, even where
    # dp_size 1 turns the flag off afterwards: 17,152 MiB
    flag = sglang_mem_fraction_static(cap, chunked_prefill_size=8192, tp=8, dp_attention=True)
    assert flag == round((H200_MIB - 17_152) / H200_MIB, 3) == 0.881
    dp8 = sglang_mem_fraction_static(cap, chunked_prefill_size=8192, tp=8, dp_attention=True,
                                     dp_size=8)
    assert dp8 == round((H200_MIB - (14_848 + 512 * 8 * 4.5)) / H200_MIB, 3)
    eagle = sglang_mem_fraction_static(cap, chunked_prefill_size=8192, tp=8,
                                       speculative="eagle")
    assert eagle == round((H200_MIB - 14_848 - 2048) / H200_MIB, 3)


def test_reserve_floor_of_10_gib_above_60_gib_only():
    # H100 80 GB, TP 1, 2K chunks: 512 + 3072 + 512 + 128 = 4,224 MiB, floored to 10 GiB
    cap = 81_559 * MIB
    got = sglang_mem_fraction_static(cap, chunked_prefill_size=2048, tp=1)
    assert got == round((81_559 - 10_240) / 81_559, 3)
    # A10 24 GB: no floor; chunked 2048 -> 512 + 3072 + 16 x 2 + 128 = 3,744 MiB
    small = sglang_mem_fraction_static(23_028 * MIB, chunked_prefill_size=2048, tp=1)
    assert small == round((23_028 - 3_744) / 23_028, 3)


def test_plan_takes_weights_from_the_fraction_and_no_headroom():
    hw, m = load_profile("a100-40gb"), load_model("opt-13b")
    plan = plan_memory(hw, m, Parallelism(), mem_fraction_static=0.8, block_size=16,
                       max_batched_tokens=2048, logits_tokens=256)
    budget = 0.8 * 40 * GIB - m.param_count() * 2
    assert plan.activation_bytes == 0.0
    assert plan.kv_blocks == math.floor(budget / (819_200 * 16))
    vllm = plan_memory(hw, m, Parallelism(), gpu_memory_utilization=0.8, block_size=16,
                       max_batched_tokens=2048, logits_tokens=256)
    assert vllm.kv_blocks < plan.kv_blocks     # vLLM also takes the activation headroom


def test_unknown_speculative_kind_is_an_error():
    with pytest.raises(SpecsimError, match="speculative"):
        sglang_mem_fraction_static(80 * GIB, chunked_prefill_size=2048, tp=1,
                                   speculative="medusa")


def _scenario(engine: str, **batching):
    return scenario_from_dict({
        "name": "x", "hardware": "h200", "target": "deepseek-v3", "policy": {"name": "none"},
        "parallelism": {"tensor_parallel": 8}, "execution": {"engine": engine},
        "batching": {"max_num_batched_tokens": 8192, **batching},
        "workload": {"synthetic": {"num_requests": 1, "prompt": {"dist": "fixed", "tokens": 8},
                                   "output": {"dist": "fixed", "tokens": 8}}}}, source="t")


def test_engine_rule_and_scenario_override():
    s = _scenario("sglang-v0.5")
    res = resolve_deployment(s)
    want = sglang_mem_fraction_static(res.hardware.memory_bytes, chunked_prefill_size=8192,
                                      tp=8)
    assert kv_fraction(s, res.hardware, res.extra_models) == want
    assert kv_fraction(_scenario("vllm-v0.9"), res.hardware, ()) is None
    over = _scenario("vllm-v0.9", mem_fraction_static=0.85)
    assert kv_fraction(over, res.hardware, ()) == 0.85


def test_bad_fraction_names_the_field():
    with pytest.raises(SpecsimError, match="batching.mem_fraction_static"):
        _scenario("sglang-v0.5", mem_fraction_static=1.5)
