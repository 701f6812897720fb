"""``eagle`` and ``eagle2``: the one-layer draft's cost and memory, EAGLE-2's tree, bad input."""
import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.acceptance import acceptance_from_config
from simulator.cost.cost_model import CostModel
from simulator.engine.plan import BatchView
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.policies.base import PolicyContext
from simulator.policies.eagle import Eagle2Speculation, EagleSpeculation
from simulator.scenario import load_scenario, parse_policy
from simulator.simulate import build_deployment, simulate

HW = load_profile("a100-40gb")
VICUNA = load_model("vicuna-7b")
COV = [0.6, 0.75, 0.82, 0.86, 0.88]


def topk():
    return acceptance_from_config({"model": "tree_topk", "coverage": [COV]})


def make(cls, params=None, acceptance=None, target=VICUNA, hw=HW):
    p = cls.parse_params(params or {}, source="test")
    ctx = PolicyContext(target_cost=CostModel(hw, target), target_model=target,
                        acceptance=topk() if acceptance is None else acceptance)
    return cls(p, ctx)


def batch(n, context=256):
    return BatchView(request_ids=np.arange(n), context=np.full(n, context, np.int64),
                     generated=np.ones(n, np.int64), output_len=np.full(n, 10**6),
                     prompt_len=np.full(n, context), batch_size=n, now_s=0.0)


def test_a_draft_step_costs_one_layer_plus_the_lm_head():
    # plain roofline, batch 1, short context: memory-bound, so time ratio = bytes ratio
    hw = HW.plain_roofline()
    pol = make(EagleSpeculation, {"num_speculative_tokens": 1}, hw=hw)
    h = VICUNA.hidden_size
    draft_params = VICUNA.layer_params() + VICUNA.lm_head_params() + 2 * h * h  # + fc
    target_params = 32 * VICUNA.layer_params() + VICUNA.lm_head_params()
    c = pol.draft_time(np.array([16.0])) / CostModel(hw, VICUNA).decode_time(1, 16)
    assert c == pytest.approx(draft_params / target_params, rel=0.03)
    assert 0.04 < c < 0.07


def test_the_draft_rereads_what_the_target_accepted():
    pol = make(EagleSpeculation)
    b = batch(2)
    before = pol.propose(b, np.random.default_rng(0))
    pol.observe(before, b, np.array([3, 0]), 0.01)
    after = pol.propose(b, np.random.default_rng(0)).draft_time_s
    assert after > before.draft_time_s
    assert after == pytest.approx(pol.draft_time(b.context.astype(float), np.array([4.0, 1.0])))


def test_memory_plan_holds_the_layer_and_its_kv_cache():
    dep = build_deployment(load_scenario("workloads/scenarios/eagle.yaml"))
    layer = load_model("eagle-vicuna-7b")
    kv = lambda layers: 2 * layers * 4096 * 2           # K and V, fp16, per token
    assert dep.memory.kv_bytes_per_token == kv(32) + kv(1)
    assert dep.memory.weight_bytes == pytest.approx(VICUNA.weight_bytes() + layer.weight_bytes())


def test_eagle2_tree_in_closed_form():
    acc = acceptance_from_config({"model": "sequoia", "rates": [0.7, 0.5]})
    pol = make(Eagle2Speculation, {"speculative_num_steps": 2, "speculative_eagle_topk": 2,
                                   "speculative_num_draft_tokens": 4}, acc)
    # depth 1: .7 and .3 * .5 = .15; depth 2 under the first: .49, .105; keep the best 3
    assert pol.tree.parents.tolist() == [-1, 0, -1]
    assert pol.expected_accepted() == pytest.approx(0.7 + 0.49 + 0.15, rel=1e-12)
    assert pol.max_verify_tokens == 4


def test_eagle2_tree_accepts_more_than_the_chain_of_the_same_draft():
    chain = make(EagleSpeculation, {"num_speculative_tokens": 5})
    assert chain.expected_accepted() == pytest.approx(sum(0.6 ** d for d in range(1, 6)))
    one = make(Eagle2Speculation, {"speculative_eagle_topk": 1,
                                   "speculative_num_draft_tokens": 6})
    assert one.tree.is_chain and one.expected_accepted() == pytest.approx(
        chain.expected_accepted())
    tree = make(Eagle2Speculation)                      # 5 steps, top-4, 16 tokens
    assert tree.tree.num_nodes == 15 and tree.tree.max_depth <= 5
    assert tree.expected_accepted() > chain.expected_accepted() + 0.2
    b = batch(30000)
    got = tree.accept(tree.propose(b, np.random.default_rng(0)), b, np.random.default_rng(5))
    assert abs(got.mean() - tree.expected_accepted()) < 4 * got.std() / np.sqrt(got.size)


def test_eagle2_drafting_is_nearly_free_to_widen_at_batch_one():
    ctx = np.array([256.0])
    chain = make(EagleSpeculation, {"num_speculative_tokens": 5}).draft_time(ctx)
    wide = make(Eagle2Speculation).draft_time(ctx)      # 4 tokens per forward after the first
    assert chain < wide < 1.1 * chain


@pytest.mark.parametrize("params, field", [
    ({"speculative_num_steps": 5, "speculative_num_draft_tokens": 5},
     "policy.speculative_num_draft_tokens"),
    ({"speculative_num_steps": 2, "speculative_eagle_topk": 2,
      "speculative_num_draft_tokens": 8}, "policy.speculative_num_draft_tokens"),
    ({"speculative_eagle_topk": 0}, "policy.speculative_eagle_topk"),
    ({"speculative_depth": 3}, "policy.speculative_depth"),
])
def test_bad_eagle2_parameters_name_the_field(params, field):
    with pytest.raises(SpecsimError) as err:
        parse_policy({"name": "eagle2", **params}, "test")
    assert field in str(err.value)


@pytest.mark.parametrize("params, field", [
    ({"tree": [2, 0]}, "policy.tree[1]"),
    ({"tree": [2, 2], "num_speculative_tokens": 4}, "policy.num_speculative_tokens"),
    ({"choices": [[0], [0, 0]], "gamma": 2}, "policy.gamma"),
    ({"choices": [[1]]}, "policy.choices"),
    ({"width": 2}, "policy.width"),
])
def test_bad_eagle_parameters_name_the_field(params, field):
    with pytest.raises(SpecsimError) as err:
        parse_policy({"name": "eagle", **params}, "test")
    assert field in str(err.value)


def test_bad_deployments_name_the_field():
    iid = acceptance_from_config({"model": "iid", "alpha": 0.8})
    assert make(EagleSpeculation, acceptance=iid).tree.is_chain   # a chain needs no tree model
    with pytest.raises(SpecsimError) as err:
        make(EagleSpeculation, {"tree": [2, 1]}, iid)
    assert err.value.field == "acceptance.model"
    for acc in (iid, acceptance_from_config({"model": "token_level"})):
        with pytest.raises(SpecsimError) as err:
            make(Eagle2Speculation, acceptance=acc)
        assert err.value.field == "acceptance.model"
    with pytest.raises(SpecsimError) as err:
        make(Eagle2Speculation, {"speculative_eagle_topk": 6,
                                 "speculative_num_draft_tokens": 20})
    assert err.value.field == "policy.speculative_eagle_topk"
    with pytest.raises(SpecsimError) as err:
        make(EagleSpeculation, target=load_model("opt-13b"))
    assert err.value.field == "policy.model"
    with pytest.raises(SpecsimError, match="trained on vicuna-13b"):
        make(EagleSpeculation, {"model": "eagle-vicuna-13b"})


@pytest.mark.parametrize("name", ["eagle", "eagle2"])
def test_shipped_scenarios_run_and_repeat_exactly(name):
    sc = load_scenario(f"workloads/scenarios/{name}.yaml")
    first, second = simulate(sc), simulate(sc)
    assert (first.requests["status"] == "finished").all()
    assert first.steps.equals(second.steps)
    dec = first.steps[first.steps["num_decode"] > 0]
    nodes = 5 if name == "eagle" else 15
    assert (dec["decode_tokens"] == (nodes + 1) * dec["num_decode"]).all()
    assert first.summary()["mean_acceptance_length"] > 1.0
    other = simulate(dataclasses.replace(sc, seed=1))
    assert not other.steps.equals(first.steps)


@pytest.mark.parametrize("hw", ["a100-40gb", "h100-sxm"])
def test_eagle2_few_requests_rereading_different_counts_price_as_propose(hw):
    """A stretch's price of a few requests that re-read different counts (the first forward
    on Python numbers: few_step_time) is ``propose``'s, bit for bit: ``draft_time`` on the
    arrays (the first forward by ``step_time``) plus the host work."""
    pol = make(Eagle2Speculation, hw=load_profile(hw))
    rng = np.random.default_rng(5)
    varied = 0
    for _ in range(60):
        n = int(rng.integers(1, 9))
        ctx = rng.integers(1, 4000, n)
        reread = rng.integers(1, 7, n).astype(np.float64)
        varied += bool(reread.min() != reread.max())
        want = pol.draft_time(ctx.astype(np.float64), reread) + pol.host(n)
        assert pol.iteration_draft_s(np.arange(n), ctx, reread, None) == want, (ctx, reread)
    assert varied > 30
