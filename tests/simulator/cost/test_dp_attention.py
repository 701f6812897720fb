"""Data-parallel attention with expert parallelism (simulator/cost/dp_attention.py): the KV
and weights of a rank by hand, the MoE dispatch bytes in closed form, the step as the
slowest rank plus the experts at the padded global count, DP 1 as today, bad values."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hardware.profile import GIB, load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.dp_attention import DpAttentionCostModel, cost_model, dispatch_bytes
from simulator.cost.memory_plan import plan_memory
from simulator.cost.parallelism import Parallelism
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model

DP8 = Parallelism(tensor_parallel=1, data_parallel_attention=8, expert_parallel=8)
H, K, MOE_LAYERS = 7168, 8, 58  # DeepSeek-V3 config.json: hidden, top-k, 61 - 3 dense layers


def _deepseek_non_expert_params() -> int:
    """DeepSeek-V3's weights outside the routed experts, from its config.json by hand:
    embedding and LM head, 61 MLA attentions (q_a 7168x1536, q_b 1536 x 128 heads x (128 +
    64), kv_a 7168 x (512 + 64), kv_b 512 x 128 x (128 + 128), o 128 x 128 x 7168, the
    latent norms 1536 + 512), 2 norms a layer, 3 dense MLPs of 18432, 58 MoE layers' shared
    expert (2048) and router (7168 x 256), the final norm."""
    attention = (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256
                 + 128 * 128 * 7168 + 1536 + 512)
    layers = 61 * (attention + 2 * 7168) + 3 * 3 * 7168 * 18432 \
        + 58 * (3 * 7168 * 2048 + 7168 * 256)
    return 2 * 129280 * 7168 + layers + 7168


def test_kv_capacity_per_rank_deepseek_v3_fp8_on_8_h200_by_hand():
    hw, m = load_profile("h200"), load_model("deepseek-v3")
    plan = plan_memory(hw, m, DP8, gpu_memory_utilization=0.9, block_size=16,
                       max_batched_tokens=2048, logits_tokens=256)
    # weights per GPU: everything but the routed experts replicated (FP8, 1 byte), the
    # 58 x 256 routed experts (3 x 7168 x 2048 each) spread over the 8 ranks
    experts = 58 * 256 * 3 * 7168 * 2048
    weights = _deepseek_non_expert_params() * 1 + experts * 1 / 8
    assert plan.weight_bytes == pytest.approx(weights, rel=1e-12)
    # activations (memory_plan.activation_bytes' form, attention TP 1) of the rank's share
    # of the replica's budget, 2048 / 8 tokens and 256 / 8 logits (SGLang's
    # _handle_data_parallelism divides the budgets among the DP ranks): the widest MLP is
    # the dense 18432 (= (8 + 1) x 2048 of a MoE layer), 16-bit; plus the all-gather
    # dispatch's gathered hidden states, all 2048 tokens x 7168, 16-bit
    act = 256 * (4 * 7168 + 2 * 2 * 18432) * 2 + 32 * 4 * 129280 + 2048 * 7168 * 2
    # the MLA latent a token: (kv_lora_rank 512 + qk_rope_head_dim 64) x 61 layers x 2 bytes
    # (kv_cache_dtype auto: 16-bit), all of it on its rank
    latent = (512 + 64) * 61 * 2
    assert plan.kv_bytes_per_token == latent == 70_272
    # the profile's capacity: 141 (hardware/profiles/h200.yaml memory_gib) x 0.9 usable
    per_rank = math.floor((0.9 * 141 * GIB - weights - act) / (latent * 16))
    assert plan.kv_blocks == 8 * per_rank and plan.kv_ranks == 8
    # against TP 8 (every rank the whole latent, 1/8 of every weight): more KV per GPU under
    # DP, since each GPU's budget now holds only its own requests
    tp8 = plan_memory(hw, m, Parallelism(tensor_parallel=8, expert_parallel=8),
                      gpu_memory_utilization=0.9, block_size=16, max_batched_tokens=2048,
                      logits_tokens=256)
    assert plan.kv_blocks > 4 * tp8.kv_blocks


def test_dispatch_bytes_closed_form():
    # all_gather: 8 ranks x 32 tokens x 7168 x 2 bytes gathered, the reduce-scatter the same
    assert dispatch_bytes("all_gather", 32, 8, H, K, 2.0) == (8 * 32 * H * 2,) * 2
    # all_to_all (DeepEP low latency): 32 tokens x 8 copies, FP8 + a 4-byte scale per 128
    # out, 16-bit back
    d, c = dispatch_bytes("all_to_all", 32, 8, H, K, 2.0)
    assert d == 32 * 8 * H * (1 + 4 / 128) and c == 32 * 8 * H * 2


def _dp_cost(dispatch="all_gather") -> DpAttentionCostModel:
    par = Parallelism(tensor_parallel=1, data_parallel_attention=8, expert_parallel=8,
                      moe_dispatch=dispatch)
    cm = cost_model(load_profile("h200"), load_model("deepseek-v3"), par)
    assert isinstance(cm, DpAttentionCostModel)
    return cm


@pytest.mark.parametrize("dispatch", ["all_gather", "all_to_all"])
def test_step_dispatch_is_the_closed_form_at_the_busiest_rank(dispatch):
    cm = _dp_cost(dispatch)
    coll = load_profile("h200").collectives
    # 9 decodes: dealt round-robin, rank 0 holds 2, so every rank is padded to 2 tokens
    ops = {op.name: op for op in cm.breakdown(np.ones(9), np.full(9, 1000.0)).ops}
    d, c = dispatch_bytes(dispatch, 2, 8, H, K, 2.0)
    price = coll.all_gather_s if dispatch == "all_gather" else coll.all_to_all_s
    assert ops["moe_dispatch"].time_s == pytest.approx(MOE_LAYERS * price(d, 8), rel=1e-12)
    assert ops["moe_combine"].time_s == pytest.approx(MOE_LAYERS * price(c, 8), rel=1e-12)


def test_step_is_the_slowest_rank_plus_the_experts():
    cm = _dp_cost()
    rank = CostModel(load_profile("h200"), load_model("deepseek-v3"), DP8.attention_rank())
    new, ctx = np.ones(16), np.full(16, 2000.0)
    ctx[3] = 30000.0  # rank 3 (requests 3 and 11) reads the most KV
    step = cm.step_time(new, ctx)
    assert step == pytest.approx(cm.breakdown(new, ctx).time_s, rel=1e-9)
    # the MoE part depends on the busiest rank's tokens only: the same for both batches
    flat = cm.step_time(new, np.full(16, 2000.0))
    slow, fast = (CostModel.step_time(cm, new[3::8], ctx[3::8]),
                  CostModel.step_time(cm, new[0::8], ctx[0::8]))
    assert step - flat == pytest.approx(slow - fast, rel=1e-9)
    # a rank's forward leaves the routed experts out: cheaper than a whole model on one GPU
    assert slow < rank.step_time(new[3::8], ctx[3::8])
    # a prefill chunk on one rank holds every rank back
    chunk = np.append(new, 1024.0)
    assert cm.step_time(chunk, np.append(ctx, 0.0)) > step


def test_dp1_is_the_plain_cost_model():
    cm = cost_model(load_profile("h200"), load_model("deepseek-v3"),
                    Parallelism(tensor_parallel=8, expert_parallel=8))
    assert type(cm) is CostModel
    assert Parallelism(tensor_parallel=8, expert_parallel=8) == \
        Parallelism(tensor_parallel=8, expert_parallel=8, data_parallel_attention=1)


@pytest.mark.parametrize("kw, field", [
    (dict(tensor_parallel=8, data_parallel_attention=8, expert_parallel=64),
     "data_parallel_attention"),
    (dict(data_parallel_attention=8), "expert_parallel"),
    (dict(data_parallel_attention=8, expert_parallel=8, pipeline_parallel=2),
     "data_parallel_attention"),
    (dict(data_parallel_attention=8, expert_parallel=8, moe_dispatch="nccl"), "moe_dispatch"),
    (dict(data_parallel_attention=0), "data_parallel_attention"),
])
def test_bad_parallelism_names_the_field(kw, field):
    with pytest.raises(SpecsimError) as exc:
        Parallelism(**kw)
    assert field in str(exc.value)


def test_dense_model_is_refused():
    with pytest.raises(SpecsimError) as exc:
        cost_model(load_profile("h200"), load_model("llama-3.1-8b"), DP8)
    assert "data_parallel_attention" in str(exc.value) and "replicas" in str(exc.value)


def test_too_few_ranks_says_how_many_fit():
    hw, m = load_profile("h200"), load_model("deepseek-v3")

    def plan(n):
        return plan_memory(hw, m, Parallelism(data_parallel_attention=n, expert_parallel=n))

    with pytest.raises(SpecsimError) as exc:
        plan(3)  # 3 GPUs: ceil(256 / 3) = 86 experts a GPU, more than 141 GiB of weights
    need = int(str(exc.value).split("data_parallel_attention >= ")[1].split()[0])
    assert plan(need).kv_blocks > 0  # the fix it names works, one rank fewer does not
    with pytest.raises(SpecsimError):
        plan(need - 1)
