"""``sweep --uncertainty N`` (simulator/planning/sweep_uncertainty.py): each simulated
point's p5/p50/p95 are ``run --uncertainty``'s for that point's scenario; nothing varying
is the point sweep exactly; an analytic sweep or a bad N is refused before any point."""
from __future__ import annotations

import pandas as pd
import pytest
import yaml

from simulator.cli import main
from simulator.planning.executors import SerialExecutor
from simulator.planning.sweep import run_sweep, sweep_from_dict
from simulator.planning.sweep_uncertainty import sweep_intervals
from simulator.scenario import scenario_from_dict
from simulator.uncertainty.propagate import METRICS, propagate
from tests.simulator.test_uncertainty import SYNTHETIC


def sweep(unc: dict) -> dict:
    scenario = {"policy": "chain", "draft": "opt-125m", "workload": SYNTHETIC,
                "acceptance": {"model": "iid", "alpha": 0.75,
                               "uncertainty": {"sd": 0.03, "source": "test"}},
                "uncertainty": unc}
    return {"name": "s", "mode": "simulated", "scenario": scenario,
            "grid": {"gamma": [1, 3]}}


def test_nothing_varying_is_the_point_sweep_exactly():
    spec = sweep_from_dict(sweep({"sources": []}), source="test")
    point = run_sweep(spec, executor="serial")
    out = sweep_intervals(spec, point, 3, executor="serial")
    pd.testing.assert_frame_equal(out[list(point.columns)], point)
    for m in METRICS:
        for q in ("p5", "p50", "p95"):
            assert (out[f"{m}_{q}"] == out[m]).all(), (m, q)


def test_each_points_intervals_are_runs_for_its_scenario():
    # the same Monte Carlo, the same draws: a point's columns are propagate's on its own
    # scenario (run --uncertainty's), and the same seed gives the same intervals
    spec = sweep_from_dict(sweep({"sources": ["acceptance", "cost"]}), source="test")
    point = run_sweep(spec, executor="serial")
    out = sweep_intervals(spec, point, 4, executor="serial")
    pd.testing.assert_frame_equal(out, sweep_intervals(spec, point, 4, executor="serial"))
    for i, raw in enumerate(spec.payloads):
        [row] = propagate([scenario_from_dict(raw, source="t", base_dir=spec.base_dir)], 4,
                          SerialExecutor())
        for m in METRICS:
            assert out.loc[i, f"{m}_p5"] == row[f"{m}_p5"]
            assert out.loc[i, f"{m}_p95"] == row[f"{m}_p95"]
    assert (out["p50_tpot_s_p5"] < out["p50_tpot_s_p95"]).all()


@pytest.mark.parametrize("data, args, field", [
    (None, ["--uncertainty", "0"], "--uncertainty"),
    (None, ["--uncertainty", "x"], "--uncertainty"),
    ({"name": "a", "mode": "analytic", "fixed": {"hardware": "a100-40gb"},
      "grid": {"batch": [1]}}, ["--uncertainty", "3"], "--uncertainty"),
])
def test_a_bad_request_exits_2_before_any_point(tmp_path, capsys, data, args, field):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data or sweep({})))
    out = tmp_path / "r.csv"
    assert main(["sweep", str(path), "--out", str(out), "--no-progress", *args]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err
    assert not out.exists()


def test_the_csv_carries_the_intervals(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sweep({"sources": ["cost"]})))
    assert main(["sweep", str(path), "--out", str(tmp_path / "r.csv"), "--no-progress",
                 "--executor", "serial", "--uncertainty", "3", "--format", "csv"]) == 0
    import io
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert (df["p99_ttft_s_p5"] <= df["p99_ttft_s_p95"]).all() and len(df) == 2
    saved = pd.read_csv(tmp_path / "r.csv")  # the results file stays the point sweep's
    assert "p99_ttft_s_p5" not in saved


def test_without_the_flag_each_point_draws_its_scenario_s_own_draws(tmp_path, capsys):
    # uncertainty.draws: 3 under fixed (a plan's or sweep's fixed: block may now set it)
    # is what --uncertainty 3 gives; with no draws declared, no interval is drawn
    data = sweep({"sources": ["cost"]})
    data["fixed"] = {"uncertainty.draws": 3}
    spec = sweep_from_dict(data, source="test")
    assert all(scenario_from_dict(r, source="t").uncertainty.draws == 3 for r in spec.payloads)
    point = run_sweep(spec, executor="serial")
    pd.testing.assert_frame_equal(sweep_intervals(spec, point, None, executor="serial"),
                                  sweep_intervals(spec, point, 3, executor="serial"))
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["sweep", str(path), "--out", str(tmp_path / "r.csv"), "--no-progress",
                 "--executor", "serial", "--format", "csv"]) == 0
    import io
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert (df["uncertainty_draws"] == 3).all()
    assert (df["p50_tpot_s_p5"] < df["p50_tpot_s_p95"]).all()
    plain = tmp_path / "p.yaml"
    plain.write_text(yaml.safe_dump(sweep({"sources": ["cost"]})))
    assert main(["sweep", str(plain), "--out", str(tmp_path / "q.csv"), "--no-progress",
                 "--executor", "serial", "--format", "csv"]) == 0
    assert "p50_tpot_s_p5" not in capsys.readouterr().out


def test_a_point_may_not_set_uncertainty_only_fixed_may(tmp_path, capsys):
    data = sweep({})
    data["grid"] = {"gamma": [1], "uncertainty.draws": [2, 4]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["sweep", str(path), "--out", str(tmp_path / "r.csv"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "uncertainty.draws" in err and "under fixed" in err and "Traceback" not in err
    assert not (tmp_path / "r.csv").exists()
