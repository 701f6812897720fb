"""``medusa``: heads' cost and memory, the candidate tree, published acceptance, bad input."""
import itertools

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.acceptance import acceptance_from_config
from simulator.acceptance.medusa import MEDUSA_TOP_K
from simulator.cost.cost_model import CostModel
from simulator.engine.plan import BatchView
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.policies.base import PolicyContext
from simulator.policies.medusa import MedusaSpeculation
from simulator.scenario import load_scenario, parse_policy
from simulator.simulate import build_deployment, simulate

HW = load_profile("a100-40gb")
VICUNA = load_model("vicuna-7b")


def make(params=None, target=VICUNA, acceptance=None, hw=HW, draft=None):
    p = MedusaSpeculation.parse_params(params or {}, source="test")
    ctx = PolicyContext(target_cost=CostModel(hw, target), acceptance=acceptance,
                        target_model=target, draft_model=draft)
    return MedusaSpeculation(p, ctx)


def batch(n):
    return BatchView(request_ids=np.arange(n), context=np.full(n, 256, np.int64),
                     generated=np.ones(n, np.int64), output_len=np.full(n, 10**6),
                     prompt_len=np.full(n, 256), batch_size=n, now_s=0.0)


def test_heads_read_their_weights_once_per_step_by_the_roofline():
    hw = HW.plain_roofline()
    pol = make(hw=hw)
    h, v, b = VICUNA.hidden_size, VICUNA.vocab_size, VICUNA.dtype_bytes
    peak, bw = hw.peak_flops("fp16"), hw.memory_bandwidth_bytes_per_s
    for n in (1, 32, 512):
        # per head: ResBlock h x h and its own LM head h x vocab over one token per request
        resblock = max(2 * n * h * h / peak, (h * h + 2 * n * h) * b / bw)
        head = max(2 * n * h * v / peak, (h * v + n * (h + v)) * b / bw)
        assert pol.heads_time(n) == pytest.approx(5 * (resblock + head), rel=1e-12)
    assert pol.propose(batch(4), np.random.default_rng(0)).draft_time_s == pol.heads_time(4)


def test_memory_plan_holds_the_head_weights():
    dep = build_deployment(load_scenario("workloads/scenarios/medusa.yaml"))
    heads = load_model("medusa-vicuna-7b")
    # 5 x (4096 x 4096 + 4096 + 4096 x 32000) parameters in fp16
    assert heads.weight_bytes() == 5 * (4096 * 4096 + 4096 + 4096 * 32000) * 2
    assert dep.memory.weight_bytes == pytest.approx(VICUNA.weight_bytes() + heads.weight_bytes())


def test_default_tree_is_the_best_63_nodes_of_the_published_heads():
    pol = make()
    assert pol.acceptance.source == "default: Medusa 7b heads"
    assert pol.tree.num_nodes == 63 and pol.max_verify_tokens == 64
    cov = np.array(MEDUSA_TOP_K["7b"])
    excl = np.diff(np.concatenate([np.zeros((5, 1)), cov], axis=1), axis=1)
    assert (np.diff(excl, axis=1) < 0).all()  # so the top path values form a valid tree
    values = sorted((np.prod([excl[h, r] for h, r in enumerate(path)])
                     for d in range(1, 6) for path in itertools.product(range(5), repeat=d)),
                    reverse=True)
    assert pol.expected_accepted() == pytest.approx(sum(values[:63]), rel=1e-9)
    # and the tree's own paths give the same sum, node by node
    ranks = pol.tree.child_rank
    own = sum(np.prod([excl[h, ranks[n]] for h, n in enumerate(pol.tree.path_to(i))])
              for i in range(pol.tree.num_nodes))
    assert own == pytest.approx(sum(values[:63]), rel=1e-9)


def test_sampled_acceptance_matches_the_expectation():
    pol = make()
    b = batch(30000)
    got = pol.accept(pol.propose(b, np.random.default_rng(0)), b, np.random.default_rng(3))
    assert got.max() <= 5
    assert abs(got.mean() - pol.expected_accepted()) < 4 * got.std() / np.sqrt(got.size)


def test_typical_acceptance_is_lossy_and_raises_acceptance():
    lift = 0.3
    pol = make({"choices": [[0], [0, 0]], "typical_acceptance": True, "typical_lift": lift})
    c1, c2 = MEDUSA_TOP_K["7b"][0][0], MEDUSA_TOP_K["7b"][1][0]
    l1, l2 = 1 - (1 - c1) * (1 - lift), 1 - (1 - c2) * (1 - lift)
    assert pol.expected_accepted() == pytest.approx(l1 + l1 * l2, rel=1e-12)
    b = batch(30000)
    got = pol.accept(pol.propose(b, np.random.default_rng(0)), b, np.random.default_rng(4))
    assert abs(got.mean() - (l1 + l1 * l2)) < 4 * got.std() / np.sqrt(got.size)
    assert make({"typical_acceptance": True}).expected_accepted() > make().expected_accepted()


def test_scenario_medusa_acceptance_is_used_and_other_models_are_not():
    own = acceptance_from_config({"model": "medusa", "size": "13b"})
    assert make(acceptance=own).acceptance.source == "scenario"
    other = acceptance_from_config({"model": "tree_topk", "coverage": [[0.9, 0.95]]})
    assert make(acceptance=other).acceptance.source.startswith("default")
    assert make({"acceptance": {"model": "medusa", "size": "33b"}},
                acceptance=other).acceptance.source == "policy.acceptance"


def test_fewer_heads_draft_shallower_trees():
    pol = make({"num_heads": 2, "node_budget": 10})
    assert pol.tree.max_depth <= 2 and pol.tree.num_nodes == 10


@pytest.mark.parametrize("params, field", [
    ({"num_heads": 6}, "policy.num_heads"),
    ({"node_budget": 3}, "policy.node_budget"),
    ({"choices": [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0, 0],
                  [0, 0, 0, 0, 0, 0]]}, "policy.choices"),
    ({"model": "medusa-vicuna-13b"}, "policy.model"),
    ({"model": "eagle-vicuna-7b"}, "policy.model"),
    ({"top_k": 6}, "policy.top_k"),
])
def test_bad_deployments_name_the_field(params, field):
    with pytest.raises(SpecsimError) as err:
        make(params)
    assert err.value.field == field


def test_a_target_without_heads_is_an_error():
    with pytest.raises(SpecsimError, match="no medusa model") as err:
        make(target=load_model("opt-13b"))
    assert err.value.field == "policy.model"


@pytest.mark.parametrize("params, field", [
    ({"heads": 3}, "policy.heads"),
    ({"node_budget": 0}, "policy.node_budget"),
    ({"choices": [[0], [2]]}, "policy.choices"),
    ({"typical_lift": 0.2}, "policy.typical_lift"),
    ({"typical_acceptance": True, "typical_lift": 1.5}, "policy.typical_lift"),
])
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(SpecsimError) as err:
        parse_policy({"name": "medusa", **params}, "test")
    assert field in str(err.value)


def test_shipped_scenario_runs_with_the_heads_priced_each_step():
    sc = load_scenario("workloads/scenarios/medusa.yaml")
    res = simulate(sc)
    assert (res.requests["status"] == "finished").all()
    dec = res.steps[res.steps["num_decode"] > 0]
    assert (dec["decode_tokens"] == 64 * dec["num_decode"]).all()
    pol = make(acceptance=acceptance_from_config(sc.acceptance))
    expected = [pol.heads_time(n) for n in dec["num_decode"]]
    assert dec["draft_s"].to_numpy() == pytest.approx(expected, rel=1e-12)
    assert 1.0 < res.summary()["mean_acceptance_length"] <= 6.0
