"""The ``sweep``, ``gamma-map`` and ``plan`` commands: output, resume, one-line errors."""
from __future__ import annotations

import io
import sys

import pandas as pd
import pytest
import yaml

from simulator.cli import main
from tests.simulator.planning.test_gamma_map_limits import largest_batch

ANALYTIC = {"name": "tiny", "mode": "analytic", "fixed": {"alpha": 0.8},
            "grid": {"batch": [1, 32], "gamma": [0, 2, 4]}}


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_sweep_prints_a_table_and_writes_resumable_results(tmp_path, capsys):
    sweep = _write(tmp_path, "s.yaml", ANALYTIC)
    out = tmp_path / "r.csv"
    assert main(["sweep", sweep, "--executor", "serial", "--out", str(out),
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "sweep tiny: 6 analytic points" in text and "speedup" in text
    first = pd.read_csv(out)
    assert len(first) == 6
    assert main(["sweep", sweep, "--executor", "serial", "--out", str(out), "--no-progress",
                 "--format", "csv"]) == 0
    again = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert len(pd.read_csv(out)) == 6  # nothing was appended: every point was done
    assert again["speedup"].tolist() == first.sort_values("point")["speedup"].tolist()


def test_a_bad_sweep_is_one_line_and_exit_code_2(tmp_path, capsys):
    sweep = _write(tmp_path, "s.yaml", {"mode": "analytic", "grid": {"replicas": [1, 2]}})
    assert main(["sweep", sweep, "--executor", "serial", "--out",
                 str(tmp_path / "r.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'replicas' is not sweepable" in err[0]


def test_the_ray_executor_without_ray_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    sweep = _write(tmp_path, "s.yaml", ANALYTIC)
    assert main(["sweep", sweep, "--executor", "ray", "--out", str(tmp_path / "r.csv")]) == 2
    assert "pip install 'specsim[ray]'" in capsys.readouterr().err


def test_gamma_map_prints_the_map_marks_and_the_crossover(capsys):
    assert main(["gamma-map", "--batch", "1,4096", "--context", "16,512,8192", "--gamma",
                 "0-6", "--alpha", "0.6", "--max-batch", "512"]) == 0
    text = capsys.readouterr().out
    assert "ctx 16" in text and "ctx 8192" in text
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    # batch 4096 fits nowhere on one A100-40GB; OPT-13B stops at 2048 tokens
    assert lines["4096"].split()[1:] == ["x", "KV"] * 2 + ["x", "ctx"]
    assert "x ctx" in lines["1"] and "(x" in lines["1"]
    assert "context 16: no gamma pays from batch" in text
    top = largest_batch(512, 1)  # by hand: the KV blocks of one replica
    assert f"context 512: still pays at the largest batch that fits, {top} (KV limit)" in text
    assert "context 8192: no batch fits" in text and "max_context 2048" in text
    assert "x KV: batch x (context + drafts + 1) tokens exceed the KV budget" in text


def test_gamma_map_csv_has_one_row_per_cell(capsys):
    assert main(["gamma-map", "--batch", "1,8", "--context", "128", "--gamma", "0-4",
                 "--policy", "chain,tree", "--tree-rates", "0.8,0.3", "--tree-width", "1,2",
                 "--format", "csv"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert len(df) == 4 and set(df["policy"]) == {"chain", "tree"}
    assert df["feasible"].all()


def test_gamma_map_csv_leaves_an_infeasible_cell_unranked(capsys):
    assert main(["gamma-map", "--batch", "1,4096", "--context", "128", "--gamma", "0-4",
                 "--format", "csv"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index("batch")
    assert df.loc[1, "feasible"] and df.loc[1, "best_gamma"] >= 1
    assert not df.loc[4096, "feasible"] and df.loc[4096, "limit"] == "kv"
    assert pd.isna(df.loc[4096, "best_gamma"]) and pd.isna(df.loc[4096, "speedup"])


@pytest.mark.parametrize("argv, words", [
    (["gamma-map", "--policy", "tree"], "--tree-rates"),
    (["gamma-map", "--batch", "0,4"], "--batch"),
    (["gamma-map", "--gamma", "4-1"], "--gamma"),
    (["gamma-map", "--policy", "beam"], "unknown policy"),
    (["gamma-map", "--gpu-memory-utilization", "0"], "--gpu-memory-utilization"),
    (["gamma-map", "--batch", "1-1000", "--context", "1,2,3,4,5,6,7", "--gamma", "0-16"],
     "the limit is 100,000"),
])
def test_bad_gamma_map_arguments(argv, words, capsys):
    assert main(argv) == 2
    assert words in capsys.readouterr().err


def test_plan_ranks_deployments_and_names_a_device_without_a_price(tmp_path, capsys):
    plan = {"scenario": "default", "fixed": {"workload.max_requests": 30},
            "slo": {"p99_tpot_ms": 60}, "prices": {"a100-40gb": 1.5},
            "search": {"min_rate_per_s": 1, "max_rate_per_s": 64, "rel_tol": 1.0},
            "candidates": [{"name": "plain", "policy": "none"}, {"name": "spec"}]}
    path = _write(tmp_path, "p.yaml", plan)
    assert main(["plan", path, "--executor", "serial", "--no-progress",
                 "--out", str(tmp_path / "plan.csv")]) == 0
    text = capsys.readouterr().out
    assert "SLO p99 TPOT <= 60 ms" in text and "plain" in text and "spec" in text
    assert len(pd.read_csv(tmp_path / "plan.csv")) == 2
    plan["candidates"].append({"name": "big", "hardware": "h200"})
    assert main(["plan", _write(tmp_path, "p2.yaml", plan), "--executor", "serial"]) == 2
    assert "no price for device 'h200'" in capsys.readouterr().err
