"""Mixture-of-experts, latent-attention and EAGLE-3 models: their KV sizes against the papers,
their memory on a device in closed form, the EAGLE-3 checkpoint's tensors, and the shape
checks that refuse an inconsistent file."""
from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import yaml

from hardware.profile import load_profile
from simulator.cost.memory_plan import activation_bytes, plan_memory
from simulator.cost.parallelism import Parallelism
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import (
    MODEL_DIR,
    attached_model,
    check_shared_vocabulary,
    load_model,
)

# DeepSeek-V3 Technical Report (arXiv 2412.19437) sec. 2.1.1 and config.json: 61 layers, the
# compressed KV latent d_c = 512 and the decoupled rope key d_h^R = 64 are what MLA caches;
# DeepSeek-V2 (arXiv 2405.04434) Table 1 gives the cache as (d_c + d_h^R) * l elements per
# token, against 2 * n_h * d_h * l for multi-head attention (n_h = 128, d_h = 128 here).
V3_LAYERS, V3_LATENT, V3_ROPE, V3_HEADS, V3_HEAD_DIM = 61, 512, 64, 128, 128
V3_KV_BYTES = V3_LAYERS * (V3_LATENT + V3_ROPE) * 2  # bf16 cache


def test_deepseek_v3_kv_bytes_per_token_is_the_published_latent():
    spec = load_model("deepseek-v3")
    assert spec.is_mla and spec.kv_elements_per_token_layer == V3_LATENT + V3_ROPE
    assert spec.kv_bytes_per_token() == V3_KV_BYTES == 70_272
    # the weights are fp8 but the cache is 16-bit unless the deployment says fp8 (vLLM's
    # kv_cache_dtype); an fp8 cache holds one byte per element
    assert dataclasses.replace(spec, kv_cache_dtype="fp8").kv_bytes_per_token() == 35_136


def test_the_latent_is_far_below_a_multi_head_or_grouped_query_cache():
    latent = load_model("deepseek-v3").kv_bytes_per_token()
    mha = 2 * V3_HEADS * V3_HEAD_DIM * V3_LAYERS * 2  # V2 Table 1: 2 n_h d_h l, bf16
    assert mha == 3_997_696
    assert mha / latent == pytest.approx(56.9, abs=0.05)  # V2 reports MLA at ~1/57 of MHA
    gqa8 = 2 * 8 * V3_HEAD_DIM * V3_LAYERS * 2  # even 8 KV groups (Llama-3-70B's) hold more
    assert latent < gqa8 / 3


def test_kimi_k2_caches_the_same_latent_with_half_the_heads():
    # Kimi-K2 README / config.json: DeepSeek-V3's MLA dims (512 + 64) over 61 layers, 64 heads
    # instead of 128: the latent does not grow with the head count
    assert load_model("kimi-k2").kv_bytes_per_token() == V3_KV_BYTES


def test_deepseek_v3_kv_capacity_on_h200_tp8_at_ninety_percent():
    # vLLM's plan: usable = capacity x gpu_memory_utilization; each of the 8 ranks holds an
    # eighth of the fp8 weights, the activation headroom, and a KV cache in blocks of 16.
    # MLA's latent is NOT divided by TP: every rank caches the whole latent of its tokens
    # (vLLM's MLA backends; issue 15's cost change -- this test is written for that behaviour)
    spec, hw, tp = load_model("deepseek-v3"), load_profile("h200"), 8
    parallel = Parallelism(tensor_parallel=tp)
    capacity = 141 * 2**30  # NVIDIA H200 datasheet: 141 GB HBM3e, which h200.yaml reads as GiB
    assert hw.memory_bytes == capacity
    weights = 671.03e9 * 1.0 / tp  # 671.03B parameters (within 0.01% of 671B) x 1 B (fp8)
    assert spec.weight_bytes() / tp == pytest.approx(weights, rel=1e-4)
    act = activation_bytes(spec, parallel, 2048)  # the plan's headroom for 2048 tokens
    assert act < 0.5 * 2**30  # a rounding error next to the cache
    # but for what every rank holds whole: the latent down-projections (q_a, kv_a: 61 x 7168
    # x (1536 + 512 + 64), fp8) and the router (58 x 7168 x 256, 16-bit)
    down, router = 61 * 7168 * (1536 + 512 + 64), 58 * 7168 * 256
    held = (spec.weight_bytes() - down - router) / tp + down + 2 * router
    budget = 0.9 * capacity - held - act
    expected_tokens = math.floor(budget / (V3_KV_BYTES * 16)) * 16
    plan = plan_memory(hw, spec, parallel, gpu_memory_utilization=0.9)
    assert plan.kv_bytes_per_token == V3_KV_BYTES
    assert plan.kv_tokens == expected_tokens
    assert 700_000 < plan.kv_tokens < 760_000  # ~48.6 GiB of latent per rank


def test_deepseek_v3_checkpoint_holds_the_model_and_one_mtp_module():
    # DeepSeek-V3 README: 685B in the Hugging Face files = 671B main model + 14B MTP module;
    # the module's layer stores its own copy of the embedding and the output head
    # (model.layers.61.embed_tokens / shared_head.head, which vLLM and SGLang skip to share
    # the target's), so 685B = main + module + embedding + head
    spec = load_model("deepseek-v3")
    assert spec.mtp_modules == 1
    stored = spec.param_count() + spec.mtp_module_params() + spec.embedding_params() \
        + spec.lm_head_params()
    assert stored == pytest.approx(685e9, rel=0.005)
    assert spec.mtp_module_params() < 0.02 * spec.param_count()


def test_expert_counts_follow_the_configs():
    v3 = load_model("deepseek-v3")  # 3 dense layers of 61, experts of 2048 (config.json)
    assert v3.moe_layers == 58 and v3.expert_params() == 3 * 7168 * 2048
    mixtral = load_model("mixtral-8x7b")  # every layer MoE, experts of 14336
    assert mixtral.moe_layers == 32 and mixtral.expert_params() == 3 * 4096 * 14336
    # top-2 of 8: the experts a token skips are 6 of 8 in each of 32 layers
    skipped = mixtral.param_count() - mixtral.active_param_count()
    assert skipped == 32 * 6 * 3 * 4096 * 14336


def test_eagle3_head_is_the_checkpoints_tensors():
    # eagle/model/cnets.py (SafeAILab/EAGLE) at eagle/traineagle3/config.json, the
    # Llama-3.1-8B-Instruct head: every parameter tensor of the saved EAGLE-3 layer; the
    # embedding is the target's and d2t/t2d are index buffers, not parameters
    h, q, kv, f, draft_vocab = 4096, 32 * 128, 8 * 128, 14336, 32000
    tensors = {
        "midlayer.self_attn.q_proj": q * 2 * h, "midlayer.self_attn.k_proj": kv * 2 * h,
        "midlayer.self_attn.v_proj": kv * 2 * h, "midlayer.self_attn.o_proj": h * q,
        "midlayer.mlp.gate_proj": f * h, "midlayer.mlp.up_proj": f * h,
        "midlayer.mlp.down_proj": h * f, "midlayer.input_layernorm": h,
        "midlayer.hidden_norm": h, "midlayer.post_attention_layernorm": h,
        "fc": h * 3 * h, "norm": h, "lm_head": draft_vocab * h,
    }
    spec = load_model("eagle3-llama-3.1-8b-instruct")
    assert spec.param_count() == sum(tensors.values()) == 424_689_664
    assert spec.lm_head_params() == draft_vocab * h
    assert spec.kv_bytes_per_token() == 2 * 8 * 128 * 2  # one GQA layer, fp16


@pytest.mark.parametrize("target, head", [
    ("llama-3.1-8b", "eagle3-llama-3.1-8b-instruct"),
    ("llama-3.1-70b", "eagle3-llama-3.1-70b-instruct"),
    ("kimi-k2", "eagle3-kimi-k2"),
])
def test_eagle3_heads_attach_to_the_target_they_were_trained_on(target, head):
    tmodel = load_model(target)
    spec = attached_model("eagle3", None, None, tmodel, field="policy.model")
    assert spec.name == head and spec.base_model == target
    assert attached_model("eagle3", head, None, tmodel, field="policy.model") == spec
    # its own LM head is over the draft vocabulary, but it proposes target tokens (d2t)
    assert check_shared_vocabulary(spec, tmodel) is spec
    assert spec.draft_vocab_size < tmodel.vocab_size == spec.vocab_size


def test_an_eagle3_head_on_another_target_is_refused():
    with pytest.raises(SpecsimError) as err:
        attached_model("eagle3", "eagle3-llama-3.1-8b-instruct", None,
                       load_model("llama-3.1-70b"), field="policy.model")
    assert err.value.field == "policy.model" and "llama-3.1-8b" in str(err.value)
    with pytest.raises(SpecsimError, match="no eagle3 models") as err:
        attached_model("eagle3", None, None, load_model("opt-13b"), field="policy.model")
    assert err.value.field == "policy.model"


# A complete MoE + MLA file (DeepSeek-V3's shapes); each hostile case breaks one thing.
VALID = yaml.safe_load((MODEL_DIR / "deepseek-v3.yaml").read_text(encoding="utf-8"))
EAGLE3 = yaml.safe_load((MODEL_DIR / "eagle3-llama-3.1-8b-instruct.yaml").read_text(
    encoding="utf-8"))
_DELETE = object()


def _file(tmp_path, base, changes):
    data = copy.deepcopy(base)
    for key, value in changes.items():
        if value is _DELETE:
            del data[key]
        else:
            data[key] = value
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_fixtures_are_valid(tmp_path):
    assert load_model(str(_file(tmp_path, VALID, {}))).kv_bytes_per_token() == V3_KV_BYTES
    assert load_model(str(_file(tmp_path, EAGLE3, {}))).kind == "eagle3"


@pytest.mark.parametrize("base, changes, field", [
    (VALID, {"experts_per_token": _DELETE}, "num_experts"),        # half a MoE
    (VALID, {"experts_per_token": 300}, "experts_per_token"),      # top-300 of 256
    (VALID, {"num_experts": -256}, "num_experts"),
    (VALID, {"experts_per_token": "8"}, "experts_per_token"),      # a string for a number
    (VALID, {"dense_layers": 61}, "dense_layers"),                 # no MoE layer left
    (VALID, {"num_experts": 0, "experts_per_token": 0, "expert_ffn_size": 0},
     "num_experts"),                                               # shared expert, no MoE
    (VALID, {"num_kv_heads": 8}, "num_kv_heads"),                  # MLA with GQA heads
    (VALID, {"qk_rope_head_dim": 0}, "qk_rope_head_dim"),          # latent without rope key
    (VALID, {"kv_lora_rank": 40000}, "kv_lora_rank"),              # no compression
    (VALID, {"kv_lora_rank": 0}, "kv_lora_rank"),                  # q_lora without MLA
    (VALID, {"published_active_params": {"value": 37.0e+9}}, "published_active_params.source"),
    (VALID, {"published_active_params": {"value": 0, "source": "x"}},
     "published_active_params.value"),
    (VALID, {"feature_layers": 3}, "feature_layers"),              # EAGLE-3 field on a decoder
    (VALID, {"draft_vocab_size": 32000}, "draft_vocab_size"),
    (EAGLE3, {"draft_vocab_size": 200000}, "draft_vocab_size"),    # bigger than the target's
    (EAGLE3, {"feature_layers": _DELETE}, "feature_layers"),
    (EAGLE3, {"mtp_modules": 1}, "mtp_modules"),                   # MTP is a decoder's
    (EAGLE3, {"num_experts": 8, "experts_per_token": 2, "expert_ffn_size": 1024},
     "num_experts"),                                               # a MoE head: not modelled
    (EAGLE3, {"v_head_dim": 64}, "v_head_dim"),                    # only MLA splits V
])
def test_inconsistent_moe_mla_files_are_refused(tmp_path, base, changes, field):
    path = _file(tmp_path, base, changes)
    with pytest.raises(SpecsimError) as err:
        load_model(str(path))
    assert err.value.field == field
    assert str(path) in str(err.value) and field in str(err.value)


def test_flops_per_token_count_the_active_experts_once():
    from simulator.results import _flops_per_token

    # Mistral's announcement: 12.9B parameters used per token, of which the 32000 x 4096
    # input embedding is a lookup (no multiply); 2 FLOPs per multiplied weight
    mixtral = load_model("mixtral-8x7b")
    assert _flops_per_token(mixtral) == pytest.approx(2 * (12.9e9 - 32000 * 4096), rel=0.02)
    # a dense untied model multiplies every weight but the embedding, its head once
    llama = load_model("llama-3.1-8b")
    assert _flops_per_token(llama) == 2 * (llama.param_count() - 128256 * 4096)
    # tied (OPT): the one matrix is looked up and multiplied: counted once, as the head
    opt = load_model("opt-13b")
    assert _flops_per_token(opt) == 2 * (opt.param_count() - opt.embedding_params()
                                         + opt.lm_head_params())
