"""vLLM-shaped input: ``speculative_config`` and ``run --vllm-args`` map onto native scenarios.

vLLM's keys and defaults are read from vllm-project/vllm, vllm/config/speculative.py
(``SpeculativeConfig``: method inference in ``__post_init__``, the ngram bounds defaulting
to 5 and 5, suffix's num_speculative_tokens defaulting to suffix_decoding_max_tree_depth,
MTP's to ``n_predict``, the deprecated MTP method names; ``disable_by_batch_size`` and
``speculative_token_tree`` from the vLLM 0.10 version of the file), and Medusa's chain from
vllm/v1/spec_decode/medusa.py (each head's argmax).
"""
import copy
import json
import subprocess
import sys

import pandas as pd
import pandas.testing as pdt
import pytest
import yaml

from simulator.cli import main
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import load_yaml_file
from simulator.scenario import scenario_from_dict
from simulator.simulate import simulate
from tests.helpers import REPO

SCENARIOS = REPO / "workloads" / "scenarios"


def shipped(name: str, **changes) -> dict:
    """A shipped scenario without its policy and draft, with ``changes`` written over it."""
    data = dict(load_yaml_file(SCENARIOS / f"{name}.yaml"))
    data.pop("policy", None)
    data.pop("draft", None)
    data.update(copy.deepcopy(changes))
    return data


def assert_same_simulation(native: dict, vllm: dict, k: int, exact: bool) -> None:
    """Identical frames; and vLLM's k: at most k draft tokens per decoding request per
    step (exactly k in some step where the method always drafts k)."""
    a = scenario_from_dict(native, source="native", base_dir=SCENARIOS)
    b = scenario_from_dict(vllm, source="vllm", base_dir=SCENARIOS)
    assert (a.policy.name, dict(a.policy.raw), a.draft, a.parallelism) == \
        (b.policy.name, dict(b.policy.raw), b.draft, b.parallelism)
    ra, rb = simulate(a), simulate(b)
    assert ra.label == rb.label
    assert len(ra.requests) > 0 and len(ra.steps) > 0
    pdt.assert_frame_equal(ra.requests, rb.requests)
    pdt.assert_frame_equal(ra.steps, rb.steps)
    steps = rb.steps
    assert steps["draft_tokens"].sum() > 0
    assert (steps["draft_tokens"] <= k * steps["num_decode"]).all()
    assert not exact or (steps["draft_tokens"] == k * steps["num_decode"]).any()


SMALL = {"trace": "default", "max_requests": 6}
CASES = {
    # ngram: only prompt_lookup_max given -> min = max (vLLM's __post_init__)
    "ngram": ("prompt_lookup", {"workload": {"tokens": {
        "kind": "code_edit", "num_requests": 5, "arrival": {"process": "poisson",
                                                             "rate_per_s": 0.4},
        "code": {"dist": "uniform", "min_tokens": 200, "max_tokens": 400}}}},
        {"name": "prompt_lookup", "num_speculative_tokens": 8, "prompt_lookup_min": 4,
         "prompt_lookup_max": 4},
        {"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4}),
    "draft_model": ("default", {"workload": SMALL, "native": {
                        "draft": "opt-125m", "parallelism": {"draft_tensor_parallel_size": 1}}},
                    {"name": "chain", "num_speculative_tokens": 3},
                    {"model": "facebook/opt-125m", "num_speculative_tokens": 3,
                     "draft_tensor_parallel_size": 1}),
    "eagle": ("eagle", {"workload": SMALL},
              {"name": "eagle", "model": "eagle-vicuna-7b", "num_speculative_tokens": 5},
              {"model": "yuhuili/EAGLE-Vicuna-7B-v1.3", "num_speculative_tokens": 5}),
    "eagle_tree": ("eagle", {"workload": SMALL},
                   {"name": "eagle", "model": "eagle-vicuna-7b",
                    "choices": [[0], [1], [0, 0], [0, 1], [0, 0, 0]]},
                   {"method": "eagle", "model": "eagle-vicuna-7b",
                    "speculative_token_tree": "[(0, 0, 0), (0,), (0, 1), (1,), (0, 0)]",
                    "num_speculative_tokens": 5}),
    "eagle3": ("default", {"target": "llama-3.1-8b", "hardware": "h100-sxm",
                           "workload": SMALL},
               {"name": "eagle3", "model": "eagle3-llama-3.1-8b-instruct",
                "num_speculative_tokens": 3},
               {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "num_speculative_tokens": 3}),
    # vLLM's Medusa drafts the argmax of each of the first k heads: a chain of k
    "medusa": ("medusa", {"workload": SMALL},
               {"name": "medusa", "model": "medusa-vicuna-7b", "num_heads": 3,
                "choices": [[0], [0, 0], [0, 0, 0]]},
               {"method": "medusa", "model": "medusa-vicuna-7b",
                "num_speculative_tokens": 3}),
    # deepseek_mtp: vLLM's older name, replaced by mtp; k defaults to n_predict (1 module)
    "mtp": ("mtp_moe", {"workload": {"trace": "default", "max_requests": 3}},
            {"name": "mtp", "num_speculative_tokens": 1}, {"method": "deepseek_mtp"}),
    "mtp_inferred": ("mtp_moe", {"workload": {"trace": "default", "max_requests": 3}},
                     {"name": "mtp", "num_speculative_tokens": 2},
                     {"model": "deepseek-ai/DeepSeek-V3", "num_speculative_tokens": 2}),
    # suffix: num_speculative_tokens defaults to suffix_decoding_max_tree_depth
    "suffix": ("suffix", {"workload": {"tokens": {"kind": "agent_loop", "num_requests": 6,
                                                  "arrival": {"process": "poisson",
                                                              "rate_per_s": 1.0}}}},
               {"name": "suffix", "num_speculative_tokens": 12,
                "suffix_decoding_max_tree_depth": 12, "suffix_decoding_min_token_prob": 0.2},
               {"method": "suffix", "suffix_decoding_max_tree_depth": 12,
                "suffix_decoding_min_token_prob": 0.2}),
    "adaptive": ("default", {"workload": SMALL, "native": {"draft": "opt-125m"}},
                 {"name": "adaptive", "base": {"name": "chain", "num_speculative_tokens": 4},
                  "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 64, 1]],
                  "speculative_disable_by_batch_size": 5},
                 {"model": "opt-125m", "num_speculative_tokens": 4,
                  "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 64, 1]],
                  "disable_by_batch_size": 5}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_speculative_config_is_the_native_policy(case):
    base, changes, policy, spec = CASES[case]
    common = {k: v for k, v in changes.items() if k != "native"}
    native = shipped(base, **common, **changes.get("native", {}), policy=policy)
    k = {"ngram": 8, "draft_model": 3, "eagle": 5, "eagle_tree": 5, "eagle3": 3, "medusa": 3,
         "mtp": 1, "mtp_inferred": 2, "suffix": 12, "adaptive": 4}[case]
    assert_same_simulation(native, shipped(base, **common, speculative_config=spec), k,
                           exact=case not in ("ngram", "suffix"))


def test_ngram_defaults_are_vllms():
    sc = scenario_from_dict({"speculative_config": {"method": "ngram",
                                                    "num_speculative_tokens": 3}}, source="t")
    assert dict(sc.policy.raw) == {"num_speculative_tokens": 3, "prompt_lookup_min": 5,
                                   "prompt_lookup_max": 5}
    sc = scenario_from_dict({"speculative_config": {"model": "[ngram]", "prompt_lookup_min": 2,
                                                    "num_speculative_tokens": 3}}, source="t")
    assert (sc.policy.name, sc.policy.params["prompt_lookup_max"]) == ("prompt_lookup", 2)


def test_speculative_config_as_a_json_string():
    text = json.dumps({"model": "eagle-vicuna-7b", "num_speculative_tokens": 4})
    sc = scenario_from_dict({"target": "vicuna-7b", "speculative_config": text}, source="t")
    assert (sc.policy.name, sc.policy.params["model"]) == ("eagle", "eagle-vicuna-7b")


@pytest.mark.parametrize("data,field,needle", [
    ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "bogus": 1}},
     "speculative_config.bogus", "valid keys are"),
    ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 3,
                             "revision": "main"}},
     "speculative_config.revision", "does not change the simulation"),
    ({"policy": "chain", "speculative_config": {"method": "ngram",
                                                "num_speculative_tokens": 3}},
     "speculative_config", "remove policy"),
    ({"draft": "opt-125m", "speculative_config": {"method": "ngram",
                                                  "num_speculative_tokens": 3}},
     "speculative_config", "remove draft"),
    ({"speculative_config": {"method": "lookahead", "num_speculative_tokens": 3}},
     "speculative_config.method", "ngram, draft_model, eagle"),
    ({"target": "vicuna-7b", "speculative_config": {
        "model": "yuhuili/EAGLE-Vicuna-99B", "num_speculative_tokens": 3}},
     "speculative_config.model", "eagle-vicuna-7b (yuhuili/EAGLE-Vicuna-7B-v1.3)"),
    ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 3,
                             "suffix_decoding_max_tree_depth": 8}},
     "speculative_config.suffix_decoding_max_tree_depth", "only used with method: suffix"),
    ({"speculative_config": {"method": "mtp", "num_speculative_tokens": 2}},
     "speculative_config.method", "no MTP modules"),
    ({"speculative_config": {"method": "eagle", "num_speculative_tokens": 2}},
     "speculative_config.model", "needs a model"),
    ({"target": "vicuna-7b", "speculative_config": {"model": "medusa-vicuna-7b"}},
     "speculative_config.num_speculative_tokens", "needs num_speculative_tokens"),
    ({"target": "vicuna-7b", "speculative_config": {
        "method": "eagle", "model": "eagle-vicuna-7b", "num_speculative_tokens": 3,
        "speculative_token_tree": "[(0,), (1,)]"}},
     "speculative_config.num_speculative_tokens", "the tree has 2 nodes"),
])
def test_bad_speculative_config_is_one_error_naming_the_field(data, field, needle):
    with pytest.raises(SpecsimError) as err:
        scenario_from_dict(data, source="s.yaml")
    assert err.value.field == field
    assert needle in str(err.value)


def test_an_hf_id_lists_only_heads_of_its_kind():
    with pytest.raises(SpecsimError) as err:
        scenario_from_dict({"target": "vicuna-7b", "speculative_config": {
            "model": "someone/EAGLE-tiny", "num_speculative_tokens": 3}}, source="s.yaml")
    text = str(err.value)
    assert "eagle-vicuna-7b" in text and "opt-125m" not in text and "medusa" not in text


def _write(path, data, as_json=False):
    path.write_text(json.dumps(data) if as_json else yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("as_json", [False, True])
def test_run_vllm_args_equals_the_native_scenario(tmp_path, as_json):
    base = {"name": "v", "target": "opt-6.7b", "hardware": "a100-40gb",
            "workload": {"trace": "default", "max_requests": 5},
            "batching": {"max_num_seqs": 64}, "policy": {"name": "none"}}
    native = dict(base, target="opt-13b", draft="opt-125m", batching={
        "max_num_seqs": 8, "max_num_batched_tokens": 1024, "enable_chunked_prefill": True,
        "block_size": 32, "gpu_memory_utilization": 0.85},
        policy={"name": "chain", "num_speculative_tokens": 3},
        execution={"enforce_eager": True})
    spec = {"model": "opt-125m", "num_speculative_tokens": 3}
    args = {"model": "facebook/opt-13b", "max-num-seqs": 8, "max_num_batched_tokens": 1024,
            "enable-chunked-prefill": True, "block_size": 32, "gpu_memory_utilization": 0.85,
            "tensor_parallel_size": 1, "enforce-eager": True,
            "speculative-config": json.dumps(spec) if as_json else spec}
    sc_path = _write(tmp_path / "base.yaml", base)
    args_path = _write(tmp_path / ("args.json" if as_json else "args.yaml"), args, as_json)
    native_path = _write(tmp_path / "native.yaml", native)
    common = ["--no-progress", "--format", "json"]
    assert main(["run", str(sc_path), "--vllm-args", str(args_path), "--out",
                 str(tmp_path / "a"), *common]) == 0
    assert main(["run", str(native_path), "--out", str(tmp_path / "b"), *common]) == 0
    a, b = (sorted(p.name for p in (tmp_path / d).iterdir()) for d in "ab")
    assert a == b and "summary.csv" in a and any(n.endswith(".steps.parquet") for n in a)
    for name in a:
        if name.endswith(".csv"):
            assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()
        if name.endswith(".parquet"):
            pdt.assert_frame_equal(pd.read_parquet(tmp_path / "a" / name),
                                   pd.read_parquet(tmp_path / "b" / name))


def test_vllm_args_values_in_vllms_spelling(tmp_path):
    from simulator.vllm_args import load_vllm_args
    args = load_vllm_args(_write(tmp_path / "a.yaml", {
        "kv-cache-dtype": "fp8_e4m3", "quantization": "modelopt_fp4",
        "enable_expert_parallel": True, "speculative_config": '{"method": "ngram"}'}))
    assert args == {"kv_cache_dtype": "fp8", "quantization": "nvfp4",
                    "enable_expert_parallel": True, "speculative_config": {"method": "ngram"}}
    with pytest.raises(SpecsimError) as err:
        load_vllm_args(_write(tmp_path / "b.yaml", {"block-size": 16, "block_size": 32}))
    assert err.value.field == "block_size" and "twice" in str(err.value)



def test_a_real_vllm_serve_config_runs_in_one_go(tmp_path):
    """A `vllm serve --config` file as people write it (issue 37: six runs and edits): its
    serving-only keys are read and listed, dtype and max-model-len map, an -Instruct id
    resolves to the catalogued shapes."""
    from simulator.vllm_args import (VLLM_VERSION, apply_vllm_args, load_vllm_args,
                                     serving_only_keys)
    path = _write(tmp_path / "serve.yaml", {
        "model": "meta-llama/Llama-3.1-8B-Instruct", "host": "0.0.0.0", "port": 8000,
        "served-model-name": "llama", "dtype": "bfloat16", "max-model-len": 8192,
        "max-num-seqs": 64, "tensor-parallel-size": 1})
    args = load_vllm_args(path)
    assert args == {"model": "llama-3.1-8b", "dtype": "bf16", "max_model_len": 8192,
                    "max_num_seqs": 64, "tensor_parallel_size": 1}
    assert serving_only_keys(path) == ["host", "port", "served-model-name"]
    sc = scenario_from_dict(apply_vllm_args({"draft": None, "policy": {"name": "none"}},
                                            args), source="t")
    assert (sc.target, sc.quantization, sc.batching.max_model_len) == \
        ("llama-3.1-8b", "bf16", 8192)
    assert VLLM_VERSION == "0.11.0"
    # dtype is the activations' when the weights are quantised; auto keeps the file's
    both = _write(tmp_path / "q.yaml", {"dtype": "float16", "quantization": "fp8"})
    assert load_vllm_args(both) == {"quantization": "fp8"}
    assert load_vllm_args(_write(tmp_path / "auto.yaml", {"dtype": "auto"})) == {}


def test_every_problem_in_an_args_file_at_once(tmp_path):
    from simulator.vllm_args import load_vllm_args
    with pytest.raises(SpecsimError) as err:
        load_vllm_args(_write(tmp_path / "bad.yaml", {"swap_space": 4, "max-num-seqs": 0,
                                                      "dtype": "float32"}))
    text = str(err.value)
    assert text.count(";") == 2 and "3 problems" in text
    assert "swap_space" in text and "max_num_seqs" in text and "dtype" in text


def test_run_vllm_args_unknown_key_exits_2_without_traceback(tmp_path):
    args = _write(tmp_path / "args.yaml", {"max-num-seqs": 8, "swap_space": 4})
    out = subprocess.run([sys.executable, "-m", "simulator.cli", "run", "--vllm-args",
                          str(args), "--out", str(tmp_path / "o"), "--no-progress"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "swap_space" in out.stderr and "max_num_seqs" in out.stderr
    assert not (tmp_path / "o").exists()


def test_data_parallel_size_is_replicas_of_a_dense_model_and_dp_attention_with_ep():
    from simulator.vllm_args import apply_vllm_args, vllm_args_from_mapping
    # vLLM's data-parallel deployment of a dense model: independent engine replicas
    args = vllm_args_from_mapping({"model": "opt-13b", "data-parallel-size": 3}, source="t")
    assert apply_vllm_args({}, args)["replicas"] == 3
    # with expert parallelism the ranks share the experts: data-parallel attention, the
    # per-rank scheduler limits (each DP rank's engine core) summed into the replica's
    args = vllm_args_from_mapping({"model": "deepseek-v3", "data_parallel_size": 8,
                                   "enable_expert_parallel": True, "max_num_seqs": 32,
                                   "max_num_batched_tokens": 4096}, source="t")
    data = apply_vllm_args({"replicas": 2}, args)
    assert data["parallelism"] == {"tensor_parallel": 1, "data_parallel_attention": 8,
                                   "expert_parallel": True}
    assert (data["batching"]["max_num_seqs"], data["batching"]["max_num_batched_tokens"]) \
        == (8 * 32, 8 * 4096)
    assert data["replicas"] == 2  # the scenario's replicas are separate servers
    # per-rank limits must be said; attention TP inside a rank is not modelled
    with pytest.raises(SpecsimError, match="per rank|own scheduler") as err:
        vllm_args_from_mapping({"model": "deepseek-v3", "data_parallel_size": 2,
                                "enable_expert_parallel": True}, source="t")
    assert err.value.field == "max_num_seqs"
    with pytest.raises(SpecsimError, match="attention TP inside"):
        vllm_args_from_mapping({"model": "deepseek-v3", "data_parallel_size": 2,
                                "tensor_parallel_size": 4, "enable_expert_parallel": True,
                                "max_num_seqs": 8, "max_num_batched_tokens": 512},
                               source="t")


def test_data_parallel_size_on_a_moe_target_is_not_replicas():
    from simulator.vllm_args import apply_vllm_args, vllm_args_from_mapping
    # vLLM shards a MoE model's experts over every DP rank even without EP
    args = vllm_args_from_mapping({"model": "mixtral-8x7b", "data_parallel_size": 2},
                                  source="t")
    with pytest.raises(SpecsimError, match="mixture of experts") as err:
        apply_vllm_args({}, args)
    assert err.value.field == "data_parallel_size"


DP_EP = {"model": "deepseek-v3", "data-parallel-size": 8, "enable-expert-parallel": True,
         "max-num-seqs": 32, "max-num-batched-tokens": 4096}


def test_vllm_dbo_and_eplb_map_onto_overlap_and_eplb():
    from simulator.vllm_args import apply_vllm_args, vllm_args_from_mapping
    # vLLM 0.11 (vllm/config/parallel.py): --enable-dbo with the thresholds' defaults
    # (dbo_decode_token_threshold 32, dbo_prefill_token_threshold 512), --enable-eplb with
    # --eplb-config's num_redundant_experts (a JSON string on the CLI), --all2all-backend
    args = vllm_args_from_mapping({**DP_EP, "enable-dbo": True, "enable-eplb": True,
                                   "all2all-backend": "deepep_high_throughput",
                                   "eplb-config": '{"num_redundant_experts": 32, '
                                                  '"window_size": 1000}'}, source="t")
    par = scenario_from_dict(apply_vllm_args({"hardware": "h100-sxm", "policy": {
        "name": "none"}}, args), source="t").parallelism
    assert (par.two_batch_overlap, par.tbo_decode_token_threshold,
            par.tbo_prefill_token_threshold) == (True, 32, 512)
    assert (par.eplb, par.redundant_experts, par.moe_dispatch) == (True, 32, "deepep_normal")
    assert par.tbo_schedule == "vllm"  # vLLM's split at the token midpoint, its schedule
    # thresholds as given; the deprecated --num-redundant-experts; the low-latency backend
    args = vllm_args_from_mapping({**DP_EP, "enable_dbo": True,
                                   "dbo_decode_token_threshold": 0,
                                   "dbo-prefill-token-threshold": 64, "enable_eplb": True,
                                   "num_redundant_experts": 8,
                                   "all2all_backend": "deepep_low_latency"}, source="t")
    par = scenario_from_dict(apply_vllm_args({"hardware": "h100-sxm", "policy": {
        "name": "none"}}, args), source="t").parallelism
    assert (par.tbo_decode_token_threshold, par.tbo_prefill_token_threshold,
            par.redundant_experts, par.moe_dispatch) == (0, 64, 8, "all_to_all")


@pytest.mark.parametrize("args,field", [
    ({"enable_dbo": True}, "enable_dbo"),                     # no DP + EP
    ({"enable_eplb": True}, "enable_eplb"),                   # no EP
    ({**DP_EP, "eplb_config": {"num_redundant_experts": 4}},
     "eplb_config.num_redundant_experts"),                    # no EPLB
    ({**DP_EP, "dbo_decode_token_threshold": 16}, "dbo_decode_token_threshold"),
    ({**DP_EP, "enable_dbo": True, "dbo_prefill_token_threshold": -1},
     "dbo_prefill_token_threshold"),
    ({**DP_EP, "all2all_backend": "pplx"}, "all2all_backend"),
    ({**DP_EP, "enable_eplb": True, "eplb_config": {"num_redundant": 4}},
     "eplb_config.num_redundant"),
    ({**DP_EP, "enable_eplb": True, "eplb_config": {"num_redundant_experts": 4},
      "num_redundant_experts": 4}, "num_redundant_experts")])
def test_bad_dbo_and_eplb_arguments_name_their_field(args, field):
    from simulator.vllm_args import vllm_args_from_mapping
    with pytest.raises(SpecsimError) as err:
        vllm_args_from_mapping(args, source="t")
    assert err.value.field == field


def test_run_vllm_dbo_without_deepep_exits_2_naming_it(tmp_path):
    # vLLM's DBO needs DeepEP's all-to-all (docs/design/dbo.md); the scenario's dispatch is
    # the all-gather default, so the run is refused before anything is written
    args = _write(tmp_path / "args.yaml", {**DP_EP, "enable-dbo": True})
    out = subprocess.run([sys.executable, "-m", "simulator.cli", "run", "--vllm-args",
                          str(args), "--out", str(tmp_path / "o"), "--no-progress"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and "enable_dbo" in out.stderr
    assert "all2all_backend" in out.stderr and not (tmp_path / "o").exists()
