"""The one-line question: ``specsim plan --target ... --gpus ...`` (quick_plan, quick_search,
quick_deploy, cli/plan_quick).  The shipped trace, a small model, serial execution."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from simulator.inputs.errors import SpecsimError
from simulator.planning.quick_plan import Question, candidates, parse_methods, tp_options
from simulator.planning.quick_search import answer_question
from simulator.scenario import load_scenario, scenario_from_dict
from simulator.simulate import simulate

REPO = Path(__file__).resolve().parents[3]
SMALL = dict(target="opt-13b", hardware="a100-40gb", gpus=2, ttft_ms=1000, tpot_ms=60,
             trace="default", rate=2.0, methods=("none", "draft_model"), gammas=(2,),
             requests=40)


@pytest.fixture(scope="module")
def small_answer():
    return answer_question(Question(**SMALL), executor="serial")


def test_parallelism_options_divide_the_gpus_within_a_node():
    from simulator.models.spec import load_model
    from simulator.planning.quick_plan import Shape
    q = Question(**{**SMALL, "gpus": 24})
    # 24 GPUs: TP 1, 2, 4, 8 divide it; 16 would leave a node; MoE adds EP at TP > 1 and
    # data-parallel attention over as many GPUs
    assert tp_options(q, load_model("opt-13b")) == [Shape(1), Shape(2), Shape(4), Shape(8)]
    moe = tp_options(Question(**{**SMALL, "gpus": 4}), load_model("mixtral-8x7b"))
    assert moe == [Shape(1), Shape(2), Shape(2, True), Shape(1, True, 2), Shape(4),
                   Shape(4, True), Shape(1, True, 4)]
    assert [s.gpus for s in moe] == [1, 2, 2, 2, 4, 4, 4]


def test_candidates_are_vllm_arguments_with_hugging_face_ids():
    q = Question(**{**SMALL, "target": "llama-3.1-70b", "hardware": "h100-sxm", "gpus": 8,
                    "methods": ("none", "eagle3"), "gammas": (3,)})
    by = {c.label: c for c in candidates(q)}
    c = by["TP4 x2 eagle3 k=3"]
    assert c.engine_args["model"] == "meta-llama/Llama-3.1-70B"
    assert c.engine_args["data_parallel_size"] == 2
    assert c.engine_args["speculative_config"] == {
        "method": "eagle3", "num_speculative_tokens": 3,
        "model": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"}
    # the scenario it simulates is what --vllm-args makes of those arguments
    sc = scenario_from_dict(c.payload, source="t")
    assert (sc.target, sc.replicas, sc.parallelism.tensor_parallel) == ("llama-3.1-70b", 2, 4)
    assert sc.policy.name == "eagle3" and sc.policy.params["num_speculative_tokens"] == 3
    assert sorted(by) == sorted(f"TP{t} x{8 // t} {m}" for t in (1, 2, 4, 8)
                                for m in ("none", "eagle3 k=3"))


def test_methods_the_target_lacks_are_refused_before_any_simulation():
    with pytest.raises(SpecsimError, match="no MTP modules"):
        candidates(Question(**{**SMALL, "methods": ("mtp",)}))
    with pytest.raises(SpecsimError, match="unknown method"):
        parse_methods("none,jacobi")
    assert parse_methods("none,chain,eagle3,chain") == ("none", "draft_model", "eagle3")


def test_ranking_and_verdict_follow_the_table(small_answer):
    t = small_answer.table
    assert list(t["rank"]) == list(range(1, len(t) + 1))
    holds = list(t["holds"])
    assert holds == sorted(holds, reverse=True)  # every holding row before any other
    searched = t[t["max_rate_per_s"].notna()]
    # one search per method that holds, from the asked rate up: never below it
    assert sorted(searched["method"]) == sorted(set(t.loc[t["holds"], "method"]))
    assert (searched["max_rate_per_s"] >= SMALL["rate"]).all()
    win = t.iloc[0]
    assert win["holds"] and small_answer.winner.label == win["candidate"]
    assert win["p99_tpot_ms"] <= SMALL["tpot_ms"] and win["p99_ttft_ms"] <= SMALL["ttft_ms"]
    assert "hold 2 req/s" in small_answer.verdict
    other = "without speculation" if win["method"] != "none" else "with speculation"
    assert other in small_answer.verdict
    assert small_answer.acceptance["none"].startswith("none")


def test_the_written_config_round_trips_to_the_same_simulation(small_answer, tmp_path):
    from simulator.planning.quick_deploy import files
    q, win = Question(**SMALL), small_answer.winner
    for name, text in files(q, win, "test", small_answer.verdict).items():
        (tmp_path / name).write_text(text)
    again = simulate(load_scenario(tmp_path / "scenario.yaml", None,
                                   tmp_path / "vllm-serve.yaml"))
    direct = simulate(scenario_from_dict(win.payload, source="winner"))
    pd.testing.assert_frame_equal(again.requests, direct.requests)
    row = small_answer.table.iloc[0]
    assert math.isclose(again.summary()["p99_tpot_s"] * 1e3, row["p99_tpot_ms"])
    serve = (tmp_path / "serve.sh").read_text()
    assert "vllm serve facebook/opt-13b" in serve and "sglang.launch_server" in serve


def test_closed_loop_ranks_by_throughput():
    ans = answer_question(Question(**{**SMALL, "rate": None, "concurrency": 8}), executor="serial")
    held = ans.table[ans.table["holds"]]
    assert list(held["output_tok/s"]) == sorted(held["output_tok/s"], reverse=True)
    assert "8 concurrent requests" in ans.verdict
    assert "max_rate_per_s" not in ans.table  # no rate search in a closed loop


def cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "simulator.cli", "plan", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_cli_one_line_question_prints_the_verdict_and_writes_the_winner(tmp_path):
    out = cli("--target", "opt-13b", "--hardware", "a100-40gb", "--gpus", "2", "--trace",
              "default", "--requests", "40", "--rate", "2", "--ttft-ms", "1000", "--tpot-ms",
              "60", "--methods", "none,chain", "--gammas", "2", "--no-progress",
              "--deploy-out", str(tmp_path / "deploy"))
    assert out.returncode == 0, out.stderr
    assert "2 x a100-40gb as " in out.stdout and " hold 2 req/s at p99 TTFT" in out.stdout
    config = yaml.safe_load((tmp_path / "deploy" / "vllm-serve.yaml").read_text())
    assert config["model"] == "facebook/opt-13b"
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("args, field", [
    (("--hardware", "a100-40gb"), "--gpus"),
    (("--hardware", "a100-40gb", "--gpus", "1", "--isl", "100", "--rate", "1", "--ttft-ms",
      "1", "--tpot-ms", "1"), "--isl"),
    (("--hardware", "a100-40gb", "--gpus", "1", "--isl", "100", "--osl", "10", "--ttft-ms",
      "1", "--tpot-ms", "1"), "--rate"),
    (("--hardware", "b900", "--gpus", "1", "--isl", "100", "--osl", "10", "--rate", "1",
      "--ttft-ms", "1", "--tpot-ms", "1"), "--hardware"),
    (("--hardware", "a100-40gb", "--gpus", "1", "--isl", "100", "--osl", "10", "--rate", "1",
      "--ttft-ms", "1", "--tpot-ms", "1", "--methods", "mtp"), "--methods"),
])
def test_cli_bad_questions_are_one_line_and_exit_2(args, field, tmp_path):
    out = cli("--target", "opt-13b", *args, "--deploy-out", str(tmp_path / "d"), cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert field in out.stderr and "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_cli_plan_yaml_and_flags_together_are_refused(tmp_path):
    out = cli(str(REPO / "workloads/scenarios/plan_default.yaml"), "--target", "opt-13b")
    assert out.returncode == 2 and "--target" in out.stderr


def test_a_moe_targets_replicas_are_separate_servers():
    q = Question(**{**SMALL, "target": "mixtral-8x7b", "hardware": "h100-sxm", "gpus": 4,
                    "methods": ("none",)})
    by = {c.label: c for c in candidates(q)}
    c = by["TP2+EP x2 none"]
    assert "data_parallel_size" not in c.engine_args and c.payload["replicas"] == 2
    assert c.engine_args["enable_expert_parallel"] is True
    from simulator.planning.quick_deploy import serve_text
    assert "2 replicas: run this on each of 2 groups of 2 GPUs" in serve_text(c, "h", "v")


def test_data_parallel_attention_candidates_round_trip_through_vllm_arguments():
    # vLLM --data-parallel-size N --enable-expert-parallel (TP 1) is DP attention; its
    # scheduler limits are per rank, the replica's N x them
    q = Question(**{**SMALL, "target": "deepseek-v3", "hardware": "h200", "gpus": 8,
                    "methods": ("none", "mtp"), "gammas": (1,)})
    by = {c.label: c for c in candidates(q)}
    c = by["DP8+EP x1 mtp k=1"]
    assert c.engine_args["data_parallel_size"] == 8 and c.engine_args["tensor_parallel_size"] == 1
    sc = scenario_from_dict(c.payload, source="t")
    assert sc.parallelism.data_parallel_attention == 8 and sc.replicas == 1
    assert sc.batching.max_num_seqs == 8 * c.engine_args["max_num_seqs"]
    from simulator.planning.quick_deploy import sglang_command
    assert "--tp-size 8 --dp-size 8 --enable-dp-attention --ep-size 8" in sglang_command(c)


def test_a_draft_the_layout_cannot_shard_skips_that_candidate_not_the_plan():
    # opt-125m has 12 attention heads: at TP8 vLLM shards the draft 8 ways as well
    # (draft_tensor_parallel_size defaults to the target's), which 12 heads do not allow
    from simulator.planning.quick_search import fitting
    from simulator.run_setup import scenario_workload
    q = Question(**{**SMALL, "hardware": "a100-80gb", "gpus": 8})
    cands = candidates(q)
    workload = scenario_workload(scenario_from_dict(cands[0].payload, source="t"))
    kept, notes = fitting(cands, workload)
    dropped = [c for c in cands if c not in kept]
    assert [(c.shape.name, c.method) for c in dropped] == [("TP8", "draft_model")]
    assert any(c.shape.name == "TP8" and c.method == "none" for c in kept)
    assert notes == ["TP8 x1: draft_model cannot run (the draft opt-125m has 12 attention "
                     "heads, not divisible by its tensor parallel degree 8)"]
