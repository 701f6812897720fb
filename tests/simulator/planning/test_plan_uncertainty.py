"""``plan --uncertainty N`` (simulator/planning/plan_uncertainty.py): nothing varying is the
point plan exactly, the same seed gives the same intervals, a cost factor f scales a
scale-free capacity by 1/f (so the rate interval is the point rate over the quantiles of
f), and the replica search from a warm start finds what enumeration finds."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from simulator.cli import main
from simulator.inputs.errors import SpecsimError
from simulator.planning.plan import plan, plan_from_dict
from simulator.planning.plan_uncertainty import fewest_holding, plan_intervals
from simulator.scenario import scenario_from_dict
from simulator.uncertainty.draws import draw_inputs
from simulator.uncertainty.propagate import INTERVAL_METHOD
from tests.simulator.test_uncertainty import SYNTHETIC


def toy(unc: dict, slo: dict | None = None, target: float | None = 4.0, **kw) -> dict:
    """A plan of one ``none`` deployment on the 24-request synthetic trace."""
    data = {"scenario": {"policy": "none", "workload": SYNTHETIC, "uncertainty": unc},
            "slo": slo or {"p99_ttft_ms": 1000, "p99_tpot_ms": 60}, "max_replicas": 8,
            "prices": {"a100-40gb": 2.0}, "candidates": [{"name": "a100"}], **kw}
    if target is not None:
        data["target_rate_per_s"] = target
    return data


@pytest.mark.parametrize("most", [1, 2, 5, 16])
def test_the_warm_replica_search_finds_the_enumerated_threshold(most):
    # a monotone predicate, false below t and true from t: the fewest holding is t (NaN
    # beyond most), from every start
    for t in range(1, most + 2):
        for start in range(0, most + 2):
            calls: list[int] = []

            def ok(n: int) -> bool:
                assert 1 <= n <= most
                calls.append(n)
                return n >= t
            got = fewest_holding(ok, start, most)
            assert (math.isnan(got) if t > most else got == t), (t, start, got)


@pytest.mark.parametrize("unc", [{"sources": []},
                                 {"sources": ["cost"], "cost": {"sigma": 0.0, "source": "t"}}])
def test_with_nothing_varying_the_intervals_are_the_point_plan(unc):
    spec = plan_from_dict(toy(unc), source="test")
    point = plan(spec)
    out = plan_intervals(spec, point, 3, executor="serial")
    pd.testing.assert_frame_equal(out[list(point.columns)], point)
    assert plan(spec).equals(point)  # and the point plan itself is unchanged
    row = out.iloc[0]
    assert row["draw_evaluations"] == 0  # no draw searched: each is the point answer
    for m in ("max_rate_per_s", "cost_per_million_tokens", "min_replicas_for_target",
              "cost_per_million_tokens_at_target"):
        assert row[f"{m}_p5"] == row[f"{m}_p50"] == row[f"{m}_p95"] == row[m], m


def test_the_same_seed_gives_the_same_intervals():
    spec = plan_from_dict(toy({"sources": ["cost", "workload"]}), source="test")
    point = plan(spec)
    a = plan_intervals(spec, point, 4, executor="serial")
    b = plan_intervals(spec, point, 4, executor="serial")
    pd.testing.assert_frame_equal(a, b)
    assert a.iloc[0]["max_rate_per_s_p5"] <= a.iloc[0]["max_rate_per_s_p95"]
    assert a.iloc[0]["max_rate_per_s_widest"] in ("cost", "workload")


def test_a_cost_factor_scales_a_scale_free_capacity_by_its_inverse():
    # One trace (the workload does not vary), no speculation, and an SLO that only the
    # backlog check binds (p99 TTFT <= 1e6 s): every step f times longer and the trace f
    # times slower is the same run in f-times-longer units, and the in-flight share at the
    # last arrival is unit-free, so the sustained rate under f is the point's over f.  The
    # search's answers are on its lattice, each within one step (1 + rel_tol) of its
    # threshold: each quantile of the rates is within that step of the point rate over
    # the opposite quantile of f.
    sigma, n = 0.2, 12
    data = toy({"sources": ["cost"], "cost": {"sigma": sigma, "source": "t"}},
               slo={"p99_ttft_ms": 1e9}, target=None)
    spec = plan_from_dict(data, source="test")
    point = plan(spec)
    row = plan_intervals(spec, point, n, executor="serial").iloc[0]
    unc = scenario_from_dict(spec.candidates[0][1], source="t").uncertainty
    f = np.array([d.cost_factor for d in draw_inputs(0, n, unc)])
    assert f.std() > 0.1  # the draws do spread
    step = 1.0 + spec.search.rel_tol
    for name, q in ((5, 0.95), (50, 0.5), (95, 0.05)):
        expect = point.iloc[0]["max_rate_per_s"] / np.quantile(f, q, method=INTERVAL_METHOD)
        assert expect / step < row[f"max_rate_per_s_p{name}"] < expect * step, name
    assert row["max_rate_per_s_widest"] == "cost"


def test_two_candidates_of_one_name_are_refused():
    spec = plan_from_dict(toy({"sources": []}, candidates=[{"name": "x"}, {"name": "x"}]),
                          source="test")
    with pytest.raises(SpecsimError, match="candidates"):
        plan_intervals(spec, plan(spec), 2, executor="serial")


def write(tmp_path, unc: dict) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(toy(unc)))
    return str(path)


@pytest.mark.parametrize("n, says", [("0", ">= 1"), ("10001", "10,000"), ("two", "whole"),
                                     ("-3", ">= 1"), ("1.5", "whole")])
def test_a_bad_number_of_draws_exits_2_naming_the_flag(tmp_path, capsys, n, says):
    out = tmp_path / "t.csv"
    code = main(["plan", write(tmp_path, {}), "--uncertainty", n, "--out", str(out),
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--uncertainty" in err and says in err and "Traceback" not in err
    assert not out.exists()


def test_a_bad_draws_key_in_the_scenario_exits_2_naming_it(tmp_path, capsys):
    code = main(["plan", write(tmp_path, {"draws": 0}), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "uncertainty.draws" in err and "Traceback" not in err


def test_the_table_says_the_replicas_with_their_interval(tmp_path, capsys):
    code = main(["plan", write(tmp_path, {"sources": ["cost"], "draws": 3}), "--no-progress",
                 "--executor", "serial"])
    out = capsys.readouterr().out
    assert code == 0
    verdict = out.split("a100 (3 draws): ")[1].splitlines()[0]
    assert verdict.startswith(("1 replica", "2 replicas", "3 replicas"))  # target 4/s
    assert " at 90%)" in verdict or "(every draw)" in verdict


def test_a_plans_fixed_block_declares_every_candidate_s_uncertainty(tmp_path, capsys):
    data = toy({}, fixed={"uncertainty": {"draws": 3, "sources": ["cost"],
                                          "cost": {"sigma": 0.05, "source": "test"}}})
    spec = plan_from_dict(data, source="test")
    [(_, raw)] = spec.candidates
    unc = scenario_from_dict(raw, source="t").uncertainty
    assert (unc.draws, unc.sources, unc.cost_sigma) == (3, ("cost",), 0.05)
    bad = toy({}, fixed={"uncertainty": {"draws": 0}})
    with pytest.raises(SpecsimError) as exc:
        plan_from_dict(bad, source="test")
    assert "uncertainty.draws" in str(exc.value)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(bad))
    assert main(["plan", str(path), "--no-progress", "--executor", "serial"]) == 2
    err = capsys.readouterr().err
    assert "uncertainty.draws" in err and "Traceback" not in err
