"""Sweeps: grid expansion, validation, analytic results, streaming to CSV/Parquet and resume."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import simulator.planning.sweep as sweep_mod
from simulator.inputs.errors import SpecsimError
from simulator.planning.analytic import estimate_table, point_cost_models
from simulator.planning.gamma_map import best_rows
from simulator.planning.sweep import (
    ResultSink,
    SweepSpec,
    expand_grid,
    load_sweep,
    run_sweep,
    sweep_from_dict,
)
from tests.helpers import REPO

SCENARIOS = REPO / "workloads" / "scenarios"


def test_grid_is_the_cartesian_product_crossed_with_points():
    pts = expand_grid({"batch": [1, 2], "gamma": [0, 4, 8]}, [{"policy": "none"},
                                                             {"policy": "chain"}])
    assert len(pts) == 2 * 2 * 3
    assert pts[0] == {"policy": "none", "batch": 1, "gamma": 0}
    assert pts[1] == {"policy": "none", "batch": 1, "gamma": 4}  # last field varies fastest
    assert {tuple(sorted(p.items())) for p in pts}.__len__() == 12


def test_keys_are_stable_and_distinct():
    spec = SweepSpec.analytic(expand_grid({"gamma": [1, 2, 3]}), fixed={"alpha": 0.7})
    again = SweepSpec.analytic(expand_grid({"gamma": [1, 2, 3]}), fixed={"alpha": 0.7})
    assert spec.keys() == again.keys()
    assert len(set(spec.keys())) == 3
    # the same point written with an alias, or as fixed instead of grid, is the same point
    alias = SweepSpec.analytic([{"num_speculative_tokens": 2, "acceptance.alpha": 0.7}])
    assert alias.keys()[0] == spec.keys()[1]
    other = SweepSpec.analytic([{"gamma": 2, "alpha": 0.71}])
    assert other.keys()[0] != spec.keys()[1]


@pytest.mark.parametrize("data, field, words", [
    ({"mode": "analytic", "grid": {}}, "grid", "empty"),
    ({"mode": "analytic"}, "grid", "empty"),
    ({"mode": "analytic", "grid": {"gamma": []}}, "grid.gamma", "empty"),
    ({"mode": "analytic", "grid": {"gamma": 4}}, "grid.gamma", "list"),
    ({"mode": "analytic", "grid": {"foo": [1]}}, "foo", "unknown field"),
    ({"mode": "simulated", "grid": {"foo.bar": [1]}}, "foo.bar", "unknown field"),
    ({"mode": "analytic", "grid": {"workload.rate_per_s": [1]}}, "workload.rate_per_s",
     "not sweepable"),
    ({"mode": "analytic", "grid": {"replicas": [1, 2]}}, "replicas", "not sweepable"),
    ({"mode": "simulated", "grid": {"context": [512]}}, "context", "not sweepable"),
    ({"mode": "simulated", "grid": {"name": ["a", "b"]}}, "name", "not sweepable"),
    ({"mode": "analytic", "grid": {"hardware_dir": ["/tmp"]}}, "hardware_dir", "not sweepable"),
    ({"mode": "simulated", "grid": {"batching.foo": [1]}}, "batching.foo", "unknown key"),
    ({"mode": "analytic", "grid": {"gamma": [-1]}}, "gamma", "at least 0"),
    ({"mode": "analytic", "grid": {"hardware": ["no-such-gpu"]}}, None, "no-such-gpu"),
    ({"mode": "simulated", "grid": {"hardware": ["no-such-gpu"]}}, None, "no-such-gpu"),
    ({"mode": "analytic", "grid": {"gamma": [1]}, "scenario": "default"}, "scenario", "only"),
    ({"mode": "fast", "grid": {"gamma": [1]}}, "mode", "unknown value"),
    ({"mode": "analytic", "grid": {"gamma": [1]}, "colour": 1}, "colour", "unknown key"),
    ({"mode": "analytic", "grid": {"policy": ["tree"]}}, "acceptance", "tree semantics"),
])
def test_bad_sweeps_name_the_field(data, field, words):
    with pytest.raises(SpecsimError) as err:
        sweep_from_dict(data, source="s.yaml")
    if field is not None:
        assert err.value.field == field
    assert words in str(err.value)


def test_analytic_points_match_the_estimate_table():
    def models(gamma):  # the point's cost models per gamma, as `specsim estimate` prices
        return point_cost_models("a100-40gb", None, "opt-13b", "opt-125m", 1, True, None,
                                 "chain", gamma)
    gammas = [0, 1, 2, 4, 8]
    for batch, context in ((1, 512), (32, 128), (8, 4096)):
        ref = estimate_table(models, None, batch=batch, context=context, gammas=gammas,
                             alpha=0.7)
        spec = SweepSpec.analytic(expand_grid({"gamma": gammas}),
                                  fixed={"batch": batch, "context": context, "alpha": 0.7})
        df = run_sweep(spec, executor="serial")
        for col in ("draft_s", "verify_s", "decode_s", "expected_tokens", "speedup"):
            np.testing.assert_allclose(df[col], ref[col], rtol=1e-12)
        # tokens/s is batch * E over the iteration time
        np.testing.assert_allclose(df["tokens_per_s"],
                                   batch * ref["expected_tokens"] / (ref["draft_s"]
                                                                     + ref["verify_s"]))


def test_closed_form_points_follow_leviathan():
    # Leviathan et al. Table 1 (c = 0): alpha 0.8, gamma 5 -> 3.69x (lecture 000, 2.5)
    df = run_sweep(SweepSpec.analytic([{"alpha": 0.8, "gamma": 5, "c": 0.0}]),
                   executor="serial")
    assert round(float(df["speedup"].iloc[0]), 2) == 3.69
    assert np.isnan(df["draft_s"].iloc[0])


def test_kstar_table_of_lecture_003_comes_out_of_an_analytic_sweep():
    # lecture 003, section 7.3: integer search of K in 1..64 with its c = T_p / T_q
    table = [(0.6, 5, 2, 1.40), (0.6, 10, 3, 1.67), (0.7, 10, 4, 1.98), (0.8, 10, 6, 2.47),
             (0.8, 20, 8, 3.09), (0.9, 10, 10, 3.43), (0.9, 20, 13, 4.67), (0.95, 20, 21, 6.60)]
    points = [{"alpha": a, "c_target_over_draft": c} for a, c, _, _ in table]
    spec = SweepSpec.analytic(expand_grid({"gamma": list(range(1, 65))}, points))
    best = best_rows(run_sweep(spec, executor="serial"), ["alpha", "c_target_over_draft"])
    got = {(r.alpha, r.c_target_over_draft): (r.gamma, round(r.speedup, 2))
           for r in best.itertuples()}
    for a, c, k, s in table:
        assert got[(a, c)] == (k, s), (a, c)


def test_shipped_kstar_sweep_reproduces_a_row():
    spec = load_sweep(SCENARIOS / "sweep_kstar.yaml")
    best = best_rows(run_sweep(spec, executor="serial"), ["alpha", "c_target_over_draft"])
    row = best[(best["alpha"] == 0.8) & (best["c_target_over_draft"] == 10)].iloc[0]
    assert row["gamma"] == 6 and round(row["speedup"], 2) == 2.47  # lecture 003, 7.3


def test_shipped_analytic_sweep_runs_without_errors():
    df = run_sweep(load_sweep(SCENARIOS / "sweep_gamma_batch.yaml"), executor="serial")
    assert df["error"].isna().all() and df["speedup"].gt(0).all()
    assert (df.loc[df["gamma"] == 0, "speedup"] == 1.0).all()  # gamma 0 is plain decoding


def _small_spec():
    return SweepSpec.analytic(expand_grid({"batch": [1, 8], "gamma": [0, 1, 2, 3]}),
                              fixed={"alpha": 0.75})


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_an_interrupted_sweep_resumes_where_it_stopped(tmp_path, monkeypatch, suffix):
    spec = _small_spec()
    fresh = run_sweep(spec, executor="serial")
    out = tmp_path / f"r{suffix}"
    real = sweep_mod.evaluate
    calls = []

    def interrupted(task):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(task)
        return real(task)

    monkeypatch.setattr(sweep_mod, "evaluate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, executor="serial", out=out, chunk_size=1)
    assert len(ResultSink(out).read()) == 3  # what finished was written before the stop

    def counting(task):
        calls.append(task)
        return real(task)

    calls.clear()
    monkeypatch.setattr(sweep_mod, "evaluate", counting)
    resumed = run_sweep(spec, executor="serial", out=out)
    assert len(calls) == len(spec) - 3
    calls.clear()
    again = run_sweep(spec, executor="serial", out=out)
    assert calls == []  # everything is done: nothing runs
    for df in (resumed, again):
        assert list(df["key"]) == spec.keys()
        for col in ("speedup", "verify_s", "expected_tokens"):
            np.testing.assert_allclose(df[col].astype(float), fresh[col], rtol=1e-12)


def test_a_half_written_csv_line_is_dropped_on_resume(tmp_path):
    spec = _small_spec()
    out = tmp_path / "r.csv"
    run_sweep(spec, executor="serial", out=out)
    text = out.read_text()
    lines = text.splitlines(keepends=True)
    out.write_text("".join(lines[:-1]) + lines[-1][:20])  # cut the last row mid-line
    df = run_sweep(spec, executor="serial", out=out)
    assert df["error"].isna().all() and len(pd.read_csv(out)) == len(spec)


def test_failed_points_are_rerun_on_resume(tmp_path, monkeypatch):
    spec = _small_spec()
    out = tmp_path / "r.csv"
    real = sweep_mod.evaluate

    def broken(task):
        if task[1]["gamma"] == 2:
            raise RuntimeError("boom")
        return real(task)

    monkeypatch.setattr(sweep_mod, "evaluate", broken)
    df = run_sweep(spec, executor="serial", out=out)
    bad = df["error"].notna()
    assert bad.sum() == 2 and df.loc[bad, "error"].str.contains("boom").all()
    assert df.loc[~bad, "speedup"].notna().all()
    monkeypatch.setattr(sweep_mod, "evaluate", real)
    df = run_sweep(spec, executor="serial", out=out)
    assert df["error"].isna().all()


def test_a_new_output_column_rewrites_the_csv(tmp_path):
    sink = ResultSink(tmp_path / "x.csv")
    sink.add({"key": "a", "error": None, "x": 1.0})
    sink.flush()
    sink.add({"key": "b", "error": None, "x": 2.0, "y": 3.0})
    sink.flush()
    df = sink.read()
    assert list(df["key"]) == ["a", "b"] and np.isnan(df["y"].iloc[0]) and df["y"].iloc[1] == 3


def test_output_needs_a_known_suffix(tmp_path):
    with pytest.raises(SpecsimError, match="csv or .parquet"):
        ResultSink(tmp_path / "results.txt")


def test_resume_keeps_all_digit_keys_as_strings(tmp_path):
    # a key of only digits (or digits with one 'e') would read back as a number and the
    # point would be run again on resume
    path = tmp_path / "sweep.csv"
    keys = ["0123456789012345", "12345e6789012345"]
    # laid out as the sink writes it (point, key first: a sweep resumes only its own file)
    pd.DataFrame({"point": [0, 1], "key": keys, "speedup": [1.5, 2.0],
                  "error": [None, None]}).to_csv(path, index=False)
    store = ResultSink(path)
    assert store.done_keys() == set(keys)
