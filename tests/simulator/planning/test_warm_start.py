"""The rate search's warm start: the analytic estimate, the steps sized by the violation, and the
answer, which is the lattice scan's wherever the search starts (feasibility monotone)."""
from __future__ import annotations

import itertools
import math

import pytest

from simulator.planning.capacity import (
    RateSearch,
    bracket,
    max_sustainable_rate,
    near_boundary,
    rate_search_bound,
    step_after,
)
from simulator.planning.plan import load_plan
from simulator.planning.warm_start import capacity_estimate, starting_rate
from simulator.scenario import scenario_from_dict
from simulator.simulate import scenario_workload
from tests.helpers import REPO

SEARCHES = [RateSearch(), RateSearch(0.1, 200, 0.05), RateSearch(0.5, 8, 0.5),
            RateSearch(1, 2, 1.0), RateSearch(0.05, 500, 0.2)]


def _scan(feasible, top: int) -> int | None:
    """The exhaustive answer: the highest feasible lattice index, None if none is."""
    found = [k for k in range(top + 1) if feasible(k)]
    return max(found) if found else None


@pytest.mark.parametrize("search", SEARCHES)
def test_any_start_and_steps_find_the_scans_answer_within_the_bound(search):
    top, bound = search.top, rate_search_bound(search)
    starts = sorted({0, 1, top // 3, top // 2, top - 1, top} & set(range(top + 1)))
    for answer in [None, *range(top + 1)]:  # feasible iff k <= answer (None: nowhere)
        def feasible(k, a=answer):
            return a is not None and k <= a
        for start in starts:
            nears = (None, lambda k: True, lambda k: k % 3 == 0,
                     lambda k, a=answer: a is not None and abs(k - a) <= 1)
            stepping = (None, lambda k: 1, lambda k: 3, lambda k: 100, lambda k: k % 5 + 1)
            for steps, near in itertools.product(stepping, nears):
                calls = []

                def ok(k, f=feasible):
                    calls.append(k)
                    return f(k)
                lo, hi = bracket(ok, start, search, steps, near)
                assert lo == _scan(feasible, top)
                assert hi == (None if lo == top else (0 if lo is None else lo + 1))
                assert len(set(calls)) <= bound


def test_near_means_within_ten_percent_of_the_limits():
    assert [near_boundary(v) for v in (0.9, 0.91, 1.0, 1.09, 1.1, 0.0, math.inf, math.nan)] \
        == [False, True, True, True, False, False, False, False]


def test_a_step_is_half_the_violations_distance_one_point_near_the_boundary():
    search = RateSearch()  # 5% lattice: a doubling is 14 points
    for v in (0.91, 0.95, 1.0, 1.05, 1.09):
        assert step_after(v, search) == 1
    assert step_after(1.05 ** 8, search) == step_after(1.05 ** -8, search) == 4
    assert step_after(100.0, search) == step_after(0.01, search) == 14  # at most a doubling
    for v in (math.inf, math.nan, 0.0):
        assert step_after(v, search) == 4  # a quarter of a doubling
    assert step_after(2.0, RateSearch(1, 2, 1.0)) == 1  # a doubling of one point


@pytest.fixture(scope="module")
def default_plan():
    spec = load_plan(REPO / "workloads" / "scenarios" / "plan_default.yaml")
    scenarios = [scenario_from_dict(raw, source=label, base_dir=spec.base_dir)
                 for label, raw in spec.candidates]
    return spec, scenarios, scenario_workload(scenarios[0])


def test_the_estimate_scales_with_replicas_and_is_deterministic(default_plan):
    spec, (a100, chain, two, h100), wl = default_plan
    est = [capacity_estimate(sc, wl, spec.slo.p99_tpot_s) for sc in (a100, chain, two, h100)]
    assert all(e is not None and e > 0 for e in est)
    assert est[2] == pytest.approx(2 * est[1])  # two replicas of the same deployment
    assert est[3] > est[1]  # the same policy on an H100
    assert est == [capacity_estimate(sc, wl, spec.slo.p99_tpot_s)
                   for sc in (a100, chain, two, h100)]
    assert starting_rate(chain, wl, spec.slo.p99_tpot_s) == pytest.approx(0.5 * est[1])


def test_policies_the_analytic_model_does_not_price_have_no_estimate(default_plan):
    spec, _, wl = default_plan
    tree = scenario_from_dict({"draft": "opt-125m",
                               "policy": {"name": "specinfer", "expansion": [2, 1, 1]},
                               "acceptance": {"model": "sequoia", "rates": [0.8, 0.3, 0.1]}},
                              source="tree")
    assert capacity_estimate(tree, wl, spec.slo.p99_tpot_s) is None
    assert starting_rate(tree, wl, spec.slo.p99_tpot_s) is None


def _non_monotone(*searches) -> bool:
    """Whether the simulated rates hold an infeasible one below a feasible one."""
    rows = sorted((e["rate_per_s"], e["feasible"]) for f in searches for e in f["evaluated"])
    return any(not a[1] and b[1] for i, a in enumerate(rows) for b in rows[i + 1:])


def test_the_warm_start_finds_the_answer_of_the_search_before_it(default_plan):
    spec, scenarios, wl = default_plan
    same = 0
    for sc in scenarios:
        warm = max_sustainable_rate(sc, spec.slo, spec.search, workload=wl)
        cold = max_sustainable_rate(sc, spec.slo, spec.search, workload=wl, warm_start=False)
        assert warm["evaluations"] <= rate_search_bound(spec.search)
        if warm["max_rate_per_s"] == cold["max_rate_per_s"]:
            same += 1
            assert warm["limited_by"] == cold["limited_by"]
        else:  # both are boundaries of a feasibility that is not monotone in the rate
            assert _non_monotone(warm, cold)
    assert same >= 3


def test_without_the_warm_start_the_search_starts_at_the_trace_rate(default_plan):
    spec, (a100, *_), wl = default_plan
    cold = max_sustainable_rate(a100, spec.slo, spec.search, workload=wl, warm_start=False)
    start = spec.search.rate(spec.search.index(wl.mean_rate_per_s))
    assert start in [e["rate_per_s"] for e in cold["evaluated"]]
