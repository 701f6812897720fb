"""SGLang 0.4.1's DeepSeek-V3 decode as it runs (issue 35 part 4): the extra launches its
code makes per layer, counted here from the listed kernels, and the Triton block-FP8
GEMM's serial K loop, checked in closed form and re-fitted from the cited measurements."""
import dataclasses
from math import ceil

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost import engine_kernels as ek
from simulator.cost import moe_kernels as mk
from simulator.cost.cost_model import CostModel
from simulator.cost.dp_attention import cost_model
from simulator.cost.execution import resolve_execution
from simulator.cost.parallelism import Parallelism
from simulator.cost.spec_catalog import _entry, load_engine
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model

# The launches read in SGLang's DeepSeek code of 0.4.1-0.4.2 (engines.yaml sglang-v0.4 names
# the files), one entry a launch, (kind, what).  python/sglang/srt/layers/quantization/
# fp8_utils.py input_to_float8, called on q_nope^T and on the attention output^T:
INPUT_TO_FLOAT8 = [("other", "x.aminmax()"), ("pointwise", "min_val.abs()"),
                   ("pointwise", "max_val.abs()"), ("pointwise", "torch.maximum"),
                   ("pointwise", ".clamp(min=1e-12)"), ("pointwise", "finfo.max / amax"),
                   ("pointwise", "x * scale"), ("pointwise", ".clamp(min, max)"),
                   ("pointwise", ".to(dtype)"), ("pointwise", ".contiguous() of x^T"),
                   ("pointwise", "scale.float()"), ("pointwise", ".reciprocal()")]
# DeepseekScalingRotaryEmbedding.forward (native PyTorch), is_neox_style False:
ROPE = [("other", "cos_sin_cache[positions]"), ("pointwise", "cos.repeat_interleave(2)"),
        ("pointwise", "sin.repeat_interleave(2)")] + [
    (kind, f"{x}: {what}") for x in ("query", "key") for kind, what in (
        ("pointwise", "x_rot * cos"), ("pointwise", "-x2 (_rotate_gptj)"),
        ("pointwise", "torch.stack((-x2, x1))"), ("pointwise", "* sin"), ("pointwise", "+"))]
# deepseek_v2.py forward_absorb: the MQA inputs assembled, the output flattened
MLA_COPIES = [("pointwise", "q_input[..., :kv_lora_rank] = q_nope_out^T"),
              ("pointwise", "k_input[..., :kv_lora_rank] = v_input"),
              ("pointwise", "q_input[..., kv_lora_rank:] = q_pe"),
              ("pointwise", "k_input[..., kv_lora_rank:] = k_pe"),
              ("pointwise", "attn_bmm_output.transpose(0, 1).flatten(1, 2)")]
# biased_grouped_topk (native PyTorch) and moe_align_block_size's buffer fill
GROUPED_TOPK = [("pointwise", "gating_output.sigmoid()"), ("pointwise", "+ correction_bias"),
                ("other", "topk(2) per group"), ("other", ".sum(dim=-1)"),
                ("other", "topk over groups"), ("pointwise", "torch.zeros_like"),
                ("other", "group_mask.scatter_"), ("pointwise", "expand().reshape() copy"),
                ("pointwise", "score_mask.bool()"), ("pointwise", "~"),
                ("pointwise", "masked_fill"), ("other", "topk over experts"),
                ("other", "scores.gather"), ("other", "topk_weights.sum"),
                ("pointwise", "topk_weights / sum"), ("pointwise", ".to(torch.float32)"),
                ("pointwise", ".to(torch.int32)")]
ALIGN = [("pointwise", "sorted_ids.fill_")]
# what the cost model already prices for every engine: one rope kernel, one routing kernel
GENERIC = {"rope": ("pointwise", 1), "routing": ("other", 1)}


def _count(kernels, kind):
    return sum(1 for k, _ in kernels if k == kind)


def test_decode_counts_are_the_listed_kernels():
    e = load_engine("sglang-v0.4")
    mla = 2 * INPUT_TO_FLOAT8 + ROPE + MLA_COPIES
    moe = GROUPED_TOPK + ALIGN
    assert len(INPUT_TO_FLOAT8) == 12 and len(ROPE) == 13 and len(GROUPED_TOPK) == 17
    assert e.mla_pointwise_kernels == _count(mla, "pointwise") - GENERIC["rope"][1] == 38
    assert e.mla_other_kernels == _count(mla, "other") == 3
    assert e.moe_pointwise_kernels == _count(moe, "pointwise") == 11
    assert e.moe_other_kernels == _count(moe, "other") - GENERIC["routing"][1] == 6
    assert e.fp8_gemm == "triton" and e.split_qkv_a
    assert e.deepep_pointwise_kernels == e.eplb_map_kernels == 0  # no DeepEP in 0.4.1


# The launches read in SGLang's DeepSeek decode of April-June 2025 (engines.yaml sglang-v0.4.5
# names the files): DP attention, DeepEP low latency, DeepGEMM, FA3 MLA.  fp8_kernel.py
# per_tensor_quant_mla_fp8, called on q_nope^T and on the attention output^T:
PER_TENSOR_QUANT_MLA = [("other", "_per_tensor_quant_mla_fp8_stage1 (atomic max)"),
                        ("pointwise", "_per_tensor_quant_mla_fp8_stage2 (quantise)")]
# deepseek_v2.py forward_absorb_core: the bmm output back to [T, H * 128] before o_proj
MLA_045_COPIES = [("pointwise", "attn_bmm_output.transpose(0, 1).flatten(1, 2)")]
# topk.py biased_grouped_topk_gpu: the cast, sgl-kernel's fused gate (the generic routing)
GATE_045 = [("pointwise", "gating_output.to(torch.float32)"), ("other", "moe_fused_gate")]
# token_dispatcher.py dispatch_a and layer.py forward_deepgemm_masked, around DeepEP LL
DEEPEP_LL = [("pointwise", "topk_idx.to(torch.int64)"),
             ("pointwise", "get_col_major_tma_aligned_tensor(down_input_scale)")]
EPLB_MAP = [("other", "partial_logical_to_rank_dispatch_physical_map[topk_ids]")]


def test_sglang_045_decode_counts_are_the_listed_kernels():
    e = load_engine("sglang-v0.4.5")
    mla = 2 * PER_TENSOR_QUANT_MLA + MLA_045_COPIES
    assert e.mla_pointwise_kernels == _count(mla, "pointwise") == 3
    assert e.mla_other_kernels == _count(mla, "other") == 2
    assert e.moe_pointwise_kernels == _count(GATE_045, "pointwise") == 1
    assert e.moe_other_kernels == _count(GATE_045, "other") - GENERIC["routing"][1] == 0
    assert e.deepep_pointwise_kernels == _count(DEEPEP_LL, "pointwise") == 2
    assert e.eplb_map_kernels == _count(EPLB_MAP, "other") == 1
    assert e.fp8_gemm == "deepgemm" and not e.split_qkv_a  # DeepGEMM (JIT), fused qkv_a
    assert e.prefill_attention == "fa3"


# SGLang 0.5.x at TP (engines.yaml sglang-v0.5 names the file): post_load_weights dequantises
# the 128 x 128 block-FP8 kv_b_proj to BF16, so the absorbed path runs torch.bmm twice (the
# second into attn_bmm_output's view, out=...): no per-tensor quantisation, no copy
MLA_05 = [("gemm", "torch.bmm(q_nope^T, w_kc)"), ("gemm", "torch.bmm(attn_output^T, w_vc)")]
# topk.py biased_grouped_topk_gpu: the cast above 16 tokens, the fused gate (with the shared
# expert appended: top-9)
GATE_05 = GATE_045


def test_sglang_05_decode_counts_are_the_listed_kernels():
    e = load_engine("sglang-v0.5")
    assert e.mla_pointwise_kernels == _count(MLA_05, "pointwise") == 0
    assert e.mla_other_kernels == _count(MLA_05, "other") == 0
    assert e.moe_pointwise_kernels == _count(GATE_05, "pointwise") == 1
    assert e.moe_other_kernels == _count(GATE_05, "other") - GENERIC["routing"][1] == 0
    assert e.shared_experts_fusion and e.fp8_gemm == "deepgemm" and not e.split_qkv_a
    assert not e.draft_extend_eager and not e.mixed_chunk  # PR #6606; prefill first


# The launches read in vLLM V0 0.7.x's DeepSeek decode (engines.yaml vllm-v0.7 names the
# files): vllm/attention/backends/mla/utils.py MLACommonImpl.forward, after the native rope
# (ROPE above: vLLM's DeepseekScalingRotaryEmbedding.forward, which SGLang 0.4.1 copied)
V0_MLA_COPIES = [("pointwise", "decode_q_pe[...] = rope's query"),
                 ("pointwise", "decode_k_pe[...] = rope's key"),
                 ("pointwise", "output[num_prefill_tokens:] = _forward_decode(...)")]
# vllm/attention/backends/triton_mla.py TritonMLAImpl._forward_decode
V0_TRITON_DECODE = [("pointwise", "torch.cat([q_nope, q_pe])"), ("pointwise", "torch.zeros o"),
                    ("other", "decode_attention_fwd stage 2 (softmax_reducev)")]


def test_vllm_v0_decode_counts_are_the_listed_kernels():
    e = load_engine("vllm-v0.7")
    mla = ROPE + V0_MLA_COPIES + V0_TRITON_DECODE
    # vLLM's grouped_topk with the correction bias is SGLang 0.4.1's biased one, kernel for
    # kernel (fused_moe.py), and its moe_align_block_size fills sorted_ids the same way
    moe = GROUPED_TOPK + ALIGN
    assert e.mla_pointwise_kernels == _count(mla, "pointwise") - GENERIC["rope"][1] == 16
    assert e.mla_other_kernels == _count(mla, "other") == 2
    assert e.moe_pointwise_kernels == _count(moe, "pointwise") == 11
    assert e.moe_other_kernels == _count(moe, "other") - GENERIC["routing"][1] == 6
    assert e.fp8_gemm == "triton" and e.split_qkv_a
    assert e.deepep_pointwise_kernels == e.eplb_map_kernels == 0  # no DeepEP in V0
    # V0's speculative path (read in 0.7.3, issue 39): its syncs, the proposer's own step and
    # the output processing made synchronous; its launches not counted (test_spec_host.py)
    assert e.verify_kernels == e.draft_prep_kernels == e.host_steps == 0
    assert (e.syncs, e.draft_host_steps, e.sync_output_per_seq_us) == (2, 1, 106.25)
    assert e.method_syncs == (("mtp", 3),)  # its hidden-state mask index after the sampler


def test_vllm_v0_step_adds_exactly_its_counted_launches():
    # against vllm-v0.9 (no engine launches, no K-loop floor): the MLA and gate families
    # are the counted launches at the profile's kinds, one request's latent query a layer
    v0, v1 = _cm("vllm-v0.7"), _cm("vllm-v0.9")
    ones, ctx = np.ones(1), np.full(1, 200.0)
    a = {op.name: op.time_s for op in v0.breakdown(ones, ctx).ops}
    b = {op.name: op.time_s for op in v1.breakdown(ones, ctx).ops}
    roof, m = v0._roof, v0.model
    nb_mla = m.num_heads / 8 * m.kv_lora_rank * 2.0
    mla = 16 * roof.transfer_time(nb_mla, "elementwise") + 2 * roof.transfer_time(nb_mla,
                                                                                  "other")
    assert a["engine_mla_kernels"] == pytest.approx(mla * m.num_layers)
    assert "engine_mla_kernels" not in b and "engine_moe_gate" not in b
    g = v0._lin_roof.gemm_time(1.0, 512, 7168)  # the shared experts' w13: its K loop
    assert a["shared_up"] == pytest.approx(max(g, ek.dense_floor(v0, 1.0, 512, 7168, 1.0))
                                           * m.moe_layers)
    assert a["shared_up"] > b["shared_up"]


# the same tables' 'vllm' column (vLLM's CUTLASS blockwise FP8 GEMM, cutlass_scaled_mm) at
# N = 7168, M = 1-128 (us): K -> time
PR_5820_VLLM_US = {2304: 19.2, 16384: 77.2}


def test_cutlass_step_is_the_cited_vllm_times_over_their_k_steps():
    (k0, t0), (k1, t1) = sorted(PR_5820_VLLM_US.items())
    step = (t1 - t0) * 1e-6 / ((k1 - k0) / 128)  # 58.0 us over 110 steps of 128
    assert ek.CUTLASS_K_STEP_S == pytest.approx(step, rel=1e-12)
    assert round(ek.CUTLASS_K_STEP_S * 1e6, 3) == 0.527


# sgl-project/sglang PR #5820 (2025-04-28), 'main' tables, the 'sglang triton' column (us):
# DeepSeek-V3 (N, K) -> times at batch 1, 8, 16, 32, 64 (as far as read)
PR_5820_TRITON_US = {(3072, 1536): [14.336, 12.032, 11.584, 11.744, 11.680],
                     (512, 7168): [31.616],
                     (7168, 16384): [112.896, 72.800, 67.168, 70.656, 71.072],
                     (24576, 7168): [84.896, 70.304, 76.224, 64.000, 62.944],
                     (32768, 512): [15.232, 13.760, 13.344, 13.152]}


def test_k_step_is_the_fit_of_the_cited_triton_times():
    # one M tile at batch 1-64: wave-steps = ceil(N/128 / 132 SMs) * K/128, closed-form
    # least squares of the medians against them
    x = np.array([ceil(n / 128 / 132) * k / 128 for n, k in PR_5820_TRITON_US])
    y = np.array([np.median(v) for v in PR_5820_TRITON_US.values()])
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    for name in ("h200", "h100-sxm"):
        assert load_profile(name).moe_fp8_triton_k_step_s == pytest.approx(
            round(slope, 3) * 1e-6, abs=1e-12)
    fit = y.mean() + slope * (x - x.mean())
    assert np.all(np.abs(fit / y - 1) < 0.22)  # every median within 21% of the line


def _cm(engine="sglang-v0.4", **spec):
    hw = load_profile("h200")
    host = dataclasses.replace(load_engine(engine), **spec)
    ex = resolve_execution(hw, {"spec": host}, max_num_seqs=256)
    return CostModel(hw, load_model("deepseek-v3"), Parallelism(tensor_parallel=8),
                     execution=ex)


def test_dense_floor_closed_form():
    cm = _cm()
    step, latency = 0.525e-6, cm._roof.kind_rates("gemm")[2]
    # the shared experts' w13 at TP8: N 2 x 2048 / 8 = 512 (4 tiles), K 7168 (56 steps)
    assert ek.dense_floor(cm, 1.0, 512, 7168, 1.0) == pytest.approx(latency + 56 * step)
    # 300 tiles of 128 columns at 64 rows: 3 waves of 132 programs
    assert ek.dense_floor(cm, 64.0, 300 * 128, 1024, 1.0) == pytest.approx(
        latency + 3 * 8 * step)
    # the 16-bit router, the absorbed bmm_fp8, another engine's kernels: no floor
    assert ek.dense_floor(cm, 1.0, 256, 7168, 2.0) == 0.0
    assert ek.dense_floor(cm, 1.0, 512, 7168, 1.0, "kv_b_proj") == 0.0
    assert ek.dense_floor(_cm(fp8_gemm="default"), 1.0, 512, 7168, 1.0) == 0.0


def test_grouped_floor_closed_form():
    cm = _cm()
    step, latency = 0.525e-6, cm._roof.kind_rates("gemm")[2]
    # 8 experts of one row, w13 N 512: 32 tiles in one wave, K 7168; w2 N 7168: 448 tiles,
    # 4 waves of K 256 (2 steps)
    assert float(ek.grouped_floor(cm, 8.0, 8.0, 512, 7168, (16, 64))) == pytest.approx(
        latency + 56 * step)
    assert float(ek.grouped_floor(cm, 8.0, 8.0, 7168, 256, (16, 64))) == pytest.approx(
        latency + 4 * 2 * step)
    assert float(ek.grouped_floor(cm, 8.0, 0.0, 512, 7168, (16, 64))) == 0.0


def test_breakdown_adds_exactly_the_floor_and_the_counted_kernels():
    on, off = _cm(), _cm(fp8_gemm="default")
    ones, ctx = np.ones(1), np.full(1, 200.0)
    a = {op.name: op.time_s for op in on.breakdown(ones, ctx).ops}
    b = {op.name: op.time_s for op in off.breakdown(ones, ctx).ops}
    layers = on.model.moe_layers
    g = on._lin_roof.gemm_time(1.0, 512, 7168)
    assert a["shared_up"] == pytest.approx(max(g, ek.dense_floor(on, 1.0, 512, 7168, 1.0))
                                           * layers)
    assert a["shared_up"] > b["shared_up"] and a["kv_b_proj"] == b["kv_b_proj"]
    assert a["router"] == b["router"]
    # the counted launches at the profile's kinds: pointwise as elementwise, else other
    roof, m = on._roof, on.model
    nb_moe = m.num_experts * 4.0
    gate = 11 * roof.transfer_time(nb_moe, "elementwise") + 6 * roof.transfer_time(nb_moe,
                                                                                   "other")
    assert a["engine_moe_gate"] == pytest.approx(gate * layers)
    nb_mla = m.num_heads / 8 * m.kv_lora_rank * 2.0
    mla = 38 * roof.transfer_time(nb_mla, "elementwise") + 3 * roof.transfer_time(nb_mla,
                                                                                  "other")
    assert a["engine_mla_kernels"] == pytest.approx(mla * m.num_layers)


def test_step_time_agrees_with_breakdown_under_the_engine():
    cm = _cm()
    for n in (1, 8, 32):
        new, ctx = np.ones(n), np.full(n, 300.0)
        assert cm.step_time(new, ctx) == pytest.approx(cm.breakdown(new, ctx).time_s,
                                                       rel=1e-9)
    # a step carrying a prefill chunk: the tables' vectorised path against the scalar one
    new, ctx = np.array([1.0, 1.0, 57.0]), np.array([300.0, 120.0, 0.0])
    assert cm.step_time(new, ctx) == pytest.approx(cm.breakdown(new, ctx).time_s, rel=1e-9)


def test_a_dense_model_and_bf16_weights_are_unchanged():
    hw = load_profile("h100-sxm")
    ex_on = resolve_execution(hw, {"spec": load_engine("sglang-v0.4")})
    ex_off = resolve_execution(hw, {"spec": load_engine("sglang-v0.4.5")})
    m = load_model("llama-3.1-8b")
    new, ctx = np.ones(4), np.full(4, 100.0)
    assert CostModel(hw, m, execution=ex_on).step_time(new, ctx) == \
        CostModel(hw, m, execution=ex_off).step_time(new, ctx)


def test_an_unknown_fp8_gemm_is_refused_by_name():
    with pytest.raises(SpecsimError) as err:
        _entry("x", {"version": "v", "fp8_gemm": {"value": "cublas", "source": "s"}}, "t")
    assert err.value.field == "x.fp8_gemm.value" and "triton" in str(err.value)


def test_vllm_fp8_linear_without_deepgemm_is_refused():
    # the floor is charged in dense_floor's DeepGEMM branch only: elsewhere it would be ignored
    flag = {"value": True, "source": "s"}
    for gemm in (None, "triton"):
        data = {"version": "v", "vllm_fp8_linear": flag}
        if gemm:
            data["fp8_gemm"] = {"value": gemm, "source": "s"}
        with pytest.raises(SpecsimError) as err:
            _entry("x", data, "t")
        assert err.value.field == "x.vllm_fp8_linear" and "deepgemm" in str(err.value.fix)
    ok = _entry("x", {"version": "v", "vllm_fp8_linear": flag,
                      "fp8_gemm": {"value": "deepgemm", "source": "s"}}, "t")
    assert ok.vllm_fp8_linear


def test_dsv3_decode_at_batch_1_within_30_percent_of_sglang_041():
    # must-hold of issue 35: sgl-project/sglang PR #2643 (v0.4.1.post2, 2024-12-29),
    # DeepSeek-V3 --tp 8 (H200, as tests/published/current_cases.py reads it), CUDA graph,
    # batch 1, input 128, output 256: 30.29 output token/s, 33.0 ms an output token (the
    # prefill's share included, as in the prediction: the run's makespan over its tokens)
    from tests.published.harness import run
    got = run("h200", "deepseek-v3", {"name": "none"}, tensor_parallel=8, batch=1,
              engine="sglang", prompt=128, output=256, rounds=2)
    per_token = got.makespan_s / (2 * 256)
    assert abs(per_token / (1 / 30.29) - 1) <= 0.30
    # and the decode step itself (TPOT) sits inside the same band
    assert abs(got.tpot_s / (1 / 30.29) - 1) <= 0.30


def _dp(dispatch: str, eplb: bool, engine: str = "sglang-v0.4.5"):
    """DeepSeek-V3 over 16 H100s with DP attention and EP (SGLang's large-EP decode)."""
    hw = load_profile("h100-sxm")
    ex = resolve_execution(hw, {"spec": load_engine(engine)}, max_num_seqs=256)
    par = Parallelism(tensor_parallel=1, data_parallel_attention=16, expert_parallel=16,
                      moe_dispatch=dispatch, eplb=eplb, redundant_experts=0)
    return cost_model(hw, load_model("deepseek-v3"), par, execution=ex)


def test_deepep_low_latency_routing_family_closed_form():
    # behind DeepEP's low-latency dispatch the routing family is the routing kernel, the
    # down projection's input quantisation (fused with the activation) and the engine's
    # launches around DeepEP (2 pointwise) and EPLB's map (1 gather); no align, no moe_sum,
    # no quantisation of the hidden states (DeepEP's dispatch casts, its combine sums)
    cm, T = _dp("all_to_all", eplb=True), 128.0
    s, roof, b = cm._ep_moe, cm._roof, cm._b
    ids = T * s.k * 12.0
    quant = T * s.k / s.ep * s.down_in * (b + 1.0 + 4.0 / 128)
    want = (roof.transfer_time(T * (s.num_experts * 4.0 + s.k * 8.0), "other")
            + roof.transfer_time(quant, "other")
            + 2 * roof.transfer_time(ids, "elementwise", rows=T)
            + roof.transfer_time(ids, "other", rows=T))
    got = {n: g for n, _, g, _, _ in mk.moe_kernel_terms(cm, T, s, True, True)}
    assert float(got["moe_routing"]) == pytest.approx(float(want), rel=1e-12)
    kernels = {n: k for n, _, _, k, _ in mk.moe_kernel_terms(cm, T, s, True, True)}
    assert kernels["moe_routing"] == 2 + 2 + 1
    # the fused-MoE path keeps its five, plus the map under EPLB, and no DeepEP launches
    assert {n: k for n, _, _, k, _ in mk.moe_kernel_terms(cm, T, s, False, True)}[
        "moe_routing"] == 5 + 1
    assert {n: k for n, _, _, k, _ in mk.moe_kernel_terms(cm, T, s, False, False)}[
        "moe_routing"] == 5


def test_the_dp_step_prices_the_low_latency_family_per_moe_layer():
    cm = _dp("all_to_all", eplb=False)
    ops = {op.name: op.time_s for op in cm.breakdown(np.ones(16 * 64), np.full(1024, 900.0)).ops}
    s = cm._ep_moe
    # each rank routes its own 64 tokens; its experts compute the mean rank's routed rows
    rows = 16 * 64.0 * s.k / s.ep
    fam = {n: g for n, _, g, _, _ in mk.moe_kernel_terms(cm, 64.0, s, True, False, rows)}
    assert ops["moe_routing"] == pytest.approx(float(fam["moe_routing"]) * s.layers, rel=1e-9)


def test_mla_launches_run_on_the_decode_path_only():
    # the absorbed-MLA launches cost one request's bytes whatever the step's tokens: a
    # 16,384-token prefill chunk pays their latency, not 2 GB a layer each
    cm = _cm("sglang-v0.4.5")
    one = {n: g for n, _, g, _, _ in mk.small_kernel_terms(cm, 1.0)}
    big = {n: g for n, _, g, _, _ in mk.small_kernel_terms(cm, 16384.0)}
    assert float(big["engine_mla_kernels"]) == pytest.approx(float(one["engine_mla_kernels"]))
    assert float(big["engine_moe_gate"]) > float(one["engine_moe_gate"])  # every token's
