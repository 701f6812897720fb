"""``run --uncertainty N``: the summary gains p5/p50/p95 columns (CSV and JSON carry them),
nothing varying collapses them onto the point estimate, and a bad N or spread is one line
and exit 2 before any simulation."""
from __future__ import annotations

import io
import json

import pandas as pd
import pytest
import yaml

from simulator.cli import main
from simulator.uncertainty.propagate import METRICS
from tests.simulator.test_uncertainty import SYNTHETIC


def write(tmp_path, sources=None, acceptance=None):
    unc = {} if sources is None else {"sources": sources}
    data = {"policy": "chain", "draft": "opt-125m", "workload": SYNTHETIC,
            "acceptance": acceptance or {"model": "iid", "alpha": 0.75,
                                         "uncertainty": {"sd": 0.03, "source": "test"}},
            "uncertainty": unc}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def run(tmp_path, capsys, *args):
    code = main(["run", *args, "--out", str(tmp_path / "out"), "--no-progress",
                 "--workers", "1"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_csv_carries_the_intervals_and_nothing_varying_is_the_point(tmp_path, capsys):
    code, out, _ = run(tmp_path, capsys, write(tmp_path, sources=[]), "--compare",
                       "none,chain", "--uncertainty", "3", "--format", "csv")
    assert code == 0
    df = pd.read_csv(io.StringIO(out))
    for m in METRICS:
        for q in ("p5", "p50", "p95"):
            assert (df[f"{m}_{q}"] == df[m]).all(), (m, q)
    saved = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert (saved["p50_tpot_s_p95"] == df["p50_tpot_s_p95"]).all()


def test_json_rows_name_the_widest_source(tmp_path, capsys):
    # 5 draws: enough to fit the shares' line on two scalar inputs and an intercept
    code, out, _ = run(tmp_path, capsys, write(tmp_path), "--uncertainty", "5",
                       "--format", "json")
    assert code == 0
    [row] = json.loads(out)
    assert row["p50_tpot_s_p5"] <= row["p50_tpot_s_p50"] <= row["p50_tpot_s_p95"]
    assert row["p50_tpot_s_widest"] in ("acceptance", "cost", "workload")


def test_the_table_names_each_source_of_width(tmp_path, capsys):
    code, out, _ = run(tmp_path, capsys, write(tmp_path), "--uncertainty", "2")
    assert code == 0
    assert "acceptance: shift sd 0.03; source: test" in out
    assert "20th smallest of 21" in out  # the default cost sigma's source
    assert "widest_source" in out


@pytest.mark.parametrize("flag, n, says", [("--uncertainty", "0", ">= 1"),
                                            ("--uncertainty", "10001", "10,000"),
                                            ("--workers", "100000", "256")])
def test_a_bad_number_of_draws_is_refused_before_any_run(tmp_path, capsys, flag, n, says):
    args = ("--uncertainty", "2", flag, n) if flag == "--workers" else (flag, n)
    code = main(["run", write(tmp_path), *args, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert flag in err and says in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_spread_on_a_model_without_probabilities_is_refused_first(tmp_path, capsys):
    acc = {"model": "curve", "lengths": {1: 1.79, 2: 2.27},
           "uncertainty": {"sd": 0.03, "source": "test"}}
    code, _, err = run(tmp_path, capsys, write(tmp_path, acceptance=acc), "--uncertainty", "2")
    assert code == 2
    assert "acceptance.uncertainty" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
