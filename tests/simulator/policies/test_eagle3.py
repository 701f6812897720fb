"""``eagle3``: the EAGLE-3 draft's cost (draft-vocabulary LM head, 2h q/k/v, the fc on the
first forward only), chain and dynamic tree, memory, the default head, bad input."""
import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.acceptance import acceptance_from_config
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import Execution
from simulator.cost.spec_catalog import load_engine
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.policies.base import PolicyContext
from simulator.policies.eagle import Eagle2Speculation
from simulator.policies.eagle3 import Eagle3Speculation
from simulator.scenario import scenario_from_dict
from simulator.simulate import build_deployment

HW = load_profile("h200")
LLAMA = load_model("llama-3.1-8b")
HEAD = load_model("eagle3-llama-3.1-8b-instruct")
COV = [0.6, 0.75, 0.82, 0.86, 0.88]


def make(params=None, acceptance=None, target=LLAMA, draft=None, hw=HW):
    p = Eagle3Speculation.parse_params(params or {}, source="test")
    acc = acceptance or acceptance_from_config({"model": "tree_topk", "coverage": [COV]},
                                               source="t")
    ctx = PolicyContext(target_cost=CostModel(hw, target), target_model=target,
                        draft_model=draft, acceptance=acc)
    return Eagle3Speculation(p, ctx)


def lm_head_s(cost, n):
    t = np.full(n, 1.0)
    return {op.name: op.time_s for op in cost.breakdown(t, np.full(n, 64.0), t).ops}["lm_head"]


def test_the_default_head_is_the_catalogs_eagle3_model_of_the_target():
    pol = make()
    assert pol.spec.name == "eagle3-llama-3.1-8b-instruct"
    # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B config (SafeAILab/EAGLE traineagle3/config.json):
    # draft_vocab_size 32000 against Llama-3.1's 128256; 3 fused target layers
    assert (pol.spec.draft_vocab_size, pol.spec.feature_layers) == (32000, 3)


def test_a_draft_forward_has_a_cheaper_lm_head_than_the_target():
    hw = HW.plain_roofline()
    pol = make(hw=hw)
    target = CostModel(hw, LLAMA)
    for n in (1, 64):
        ratio = lm_head_s(pol.cost, n) / lm_head_s(target, n)
        # memory-bound at these batches: the head's weights, 32000 x 4096 against 128256 x 4096
        assert ratio == pytest.approx(32000 / 128256, rel=0.02)


def test_a_draft_step_costs_the_heads_weights():
    # plain roofline, batch 1, short context: memory-bound, so the time ratio is the ratio of
    # weights read: the head's (one layer with 2h q/k/v, the fc of 3 layers, the draft LM
    # head: the catalog's param_count) over the target's layers and LM head
    hw = HW.plain_roofline()
    pol = make({"num_speculative_tokens": 1}, hw=hw)
    target = 32 * LLAMA.layer_params() + LLAMA.lm_head_params()
    c = pol.draft_time(np.array([16.0])) / CostModel(hw, LLAMA).decode_time(1, 16)
    assert c == pytest.approx(HEAD.param_count() / target, rel=0.03)


def test_the_fc_runs_on_the_first_forward_only():
    # vLLM (v1/spec_decode/eagle.py): combine_hidden_states once, before the first pass
    one = make({"num_speculative_tokens": 1})
    four = make({"num_speculative_tokens": 4})
    ctx, reread = np.full(8, 300.0), np.full(8, 3.0)
    narrow = dataclasses.replace(HEAD, feature_layers=1)
    for pol in (one, four):
        fused3 = pol.draft_time(ctx, reread)
        pol.spec = narrow
        # two fewer fused layers: two h x h linears fewer, over the 24 re-read tokens alone
        assert fused3 - pol.draft_time(ctx, reread) == \
            pytest.approx(2 * pol.prices.square_linear_s(24), rel=1e-12)


def test_chain_and_dynamic_tree():
    chain = make({"num_speculative_tokens": 3})
    assert chain.tree.is_chain and chain.max_verify_tokens == 4
    acc = acceptance_from_config({"model": "sequoia", "rates": [0.7, 0.5]}, source="t")
    knobs = {"speculative_num_steps": 2, "speculative_eagle_topk": 2,
             "speculative_num_draft_tokens": 4}
    tree = make(knobs, acceptance=acc)
    # the same tree EAGLE-2's policy builds from SGLang's knobs (eagle.py's closed form:
    # depth 1 .7 and .15, depth 2 .49: expected accepted 1.34)
    p = Eagle2Speculation.parse_params(knobs, source="t")
    e2 = Eagle2Speculation(p, PolicyContext(target_cost=CostModel(HW, LLAMA),
                                            target_model=LLAMA, acceptance=acc,
                                            draft_model=load_model("eagle-llama-3.1-8b-instruct")))
    assert tree.tree.parents.tolist() == e2.tree.parents.tolist() == [-1, 0, -1]
    assert tree.expected_accepted() == pytest.approx(0.7 + 0.49 + 0.15, rel=1e-12)
    assert tree.max_verify_tokens == 4
    assert list(tree.levels) == [1, 2]


def test_memory_plan_holds_the_head_and_its_kv_cache():
    sc = scenario_from_dict({"hardware": "h200", "target": "llama-3.1-8b", "draft": None,
                             "policy": {"name": "eagle3", "num_speculative_tokens": 3},
                             "workload": {"trace": "default", "max_requests": 5}},
                            source="test")
    dep = build_deployment(sc)
    kv = lambda layers: 2 * layers * 8 * 128 * 2  # K and V of 8 KV heads, 16-bit, per token
    assert dep.memory.kv_bytes_per_token == kv(32) + kv(1)
    assert dep.memory.weight_bytes == pytest.approx(LLAMA.weight_bytes() + HEAD.weight_bytes())


def test_a_head_trained_on_another_base_is_refused():
    with pytest.raises(SpecsimError, match="trained on llama-3.1-70b"):
        make({"model": "eagle3-llama-3.1-70b-instruct"})
    with pytest.raises(SpecsimError, match="no eagle3 model"):
        make(target=load_model("vicuna-7b"))
    with pytest.raises(SpecsimError, match="is a eagle model, not eagle3"):
        make({"model": "eagle-llama-3.1-8b-instruct"})


def test_bad_knobs():
    with pytest.raises(SpecsimError, match="speculative_num_draft_tokens"):
        Eagle3Speculation.parse_params({"num_speculative_tokens": 3,
                                        "speculative_num_draft_tokens": 8}, source="t")
    with pytest.raises(SpecsimError, match="cannot reach depth"):
        Eagle3Speculation.parse_params({"num_speculative_tokens": 5, "topk": 4,
                                        "speculative_num_draft_tokens": 4}, source="t")


def _on_engine(k: int, eager: bool) -> Eagle3Speculation:
    # SGLang 0.4.x's speculative counts, its draft extend eager (engines.yaml) or not
    spec = dataclasses.replace(load_engine("sglang-v0.4.5"), draft_extend_eager=eager)
    ex = Execution(kernel_launch_s=10e-6, graph_launch_s=15e-6, spec=spec)
    p = Eagle3Speculation.parse_params({"num_speculative_tokens": k}, source="test")
    acc = acceptance_from_config({"model": "tree_topk", "coverage": [COV]}, source="t")
    return Eagle3Speculation(p, PolicyContext(target_cost=CostModel(HW, LLAMA, execution=ex),
                                              target_model=LLAMA, acceptance=acc))


def test_an_eager_draft_extend_reprices_the_first_forward_alone():
    # SGLang before PR #6606 runs the draft over the accepted tokens outside any CUDA graph
    # (ForwardMode.DRAFT_EXTEND is not a graph mode); the later forwards replay its captured
    # draft loop.  So the eager extend changes the iteration by the first forward's eager
    # price less its graph price, whatever the chain's length
    ctx, reread = np.array([300.0, 700.0]), np.array([3.0, 1.0])
    graphed = _on_engine(2, False).cost
    eager_cost = CostModel(HW, graphed.model, execution=dataclasses.replace(
        graphed.execution, cuda_graphs=False), host=False)
    start, logits = ctx - (reread - 1.0), np.ones(2)
    first = eager_cost.step_time(reread, start, logits) - graphed.step_time(reread, start,
                                                                            logits)
    assert first > 0  # eager: every kernel at least one launch, no single replay
    for k in (2, 5):
        on, off = _on_engine(k, True), _on_engine(k, False)
        assert on.draft_time(ctx, reread) - off.draft_time(ctx, reread) == pytest.approx(
            first, rel=1e-9)
        assert on.iteration_draft_s(np.arange(2), ctx, reread, None) - \
            off.iteration_draft_s(np.arange(2), ctx, reread, None) == pytest.approx(
                first, rel=1e-9)


def test_engines_that_capture_the_draft_extend_price_it_as_a_graph_replay():
    # vLLM V1 0.9 pads the first pass to a captured size; SGLang's 0.4.x entries do not
    assert not load_engine("vllm-v0.9").draft_extend_eager
    assert load_engine("sglang-v0.4").draft_extend_eager
    assert load_engine("sglang-v0.4.5").draft_extend_eager
    for name in ("sglang-v0.4", "sglang-v0.4.5"):
        src = [s for s in load_engine(name).sources if s.startswith("draft_extend_eager:")]
        assert len(src) == 1 and "PR #6606" in src[0]
