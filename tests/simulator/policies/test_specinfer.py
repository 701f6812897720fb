"""``specinfer``: expansion and merge trees, their cost, their acceptance, their bad input."""
import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.acceptance import acceptance_from_config
from simulator.cost.cost_model import CostModel
from simulator.cost.drafting import chain_draft_time, level_draft_pricer, level_draft_time
from simulator.cost.parallelism import Parallelism
from simulator.engine.plan import BatchView
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.policies.base import PolicyContext
from simulator.policies.specinfer import SpecInferSpeculation
from simulator.scenario import PolicyConfig, load_scenario, parse_policy
from simulator.simulate import simulate

COV = [0.6, 0.75, 0.82, 0.86, 0.88]          # one coverage row: every depth alike
HW = load_profile("a100-40gb")
TARGET = CostModel(HW, load_model("llama-2-7b"))
DRAFT = CostModel(HW, load_model("llama-68m"))


def topk(cov=COV):
    return acceptance_from_config({"model": "tree_topk", "coverage": [cov]})


def make(params, acceptance=None, target=TARGET, draft=DRAFT):
    p = SpecInferSpeculation.parse_params(params, source="test")
    ctx = PolicyContext(target_cost=target, draft_cost=draft,
                        acceptance=topk() if acceptance is None else acceptance)
    return SpecInferSpeculation(p, ctx)


def batch(n, context=512):
    return BatchView(request_ids=np.arange(n), context=np.full(n, context, np.int64),
                     generated=np.ones(n, np.int64), output_len=np.full(n, 10**6),
                     prompt_len=np.full(n, context), batch_size=n, now_s=0.0)


def test_specinfer_tree_accepts_more_than_the_chain_of_the_same_draft():
    c1, _, c3 = COV[:3]
    tree = make({})                                       # <1,1,3,1,1,1,1,1>
    chain = make({"expansion": [1] * 8})
    # depth 1: c1, depth 2: c1^2, depth 3: the three children sum to c1^2 c3, then chains
    closed_tree = c1 + c1 ** 2 + c1 ** 2 * c3 * sum(c1 ** j for j in range(6))
    closed_chain = sum(c1 ** d for d in range(1, 9))
    assert tree.expected_accepted() == pytest.approx(closed_tree, rel=1e-12)
    assert chain.expected_accepted() == pytest.approx(closed_chain, rel=1e-12)
    assert closed_tree > closed_chain
    # the sampled acceptance agrees with the closed form (Monte Carlo, 4 standard errors)
    b = batch(40000)
    plan = tree.propose(b, np.random.default_rng(0))
    got = tree.accept(plan, b, np.random.default_rng(1))
    assert got.max() <= 8
    assert abs(got.mean() - closed_tree) < 4 * got.std() / np.sqrt(got.size)


def _tokens_per_s(width, batch_size, acceptance):
    """Throughput from the cost model and the closed-form expectation (no simulation)."""
    pol = make({"expansion": [width, 1, 1, 1, 1, 1]}, acceptance)
    ctx = np.full(batch_size, 512.0)
    step = pol.draft_time(ctx) + TARGET.step_time(np.full(batch_size, pol.max_verify_tokens),
                                                  ctx)
    return batch_size * (1.0 + pol.expected_accepted()) / step


def test_wider_trees_help_at_batch_one_and_stop_helping_at_large_batch():
    # cost model + closed-form acceptance: at batch 1 verification is memory-bound, so extra
    # nodes are nearly free; at batch 256 they cost compute (SpecInfer Fig. 10: batch >= 4
    # wants width 2-3, wider loses)
    acc = topk()
    small = [_tokens_per_s(w, 1, acc) for w in (1, 2, 3)]
    assert small[0] < small[1] < small[2]
    large = [_tokens_per_s(w, 256, acc) for w in (1, 2, 3, 4)]
    assert large[0] == max(large) and large[0] > large[1] > large[2]


def test_offloading_gains_most_from_trees():
    # SpecInfer section 6: fewer steps means fewer weight transfers over PCIe
    def speedup(target):
        pol = make({}, target=target)
        ctx = np.full(1, 512.0)
        step = pol.draft_time(ctx) + target.step_time([pol.max_verify_tokens], ctx)
        return (1.0 + pol.expected_accepted()) * target.decode_time(1, 512) / step
    offloaded = CostModel(HW, load_model("llama-2-7b"), Parallelism(offload_fraction=1.0))
    assert speedup(offloaded) > speedup(TARGET) > 1.0


def test_merged_drafts_run_in_parallel_on_separate_devices():
    names = ["llama-68m", "llama-160m"]
    costs = [CostModel(HW, load_model(n), host=False) for n in names]  # inside the step
    ctx = np.full(3, 300.0)
    each = [chain_draft_time(c, ctx, np.full(3, 4)) for c in costs]
    params = {"draft_models": names, "num_speculative_tokens": 4}
    one_gpu = make(params, draft=None)
    tp2 = CostModel(HW, load_model("llama-2-7b"), Parallelism(tensor_parallel=2))
    two_gpus = make(params, target=tp2, draft=None)
    assert one_gpu.draft_time(ctx) == pytest.approx(sum(each), rel=1e-12)
    assert two_gpus.draft_time(ctx) == pytest.approx(max(each), rel=1e-12)
    assert two_gpus.tree.num_nodes == 8 and two_gpus.max_verify_tokens == 9


def test_expansion_drafting_splits_the_batch_over_devices():
    tp2 = CostModel(HW, load_model("llama-2-7b"), Parallelism(tensor_parallel=2))
    pol = make({"expansion": [2, 2]}, target=tp2)
    ctx = np.full(4, 128.0)
    assert pol.draft_time(ctx) == pytest.approx(level_draft_time(DRAFT, ctx[:2], [1, 2]),
                                                rel=1e-12)


def test_mss_accepts_more_than_naive_sampling():
    # SpecInfer Theorem 4.3: MSS never rejects more often than naive sampling
    acc = acceptance_from_config({"model": "token_level", "temperature": 1.0})
    means = {}
    for method in ("mss", "naive"):
        pol = make({"expansion": [3, 1], "verification": method}, acc)
        b = batch(3000)
        got = pol.accept(pol.propose(b, np.random.default_rng(0)), b, np.random.default_rng(2))
        means[method] = (got.mean(), got.std() / np.sqrt(got.size))
    (m, se_m), (n, se_n) = means["mss"], means["naive"]
    assert m - n > 3 * np.hypot(se_m, se_n)


@pytest.mark.parametrize("params, field", [
    ({"expansion": [1, 0, 2]}, "policy.expansion[1]"),
    ({"expansion": []}, "policy.expansion"),
    ({"expansion": [8, 8, 8]}, "policy.expansion"),
    ({"tree_shape": [1, 2]}, "tree_shape"),
    ({"expansion": [2], "draft_models": ["llama-68m"]}, "policy.draft_models"),
    ({"draft_models": "llama-68m"}, "policy.draft_models"),
    ({"num_speculative_tokens": 3}, "policy.num_speculative_tokens"),
    ({"verification": "beam"}, "policy.verification"),
    ({"acceptance": {"model": "tree_topk"}}, "policy.acceptance.coverage"),
])
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(SpecsimError) as err:
        parse_policy({"name": "specinfer", **params}, "test")
    assert field in str(err.value)


def test_bad_deployments_name_the_field():
    iid = acceptance_from_config({"model": "iid", "alpha": 0.8})
    with pytest.raises(SpecsimError, match="chains only") as err:
        make({}, iid)
    assert err.value.field == "acceptance.model"
    assert make({"expansion": [1, 1]}, iid).tree.is_chain   # chains need no tree semantics
    with pytest.raises(SpecsimError) as err:
        make({}, draft=None)
    assert err.value.field == "draft"
    with pytest.raises(SpecsimError, match="not a draft decoder"):
        make({"draft_models": ["medusa-vicuna-7b"]}, draft=None)
    with pytest.raises(SpecsimError) as err:
        make({"verification": "mss"})                   # tree_topk's numbers are fixed
    assert err.value.field == "policy.verification"
    greedy_needs_t0 = acceptance_from_config({"model": "token_level", "temperature": 1.0})
    with pytest.raises(SpecsimError, match="temperature"):
        make({"verification": "greedy"}, greedy_needs_t0)


def test_own_acceptance_replaces_a_chain_only_scenario_model():
    iid = acceptance_from_config({"model": "iid", "alpha": 0.8})
    pol = make({"acceptance": {"model": "tree_topk", "coverage": [COV]}}, iid)
    assert pol.acceptance.source == "policy.acceptance"
    assert pol.expected_accepted() == pytest.approx(make({}).expected_accepted())


def test_shipped_scenario_runs_and_verifies_the_whole_tree():
    sc = load_scenario("workloads/scenarios/specinfer.yaml")
    res = simulate(sc)
    assert (res.requests["status"] == "finished").all()
    dec = res.steps[res.steps["num_decode"] > 0]
    nodes = 1 + 1 + 3 * 6                                  # <1,1,3,1,1,1,1,1>
    assert (dec["draft_tokens"] == nodes * dec["num_decode"]).all()
    assert (dec["decode_tokens"] == (nodes + 1) * dec["num_decode"]).all()
    assert res.accepted_hist[9:].sum() == 0 and res.accepted_hist[1:9].sum() > 0
    assert (dec["draft_s"] > 0).all()


def test_merge_based_scenario_runs():
    sc = load_scenario("workloads/scenarios/specinfer.yaml")
    sc = dataclasses.replace(
        sc, acceptance={"model": "tree_topk", "coverage": [COV]},
        workload={"trace": "default", "max_requests": 12},
        policy=PolicyConfig("specinfer", {"draft_models": ["llama-68m", "llama-160m"],
                                          "num_speculative_tokens": 3}))
    res = simulate(sc)
    assert (res.requests["status"] == "finished").all()
    assert res.summary()["mean_acceptance_length"] > 1.0


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_whole_number_contexts_price_each_shard_by_the_level_loop_bitwise(tp):
    """Token counts (ints) are priced by each shard's closed form at its context sum: the
    level loop's float exactly, and every forward's ``step_time`` summed within rounding."""
    target = CostModel(HW, load_model("llama-2-7b"), Parallelism(tensor_parallel=tp))
    pol = make({"expansion": [1, 3, 2, 1]}, target=target)
    levels = [1, 1, 3, 6]  # the forwards: the root, its child, its 3 children, their 6
    assert level_draft_pricer(DRAFT, 1, levels) is not None  # the closed forms under test
    rng = np.random.default_rng(5)
    for n in range(1, 9):
        ctx = rng.integers(20, 3000, n)
        shards = np.array_split(ctx.astype(np.float64), min(tp, n))  # even, in order
        assert pol.draft_time(ctx) == max(level_draft_time(DRAFT, s, levels) for s in shards)
        by_forward = max(sum(DRAFT.step_time(np.full(s.size, t), s + before, np.full(s.size, t))
                             for t, before in zip(levels, [0, 1, 2, 5])) for s in shards)
        assert pol.draft_time(ctx) == pytest.approx(by_forward, rel=1e-12)


def test_whole_number_contexts_price_merged_drafts_as_their_chains_bitwise():
    params = {"draft_models": ["llama-68m", "llama-160m", "llama-68m"],
              "num_speculative_tokens": 3}
    tp2 = CostModel(HW, load_model("llama-2-7b"), Parallelism(tensor_parallel=2))
    for target in (TARGET, tp2):
        pol = make(params, target=target, draft=None)
        rng = np.random.default_rng(9)
        for n in (1, 2, 5):
            ctx = rng.integers(20, 1500, n)
            k = np.full(n, 3)
            groups = [[0, 2], [1]] if target is tp2 else [[0, 1, 2]]  # round-robin drafts
            want = max(sum(chain_draft_time(pol.draft_costs[i], ctx.astype(np.float64), k)
                           for i in g) for g in groups)
            assert pol.draft_time(ctx) == want


def test_one_prompt_chunk_is_the_drafts_forward_over_it_bitwise():
    tp2 = CostModel(HW, load_model("llama-2-7b"), Parallelism(tensor_parallel=2))
    assert DRAFT.uniform_step_time(1, 512, 0.0, 0) is not None  # the closed form under test
    for target in (TARGET, tp2):
        pol = make({"expansion": [1, 3, 1]}, target=target)
        limit = pol.draft_max_context  # llama-68m's context: no speculation at or past it
        for chunk, ctx in [(512, 0), (37, 1200), (1, 900), (100, limit - 105)]:
            new, at = np.array([chunk]), np.array([ctx])
            assert pol.prefill_time(new, at) == DRAFT.step_time(new, at, np.zeros(1))
        # the prompt and its next token end at limit - 3: its 3 levels would reach the
        # limit, so the draft never speculates on it and skips the chunk
        assert pol.prefill_time(np.array([100]), np.array([limit - 104])) == 0.0
