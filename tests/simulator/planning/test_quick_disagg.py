"""``specsim plan --disagg`` and ``--pareto``: the disaggregated candidates (quick_disagg.py),
the concurrency ladder (pareto_search.py) and the CLI end to end on a small model."""
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from simulator.planning.pareto import PER_GPU, PER_USER
from simulator.planning.quick_disagg import all_candidates, link_payload, pool_splits
from simulator.planning.quick_plan import Question, Shape
from simulator.planning.quick_search import fitting
from simulator.scenario import load_scenario, scenario_from_dict
from simulator.simulate import scenario_workload, simulate
from tests.helpers import REPO
from tests.simulator.planning.test_pareto import dominated_by_any

DEEPSEEK = dict(target="deepseek-v3", hardware="h200", gpus=16, ttft_ms=2000, tpot_ms=50,
                isl=1000, osl=100, concurrency=8, methods=("none", "mtp"), gammas=(2,),
                requests=20, disagg=True)
TINY = ("--target", "opt-1.3b", "--hardware", "a10", "--gpus", "2", "--isl", "300", "--osl",
        "30", "--ttft-ms", "500", "--tpot-ms", "20", "--methods", "none,chain", "--gammas",
        "3", "--requests", "8", "--executor", "serial", "--no-progress")


def test_the_splits_are_the_ratios_that_divide_the_gpus():
    # 1:1, 1:2, 1:3, 2:1 of 16: 8+8 and 4+12 (16/3 is no whole number); of 12: all four
    assert pool_splits(16) == [(8, 8), (4, 12)]
    assert pool_splits(12) == [(6, 6), (4, 8), (3, 9), (8, 4)]
    assert pool_splits(1) == []


def test_every_disaggregated_candidate_spends_the_budget_and_its_pools_fit():
    """DeepSeek-V3 on 16 x H200: 671B parameters in FP8 (DeepSeek-V3 technical report,
    arXiv 2412.19437: 671B total) are 671 GB, more than 4 x 141 GB (H200 datasheet) and
    less than 8 x 141 x 0.9 GB: only 8-GPU instances fit, on either side."""
    q = Question(**DEEPSEEK)
    dis = [c for c in all_candidates(q) if c.disaggregated]
    assert dis
    for c in dis:
        assert c.prefill_shape.gpus * c.prefill_replicas + c.shape.gpus * c.replicas == 16
        assert c.devices == 16
        assert c.prefill_shape.data_parallel == c.shape.data_parallel
        d = scenario_from_dict(c.payload, source=c.label).disaggregation
        assert (d.prefill.replicas, d.decode.replicas) == (c.prefill_replicas, c.replicas)
        assert d.prefill.parallelism.devices == c.prefill_shape.gpus
        assert d.decode.parallelism.devices == c.shape.gpus
    workload = scenario_workload(scenario_from_dict(dis[0].payload, source="t"))
    kept, notes = fitting(dis, workload)
    assert {(c.prefill_shape.gpus, c.shape.gpus) for c in kept} == {(8, 8)}
    assert all(min(c.prefill_shape.gpus, c.shape.gpus) < 8 for c in dis if c not in kept)
    assert notes  # each layout left out says so
    # a method that drafts with its own model is not split over attention ranks
    assert not [c for c in dis if c.shape.data_parallel > 1 and c.method not in ("none", "mtp")]


def test_the_link_is_one_nic_per_rank_of_the_smaller_instance():
    assert link_payload(Shape(8), Shape(4))["bandwidth_gb_per_s"] == 4 * 50
    assert link_payload(Shape(1, True, 8), Shape(1, True, 8))["bandwidth_gb_per_s"] == 50


def test_a_disaggregated_winner_s_files_rerun_its_simulation(tmp_path):
    from simulator.planning.quick_deploy import files
    q = Question(target="opt-1.3b", hardware="a10", gpus=2, ttft_ms=500, tpot_ms=20, isl=300,
                 osl=30, concurrency=4, methods=("none",), requests=8, disagg=True)
    win = next(c for c in all_candidates(q) if c.disaggregated)
    texts = files(q, win, "test", "verdict")
    assert sorted(texts) == ["scenario.yaml", "serve.sh"]
    (tmp_path / "scenario.yaml").write_text(texts["scenario.yaml"])
    again = simulate(load_scenario(tmp_path / "scenario.yaml"))
    direct = simulate(scenario_from_dict(win.payload, source="winner"))
    pd.testing.assert_frame_equal(again.requests, direct.requests)
    serve = texts["serve.sh"]
    assert serve.count("vllm serve facebook/opt-1.3b") == 2
    assert serve.count("NixlConnector") == 2
    assert "--disaggregation-mode prefill" in serve and "--disaggregation-mode decode" in serve


def cli(*args, cwd=REPO):
    # this checkout's code from any folder (the run in an empty one shows what it writes)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "simulator.cli", "plan", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=env)


def test_cli_pareto_writes_every_point_and_the_chart(tmp_path):
    out = cli(*TINY, "--concurrency", "4", "--disagg", "--pareto", str(tmp_path / "p.csv"),
              "--report", str(tmp_path / "p.html"))
    assert out.returncode == 0, out.stderr
    pts = pd.read_csv(tmp_path / "p.csv")
    assert list(pts.columns[:2]) == ["series", "candidate"]
    assert {"concurrency", "devices", "output_tok/s", "mean_tpot_ms", PER_GPU, PER_USER,
            "holds", "on_frontier", "on_overall_frontier"} <= set(pts.columns)
    assert set(pts["series"]) == {"aggregated", "aggregated + speculation", "disaggregated",
                                  "disaggregated + speculation"}
    assert sorted(set(pts["concurrency"])) == [1, 2, 4]
    assert (pts["devices"] == 2).all()
    assert np.allclose(pts[PER_GPU], pts["output_tok/s"] / pts["devices"])
    assert np.allclose(pts[PER_USER], 1e3 / pts["mean_tpot_ms"])
    for _, g in pts.groupby("series"):
        assert g["on_frontier"].any()
        beaten = dominated_by_any(g[PER_USER], g[PER_GPU])
        assert (g["on_frontier"].to_numpy() == ~beaten).all()
    html = (tmp_path / "p.html").read_text()
    assert 'name="generator"' in html and "Pareto frontier" in html
    assert "the most output tokens/s per GPU" in out.stdout
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("extra, field", [
    (("--rate", "2"), "--rate"),
    (("--concurrency", "2000"), "--concurrency"),
    (("--out", "t.csv"), "--out"),
])
def test_cli_pareto_bad_flags_exit_2_and_write_nothing(extra, field, tmp_path):
    out = cli(*TINY, "--pareto", "p.csv", *extra, cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert field in out.stderr and "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_pareto_never_replaces_a_file_it_did_not_write(tmp_path):
    mine = tmp_path / "p.csv"
    mine.write_text("my notes\n")
    out = cli(*TINY, "--concurrency", "1", "--pareto", str(mine))
    assert out.returncode == 2 and "--pareto" in out.stderr
    assert mine.read_text() == "my notes\n"


def test_the_points_are_the_same_from_any_executor():
    """Same question, same seed: the same points, one process or a pool."""
    from simulator.planning.pareto_search import pareto_points
    q = Question(target="opt-1.3b", hardware="a10", gpus=2, ttft_ms=500, tpot_ms=20, isl=200,
                 osl=20, concurrency=2, methods=("none",), requests=6, disagg=True)
    serial = pareto_points(q, 2, executor="serial")
    pooled = pareto_points(q, 2, executor="local", workers=2)
    pd.testing.assert_frame_equal(serial.points, pooled.points)
    assert sorted(set(serial.points["deployment"])) == ["aggregated", "disaggregated"]


def test_the_ranking_searches_and_names_the_best_of_each_kind():
    from simulator.planning.quick_search import answer_question
    q = Question(target="opt-1.3b", hardware="a10", gpus=2, ttft_ms=500, tpot_ms=20, isl=300,
                 osl=40, rate=4.0, methods=("none",), requests=20, disagg=True)
    ans = answer_question(q, executor="serial")
    t = ans.table
    held = t[t["holds"]]
    searched = t[t["max_rate_per_s"].notna()]
    # one rate search per deployment kind that holds, each from the asked rate up
    assert sorted(searched["deployment"]) == sorted(set(held["deployment"]))
    assert (searched["max_rate_per_s"] >= 4.0).all()
    assert (t["devices"] == 2).all()
    other = {"aggregated": "disaggregated", "disaggregated": "aggregated"}
    assert f"; {other[t.iloc[0]['deployment']]}, the " in ans.verdict
