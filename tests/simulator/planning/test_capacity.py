"""Capacity planning: monotone in replicas and hardware, exact search, infeasible, prices."""
from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import load_yaml_file
from simulator.planning.capacity import (
    CapacitySLO,
    RateSearch,
    evaluate_rate,
    max_sustainable_rate,
    min_replicas,
)
from simulator.planning.plan import cost_per_million_tokens, plan, plan_from_dict
from simulator.scenario import scenario_from_dict
from simulator.simulate import scenario_workload
from tests.helpers import REPO

SCENARIOS = REPO / "workloads" / "scenarios"
# short requests keep each simulation to a fraction of a second
WORKLOAD = {"synthetic": {"num_requests": 100, "arrival": {"process": "poisson",
                                                           "rate_per_s": 2},
                          "prompt": {"dist": "uniform", "min_tokens": 64, "max_tokens": 256},
                          "output": {"dist": "uniform", "min_tokens": 16, "max_tokens": 64}}}
SEARCH = {"min_rate_per_s": 0.5, "max_rate_per_s": 500, "rel_tol": 0.2}


def _plan(candidates, slo=None, **extra):
    data = {"scenario": "default", "fixed": {"workload": WORKLOAD},
            "slo": slo or {"p99_ttft_ms": 500, "p99_tpot_ms": 30}, "search": SEARCH,
            "candidates": candidates, **extra}
    return plan_from_dict(data, source="plan.yaml")


@pytest.fixture(scope="module")
def ladder():
    spec = _plan([{"name": "x1", "replicas": 1}, {"name": "x2", "replicas": 2},
                  {"name": "x3", "replicas": 3}, {"name": "a100-80gb", "hardware": "a100-80gb"},
                  {"name": "h100", "hardware": "h100-sxm"}])
    return spec, plan(spec, executor="serial").set_index("candidate")


def test_more_replicas_never_lower_the_max_rate(ladder):
    _, df = ladder
    rates = df.loc[["x1", "x2", "x3"], "max_rate_per_s"].to_numpy()
    assert df["feasible"].all() and np.all(np.diff(rates) >= 0) and rates[2] > rates[0]


def test_faster_hardware_never_lowers_the_max_rate(ladder):
    _, df = ladder
    # a100-80gb: more bandwidth than a100-40gb; h100-sxm: more bandwidth and FLOP/s
    rates = df.loc[["x1", "a100-80gb", "h100"], "max_rate_per_s"].to_numpy()
    assert np.all(np.diff(rates) >= 0) and rates[2] > rates[0]


def test_the_search_stops_at_the_lattice_boundary(ladder):
    spec, df = ladder
    label, raw = spec.candidates[0]
    sc = scenario_from_dict(raw, source=label, base_dir=spec.base_dir)
    wl = scenario_workload(sc)
    best = df.loc[label, "max_rate_per_s"]
    k = spec.search.index(best)
    assert spec.search.rate(k) == pytest.approx(best, rel=1e-12)
    assert evaluate_rate(sc, wl, best, spec.slo)["feasible"]
    above = evaluate_rate(sc, wl, spec.search.rate(k + 1), spec.slo)
    assert not above["feasible"] and above["violated"] == df.loc[label, "limited_by"]


def test_an_infeasible_search_says_so_and_shows_the_best_point():
    spec = _plan([{"name": "a100"}], slo={"p99_tpot_ms": 1})  # no GPU decodes OPT-13B in 1 ms
    sc = scenario_from_dict(spec.candidates[0][1], source="a100", base_dir=spec.base_dir)
    found = max_sustainable_rate(sc, spec.slo, spec.search)
    assert not found["feasible"] and math.isnan(found["max_rate_per_s"])
    assert found["note"].startswith("infeasible: no rate in [0.5, 500]/s meets the SLO")
    assert f"best point seen: {found['best_rate_per_s']:.4g}/s" in found["note"]
    tried = found["evaluated"]
    assert not any(e["feasible"] for e in tried) and tried[0]["rate_per_s"] == 0.5
    assert found["best_violation"] == min(e["violation"] for e in tried) > 1
    assert "p99_tpot" in {v for e in tried for v in e["violated"].split(",")}


def test_min_replicas_is_the_first_feasible_count():
    spec = _plan([{"name": "a100"}])
    sc = scenario_from_dict(spec.candidates[0][1], source="a100", base_dir=spec.base_dir)
    wl = scenario_workload(sc)
    n = min_replicas(sc, spec.slo, 30.0, max_replicas=8, workload=wl)["min_replicas"]
    assert 1 < n <= 8

    def ok(k):
        import dataclasses
        return evaluate_rate(dataclasses.replace(sc, replicas=k), wl, 30.0, spec.slo)["feasible"]

    assert ok(n) and not ok(n - 1)


def test_cost_per_million_tokens_is_dollars_per_hour_over_tokens_per_hour():
    # 4 devices at $2/h = $8/h; 1000 tokens/s = 3.6M tokens/h -> $2.22 per million
    assert cost_per_million_tokens(2.0, 4, 1000.0) == pytest.approx(8.0 / 3.6)
    assert math.isnan(cost_per_million_tokens(2.0, 4, 0.0))


def test_the_ranked_table_prices_each_deployment():
    spec = _plan([{"name": "cheap", "policy": "none"}, {"name": "spec", "policy": "chain"}],
                 prices={"a100-40gb": 2.0}, target_rate_per_s=4.0, max_replicas=4)
    df = plan(spec, executor="serial")
    assert list(df["rank"]) == [1, 2]
    assert df["cost_per_million_tokens_at_target"].is_monotonic_increasing
    mean_out = float(np.mean(scenario_workload(scenario_from_dict(
        spec.candidates[0][1], source="x", base_dir=spec.base_dir)).output_tokens))
    for row in df.itertuples():
        assert row.cost_per_million_tokens == pytest.approx(
            2.0 * row.devices / 3600 / (row.max_rate_per_s * mean_out) * 1e6)
        assert row.cost_per_million_tokens_at_target == pytest.approx(
            2.0 * row.min_replicas_for_target / 3600 / (4.0 * mean_out) * 1e6)


@pytest.mark.parametrize("change, words", [
    ({"prices": {"h100-sxm": 3.0}}, "no price for device 'a100-40gb'"),
    ({"prices": {"a100-40gb": "cheap"}}, "expected a number"),
    ({"slo": {}}, "sets nothing"),
    ({"slo": {"goodput_fraction": 1.5}}, "at most 1"),
    ({"slo": {"p99_tpot_ms": 50, "p95_tpot_ms": 50}}, "unknown key"),
    ({"candidates": []}, "non-empty list"),
    ({"candidates": [{"colour": "red"}]}, "unknown field"),
    ({"candidates": [{"context": 512}]}, "not sweepable"),
    ({"search": {"min_rate_per_s": 10, "max_rate_per_s": 1}}, "min_rate_per_s"),
    ({"search": {"step": 2}}, "unknown key"),
    ({"max_replicas": 0}, "at least 1"),
])
def test_bad_plans_are_rejected_before_anything_runs(change, words):
    data = {"scenario": "default", "slo": {"p99_tpot_ms": 50},
            "candidates": [{"hardware": "a100-40gb"}], **change}
    with pytest.raises(SpecsimError, match=words):
        plan_from_dict(data, source="plan.yaml")


def test_a_price_table_file_missing_a_device_names_it(tmp_path):
    (tmp_path / "prices.yaml").write_text("a100-40gb: 1.5\n")
    data = {"scenario": "default", "slo": {"p99_tpot_ms": 50}, "prices": "prices.yaml",
            "candidates": [{"hardware": "a100-40gb"}, {"hardware": "h200"}]}
    with pytest.raises(SpecsimError) as err:
        plan_from_dict(data, source="plan.yaml", base_dir=tmp_path)
    assert "'h200'" in str(err.value) and err.value.field == "prices"


def test_search_lattice_and_slo_validation():
    s = RateSearch(1.0, 100.0, 0.1)
    assert s.rate(0) == 1.0 and s.rate(s.top) <= 100.0 < s.rate(s.top + 1)
    with pytest.raises(SpecsimError, match="per-request"):
        CapacitySLO(goodput_fraction=0.9)


def test_the_shipped_plan_runs_reduced():
    data = load_yaml_file(SCENARIOS / "plan_default.yaml")
    data.update(fixed={"workload": WORKLOAD}, candidates=data["candidates"][:2],
                search={"min_rate_per_s": 1, "max_rate_per_s": 100, "rel_tol": 0.5},
                target_rate_per_s=2)
    df = plan(plan_from_dict(data, source="plan_default.yaml", base_dir=SCENARIOS),
              executor="serial")
    assert df["error"].isna().all() and df["cost_per_million_tokens"].gt(0).all()
