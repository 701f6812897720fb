"""Fast-forward of the drafters that price their own stretches (``eagle``, ``eagle2``,
``eagle3``, ``mtp``, ``medusa``, ``specinfer``, ``staged``: ``ChainStretch.carried``,
simulator/engine/chain_short.py): each iteration priced from the contexts and what every
request accepted the iteration before, its acceptances drawn as ``accept`` draws them
(chains and trees, any acceptance model).  The same DataFrames as the step-by-step
reference (``engine.fast_forward: false``), bit for bit: on the shipped scenarios that use
them and on random ones (acceptance models, preemption, admissions, several replicas),
where ``chain`` joins them with the positional acceptance models (``ChainCounts``:
positional, curve, tree_topk) its stretches now take too."""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.scenario import PolicyConfig, load_scenario
from tests.helpers import REPO, scenario, workload
from tests.simulator.engine.test_fast_forward import (
    _both,
    assert_identical,
    identical_or_unservable,
)

SCENARIOS = REPO / "workloads" / "scenarios"


@pytest.mark.parametrize("name", ["eagle", "eagle2", "eagle3_moe", "mtp_moe", "uncertainty",
                                  "medusa", "specinfer", "staged"])
def test_shipped_feature_drafts_take_stretches(name):
    """The shipped eagle, eagle2 (a dynamic tree), eagle3, mtp and medusa (a 63-node tree)
    scenarios: identical, and most iterations advanced in stretches (the step-by-step
    reference advances none)."""
    on, off = _both(load_scenario(SCENARIOS / f"{name}.yaml"))
    assert_identical(on, off)
    info = on.info["engine"]
    assert off.info["engine"]["vectorised"] == 0
    assert info["vectorised"] > info["iterations"] / 2


@pytest.mark.parametrize("params, acceptance", [
    ({"tree": [2, 2, 1]}, {"model": "tree_topk", "coverage": [[0.7, 0.85]] * 3}),
    ({"num_speculative_tokens": 3,  # the policy's own model, bound on its first draw
      "acceptance": {"model": "per_request", "mean": 0.7, "concentration": 3}}, None),
    ({"num_speculative_tokens": 4},  # acceptance that depends on the context
     {"model": "context_decay", "alpha0": 0.85, "scale_tokens": 300, "floor": 0.3})],
    ids=["static-tree", "own-acceptance", "context-decay"])
def test_trees_and_any_acceptance_take_stretches(params, acceptance):
    """A carried draft draws its acceptances as ``accept`` does, iteration by iteration: a
    static tree, a policy's own model (bound from the run's generator on its first draw)
    and an acceptance that depends on the context all advance in stretches, identically."""
    rng = np.random.default_rng(5)
    wl = workload(np.sort(rng.uniform(0, 4, 20)), rng.integers(8, 400, 20),
                  rng.integers(5, 120, 20))
    sc = scenario("none", hardware="a100-40gb", target="vicuna-7b", draft="eagle-vicuna-7b")
    sc = dataclasses.replace(sc, policy=PolicyConfig("eagle", params))
    if acceptance is not None:
        sc = dataclasses.replace(sc, acceptance=acceptance)
    on, off = _both(sc, wl)
    assert_identical(on, off)
    assert on.info["engine"]["vectorised"] > on.info["engine"]["iterations"] / 2
    assert on.steps["accepted_tokens"].nunique() > 3  # the draws really varied


@pytest.mark.parametrize("params", [{"node_budget": 20},
                                    {"node_budget": 12, "typical_acceptance": True}])
def test_medusa_heads_take_stretches(params):
    """Medusa's heads (priced on the batch size, nothing re-read) with its tree sampled
    from the acceptance model or by typical acceptance's lifted rates: identical, taken."""
    rng = np.random.default_rng(8)
    n = 30
    sc = load_scenario(SCENARIOS / "medusa.yaml", ["replicas=2"])
    sc = dataclasses.replace(sc, policy=PolicyConfig("medusa", params))
    wl = workload(np.sort(rng.uniform(0, 6, n)), rng.integers(8, 800, n),
                  rng.integers(10, 200, n))
    on, off = _both(sc, wl)
    assert_identical(on, off)
    assert on.info["engine"]["vectorised"] > on.info["engine"]["iterations"] / 2
    assert on.steps["accepted_tokens"].nunique() > 3


@pytest.mark.parametrize("ahead_batch, chunk", [(0, 4), (64, 1)],
                         ids=["from-the-generator", "a-chunk-an-iteration"])
def test_tree_walks_drawn_ahead_or_not_are_the_step_by_step_walks(monkeypatch, ahead_batch,
                                                                  chunk):
    """A stretch's tree walks (``BatchDraws``, issue 36) taken from the generator level by
    level (no batch walks ahead), or from uniforms drawn ahead in chunks of one iteration's
    most (refilled all the time): identical to the step-by-step reference either way."""
    from simulator.engine import chain_short
    from simulator.policies import tree_acceptance
    monkeypatch.setattr(tree_acceptance, "_AHEAD_BATCH", ahead_batch)
    monkeypatch.setattr(chain_short, "_AHEAD", chunk)
    rng = np.random.default_rng(12)
    n = 30
    wl = workload(np.sort(rng.uniform(0, 6, n)), rng.integers(8, 800, n),
                  rng.integers(10, 200, n))
    for name in ("medusa", "specinfer"):
        on, off = _both(load_scenario(SCENARIOS / f"{name}.yaml", ["replicas=2"]), wl)
        assert_identical(on, off)
        assert on.info["engine"]["vectorised"] > on.info["engine"]["iterations"] / 2


def _straddling(policy: str, params: dict, *, seed: int, share: float, low: int):
    """The policy's shipped scenario on 2 replicas, fast-forward on and off, with ``share``
    of 30 prompts between ``low`` and 2,040 tokens: across the drafts' 2,048-token context."""
    rng = np.random.default_rng(seed)
    n = 30
    sc = load_scenario(SCENARIOS / f"{policy}.yaml", ["replicas=2"])
    sc = dataclasses.replace(sc, policy=PolicyConfig(policy, params))
    prompt = np.where(rng.random(n) < share, rng.integers(low, 2040, n), rng.integers(8, 600, n))
    wl = workload(np.sort(rng.uniform(0, 6, n)), prompt, rng.integers(10, 200, n))
    return _both(sc, wl)


@pytest.mark.parametrize("params", [{"expansion": [1, 2, 1, 1]},
                                    {"draft_models": ["llama-68m", "llama-160m"],
                                     "num_speculative_tokens": 3}])
def test_specinfer_trees_take_stretches_up_to_the_drafts_context(params):
    """SpecInfer's token tree (an expansion, or merged chains of two drafts), with prompts
    straddling the drafts' 2,048-token context: a request stops being speculated once prompt
    + generated + the tree's depth reaches it, and the stretches stop there too."""
    on, off = _straddling("specinfer", params, seed=9, share=0.4, low=1900)
    assert_identical(on, off)
    steps = on.steps
    assert ((steps["draft_tokens"] < steps["num_decode"] * steps["draft_tokens"].max())
            & (steps["num_decode"] > 0)).any()  # some decodes were not speculated
    assert on.info["engine"]["vectorised"] > on.info["engine"]["iterations"] / 3


@pytest.mark.parametrize("params", [{"num_speculative_tokens": 5},
                                    {"num_speculative_tokens": 4, "draft2": "ngram"}])
def test_staged_drafts_draw_inside_their_price(params):
    """Staged speculation draws its inner acceptances while it drafts (``propose``), then
    the outer ones (``accept``): a stretch prices and draws in that order, so the results
    are identical, also with prompts straddling the drafts' context."""
    on, off = _straddling("staged", params, seed=10, share=0.3, low=1950)
    assert_identical(on, off)
    assert on.info["engine"]["vectorised"] > on.info["engine"]["iterations"] / 3


def test_the_stretch_tells_the_policy_what_it_accepted():
    """The draft's first forward re-reads what each request accepted last iteration: after
    a run the policy's record of it is the step-by-step run's, request by request, and it
    varied (so the stretches priced real, differing re-reads)."""
    from simulator.engine.replica import Replica
    seen = {}
    init = Replica.__init__

    def keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        seen.setdefault(self.fast_forward, []).append(self.policy)

    sc = dataclasses.replace(load_scenario(SCENARIOS / "eagle.yaml"), replicas=2)
    Replica.__init__ = keep
    try:
        on, off = _both(sc)
    finally:
        Replica.__init__ = init
    assert_identical(on, off)
    for a, b in zip(seen[True], seen[False]):
        assert np.array_equal(a._emitted, b._emitted)
    assert np.unique(np.concatenate([p._emitted for p in seen[True]])).size > 3


def test_mtp_on_deepseek_with_preemption():
    """MTP on DeepSeek-V3 (MLA: the target's verification has no closed form, so each
    stretch iteration prices it by ``step_time``), a KV cache small enough to preempt."""
    rng = np.random.default_rng(2)
    n = 40
    sc = load_scenario(SCENARIOS / "mtp_moe.yaml", ["replicas=2", "batching.max_num_seqs=24",
                                                    "batching.gpu_memory_utilization=0.575"])
    wl = workload(np.sort(rng.uniform(0, 3, n)), rng.integers(8, 3000, n),
                  rng.integers(20, 400, n))
    on, off = _both(sc, wl)
    assert_identical(on, off)
    assert on.steps["preemptions"].sum() > 0  # the KV cache ran out: requests recomputed
    assert on.info["engine"]["vectorised"] > on.info["engine"]["iterations"] / 3


@pytest.mark.parametrize("name", ["mtp_moe", "eagle3_moe"])
def test_few_requests_first_passes_go_on_lists(monkeypatch, name):
    """A feature drafter's chain over fewer than 8 requests (MLA's verification without a
    closed form: ``few_mixed_pricer``) takes its first passes on lists (chain_lists.py),
    and the run is still the step-by-step reference's, bit for bit."""
    from simulator.engine import chain_short
    kept = []

    def counted(*args):
        got = rows_lists(*args)
        kept.append(got[0])
        return got
    rows_lists = chain_short.rows_lists
    monkeypatch.setattr(chain_short, "rows_lists", counted)
    on, off = _both(load_scenario(SCENARIOS / f"{name}.yaml"))
    assert_identical(on, off)
    assert len(kept) > 20 and sum(kept) > on.info["engine"]["vectorised"] / 2


def test_chain_with_a_measured_curve_takes_stretches():
    """``chain`` with a measured acceptance curve (positional: context-free, one uniform a
    request, ``ChainCounts``) advances stretches too, identically."""
    rng = np.random.default_rng(4)
    n = 30
    sc = scenario("chain:num_speculative_tokens=4", hardware="a100-40gb", target="llama-2-7b",
                  draft="llama-68m", replicas=2)
    sc = dataclasses.replace(sc, acceptance={"model": "curve",
                                             "lengths": {1: 1.8, 2: 2.4, 3: 2.8, 4: 3.0}})
    wl = workload(np.sort(rng.uniform(0, 8, n)), rng.integers(8, 900, n),
                  rng.integers(10, 200, n))
    on, off = _both(sc, wl)
    assert_identical(on, off)
    assert on.info["engine"]["vectorised"] > on.info["engine"]["iterations"] / 2
    assert on.steps["accepted_tokens"].nunique() > 5  # the draws really varied


ACCEPTANCE = [{"model": "iid", "alpha": 0.75},
              {"model": "per_request", "mean": 0.6, "concentration": 3.0},
              {"model": "positional", "rates": [0.9, 0.7, 0.6, 0.5]},
              {"model": "tree_topk", "coverage": [[0.8, 0.9], [0.7, 0.85], [0.6, 0.8]]}]
# (policy, draft, a gpu_memory_utilization that leaves llama-3.1-8b a few hundred blocks)
ACCEPTANCE.append({"model": "context_decay", "alpha0": 0.9, "scale_tokens": 400})
# (policy, its parameters beside the drafts, draft, a gpu_memory_utilization that leaves
# llama-3.1-8b a few hundred KV blocks, whether it drafts a tree: tree_topk acceptance)
DRAFTERS = [("eagle", {}, "eagle-llama-3.1-8b-instruct", 0.40, False),
            ("eagle3", {}, None, 0.4125, False),
            ("eagle3", {"speculative_eagle_topk": 2, "speculative_num_draft_tokens": 6}, None,
             0.4125, True),
            ("eagle2", {"speculative_eagle_topk": 2, "speculative_num_draft_tokens": 6},
             "eagle-llama-3.1-8b-instruct", 0.40, True),
            ("chain", {}, "llama-3.2-1b", 0.45, False)]


@st.composite
def cases(draw):
    n = draw(st.integers(1, 24))
    return {"arrival": np.cumsum(draw(st.lists(st.floats(0, 0.3), min_size=n, max_size=n))),
            "prompt": draw(st.lists(st.integers(1, 600), min_size=n, max_size=n)),
            "output": draw(st.lists(st.integers(1, 150), min_size=n, max_size=n)),
            "drafter": draw(st.sampled_from(range(len(DRAFTERS)))),
            "k": draw(st.integers(1, 6)),
            "acceptance": draw(st.sampled_from(range(len(ACCEPTANCE)))),
            "tight": draw(st.booleans()), "seqs": draw(st.integers(1, 16)),
            "batched": draw(st.integers(64, 1024)), "chunked": draw(st.booleans()),
            "replicas": draw(st.integers(1, 3)),
            "router": draw(st.sampled_from(["round_robin", "least_outstanding_tokens"])),
            "seed": draw(st.integers(0, 2**31))}


@settings(max_examples=50, deadline=None, derandomize=True,  # same examples every run
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_random_feature_chains_are_identical(case):
    name, extra, draft, util, tree = DRAFTERS[case["drafter"]]
    k = "speculative_num_steps" if name == "eagle2" else "num_speculative_tokens"
    sc = scenario("none", hardware="a100-40gb", target="llama-3.1-8b", draft=draft,
                  replicas=case["replicas"], router=case["router"], seed=case["seed"],
                  batching={"max_num_seqs": case["seqs"],
                            "max_num_batched_tokens": case["batched"],
                            "enable_chunked_prefill": case["chunked"],
                            "gpu_memory_utilization": util if case["tight"] else 0.9})
    # 5 nodes reach depth 5 at most, and 1 forward of top-2 proposes 2 nodes only
    steps = min(max(case["k"], 2), 5) if tree else case["k"]
    sc = dataclasses.replace(sc, policy=PolicyConfig(name, {k: steps, **extra}),
                             acceptance=ACCEPTANCE[3 if tree else case["acceptance"]])
    identical_or_unservable(sc, workload(case["arrival"], case["prompt"], case["output"]))


@pytest.mark.parametrize("policy, target, draft", [
    (PolicyConfig("eagle3", {"num_speculative_tokens": 5, "speculative_eagle_topk": 4,
                             "speculative_num_draft_tokens": 8}),
     "llama-3.1-8b", "eagle3-llama-3.1-8b-instruct"),
    (PolicyConfig("eagle2", {"speculative_num_steps": 4, "speculative_eagle_topk": 3,
                             "speculative_num_draft_tokens": 10}), "vicuna-7b",
     "eagle-vicuna-7b"),
    (PolicyConfig("medusa", {"node_budget": 12}), "vicuna-7b", "medusa-vicuna-7b")],
    ids=["eagle3-tree", "eagle2", "medusa"])
def test_trees_on_a_cascading_engine_stay_exact(policy, target, draft):
    """SGLang 0.4.5's FA3 backend verifies (and drafts) a tree as a cascade
    (simulator/cost/tree_cascade.py): the iterations the stretches advance pay it as the
    step-by-step ones do, bit for bit, and it costs time."""
    from simulator.cost.spec_catalog import load_engine

    rng = np.random.default_rng(11)
    arrivals = np.sort(rng.uniform(0, 3, 16))
    prompts, outputs = rng.integers(8, 400, 16), rng.integers(10, 120, 16)
    wl = workload(arrivals, prompts, outputs)
    sglang = load_engine("sglang-v0.4.5")
    sc = dataclasses.replace(
        scenario("none", hardware="h100-sxm", target=target, draft=draft), policy=policy,
        acceptance={"model": "tree_topk", "coverage": [[0.6, 0.8, 0.88, 0.92]]},
        execution={"spec": sglang})
    on, off = _both(sc, wl)
    assert_identical(on, off)
    assert on.info["engine"]["vectorised"] > on.info["engine"]["iterations"] / 2
    # it costs time, compared on requests that all arrive at once: with later arrivals the
    # makespan is not monotone in a step's price (a slower step gathers more arrivals into
    # one batch, and the batches' draws differ); at once, both runs take the same steps
    together = workload(np.zeros(16), prompts, outputs)
    cascade, _ = _both(sc, together)
    plain = dataclasses.replace(sc, execution={"spec": dataclasses.replace(
        sglang, tree_cascade=False)})
    base, _ = _both(plain, together)
    assert len(cascade.steps) == len(base.steps)
    assert cascade.steps["start_s"].iloc[-1] > base.steps["start_s"].iloc[-1]
