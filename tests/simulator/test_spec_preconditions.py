"""Speculation preconditions, checked where the seeds state them (issue 11, item 8).

- Draft and target share one vocabulary (seed 003 section 3; seed 000 section 2).
- A request too long for the draft model is decoded without speculation (vLLM's rule).
- Model files named in a scenario resolve against the scenario's folder.
- Token trees: test_tree_preconditions.py.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from simulator.cost.drafting import fits_draft_context
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import load_yaml_file
from simulator.models.spec import MODEL_DIR, check_shared_vocabulary, list_models, load_model
from simulator.scenario import _TOP, PolicyConfig, load_scenario
from simulator.simulate import build_deployment, check_runnable, simulate
from tests.helpers import REPO, ConstantCost, scenario, workload

SCENARIO_DIR = REPO / "workloads" / "scenarios"


# ------------------------------------------------------------------ 1. one vocabulary
def test_a_draft_with_another_vocabulary_is_an_error_naming_both():
    sc = scenario("chain:num_speculative_tokens=4", target="llama-2-7b", draft="opt-125m")
    with pytest.raises(SpecsimError) as err:
        build_deployment(sc)
    e = err.value
    assert e.field == "draft" and e.fix
    for part in ("opt-125m", "50272", "llama-2-7b", "32000"):
        assert part in e.message


def test_padded_vocabularies_compare_as_written():
    # OPT-125m and OPT-13b both pad their embedding to 50272: the same field, accepted
    small, big = load_model("opt-125m"), load_model("opt-13b")
    assert small.vocab_size == big.vocab_size == 50272
    assert check_shared_vocabulary(small, big) is small
    assert check_shared_vocabulary(None, big) is None


def test_an_effective_vocab_size_is_matched_on_the_tokenizer():
    # opt-350m's vocab_size (25648) is an effective width for the cost model of its
    # 512-wide embedding; its tokenizer is OPT's 50272 (facebook/opt-350m config.json)
    small = load_model("opt-350m")
    assert small.vocab_size == 25648 and small.tokenizer_vocab == 50272
    assert check_shared_vocabulary(small, load_model("opt-13b")) is small
    with pytest.raises(SpecsimError, match="vocab_size 50272"):
        check_shared_vocabulary(small, load_model("llama-2-7b"))


def test_attached_heads_share_their_base_models_vocabulary():
    # Medusa heads and EAGLE layers reuse the base's LM head: a stated invariant of the catalog
    attached = [load_model(n) for n in list_models() if load_model(n).kind != "decoder"]
    assert attached
    for spec in attached:
        assert spec.vocab_size == load_model(spec.base_model).vocab_size, spec.name


def _shipped_scenarios():
    out = []
    for path in sorted(SCENARIO_DIR.glob("*.yaml")):
        data = load_yaml_file(path)
        if isinstance(data, dict) and data and set(data) <= set(_TOP):   # not sweeps, plans
            out.append(path)
    return out


@pytest.mark.parametrize("path", _shipped_scenarios(), ids=lambda p: p.stem)
def test_every_shipped_pair_shares_a_vocabulary(path):
    sc = load_scenario(path)
    target = load_model(sc.target)
    names = [sc.draft] if sc.draft else []
    params = dict(sc.policy.params)
    if params.get("draft2") not in (None, "ngram"):
        names.append(params["draft2"])
    names += list(params.get("draft_models") or [])
    for name in names:
        assert load_model(name).vocab_size == target.vocab_size, (path.stem, name)
    if sc.disaggregation is None:
        build_deployment(sc)  # and the check itself passes
    else:  # each pool's deployment (the top level has none)
        check_runnable(sc)


def test_merged_and_second_stage_drafts_must_share_the_vocabulary_too():
    base = scenario("none", target="llama-2-7b", draft="llama-68m")
    merged = dataclasses.replace(base, policy=PolicyConfig(
        "specinfer", {"draft_models": ["llama-68m", "opt-125m"]}),
        acceptance={"model": "tree_topk", "coverage": [[0.6, 0.2]]})
    with pytest.raises(SpecsimError) as err:
        simulate(merged, workload=workload([0.0], [10], [10]))
    assert err.value.field == "policy.draft_models" and "opt-125m" in err.value.message
    staged = dataclasses.replace(base, draft="llama-160m", policy=PolicyConfig(
        "staged", {"draft2": "opt-125m"}))
    with pytest.raises(SpecsimError) as err:
        simulate(staged, workload=workload([0.0], [10], [10]))
    assert err.value.field == "policy.draft2" and "50272" in err.value.message


# ------------------------------------------------------------------ 2. the draft's context
def test_the_rule_is_vllms_strict_inequality():
    # vLLM Top1Proposer: speculate only while seq_len + k < the draft's max_model_len
    seq = np.array([2042, 2043, 2044, 3000])
    assert fits_draft_context(seq, 4, 2048).tolist() == [True, True, False, False]
    assert fits_draft_context(seq, 4, None).all()


class RecordingCost(ConstantCost):
    """Constant-time forwards that remember the furthest position each one priced."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.furthest = 0.0

    def step_time(self, new_tokens, context, logits_tokens=None) -> float:
        new, ctx = np.asarray(new_tokens, float), np.asarray(context, float)
        if new.size:
            self.furthest = max(self.furthest, float((ctx + new).max()))
        return self.seconds

    def chain_decode_time(self, context, steps: int) -> float:
        ctx = np.asarray(context, float)
        if ctx.size and steps:
            self.furthest = max(self.furthest, float(ctx.max()) + steps)
        return self.seconds * steps


def _expected_drafts(prompt: int, output: int, k: int, max_context: int) -> int:
    """Speculative steps of one request when every draft is accepted (alpha = 1): a step
    speculates iff prompt + generated + k < max_context and then emits min(k + 1, left)."""
    generated, drafts = 1, 0                     # the prefill emits the first token
    while generated < output:
        if prompt + generated + k < max_context:
            drafts += 1
            generated += min(k + 1, output - generated)
        else:
            generated += 1
    return drafts


# llama-2-7b reads 4096 tokens, llama-68m only 2048: vLLM's own example of this rule
PROMPTS = [100, 2030, 2042, 2043, 3000]
OUTPUTS = [40, 40, 10, 10, 40]


def _long_and_short(sc, k: int):
    wl = workload(10.0 * np.arange(len(PROMPTS)), PROMPTS, OUTPUTS)
    draft_cost = RecordingCost(1e-3)
    res = simulate(sc, workload=wl, target_cost=ConstantCost(1e-2), draft_cost=draft_cost)
    req = res.requests
    assert (req["status"] == "finished").all()
    assert req["emitted_tokens"].tolist() == OUTPUTS
    return req, draft_cost


@pytest.mark.parametrize("policy", [
    PolicyConfig("chain", {"num_speculative_tokens": 4}),
    PolicyConfig("adaptive", {"base": {"name": "chain", "num_speculative_tokens": 4}}),
    PolicyConfig("specinfer", {"expansion": [1, 1, 1, 1]}),       # a chain-shaped tree, k = 4
    PolicyConfig("staged", {"num_speculative_tokens": 4, "draft2": "ngram"}),
], ids=lambda p: p.name)
def test_requests_past_the_drafts_context_are_not_speculated(policy):
    sc = dataclasses.replace(scenario("none", alpha=1.0, target="llama-2-7b",
                                      draft="llama-68m"), policy=policy)
    draft_ctx = load_model("llama-68m").max_context
    req, cost = _long_and_short(sc, 4)
    want = [_expected_drafts(p, o, 4, draft_ctx) for p, o in zip(PROMPTS, OUTPUTS)]
    assert want == [8, 3, 1, 0, 0]              # so both kinds are in the workload
    assert req["num_drafts"].tolist() == want
    assert req["num_draft_tokens"].tolist() == [4 * w for w in want]
    assert req["num_accepted_tokens"].tolist() == [4 * w for w in want]
    assert 0 < cost.furthest <= draft_ctx       # no draft forward priced past its context


def test_branching_trees_skip_long_requests_too():
    sc = scenario("none", target="llama-2-7b", draft="llama-68m")
    sc = dataclasses.replace(sc, policy=PolicyConfig("specinfer", {"expansion": [2, 1]}),
                             acceptance={"model": "token_level"})
    req, cost = _long_and_short(sc, 2)
    # depth 2: speculated while prompt + generated + 2 < 2048
    assert req["num_drafts"].iloc[0] > 0 and req["num_drafts"].iloc[-1] == 0
    assert (req["num_accepted_tokens"] <= 2 * req["num_drafts"]).all()
    assert 0 < cost.furthest <= load_model("llama-68m").max_context


# ------------------------------------------------------------------ 3. model paths
def _write_model(path: Path, catalog_name: str, new_name: str) -> None:
    text = (MODEL_DIR / f"{catalog_name}.yaml").read_text()
    path.write_text(text.replace(f"name: {catalog_name}\n", f"name: {new_name}\n", 1))


def test_model_files_resolve_against_the_scenarios_folder(tmp_path, monkeypatch):
    folder, elsewhere = tmp_path / "scen", tmp_path / "elsewhere"
    (folder / "models").mkdir(parents=True)
    elsewhere.mkdir()
    _write_model(folder / "mydraft.yaml", "llama-68m", "mydraft")
    _write_model(folder / "models" / "mytarget.yaml", "llama-2-7b", "mytarget")
    (folder / "s.yaml").write_text(
        "name: paths\nhardware: a100-40gb\ntarget: models/mytarget.yaml\n"
        "draft: mydraft.yaml\npolicy: {name: chain, num_speculative_tokens: 2}\n"
        "acceptance: {model: iid, alpha: 0.7}\n")
    monkeypatch.chdir(elsewhere)               # neither file is next to the working directory
    sc = load_scenario(Path("..") / "scen" / "s.yaml")
    assert Path(sc.draft) == (folder / "mydraft.yaml").resolve()
    assert Path(sc.target) == (folder / "models" / "mytarget.yaml").resolve()
    dep = build_deployment(sc)
    assert (dep.draft.name, dep.target.name) == ("mydraft", "mytarget")
    res = simulate(sc, workload=workload([0.0, 0.1], [50, 60], [8, 8]))
    assert (res.requests["num_drafts"] > 0).all()
    # an absolute path stays as written; a catalog name is not a path
    absolute = str(folder / "mydraft.yaml")
    (folder / "t.yaml").write_text(f"target: llama-2-7b\ndraft: {absolute}\n")
    sc = load_scenario(folder / "t.yaml")
    assert (sc.target, sc.draft) == ("llama-2-7b", absolute)
