"""``mtp``: k sequential passes of the target's MTP module(s), module reuse, the memory it
holds, per-position acceptance from a measured curve, bad input."""
import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.acceptance import acceptance_from_config
from simulator.cost.cost_model import CostModel
from simulator.cost.drafting import OperatorPrices
from simulator.cost.parallelism import Parallelism
from simulator.engine.plan import BatchView
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model, model_from_dict
from simulator.policies.base import PolicyContext
from simulator.policies.mtp import MtpSpeculation, module_for_pass
from simulator.policies.registry import Adaptive
from simulator.scenario import scenario_from_dict
from simulator.simulate import build_deployment, simulate
from tests.helpers import SHARED

HW = load_profile("h200")
# a small MoE with one MTP module, DeepSeek-like in structure (a dense first layer, shared
# and routed experts, num_nextn_predict_layers 1); not a published model
TINY = {"name": "tiny-moe-mtp", "family": "test", "source": "test",
        "published_params": {"value": 1e9, "source": "test"}, "num_layers": 4,
        "hidden_size": 1024, "num_heads": 8, "num_kv_heads": 8, "head_dim": 128,
        "ffn_size": 4096, "gated_mlp": True, "vocab_size": 32000, "tied_embeddings": False,
        "dtype": "bf16", "max_context": 8192, "num_experts": 16, "experts_per_token": 2,
        "expert_ffn_size": 512, "shared_experts": 1, "dense_layers": 1, "mtp_modules": 1}
TARGET = model_from_dict(TINY, source="test")
CURVE = SHARED / "traces" / "acceptance" / "dsv4_mtp.yaml"
# the file's deepseek-v4-pro AL(k), k = 1..4 (InferenceX, SPEED-Bench, vLLM MTP on B300: the
# header of ../shared/traces/acceptance/dsv4_mtp.yaml)
AL = {"thinking_on": {1: 1.79, 2: 2.27, 3: 2.49, 4: 2.54},
      "thinking_off": {1: 1.92, 2: 2.61, 3: 2.97, 4: 3.00}}


def make(params=None, target=TARGET, acceptance=None, tp=1):
    p = MtpSpeculation.parse_params(params or {}, source="test")
    acc = acceptance or acceptance_from_config({"model": "iid", "alpha": 0.8}, source="t")
    ctx = PolicyContext(target_cost=CostModel(HW, target, Parallelism(tensor_parallel=tp)),
                        target_model=target, acceptance=acc)
    return MtpSpeculation(p, ctx)


def batch(n, context=256):
    return BatchView(request_ids=np.arange(n), context=np.full(n, context, np.int64),
                     generated=np.ones(n, np.int64), output_len=np.full(n, 10**6),
                     prompt_len=np.full(n, context), batch_size=n, now_s=0.0)


def model_file(tmp_path, data=TINY):
    import yaml
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("name,tp", [("tiny", 1), ("deepseek-v3", 8)])
def test_k3_with_one_module_costs_three_module_passes(name, tp):
    target = TARGET if name == "tiny" else load_model(name)
    assert target.mtp_modules == 1  # DeepSeek-V3: num_nextn_predict_layers 1
    pol = make({"num_speculative_tokens": 3}, target=target, tp=tp)
    assert pol.pass_modules == [0, 0, 0]
    # priced independently: a one-layer model of the target's shapes (its MoE layer) under
    # the target's execution and sharding, inside the target's step; eh_proj (2h -> h) = two
    # h x h linears
    tcost = CostModel(HW, target, Parallelism(tensor_parallel=tp))
    layer = dataclasses.replace(target, num_layers=1, dense_layers=0, mtp_modules=0)
    assert layer.moe_layers == 1
    cm = CostModel(tcost.hardware, layer, Parallelism(tensor_parallel=tp),
                   execution=tcost.execution, host=not tcost.execution.captured_draft_loop)
    square = OperatorPrices(cm).square_linear_s
    ctx, reread = np.array([100.0, 300.0]), np.array([3.0, 1.0])
    one = np.ones(2)
    # pass 0 re-reads the accepted tokens (not yet in the module's KV), passes 1 and 2 add
    # one token each at the next positions
    expected = cm.step_time(reread, ctx - (reread - 1), one) + 2 * square(4) \
        + cm.step_time(one, ctx + 1, one) + 2 * square(2) \
        + cm.step_time(one, ctx + 2, one) + 2 * square(2)
    assert pol.draft_time(ctx, reread) == pytest.approx(expected, rel=1e-12)
    # and three passes cost three times one pass where every pass has the same shape
    flat = make({"num_speculative_tokens": 1}, target=target, tp=tp)
    assert pol.draft_time(ctx) == pytest.approx(3 * flat.draft_time(ctx), rel=2e-3)


def test_more_passes_than_modules_reuse_them():
    # vLLM, deepseek_mtp.py: current_step_idx = spec_step_idx % num_mtp_layers
    assert [module_for_pass(j, 1) for j in range(4)] == [0, 0, 0, 0]
    assert [module_for_pass(j, 2) for j in range(3)] == [0, 1, 0]
    two = dataclasses.replace(TARGET, mtp_modules=2)
    assert make({"num_speculative_tokens": 3}, target=two).pass_modules == [0, 1, 0]


def test_memory_holds_the_trained_modules_not_one_per_pass():
    p1 = MtpSpeculation.parse_params({"num_speculative_tokens": 1}, source="t")
    p5 = MtpSpeculation.parse_params({"num_speculative_tokens": 5}, source="t")
    (w1,), (kv1,) = MtpSpeculation.memory_models(p1, None, TARGET)
    (w5,), (kv5,) = MtpSpeculation.memory_models(p5, None, TARGET)
    # one module: a MoE layer + eh_proj 2h x h + 3 norms (DeepSeek-V3 section 2.2), bf16
    h = TARGET.hidden_size
    module = TARGET.layer_params(moe=True) + 2 * h * h + 3 * h
    assert w1.weight_bytes() == w5.weight_bytes() == module * 2
    # one layer of K and V: 2 x 8 KV heads x 128 x 2 bytes
    assert kv1.kv_bytes_per_token() == kv5.kv_bytes_per_token() == 2 * 8 * 128 * 2
    two = dataclasses.replace(TARGET, mtp_modules=2)
    (w2,), (kv2,) = MtpSpeculation.memory_models(p5, None, two)
    assert w2.weight_bytes() == 2 * module * 2
    assert kv2.kv_bytes_per_token() == 2 * kv1.kv_bytes_per_token()
    # DeepSeek-V3's one module, FP8 weights (1 byte), its KV the MLA latent: kv_lora_rank 512
    # + qk_rope_head_dim 64 elements per token per layer (DeepSeek-V2, arXiv 2405.04434,
    # section 2.1.2 and Table 1: (d_c + d_h^R) l elements), 16-bit by default
    ds = load_model("deepseek-v3")
    (w,), (kv,) = MtpSpeculation.memory_models(p5, None, ds)
    assert w.weight_bytes() == ds.mtp_module_params() * 1
    assert kv.kv_bytes_per_token() == (512 + 64) * 2


def test_the_deployment_plans_the_modules_and_their_kv(tmp_path):
    sc = scenario_from_dict({"hardware": "h200", "target": model_file(tmp_path), "draft": None,
                             "policy": {"name": "mtp", "num_speculative_tokens": 4},
                             "workload": {"trace": "default", "max_requests": 5}},
                            source="test")
    dep = build_deployment(sc)
    h = TARGET.hidden_size
    module = TARGET.layer_params(moe=True) + 2 * h * h + 3 * h
    assert dep.memory.weight_bytes == pytest.approx(TARGET.weight_bytes() + 2 * module)
    assert dep.memory.kv_bytes_per_token == pytest.approx(
        TARGET.kv_bytes_per_token() + 2 * 8 * 128 * 2)
    assert dep.max_verify_tokens == 5


def test_the_first_pass_rereads_what_the_target_accepted():
    pol = make({"num_speculative_tokens": 2})
    b = batch(2)
    before = pol.propose(b, np.random.default_rng(0))
    pol.observe(before, b, np.array([2, 0]), 0.01)
    after = pol.propose(b, np.random.default_rng(0)).draft_time_s
    assert after > before.draft_time_s
    assert after == pytest.approx(pol.draft_time(b.context.astype(float), np.array([3., 1.])))


def curve_policy(k, mode="thinking_off"):
    if not CURVE.exists():
        pytest.skip("../shared/traces/acceptance/dsv4_mtp.yaml is absent")
    return make({"num_speculative_tokens": k, "acceptance": {
        "model": "curve", "path": str(CURVE), "key": f"deepseek-v4-pro/{mode}"}})


@pytest.mark.parametrize("mode,k", [("thinking_on", k) for k in (1, 2, 3, 4)]
                         + [("thinking_off", k) for k in (1, 2, 3)])
def test_per_position_acceptance_reproduces_the_curve(mode, k):
    pol = curve_policy(k, mode)
    # analytically, within 1% of the measured AL(k) (the fit over all 8 gammas is exact at
    # these k: the increments up to k are non-increasing and the later ones pool below them)
    assert 1 + pol.expected_accepted() == pytest.approx(AL[mode][k], rel=0.01)
    # sampled: 200,000 verifications; accepted + 1 has sd <= 1.5, so the mean's standard
    # error is <= 0.0034, a fifth of the 1% tolerance (>= 0.0179)
    n = 200_000
    b = batch(n)
    plan = pol.propose(b, np.random.default_rng(k))
    got = pol.accept(plan, b, np.random.default_rng(k))
    assert got.min() >= 0 and got.max() <= k
    assert (got + 1).mean() == pytest.approx(AL[mode][k], rel=0.01)
    assert (got + 1).mean() == pytest.approx(1 + pol.expected_accepted(), abs=5 * 0.0034)


def test_the_thinking_off_curve_is_fitted_across_all_its_gammas():
    # thinking_off's increments from k = 4 are 0.03, 0.10, 0.06, -0.16, 0.11: the
    # non-increasing least-squares fit pools 0.03 and 0.10 to 0.065, so the model's AL(4) is
    # 1 + 0.92 + 0.69 + 0.36 + 0.065 = 3.035, 1.2% above the measured 3.00 (the measurement
    # itself wobbles by more: AL(6) 3.16, AL(7) 3.00)
    pol = curve_policy(4)
    assert 1 + pol.expected_accepted() == pytest.approx(3.035, rel=1e-12)


def test_a_simulation_reproduces_the_curve(tmp_path):
    if not CURVE.exists():
        pytest.skip("../shared/traces/acceptance/dsv4_mtp.yaml is absent")
    sc = scenario_from_dict({
        "hardware": "h200", "target": model_file(tmp_path), "draft": None, "seed": 3,
        "policy": {"name": "mtp", "num_speculative_tokens": 3},
        "acceptance": {"model": "curve", "path": str(CURVE),
                       "key": "deepseek-v4-pro/thinking_off"},
        "workload": {"synthetic": {
            "num_requests": 64, "arrival": {"process": "poisson", "rate_per_s": 100},
            "prompt": {"dist": "fixed", "tokens": 128},
            "output": {"dist": "fixed", "tokens": 2000}}}}, source="test")
    first, second = simulate(sc).summary(), simulate(sc).summary()
    assert first["num_accepted_tokens"] == second["num_accepted_tokens"]  # same seed
    # mean accepted + 1 per verification over about 43,000 verifications: accepted + 1 has
    # sd 0.95 at k = 3 (P = 0.08, 0.23, 0.33, 0.36), so the standard error is 0.0046 and 1%
    # (0.0297) is 6.5 of them
    assert first["num_drafts"] > 40_000
    assert first["mean_acceptance_length"] == pytest.approx(AL["thinking_off"][3], rel=0.01)


def test_same_seed_same_acceptance():
    pol = make({"num_speculative_tokens": 3})
    b = batch(64)
    plan = pol.propose(b, np.random.default_rng(0))
    a = pol.accept(plan, b, np.random.default_rng(7))
    assert np.array_equal(a, pol.accept(plan, b, np.random.default_rng(7)))


def test_a_target_without_mtp_modules_is_refused():
    dense = dataclasses.replace(TARGET, mtp_modules=0, name="dense-no-mtp")
    p = MtpSpeculation.parse_params({}, source="t")
    for call in (lambda: MtpSpeculation.memory_models(p, None, dense),
                 lambda: make({}, target=dense)):
        with pytest.raises(SpecsimError) as err:
            call()
        assert "dense-no-mtp" in str(err.value) and "mtp_modules" in str(err.value)
    with pytest.raises(SpecsimError, match="num_speculative_tokens"):
        MtpSpeculation.parse_params({"num_speculative_tokens": 0}, source="t")


def test_adaptive_can_wrap_mtp_and_eagle3():
    assert {"mtp", "eagle3"} <= set(Adaptive.BASES)


def test_the_module_is_sharded_as_the_target_is():
    ds = load_model("deepseek-v3")
    p = MtpSpeculation.parse_params({"num_speculative_tokens": 2}, source="t")
    acc = acceptance_from_config({"model": "iid", "alpha": 0.8}, source="t")
    for parallel, (tp, ep) in [(Parallelism(tensor_parallel=8, expert_parallel=8), (8, 8)),
                               (Parallelism(tensor_parallel=8, pipeline_parallel=2), (8, 1)),
                               # replicated on every rank (vLLM's draft_tensor_parallel_size
                               # 1): its experts cannot be spread over 8 ranks either
                               (Parallelism(tensor_parallel=8, expert_parallel=8,
                                            draft_tensor_parallel=1), (1, 1))]:
        pol = MtpSpeculation(p, PolicyContext(target_cost=CostModel(HW, ds, parallel),
                                              target_model=ds, acceptance=acc))
        got = pol.cost.parallel
        assert (got.tensor_parallel, got.expert_parallel, got.pipeline_parallel) == (tp, ep, 1)
