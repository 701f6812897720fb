"""The speculative iteration's host work per engine (simulator/cost/spec_host.py): its closed
form, the catalog's sources, the ``execution.engine`` field, and the method-accounting rule:
every shipped policy's iteration is charged by the one function ``spec_host_s`` for the work
the method does (draft forwards, tree levels, reranked nodes), written here from each
method's description, never read back from the policy."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import Execution, parse_execution
from simulator.cost.spec_catalog import COUNTS, SYNC_METHODS, _entry, engine_names, load_engine
from simulator.cost.spec_host import spec_host_s
from simulator.cost.spec_work import SpecWork
from simulator.cost.tree_cascade import tree_cascade_s
from simulator.deployment import resolve_deployment
from simulator.engine.plan import BatchView
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.policies.lookahead import JacobiDecoding, LookaheadDecoding
from simulator.policies.prompt_lookup import PromptLookup
from simulator.policies.base import PolicyContext
from simulator.policies.registry import BASES
from simulator.policies.suffix import SuffixDecoding
from simulator.scenario import scenario_from_dict
from simulator.simulate import prepare
from tests.helpers import ConstantCost
from workloads.workload import Workload

LAUNCH, STEP = 10e-6, 200e-6
VLLM = Execution(kernel_launch_s=LAUNCH, cpu_step_s=STEP, spec=load_engine("vllm-v0.9"))


def test_a_chain_on_vllm_pays_its_counted_launches_and_four_synced_steps():
    # vLLM 0.9.2, K = 3: 8 verification launches, 18 of input preparation, 16 between each
    # of the 2 later draft forwards; 4 syncs (2 before propose(), its 2 .item()), each
    # exposing one host step
    work = SpecWork(draft_forwards=3)
    assert spec_host_s(VLLM, work, 1) == pytest.approx((8 + 18 + 2 * 16) * LAUNCH + 4 * STEP)
    per_seq = dataclasses.replace(VLLM, cpu_per_seq_s=1e-6)
    assert spec_host_s(per_seq, work, 32) == pytest.approx(
        (8 + 18 + 32) * LAUNCH + 4 * (STEP + 32e-6))


def test_proposes_two_item_syncs_are_paid_once_an_iteration_by_eagle_and_eagle3_on_092():
    # vllm/v1/spec_decode/eagle.py EagleProposer.propose at v0.9.2: 'FIXME(woosuk): The below
    # two ops cause synchronization' (seq_lens.max().item(), the query lengths' max().item())
    # before the first draft forward, for method eagle and eagle3 alike; gone at 0.10.x
    v10 = dataclasses.replace(VLLM, spec=load_engine("vllm-v0.10"))
    assert VLLM.spec.syncs - v10.spec.syncs == 2
    for k in (2, 3, 7):  # once an iteration, whatever the number of draft forwards
        for work in (SpecWork(draft_forwards=k),
                     SpecWork(draft_forwards=k, vocab_map=True, feature_layers=3)):
            assert spec_host_s(VLLM, work, 1) - spec_host_s(v10, work, 1) == pytest.approx(
                2 * STEP)
    # the same launches otherwise: the two entries differ by the syncs alone (0.9.2's MTP
    # branch has its own count; 0.10's one propose() has no method branch)
    assert dataclasses.replace(v10.spec, name="x", version="", syncs=0, method_syncs=()) == \
        dataclasses.replace(VLLM.spec, name="x", version="", syncs=0, method_syncs=())


def test_eagle3_on_vllm_also_pays_its_vocabulary_map_and_feature_fusion():
    # vLLM 0.9.2, EAGLE-3 K = 3 (llama_eagle3.py compute_logits; gpu_model_runner.py): the
    # chain's launches, 4 of the d2t map after each of the 3 forwards, 2 more layers'
    # gathers beyond the one hidden-state gather, their concatenation and the eager fc
    work = SpecWork(draft_forwards=3, vocab_map=True, feature_layers=3)
    chain = spec_host_s(VLLM, SpecWork(draft_forwards=3), 1)
    assert spec_host_s(VLLM, work, 1) - chain == pytest.approx((3 * 4 + 2 * 1 + 2) * LAUNCH)
    # SGLang maps the vocabulary and fuses the features inside its captured forwards: none
    sglang = dataclasses.replace(VLLM, spec=load_engine("sglang-v0.4"))
    assert spec_host_s(sglang, work, 1) == spec_host_s(sglang, SpecWork(draft_forwards=3), 1)


# syncs of one iteration per method, read in vLLM's code (engines.yaml sources): before
# propose(), parse_output's .cpu() (every method) and the blocking next_token_ids upload
# (EagleProposer methods); inside 0.9.2's propose(), the FIXME(woosuk) pair for eagle and
# eagle3, query_lens.max().item() alone for deepseek_mtp, none at 0.10.x; the ngram path
# none beyond the first.  Medusa's own .tolist() per head is not told apart (its 4)
VLLM_SYNCS = {"vllm-v0.9": {"eagle": 2 + 2, "eagle3": 2 + 2, "mtp": 2 + 1,
                            "prompt_lookup": 1, "medusa": 4, "": 4},
              "vllm-v0.10": {"eagle": 2, "eagle3": 2, "mtp": 2, "prompt_lookup": 1,
                             "medusa": 2, "": 2}}


@pytest.mark.parametrize("engine", list(VLLM_SYNCS))
def test_each_methods_synced_host_time_is_its_own_sync_count_on_vllm(engine):
    # overlap hides the launches, so what is left is the syncs, each one host step
    spec = dataclasses.replace(load_engine(engine), overlap=True)
    ex = dataclasses.replace(VLLM, spec=spec, cpu_per_seq_s=1e-6)
    for method, syncs in VLLM_SYNCS[engine].items():
        for k, n in ((1, 1), (3, 8)):
            work = SpecWork(draft_forwards=k, method=method)
            assert spec_host_s(ex, work, n) == pytest.approx(syncs * (STEP + n * 1e-6))


def test_mtp_on_vllm_092_pays_the_chains_launches_and_one_sync_less_than_eagle():
    # K = 1: 8 verification launches and 18 of input preparation, as eagle's; 3 syncs
    mtp, eagle = SpecWork(draft_forwards=1, method="mtp"), SpecWork(draft_forwards=1)
    assert spec_host_s(VLLM, mtp, 1) == pytest.approx((8 + 18) * LAUNCH + 3 * STEP)
    assert spec_host_s(VLLM, eagle, 1) - spec_host_s(VLLM, mtp, 1) == pytest.approx(STEP)
    # an n-gram iteration: the verification's 8 launches and parse_output's one sync
    assert spec_host_s(VLLM, SpecWork(method="prompt_lookup"), 1) == pytest.approx(
        8 * LAUNCH + STEP)


def test_v0_mtp_pays_three_syncs_its_proposer_step_and_synchronous_output_per_sequence():
    # vLLM 0.7.3 (engines.yaml vllm-v0.7): the drafts' proposal_lens.tolist() and the
    # accepted ids' .tolist() after the rejection sampler (2 syncs; MTP's hidden-state mask
    # index between them a third), the proposer's own execute_model (1 host step), no launch
    # counted; async output processing off under speculation, so vLLM issue #6913's 3.4 ms
    # at batch 32 shows, 106.25 us a sequence
    v0 = _on("vllm-v0.7")
    for n in (1, 8, 32):
        got = spec_host_s(v0, SpecWork(draft_forwards=1, method="mtp"), n)
        assert got == pytest.approx(4 * STEP + n * 106.25e-6)
    assert spec_host_s(v0, SpecWork(draft_forwards=1), 32) - 3 * STEP == pytest.approx(3.4e-3)
    # overlap would hide launches, never the output processing nothing overlaps
    hidden = dataclasses.replace(v0, spec=dataclasses.replace(v0.spec, overlap=True))
    assert spec_host_s(hidden, SpecWork(draft_forwards=1), 4) == pytest.approx(
        3 * STEP + 4 * 106.25e-6)
    # V1 runs output processing in its API-server process: no such charge there
    assert load_engine("vllm-v0.9").sync_output_per_seq_us == 0.0


def _on(engine: str) -> Execution:
    return dataclasses.replace(VLLM, spec=load_engine(engine))


def test_sglang_0_4_5_builds_a_chains_tree_and_syncs_its_draft_and_verification():
    # engines.yaml sglang-v0.4.5 (read in sglang-0.4.5.post3): 27 verification launches, 25
    # of the draft's and draft extend's preparation, 13 of build_tree_kernel_efficient (a
    # chain's too), 7 of FA3 metadata per captured draft step; 3 verification syncs, the
    # draft's and the draft extend's .item() / .tolist() and their two batch builds
    ex = _on("sglang-v0.4.5")
    chain = SpecWork(draft_forwards=3)
    assert spec_host_s(ex, chain, 1) == pytest.approx((27 + 25 + 13 + 2 * 7) * LAUNCH
                                                      + (3 + 2 + 2) * STEP)
    # a 5-step top-4 tree of 8 tokens: the same build, 20 more verification launches and
    # the expand lengths' max().item()
    tree = SpecWork(draft_forwards=5, tree_levels=5, tree_nodes=7, rerank=True,
                    verify_tree_keys=(1, 2, 3, 4, 5, 6, 2, 2))
    assert spec_host_s(ex, tree, 1) == pytest.approx((27 + 25 + 13 + 4 * 7 + 20) * LAUNCH
                                                     + (3 + 2 + 2 + 1) * STEP)


def test_sglang_0_4_1_pays_each_uncaptured_draft_step_a_batch_build_and_a_sync():
    # engines.yaml sglang-v0.4 (read in sglang-0.4.1.post4): forward_draft_decode per step,
    # 27 launches, generate_attn_arg_decode's .item() and a batch of its own, after the first
    ex = _on("sglang-v0.4")
    for k in (1, 5):
        got = spec_host_s(ex, SpecWork(draft_forwards=k), 1)
        assert got == pytest.approx((39 + 22 + 22 + 27 * (k - 1)) * LAUNCH
                                    + (4 + 7 + 1 + 2 * (k - 1)) * STEP)
    # a model-free iteration pays the verification's alone: no draft syncs or batches
    assert spec_host_s(ex, SpecWork(), 1) == pytest.approx(39 * LAUNCH + 4 * STEP)


def _catalog_entry(method_syncs) -> dict:
    return {"version": "v", "syncs": {"value": 4, "source": "read"},
            "method_syncs": method_syncs}


def test_an_entrys_method_syncs_name_known_methods_counts_and_sources():
    got = _entry("e", _catalog_entry({"mtp": {"value": 3, "source": "eagle.py"}}), "t")
    assert got.method_syncs == (("mtp", 3),) and "method_syncs.mtp: eagle.py" in got.sources
    bad = [({"ngram": {"value": 1, "source": "s"}}, "e.method_syncs.ngram", "prompt_lookup"),
           ({"mtp": {"value": -1, "source": "s"}}, "e.method_syncs.mtp.value", ""),
           ({"mtp": {"value": 1.5, "source": "s"}}, "e.method_syncs.mtp.value", ""),
           ({"mtp": {"value": 1}}, "e.method_syncs.mtp.source", "source"),
           ([3], "e.method_syncs", "")]
    for given, field, fix in bad:
        with pytest.raises(SpecsimError) as err:
            _entry("e", _catalog_entry(given), "t")
        assert err.value.field == field and fix in str(err.value), given


def test_overlap_hides_the_launches_but_not_the_syncs():
    hidden = dataclasses.replace(VLLM, spec=dataclasses.replace(VLLM.spec, overlap=True))
    assert spec_host_s(hidden, SpecWork(draft_forwards=3), 4) == pytest.approx(4 * STEP)


def test_tensorrt_llm_shows_only_its_drafts_sync_and_nothing_in_one_model_mode():
    work = SpecWork(draft_forwards=3)
    two = dataclasses.replace(VLLM, spec=load_engine("trtllm-1.0"))
    one = dataclasses.replace(VLLM, spec=load_engine("trtllm-1.0-one-model"))
    assert spec_host_s(two, work, 2) == pytest.approx(STEP)
    assert spec_host_s(one, work, 2) == 0.0


def test_nothing_is_charged_without_an_engine_or_a_drafting_request():
    assert spec_host_s(dataclasses.replace(VLLM, spec=Execution().spec),
                       SpecWork(draft_forwards=3), 8) == 0.0
    assert spec_host_s(VLLM, SpecWork(draft_forwards=3), 0) == 0.0


def test_a_reranked_tree_pays_its_levels_nodes_and_syncs():
    hf = Execution(kernel_launch_s=LAUNCH, cpu_step_s=STEP, spec=load_engine("eagle-official"))
    # EAGLE-2's code, depth 6, 59 nodes: 14 + 4 + 6 * 11 + 11 + 59 launches or host ops,
    # 1 + 2 syncs (cnets.py topK_genrate, utils.py, ea_model.py; engines.yaml)
    work = SpecWork(draft_forwards=6, tree_levels=6, tree_nodes=59, rerank=True)
    assert spec_host_s(hf, work, 1) == pytest.approx((14 + 4 + 66 + 11 + 59) * LAUNCH
                                                     + 3 * STEP)
    static = dataclasses.replace(work, rerank=False)
    assert spec_host_s(hf, static, 1) == pytest.approx((14 + 4 + 66) * LAUNCH + STEP)


def test_every_catalog_engine_names_its_version_and_sources_every_count():
    assert {"vllm-v0.9", "sglang-v0.4", "eagle-official"} <= set(engine_names())
    for name in engine_names():
        spec = load_engine(name)
        given = [f for f in COUNTS + ("overlap",) if getattr(spec, f)]
        assert spec.version and len(spec.sources) >= len(given)
        assert all(any(s.startswith(f + ":") and len(s) > 40 for s in spec.sources)
                   for f in given), name


def test_the_execution_block_names_an_engine_or_says_which_exist():
    assert parse_execution({"engine": "sglang-v0.4"}, source="t")["spec"].name == "sglang-v0.4"
    with pytest.raises(SpecsimError) as err:
        parse_execution({"engine": "tgi"}, source="t")
    assert err.value.field == "execution.engine" and "vllm-v0.9" in str(err.value)


# ------------------------------------------------------------ the method-accounting rule
def _scenario(policy: dict, target: str, draft: str | None, engine: str | None):
    big = target == "deepseek-v3"  # one 8 x H200 node holds it
    data = {"name": "t", "seed": 0, "hardware": "h200" if big else "h100-sxm",
            "target": target, "parallelism": {"tensor_parallel": 8 if big else 1},
            "policy": policy,
            "acceptance": {"model": "tree_topk", "coverage": [[0.6, 0.8, 0.9]]},
            "execution": {"engine": engine} if engine else {},
            "workload": {"synthetic": {"num_requests": 4,
                                       "arrival": {"process": "poisson", "rate_per_s": 1.0},
                                       "prompt": {"dist": "fixed", "tokens": 64},
                                       "output": {"dist": "fixed", "tokens": 32}}}}
    if draft:
        data["draft"] = draft
    return scenario_from_dict(data, source="test")


def _without_spec_work(sc):
    """The same engine's forwards (an engine also prices DeepSeek's decode kernels and its
    prefill attention: engines.yaml) without its speculative path's host work."""
    quiet = dataclasses.replace(sc.execution["spec"], **{k: 0 for k in COUNTS},
                                tree_cascade=False, method_syncs=())
    return dataclasses.replace(sc, execution={**sc.execution, "spec": quiet})


def _batch(n: int) -> BatchView:
    return BatchView(request_ids=np.arange(n), context=np.full(n, 100), generated=np.ones(n),
                     output_len=np.full(n, 32), prompt_len=np.full(n, 64), batch_size=n,
                     now_s=0.0)


def _proposer_s(sc, n: int) -> float:
    pol = prepare(sc).policies[0]
    plan = pol.propose(_batch(n), np.random.default_rng(0))
    return plan.draft_time_s + plan.cpu_time_s


# each method: (policy, target, draft, the work its description says one iteration does)
MODEL_METHODS = {
    "chain": ({"name": "chain", "num_speculative_tokens": 4}, "llama-2-7b", "llama-68m",
              SpecWork(draft_forwards=4)),
    # its tree: one node at depth 1, two at 2, one child each at 3; a verified token attends
    # the root, its ancestors and itself: the root's row 1 key, a node's its depth + 1
    "specinfer": ({"name": "specinfer", "expansion": [1, 2, 1]}, "llama-2-7b", "llama-68m",
                  SpecWork(draft_forwards=3, tree_levels=3, tree_nodes=1 + 2 + 2,
                           verify_tree_keys=(1, 2, 3, 3, 4, 4))),
    # the heads' tree given as paths: two nodes at depth 1, three at depth 2
    "medusa": ({"name": "medusa", "choices": [[0], [1], [0, 0], [0, 1], [1, 0]]}, "vicuna-7b",
               "medusa-vicuna-7b",
               SpecWork(draft_forwards=1, verify_tree_keys=(1, 2, 2, 3, 3, 3),
                        method="medusa")),
    "eagle": ({"name": "eagle", "num_speculative_tokens": 3}, "vicuna-7b", "eagle-vicuna-7b",
              SpecWork(draft_forwards=3, method="eagle")),
    # EAGLE-2's tree under ranks 0.6, 0.2 (the coverage below): the best 5 candidates by
    # path probability are 0.6 (depth 1), 0.36 (2), 0.216 (3), 0.2 (1), 0.12 (2); its 2
    # later forwards draft top-2 a request, over 1 and 2 drafted tokens of each branch
    "eagle2": ({"name": "eagle2", "speculative_num_steps": 3, "speculative_eagle_topk": 2,
                "speculative_num_draft_tokens": 6}, "vicuna-7b", "eagle-vicuna-7b",
               SpecWork(draft_forwards=3, tree_levels=3, tree_nodes=5, rerank=True,
                        verify_tree_keys=(1, 2, 3, 4, 2, 3), draft_tree=((2, 1), (2, 2)))),
    # EAGLE-3 (its model file): a 32000-token head mapped to the target's vocabulary every
    # forward, the hidden states of 3 target layers fused each iteration
    "eagle3": ({"name": "eagle3", "num_speculative_tokens": 2}, "llama-3.1-8b",
               "eagle3-llama-3.1-8b-instruct",
               SpecWork(draft_forwards=2, vocab_map=True, feature_layers=3, method="eagle3")),
    "eagle3-tree": ({"name": "eagle3", "num_speculative_tokens": 3,
                     "speculative_eagle_topk": 2, "speculative_num_draft_tokens": 6},
                    "llama-3.1-8b", "eagle3-llama-3.1-8b-instruct",
                    SpecWork(draft_forwards=3, tree_levels=3, tree_nodes=5, rerank=True,
                             vocab_map=True, feature_layers=3, method="eagle3",
                             verify_tree_keys=(1, 2, 3, 4, 2, 3), draft_tree=((2, 1), (2, 2)))),
    "mtp": ({"name": "mtp", "num_speculative_tokens": 2}, "deepseek-v3", None,
            SpecWork(draft_forwards=2, method="mtp")),
    # inner acceptance 0: each round of the outer draft yields one token, so 4 rounds (4
    # forwards of the outer draft) make its 4 drafts
    "staged": ({"name": "staged", "num_speculative_tokens": 4, "inner_alpha": 0.0},
               "llama-2-7b", "llama-68m", SpecWork(draft_forwards=4)),
}


@pytest.mark.parametrize("engine", ["vllm-v0.9", "sglang-v0.4", "sglang-v0.4.5",
                                    "eagle-official"])
@pytest.mark.parametrize("name", list(MODEL_METHODS))
def test_each_model_drafting_method_pays_spec_host_s_for_its_work(name, engine):
    """... and, on an engine whose attention verifies a tree as a cascade (SGLang 0.4.5's
    FA3), the cascade's GPU work on the target's layers and the draft layer's."""
    policy, target, draft, work = MODEL_METHODS[name]
    with_engine = _scenario(policy, target, draft, engine)
    ex = resolve_deployment(with_engine).target_cost.execution
    extra = _proposer_s(with_engine, 3) - _proposer_s(_without_spec_work(with_engine), 3)
    want = spec_host_s(ex, work, 3)
    if ex.spec.tree_cascade:
        pol = prepare(with_engine).policies[0]
        layer = pol.cost if work.draft_tree else None  # the draft layer's cost model
        want += tree_cascade_s(resolve_deployment(with_engine).target_cost, layer,
                               work.verify_tree_keys, work.draft_tree, 3)
    assert extra == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert extra > 0


def _text_workload():
    ids = (np.array([1, 2, 3, 1, 2, 3, 1, 2]),)
    return Workload(name="hand", arrival_s=np.zeros(1), prompt_tokens=[8], output_tokens=[8],
                    prompt_ids=ids, output_ids=(np.array([3, 1, 2, 3, 1, 2, 3, 1]),))


@pytest.mark.parametrize("cls", [PromptLookup, SuffixDecoding, JacobiDecoding,
                                 LookaheadDecoding])
def test_each_model_free_method_pays_the_verification_work_alone(cls):
    ex = dataclasses.replace(VLLM, spec=load_engine("sglang-v0.4"))
    plans = []
    # a deployed target runs the engine's host work; a bare pricer has none to charge
    for target in (CostModel(load_profile("a10"), load_model("opt-125m"), execution=ex),
                   ConstantCost(1e-3)):
        ctx = PolicyContext(target_cost=target, workload=_text_workload())
        pol = cls(cls.parse_params({}, source="t"), ctx)
        batch = BatchView(request_ids=np.array([0]), context=np.array([10]),
                          generated=np.array([2]), output_len=np.array([8]),
                          prompt_len=np.array([8]), batch_size=1, now_s=0.0)
        plans.append(pol.propose(batch, np.random.default_rng(0)))
    drafting = int(np.count_nonzero(plans[0].verify_tokens > 1))  # requests verifying guesses
    assert drafting == 1
    assert plans[0].cpu_time_s - plans[1].cpu_time_s == pytest.approx(
        spec_host_s(ex, SpecWork(), drafting))


def test_the_rule_covers_every_shipped_method():
    covered = {m.split("-")[0] for m in MODEL_METHODS} | {"prompt_lookup", "suffix", "jacobi",
                                                          "lookahead"}
    assert set(BASES) <= covered
    # an engine's per-method syncs are keyed by the names the policies carry
    assert set(SYNC_METHODS) <= set(BASES)
    for name in engine_names():
        spec = load_engine(name)
        assert all(any(s.startswith(f"method_syncs.{m}:") and len(s) > 40
                       for s in spec.sources) for m, _ in spec.method_syncs), name


def test_chain_stretches_stay_exact_with_an_engines_host_work():
    """The chain's fast-forwarded stretches add the same host work its ``propose`` adds, so
    fast-forward and the step-by-step reference stay identical, and the engine's work shows
    in every speculative iteration's draft time."""
    from simulator.scenario import EngineOptions
    from simulator.simulate import simulate
    from tests.helpers import scenario, workload
    from tests.simulator.engine.test_fast_forward import assert_identical

    rng = np.random.default_rng(5)
    wl = workload(np.sort(rng.uniform(0, 5, 24)), rng.integers(8, 300, 24),
                  rng.integers(20, 150, 24))
    base = scenario("chain:num_speculative_tokens=3", hardware="a10", target="opt-1.3b",
                    draft="opt-125m")
    sc = dataclasses.replace(base, execution={"spec": load_engine("vllm-v0.9")})
    on, off = (simulate(dataclasses.replace(sc, engine=EngineOptions(fast_forward=f)),
                        workload=wl) for f in (True, False))
    assert_identical(on, off)
    assert on.info["engine"]["vectorised"] > 0
    plain = simulate(dataclasses.replace(base, engine=EngineOptions(fast_forward=False)),
                     workload=wl)
    assert on.steps["start_s"].iloc[-1] > plain.steps["start_s"].iloc[-1]  # it costs time
