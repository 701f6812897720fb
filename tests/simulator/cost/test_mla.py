"""Multi-head latent attention (issue 15 item 2): KV bytes of the latent, whole on every TP
rank; the linears' split; absorbed decode and expanded prefill attention work."""
import dataclasses
import math

import numpy as np
import pytest

from hardware.profile import GIB, load_profile
from simulator.cost import mla
from simulator.cost.cost_model import CostModel
from simulator.cost.memory_plan import activation_bytes, plan_memory
from simulator.cost.parallelism import Parallelism
from simulator.models.spec import model_from_dict

# deepseek-ai/DeepSeek-V3 config.json (Hugging Face): 61 layers, hidden 7168, 128 heads,
# q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128,
# v_head_dim 128, 256 routed + 1 shared experts of 2048, 8 per token, first_k_dense_replace 3
# (intermediate_size 18432), vocab 129280; FP8 weights.  Stored with bf16 weights here so
# that the attention checks run on any device.
DSV3 = dict(name="deepseek-v3-shapes", family="deepseek", source="test",
            published_params={"value": 671e9, "source": "DeepSeek-V3 report abstract"},
            num_layers=61, hidden_size=7168, num_heads=128, num_kv_heads=128, head_dim=128,
            ffn_size=18432, gated_mlp=True, vocab_size=129280, tied_embeddings=False,
            dtype="bf16", max_context=163840, num_experts=256, experts_per_token=8,
            shared_experts=1, expert_ffn_size=2048, dense_layers=3, kv_lora_rank=512,
            q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128)
MODEL = model_from_dict(DSV3, source="test")
# DeepSeek-V2-Lite's layout: no q latent (q_lora_rank 0), 16 heads (config.json)
LITE = model_from_dict(dict(DSV3, name="mla-no-q-latent", num_layers=4, hidden_size=2048,
                            num_heads=16, num_kv_heads=16, ffn_size=10944, num_experts=64,
                            experts_per_token=6, shared_experts=2, expert_ffn_size=1408,
                            dense_layers=1, q_lora_rank=0, vocab_size=102400),
                       source="test")
H200 = load_profile("h200")
FLAT = dataclasses.replace(H200, kernels=None)


def test_kv_bytes_per_token_are_the_published_latent():
    # DeepSeek-V2 paper (arXiv 2405.04434) Table 1: MLA caches (d_c + d_h^R) l = (512 + 64) l
    # elements per token, i.e. 576 a layer; with DeepSeek-V3's 61 layers in bf16:
    assert MODEL.kv_bytes_per_token() == 576 * 61 * 2 == 70_272
    fp8 = dataclasses.replace(MODEL, kv_cache_dtype="fp8")
    assert fp8.kv_bytes_per_token() == 576 * 61
    # against a GQA cache of the same heads: 2 x 128 heads x 128 dims = 32768 a layer
    assert 2 * 128 * 128 / 576 > 50


def test_kv_capacity_on_h200_holds_the_whole_latent_on_every_rank():
    # 8 x H200 at TP 8, 90% of memory: weights / 8 per device but the replicated ones (the
    # latent down-projections q_a and kv_a, 61 x 7168 x (1536 + 512 + 64) FP8, and the router,
    # 58 x 7168 x 256 at 16 bits, whole on every rank); the latent NOT divided by 8
    fp8 = dataclasses.replace(MODEL, dtype="fp8")
    par = Parallelism(tensor_parallel=8)
    plan = plan_memory(H200, fp8, par, gpu_memory_utilization=0.9, block_size=64,
                       max_batched_tokens=8192, logits_tokens=256)
    assert plan.kv_bytes_per_token == 70_272
    usable = 0.9 * H200.memory_bytes
    down, router = 61 * 7168 * (1536 + 512 + 64), 58 * 7168 * 256
    weights = (fp8.param_count() - down - router) * 1 / 8 + down * 1 + router * 2
    assert plan.weight_bytes == weights
    budget = usable - weights - activation_bytes(fp8, par, 8192, 256)
    assert plan.kv_blocks == math.floor(budget / (70_272 * 64))
    # by hand: (0.9 x 141 GiB - 671e9 x 1 B / 8 - 0.6 GB) / 70,272 B = 0.74 million tokens;
    # a 128-head MHA cache (2 x 128 x 128 x 2 B / 8 a layer) would hold 7x fewer
    assert 0.70e6 < plan.kv_tokens < 0.78e6, plan.kv_tokens
    assert plan.capacity_bytes == 141 * GIB
    # a GQA model's KV is divided by the TP ranks as before
    gqa = model_from_dict(dict(DSV3, name="gqa", kv_lora_rank=0, q_lora_rank=0,
                               qk_rope_head_dim=0, v_head_dim=0, num_kv_heads=8),
                          source="test")
    assert plan_memory(H200, dataclasses.replace(gqa, dtype="fp8"), par).kv_bytes_per_token \
        == gqa.kv_bytes_per_token() / 8


@pytest.mark.parametrize("model", [MODEL, LITE], ids=lambda m: m.name)
def test_mla_linears_sum_to_the_attention_parameters(model):
    ops = mla.linears(model, 1)
    assert sum(w for _, w, _, _ in ops) + mla.norm_params(model) \
        == model.attention_params_per_layer()
    names = [name for name, *_ in ops]
    # vLLM runs q_a_proj and kv_a_proj_with_mqa as one GEMM (fused_qkv_a_proj) with a q latent
    assert names[:2] == (["fused_qkv_a_proj", "q_b_proj"] if model.q_lora_rank
                         else ["q_proj", "kv_a_proj"])
    # under TP the replicated latent projections stay whole, the rest splits by heads
    by_name = {name: w for name, w, _, _ in ops}
    split = {name: w for name, w, _, _ in mla.linears(model, 8)}
    for name in by_name:
        replicated = name in ("fused_qkv_a_proj", "kv_a_proj")
        assert split[name] == pytest.approx(by_name[name] / (1 if replicated else 8))


def _attention(cm, new, ctx):
    return next(op for op in cm.breakdown(np.asarray(new, float), np.asarray(ctx, float)).ops
                if op.name == "attention")


@pytest.mark.parametrize("tp", [1, 8])
def test_decode_attention_is_the_absorbed_form(tp):
    cm = CostModel(FLAT, MODEL, Parallelism(tensor_parallel=tp))
    heads, L, R, layers = 128 / tp, 512, 64, 61
    ctx = np.array([1000.0, 4000.0, 17.0])
    op = _attention(cm, np.ones(3), ctx)
    # FlashMLA / DeepSeek-V2 appendix: per query-key pair and head 2 (L + R) + 2 L FLOPs,
    # the cached latent (L + R) read once per request, not divided by TP
    pairs = (ctx + 1.0).sum()
    assert op.flops == pytest.approx(layers * heads * (2 * (L + R) + 2 * L) * pairs, rel=1e-12)
    q_io = 3 * heads * (L + R + L) * 2
    assert op.hbm_bytes == pytest.approx(layers * ((ctx + 1).sum() * (L + R) * 2 + q_io),
                                         rel=1e-12)
    # verification widths take the decode path too (vLLM sends 1 + num_speculative_tokens)
    ver = _attention(cm, np.full(3, 4.0), ctx)
    assert ver.flops == pytest.approx(layers * heads * (2 * (L + R) + 2 * L)
                                      * (4 * (ctx + 2.5)).sum(), rel=1e-12)


def test_prefill_attention_is_the_expanded_form():
    cm = CostModel(FLAT, MODEL, Parallelism(tensor_parallel=8))
    heads, L, P, R, V, layers = 16, 512, 128, 64, 128, 61
    n, c = 512.0, 3000.0
    op = _attention(cm, [n], [c])
    # per pair and head 2 (P + R) + 2 V (causal: n (c + (n+1)/2) pairs), plus kv_b
    # up-projecting the c cached latents to per-head K and V: 2 L heads (P + V) each
    pairs = n * (c + (n + 1) / 2)
    expect = heads * (2 * (P + R) + 2 * V) * pairs + 2 * L * heads * (P + V) * c
    assert op.flops == pytest.approx(layers * expect, rel=1e-12)
    # the absorbed form would cost more FLOPs on a long chunk: why prefill expands
    assert heads * (2 * (L + R) + 2 * L) * pairs > expect


def test_decode_reads_the_latent_once_per_request():
    # 16 decodes at 8k context: attention bytes are the latent (576 x 2 B a token a layer),
    # the same on every TP rank; a GQA cache of 8 KV heads would be 2 x 8 x 128 x 2 / TP
    ctx = np.full(16, 8192.0)
    one = _attention(CostModel(FLAT, MODEL), np.ones(16), ctx)
    eight = _attention(CostModel(FLAT, MODEL, Parallelism(tensor_parallel=8)), np.ones(16), ctx)
    kv = 61 * 16 * 8193 * 576 * 2
    assert one.hbm_bytes > kv and eight.hbm_bytes > kv
    assert (eight.hbm_bytes - kv) == pytest.approx((one.hbm_bytes - kv) / 8, rel=1e-12)


@pytest.mark.parametrize("profile", ["h200", "h200-flat"])
@pytest.mark.parametrize("u", [1, 4, 40])
def test_uniform_step_times_bitwise_on_mla(profile, u):
    hw = FLAT if profile == "h200-flat" else H200
    cm = CostModel(hw, LITE, Parallelism(tensor_parallel=2))
    rng = np.random.default_rng(u)
    checked = 0
    for n in (1, 5, 33):
        batches = [rng.integers(0, 6000, n).astype(np.float64) for _ in range(3)]
        vector = cm.uniform_step_times(n, u, np.array([c.sum() for c in batches]), n * u)
        new = np.full(n, float(u))
        if vector is None:  # the roof may switch with the context: the general path
            assert cm.step_time(new, batches[0]) == pytest.approx(
                cm.breakdown(new, batches[0]).time_s, rel=1e-12)
            continue
        checked += 1
        assert np.array_equal(vector, [cm.step_time(new, c) for c in batches])
        assert vector[0] == pytest.approx(cm.breakdown(new, batches[0]).time_s, rel=1e-12)
    assert checked or u == 40
    assert cm.chain_decode_time(np.array([100.0, 2000.0]), 5) == pytest.approx(
        sum(cm.step_time(np.ones(2), np.array([100.0, 2000.0]) + j) for j in range(5)),
        rel=1e-12)


@pytest.mark.parametrize("causal,overhead", [(True, 0.0), (True, 96.0), (False, 0.0)])
def test_a_batch_of_decode_forms_is_priced_as_beside_a_prefill(causal, overhead):
    # every request of at most DECODE_MAX_QUERY tokens (verifications, draft forwards) takes
    # the absorbed form's coefficients as scalars: elementwise the same floats each request
    # gets in a batch that also holds a prefill chunk (np.where's arrays of them)
    shape = mla.MlaShape.of(MODEL, 8, 2.0, 2.0)
    rng = np.random.default_rng(5)
    new = rng.integers(1, mla.DECODE_MAX_QUERY + 1, (4, 6)).astype(float)
    ctx = rng.integers(0, 9000, (4, 6)).astype(float)
    alone = shape.arrays(new, ctx, causal, overhead)
    mixed = shape.arrays(np.concatenate([new, [[512.0] * 6]]),
                         np.concatenate([ctx, [[3000.0] * 6]]), causal, overhead)
    for got, want in zip(alone, mixed):
        assert got.tolist() == want[:-1].tolist()
