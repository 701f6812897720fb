"""Mixture-of-experts cost (issue 15 item 2): distinct experts per step, expert weight bytes
and FLOPs from them, expert parallelism's all-to-alls, and the verification/decode ratio."""
import dataclasses
import functools

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost import moe
from simulator.cost.cost_model import CostModel
from simulator.cost.parallelism import Parallelism, expert_parallel_degree
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import model_from_dict
from simulator.scenario import scenario_from_dict

# Qwen/Qwen3-30B-A3B config.json (Hugging Face): 48 layers, hidden 2048, 32 heads, 4 KV heads,
# head_dim 128, 128 experts of moe_intermediate_size 768, num_experts_per_tok 8, vocab 151936,
# untied, bfloat16.  Its dense twin has one MLP of 8 x 768 = 6144: the same active MLP width,
# so the same active size (3.3B, the model card's "3.3B activated").
QWEN = dict(name="qwen3-30b-a3b-shapes", family="qwen3", source="test",
            published_params={"value": 30.5e9, "source": "Qwen3-30B-A3B model card"},
            num_layers=48, hidden_size=2048, num_heads=32, num_kv_heads=4, head_dim=128,
            ffn_size=6144, gated_mlp=True, vocab_size=151936, tied_embeddings=False,
            dtype="bf16", max_context=40960)
MOE = model_from_dict(dict(QWEN, num_experts=128, experts_per_token=8, expert_ffn_size=768),
                      source="test")
DENSE = model_from_dict(dict(QWEN, name="qwen3-dense-twin"), source="test")
# a small MoE with shared experts and leading dense layers (DeepSeek's layout, small sizes)
SMALL = model_from_dict(dict(QWEN, name="small-moe", num_layers=6, hidden_size=512,
                             num_heads=8, num_kv_heads=8, head_dim=64, ffn_size=2048,
                             vocab_size=32000, num_experts=16, experts_per_token=2,
                             shared_experts=1, expert_ffn_size=256, dense_layers=1),
                        source="test")


@functools.cache
def _hw(name: str):
    if name == "h100-flat":  # the device without its kernel shapes: the flat roofline
        return dataclasses.replace(load_profile("h100-sxm"), kernels=None)
    return load_profile(name)


def _routed_distinct(rng, probs: np.ndarray, k: int, tokens: int, trials: int) -> np.ndarray:
    """Monte Carlo: each token picks k distinct experts with inclusion probabilities
    ``probs`` (systematic sampling: points u, u+1, .., u+k-1 on the cumulative sums, each
    p_e <= 1 so every point lands on another expert); distinct experts per trial."""
    edges = np.concatenate(([0.0], np.cumsum(probs)))
    edges[-1] = k  # rounding: the last interval ends at k exactly
    u = rng.random((trials, tokens, 1)) + np.arange(k)
    picks = np.searchsorted(edges, u, side="right") - 1
    E = probs.size
    flat = (picks.reshape(trials, -1) + E * np.arange(trials)[:, None]).ravel()
    return (np.bincount(flat, minlength=trials * E).reshape(trials, E) > 0).sum(axis=1)


@pytest.mark.parametrize("tokens", [1, 2, 4, 16, 64, 256])
def test_distinct_experts_closed_form_against_uniform_routing(tokens):
    # k of E without replacement per token (a random permutation's first k), tokens independent
    E, k, trials = 128, 8, 600
    rng = np.random.default_rng(tokens)
    picks = np.argpartition(rng.random((trials, tokens, E)), k, axis=-1)[..., :k]  # k smallest
    flat = (picks.reshape(trials, -1) + E * np.arange(trials)[:, None]).ravel()
    d = (np.bincount(flat, minlength=trials * E).reshape(trials, E) > 0).sum(axis=1)
    expect = moe.distinct_experts(tokens, E, k)
    se = d.std(ddof=1) / np.sqrt(trials)
    # + 1e-3: at 256 tokens every trial touches all 128 (a miss has probability 8.5e-6 per
    # step in all), so the sample has no spread to measure the 128 - D(256) gap with
    assert abs(d.mean() - expect) <= 4 * se + 1e-3, (d.mean(), expect, se)


@pytest.mark.parametrize("skew", [0.0, 0.8, 1.5])
def test_skewed_routing_formula_against_monte_carlo(skew):
    E, k, trials = 64, 6, 4000
    p = moe.inclusion_probabilities(E, k, skew)
    rng = np.random.default_rng(int(10 * skew))
    for tokens in (1, 3, 20):
        d = _routed_distinct(rng, p, k, tokens, trials)
        expect = moe.distinct_experts(tokens, E, k, p)
        se = max(d.std(ddof=1), 1e-9) / np.sqrt(trials)
        assert abs(d.mean() - expect) <= 4 * se + 1e-9, (skew, tokens, d.mean(), expect)


def test_distinct_experts_limits_and_skew():
    E, k = 256, 8
    assert moe.distinct_experts(1, E, k) == pytest.approx(k, rel=1e-12)  # 1 token: k experts
    assert moe.distinct_experts(0, E, k) == 0.0
    assert moe.distinct_experts(20_000, E, k) == pytest.approx(E, rel=1e-9)  # -> all E
    t = np.arange(1.0, 2000.0)
    d = moe.distinct_experts(t, E, k)
    assert np.all(np.diff(d[:400]) > 0) and np.all(np.diff(d) >= 0)
    assert np.all(d <= E) and np.all(d <= k * t + 1e-9)
    # s = 0 is the closed form; skew concentrates the picks: fewer distinct at every T > 1
    uniform_p = moe.inclusion_probabilities(E, k, 0.0)
    np.testing.assert_allclose(uniform_p, k / E, rtol=1e-12)
    np.testing.assert_allclose(moe.distinct_experts(t, E, k, uniform_p), d, rtol=1e-12)
    for skew in (0.5, 1.0, 2.0):
        p = moe.inclusion_probabilities(E, k, skew)
        assert p.sum() == pytest.approx(k, rel=1e-12) and p.max() <= 1.0
        assert moe.distinct_experts(1, E, k, p) == pytest.approx(k, rel=1e-12)
        assert np.all(moe.distinct_experts(t[1:], E, k, p) < d[1:])
    with pytest.raises(SpecsimError, match="routing_skew"):
        moe.inclusion_probabilities(E, k, -1.0)


def _linear_weight_bytes(model, tp: int = 1) -> float:
    """What a dense forward reads: every matrix but the embedding (weights of norms aside)."""
    norms = (2 * model.num_layers + 1) * model.norm_params()
    return (model.param_count() - model.embedding_params() - norms) * model.dtype_bytes / tp


@pytest.mark.parametrize("model", [MOE, SMALL], ids=lambda m: m.name)
def test_expert_weight_bytes_follow_the_distinct_experts(model):
    cm = CostModel(_hw("h100-sxm"), model)
    # every expert touched: the model's matrices, counted from the spec's parameter counts
    assert cm.weight_bytes_read_per_step == pytest.approx(_linear_weight_bytes(model),
                                                          rel=1e-12)
    expert_bytes = model.expert_params() * model.dtype_bytes * model.moe_layers
    for t in (1, 4, 64):
        missing = model.num_experts - moe.distinct_experts(t, model.num_experts,
                                                           model.experts_per_token)
        assert cm.weight_bytes_read(t) == pytest.approx(
            cm.weight_bytes_read_per_step - missing * expert_bytes, rel=1e-12)
    # FLOPs: 2 T (k + shared) P per MoE layer, plus the router's 2 T h E
    T = 24.0
    ops = {op.name: op for op in cm.breakdown(np.array([T]), np.array([100.0])).ops}
    routed = ops["experts_up"].flops + ops["experts_down"].flops
    assert routed == pytest.approx(2 * T * model.experts_per_token * model.expert_params()
                                   * model.moe_layers, rel=1e-12)
    assert ops["router"].flops == pytest.approx(2 * T * model.hidden_size * model.num_experts
                                                * model.moe_layers, rel=1e-12)
    if model.shared_experts:
        shared = ops["shared_up"].flops + ops["shared_down"].flops
        assert shared == pytest.approx(2 * T * model.shared_experts * model.expert_params()
                                       * model.moe_layers, rel=1e-12)
        assert ops["mlp_up"].flops + ops["mlp_down"].flops == pytest.approx(
            2 * T * model.mlp_params_per_layer() * model.dense_layers, rel=1e-12)


@pytest.mark.parametrize("profile", ["h100-sxm", "h100-flat", "a100-80gb"])
def test_verification_is_dearer_than_decode_on_moe_not_on_dense(profile):
    # issue 15: at batch 1 and small batch a gamma + 1 = 4 token verification touches up to
    # 4x the experts of a 1-token decode (D(4) = 31.1 vs D(1) = 8 of 128), so it costs
    # clearly more; the dense twin's verification is nearly free; at batch 256 the 1024
    # verification tokens and the 256 decode tokens both touch nearly all 128 experts
    # (D(256) = 113.2, D(1024) = 128.0) and the ratio falls back toward 1.
    batches = [1, 4, 256]
    r_moe = moe.verify_decode_ratio(CostModel(_hw(profile), MOE), batches, 4, 1024.0)
    r_dense = moe.verify_decode_ratio(CostModel(_hw(profile), DENSE), batches, 4, 1024.0)
    assert r_moe[0] > 1.5 and r_moe[1] > 1.5, r_moe
    assert r_dense[0] < 1.1 and r_dense[1] < 1.1, r_dense
    assert r_moe[2] < 1.3 and r_moe[2] < r_moe[1] - 0.5, r_moe


def test_expert_parallel_keeps_the_all_reduce():
    # vLLM (fused_moe/config.py): use_all2all_kernels = dp_size > 1 and use_ep, so with one
    # data-parallel rank TP + EP runs no dispatch/combine: every rank holds all the tokens and
    # the MoE output is all-reduced as without EP, two all-reduces a layer either way
    hw = _hw("h100-sxm")
    model = dataclasses.replace(MOE)
    tp = Parallelism(tensor_parallel=4)
    ep = Parallelism(tensor_parallel=4, expert_parallel=4)
    cm_tp, cm_ep = CostModel(hw, model, tp), CostModel(hw, model, ep)
    for t in (1.0, 16.0, 256.0, 2048.0):
        ops_ep = {op.name: op for op in cm_ep.breakdown(np.array([t]), np.array([512.0])).ops}
        ops_tp = {op.name: op for op in cm_tp.breakdown(np.array([t]), np.array([512.0])).ops}
        assert "all_to_all" not in ops_tp and "all_to_all" not in ops_ep
        per_ar = hw.collectives.all_reduce_s(t * model.hidden_size * 2.0, 4)
        for ops in (ops_ep, ops_tp):
            assert ops["all_reduce"].time_s == pytest.approx(2 * model.num_layers * per_ar,
                                                             rel=1e-12)
        # experts spread whole: the same FLOPs and weight bytes per device in expectation
        # (the activations differ: T k / EP rows of whole experts against T k rows of slices)
        for name in ("experts_up", "experts_down"):
            assert ops_ep[name].flops == pytest.approx(ops_tp[name].flops, rel=1e-12)
            if t == 1.0:
                assert ops_ep[name].hbm_bytes == pytest.approx(ops_tp[name].hbm_bytes,
                                                               rel=1e-2)
                # but the busiest EP rank holds more than the mean's share of the experts
                assert ops_ep[name].time_s > ops_tp[name].time_s


def test_all_to_all_collective_convention():
    # nccl-tests PERFORMANCE.md: alltoall busbw = algbw (n-1)/n, S the per-rank buffer; with
    # no measured all-to-all the profile's send/recv prices the (n-1)/n of S that leaves
    # (h200's collectives without their all_to_all block, which holds DeepEP's kernels)
    c = dataclasses.replace(_hw("h200").collectives, all_to_all=())
    for n in (2, 4, 8):
        for s in (4096.0, 1e6, 64e6):
            assert c.all_to_all_s(s, n) == c.send_recv_s(s * (n - 1) / n)
        big = 4e9  # large enough that the latency is negligible
        busbw = big / c.all_to_all_s(big, n) * (n - 1) / n
        assert busbw == pytest.approx(370e9, rel=0.01)  # the send/recv bus bandwidth
    assert c.all_to_all_s(1e6, 1) == 0.0 and c.all_to_all_s(0.0, 8) == 0.0
    assert "derived" in c.basis("all_to_all", 8)
    link = _hw("a100-80gb")
    c2 = dataclasses.replace(link, collectives=None).collectives  # the interconnect formula
    bw, lat = link.interconnect.bandwidth_bytes_per_s, link.interconnect.latency_s
    assert c2.all_to_all_s(1e6, 4) == pytest.approx(lat + 1e6 * 0.75 / bw, rel=1e-12)


def test_expert_parallel_degree_rule():
    assert expert_parallel_degree(True, 8, "t") == 8
    assert expert_parallel_degree(False, 8, "t") == 1
    assert expert_parallel_degree(8, 8, "t") == 8
    with pytest.raises(SpecsimError, match="expert_parallel"):
        expert_parallel_degree(4, 8, "t")
    with pytest.raises(SpecsimError, match="expert_parallel"):
        Parallelism(tensor_parallel=2, expert_parallel=4)
    sc = scenario_from_dict({"parallelism": {"tensor_parallel": 4, "expert_parallel": True},
                             "moe": {"routing_skew": 1.2}}, source="t")
    assert sc.parallelism.expert_parallel == 4 and sc.moe.routing_skew == 1.2
    with pytest.raises(SpecsimError, match="moe.routing_skew"):
        scenario_from_dict({"moe": {"routing_skew": -0.5}}, source="t")
    with pytest.raises(SpecsimError, match="expert_parallel"):  # a dense model has no experts
        CostModel(_hw("h100-sxm"), DENSE, Parallelism(tensor_parallel=2, expert_parallel=2))


def test_routing_skew_makes_verification_cheaper():
    uniform = CostModel(_hw("h100-sxm"), MOE)
    skewed = CostModel(_hw("h100-sxm"), MOE, routing_skew=1.0)
    assert skewed.verify_time(4, 1024, 4) < uniform.verify_time(4, 1024, 4)
    assert skewed.decode_time(1, 1024) == pytest.approx(uniform.decode_time(1, 1024),
                                                        rel=1e-12)  # one token: k experts


@pytest.mark.parametrize("case", ["h100-sxm:1:1", "h100-flat:1:1", "h100-sxm:4:4",
                                  "a100-80gb:2:1"])
@pytest.mark.parametrize("u", [1, 4])
def test_uniform_step_times_bitwise_on_moe(case, u):
    profile, tp, ep = case.split(":")
    model = SMALL if tp == "4" else MOE
    cm = CostModel(_hw(profile), model, Parallelism(tensor_parallel=int(tp),
                                                     expert_parallel=int(ep)))
    rng = np.random.default_rng([int(tp), u])
    for n in (1, 3, 17, 64):
        batches = [rng.integers(0, 6000, n).astype(np.float64) for _ in range(4)]
        sums = np.array([c.sum() for c in batches])
        vector = cm.uniform_step_times(n, u, sums, n * u)
        assert vector is not None
        new = np.full(n, float(u))
        assert np.array_equal(vector, [cm.step_time(new, c) for c in batches])
        assert [cm.uniform_step_time(n, u, s, n * u) for s in sums] == vector.tolist()
        assert [cm.uniform_pricer(n, u, n * u)(s) for s in sums] == vector.tolist()
        assert vector[0] == pytest.approx(cm.breakdown(new, batches[0]).time_s, rel=1e-12)
    # a mixed batch (decodes and a chunk) through the tables and the scalar path alike
    new, ctx = np.array([1.0] * 9 + [300.0]), rng.integers(0, 4000, 10).astype(np.float64)
    scalar = CostModel(cm.hardware, model, cm.parallel, tables=False)
    assert cm.step_time(new, ctx) == pytest.approx(scalar.step_time(new, ctx), rel=1e-12)
    assert cm.step_time(new, ctx) == pytest.approx(cm.breakdown(new, ctx).time_s, rel=1e-12)


def test_single_roofline_keeps_the_collectives_and_offload_streams_experts():
    from simulator.cost.execution import resolve_execution
    hw = _hw("h100-sxm")
    ex = dataclasses.replace(resolve_execution(hw), step_model="single_roofline")
    cm = CostModel(hw, SMALL, Parallelism(tensor_parallel=4, expert_parallel=4), execution=ex)
    ops = {op.name: op for op in cm.breakdown(np.ones(8), np.full(8, 100.0)).ops}
    assert set(ops) == {"step", "all_reduce", "logits_gather"}
    # offloaded weights: the touched experts' share crosses the host link
    off = CostModel(hw, SMALL, Parallelism(offload_fraction=0.5))
    ops = {op.name: op for op in off.breakdown(np.array([4.0]), np.array([10.0])).ops}
    d = moe.distinct_experts(4, SMALL.num_experts, SMALL.experts_per_token)
    up = 2 * SMALL.hidden_size * SMALL.expert_ffn_size * 2  # w13 bytes of one expert
    assert ops["experts_up"].host_bytes == pytest.approx(0.5 * d * up * SMALL.moe_layers)


@pytest.mark.parametrize("case", ["h100-sxm:1:1", "h100-flat:4:4"])
def test_moe_table_entries_are_the_scalar_terms(case):
    from simulator.cost import token_terms
    profile, tp, ep = case.split(":")
    cm = CostModel(_hw(profile), SMALL, Parallelism(tensor_parallel=int(tp),
                                                     expert_parallel=int(ep)))
    for t in (0.0, 1.0, 4.0, 37.0, 1000.0, 3000.0):
        for mode in ("eager", "full"):
            scalar = token_terms.terms_time(token_terms.token_terms(cm, t, cm._layers, True,
                                                                    mode))
            assert cm._tables.layers(t, mode) == pytest.approx(scalar, rel=1e-12, abs=0.0)
