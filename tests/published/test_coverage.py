"""Coverage of the 90% intervals on the published-results check, per case group (issue 39:
between 80% and 97%), and the pieces it is built from: the groups, the leave-one-out
sigma, the reading of a speedup's miss as a speculative-path factor, a range's cover.

The coverage itself (``python -m tests.published --coverage 10``) is slow-marked: it runs
every numeric case ten times over.  A group outside the band is xfail(strict) with the
measured figure (``OUTSIDE``): no constant is tuned to bring it in (the split-conformal
estimator itself replaced the median-based one after that one's coverage was seen below the
band: docs/uncertainty.md).  The model-error sigmas of
the absolute and tau groups (tests/published/model_error.py) are checked here on cases with
a known answer.
"""
import dataclasses

import numpy as np
import pytest

from simulator.uncertainty.propagate import INTERVAL_METHOD
from simulator.uncertainty.spec import MODEL_ERROR_SIGMA, SPEC_COST_SIGMA
from tests.published import harness
from tests.published.cases import CASES
from tests.published.coverage import (
    BAND,
    GROUPS,
    Covered,
    by_group,
    coverage,
    draws,
    group,
    has_spread,
    numeric_cases,
    interval,
    spec_factors,
    spec_sigma,
)
from tests.published.model_error import KINDS, log_error, loo_sigma, metric_kind
from tests.published.tolerances import ABSOLUTE, SPEEDUP, TAU, Case

DRAWS = 10
# groups measured outside BAND at DRAWS draws (python -m tests.published --coverage 10),
# type 6 intervals, split-conformal sigmas (issue 39): none.  Measured: tau 6/7 (86%),
# speedup 24/27 (89%), absolute 61/67 (91%) (issue 35's H100 decode attention fit and the
# cost sigma from the inference-perf stages; 62/67 before); with the median-based normal
# sigmas before,
# speedup 21/27 (78%) and absolute 49/67 (73%) were below the band
OUTSIDE: dict[str, str] = {}


def test_every_case_with_a_number_has_a_group_and_no_other():
    """Every case with a number has a group, but a ratio of two runs without speculation."""
    for case in CASES:
        kind = case.tolerance.kind
        no_number = kind in ("order", "exact", "abs") or not case.speculative
        assert (group(case) is None) == no_number, case.name
    assert sum(not c.speculative for c in CASES) == 1  # the TBO prefill ablation
    assert {group(c) for c in CASES} - {None} == set(GROUPS)


# ten cases, |ln g| = 0.1 .. 0.9 and one infinite (no positive g closes its miss)
TEN = {**{f"c{i}": float(np.exp((-1) ** i * 0.1 * i)) for i in range(1, 10)},
       "none": float("inf")}


def test_leave_one_out_never_reads_the_case_itself():
    # nine others: the conformal rank ceil(10 x 0.9) = 9, their largest score
    assert spec_sigma(TEN, "none") == pytest.approx(0.9 / Z95)
    assert spec_sigma(TEN, "c3") == spec_sigma(TEN, "c9") == float("inf")
    # the case left out may be anything: its own score is never read
    for own in (1e-9, 1.0, 1e9, float("inf")):
        assert spec_sigma({**TEN, "none": own}, "none") == pytest.approx(0.9 / Z95)
    # every case (the shipped reading): rank ceil(11 x 0.9) = 10 of 10, the infinite one
    assert spec_sigma(TEN) == float("inf")
    # fewer than nine others: unbounded, not the largest score
    assert spec_sigma({k: TEN[k] for k in ("c1", "c2", "c3")}, "c1") == float("inf")


def _linear_case(name, published, target_s, spec_s):
    """A case whose speedup is 1 / (target + g spec), g the drawn speculative factor."""
    def predict(engine):
        draw = harness._DRAW
        g = 1.0 if draw is None else draw.spec_cost_factor
        return 1.0 / (target_s + g * spec_s)
    return Case(name, "a closed form", published, SPEEDUP, predict)


def test_a_speedup_miss_is_read_as_the_factor_that_closes_it():
    # 1 / (0.3 + 0.2 g) = 2  <=>  g = 1.0; = 1.25 <=> g = 2.5; above 1/0.3: no positive g
    cases = [_linear_case("exact", 2.0, 0.3, 0.2), _linear_case("slow", 1.25, 0.3, 0.2),
             _linear_case("none", 4.0, 0.3, 0.2),
             Case("tau", "a closed form", 3.0, TAU, lambda e: 3.0)]
    got = spec_factors(cases)
    assert set(got) == {"exact", "slow", "none"}
    assert got["exact"] == pytest.approx(1.0) and got["slow"] == pytest.approx(2.5)
    assert got["none"] == float("inf")


def test_a_ratio_without_speculation_is_in_no_group():
    """Its speculative factor is undefined (no g moves it): read into the speedup group it
    was an infinite score, and the shipped sigma over every case unbounded."""
    flat = Case("tbo", "a closed form", 1.31, SPEEDUP, lambda e: 1.34, speculative=False)
    assert group(flat) is None and flat not in numeric_cases([flat])
    assert spec_factors([dataclasses.replace(flat, speculative=True)]) == {"tbo": float("inf")}
    assert spec_factors([flat]) == {}


def test_a_published_range_is_covered_where_the_interval_meets_it():
    rng = Case("r", "s", (2.21, 2.38), TAU, lambda e: 0.0)
    assert Covered(rng, "tau", 0.0, None, 2.30, 2.4, 2.5).covered
    assert not Covered(rng, "tau", 0.0, None, 2.40, 2.5, 2.6).covered
    one = Case("p", "s", 1.5, SPEEDUP, lambda e: 0.0)
    assert Covered(one, "speedup", 0.1, None, 1.4, 1.5, 1.6).covered
    assert not Covered(one, "speedup", 0.1, None, 1.51, 1.6, 1.7).covered


def test_the_draws_are_the_seeds():
    a, b = draws(4, seed=3), draws(4, seed=3)
    assert all((x == y).all() for x, y in zip(a, b))
    assert not (draws(1, seed=4)[0] == a[0]).any()


@pytest.fixture(scope="module")
def measured():
    return coverage(DRAWS)


@pytest.mark.slow
def test_the_shipped_speculative_sigma_is_the_check_s_own(measured):
    _, full, _ = measured
    assert SPEC_COST_SIGMA == pytest.approx(full, abs=5e-5)


@pytest.mark.slow
def test_the_shipped_model_error_sigma_is_the_check_s_own(measured):
    # uncertainty.model_error: published (simulator/uncertainty/spec.py): re-derive it when
    # the absolute cases' predictions move
    _, _, err = measured
    assert MODEL_ERROR_SIGMA == pytest.approx(err.cost_sigma(kind="throughput"), abs=5e-5)


def _param(name):
    marks = [pytest.mark.xfail(strict=True, reason=OUTSIDE[name])] if name in OUTSIDE else []
    return pytest.param(name, id=name, marks=[pytest.mark.slow, *marks])


@pytest.mark.parametrize("name", [_param(g) for g in GROUPS])
def test_the_90_percent_intervals_cover_80_to_97_percent(measured, name):
    rows, _, _ = measured
    covered, cases = by_group(rows)[name]
    assert cases > 0
    assert BAND[0] <= covered / cases <= BAND[1], f"{name}: {covered}/{cases}"


@pytest.mark.parametrize("argv", [["--coverage"], ["--coverage", "ten"], ["--coverage", "1"],
                                  ["--table"]])
def test_a_bad_argument_is_one_line_and_exit_2(argv, capsys):
    from tests.published.__main__ import cli
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("--coverage" in err) and "Traceback" not in err


def test_every_absolute_case_has_one_metric_kind():
    kinds = [metric_kind(c) for c in CASES if c.tolerance == ABSOLUTE]
    assert kinds and set(kinds) <= set(KINDS)
    with pytest.raises(ValueError, match="one unit"):
        metric_kind(Case("x", "a number with no unit", 1.0, ABSOLUTE, lambda e: 1.0))


def test_a_log_error_of_a_range_is_zero_inside_and_to_the_nearer_end_outside():
    assert log_error(2.0, 2.0 * np.e) == pytest.approx(1.0)
    assert log_error((2.0, 3.0), 2.5) == 0.0
    assert log_error((2.0, 3.0), 3.0 * np.e) == pytest.approx(1.0)
    assert log_error((2.0, 3.0), 2.0 / np.e) == pytest.approx(-1.0)


def test_the_model_error_sigma_never_reads_the_case_left_out():
    # twenty errors, |e| = 0.01 .. 0.20 with alternating signs
    errors = {f"e{i}": (-1) ** i * i / 100 for i in range(1, 21)}
    # nineteen others: rank ceil(20 x 0.9) = 18: the 18th smallest |e| of the others
    assert loo_sigma(errors, "e20") == pytest.approx(0.18 / Z95)
    assert loo_sigma(errors, "e1") == pytest.approx(0.19 / Z95)
    assert loo_sigma({**errors, "e20": -50.0}, "e20") == loo_sigma(errors, "e20")
    # all twenty: rank ceil(21 x 0.9) = 19
    assert loo_sigma(errors) == pytest.approx(0.19 / Z95)
    # four others: ceil(5 x 0.9) = 5 > 4, unbounded
    assert loo_sigma({k: errors[k] for k in ("e1", "e2", "e3", "e4", "e5")}, "e1") == np.inf


def test_the_fifth_number_leaves_the_first_four_as_they_were_drawn():
    for got, child in zip(draws(3, seed=5), np.random.SeedSequence(5).spawn(3)):
        rng = np.random.default_rng(child)
        old = [rng.standard_normal(), rng.uniform(), rng.standard_normal(),
               rng.standard_normal()]
        assert list(got[:4]) == old


def _throughput(name, published, at_factor_one):
    """An absolute case whose prediction is the inverse of the drawn cost factor."""
    def predict(engine):
        draw = harness._DRAW
        return at_factor_one / (1.0 if draw is None else draw.cost_factor)
    return Case(name, f"{published} tokens/s", published, ABSOLUTE, predict)


# 4,000 draws: the 5% quantile of a normal sample has standard error
# sqrt(0.05 * 0.95 / n) / phi(1.645) = 0.034 in z; four of them, times sigma
Z95, TOL_Z = 1.6448536269514722, 4 * 0.034


def test_an_absolute_interval_is_the_point_over_the_drawn_lognormal_factor():
    numbers = draws(4000, seed=1)
    row = interval(_throughput("t", 90.0, 100.0), numbers, 0.0, cost_sigma=0.5)
    z = np.array([n[2] for n in numbers])
    for got, q in ((row.p5, 0.05), (row.p50, 0.5), (row.p95, 0.95)):
        want = np.quantile(100.0 / np.exp(0.5 * z), q, method=INTERVAL_METHOD)
        assert got == pytest.approx(want, rel=1e-12)
    # the closed form: p5/p95 of 100 / exp(0.5 Z) are 100 exp(-+1.645 * 0.5)
    assert np.log(row.p5 / 100.0) == pytest.approx(-Z95 * 0.5, abs=TOL_Z * 0.5)
    assert np.log(row.p95 / 100.0) == pytest.approx(Z95 * 0.5, abs=TOL_Z * 0.5)
    assert row.model_sigma == 0.5 and row.covered


def test_a_tau_without_a_spread_takes_the_model_error_as_a_lognormal_factor():
    case = Case("m", "a closed form", 2.32, TAU, lambda e: 2.41)
    assert not has_spread(case)
    numbers = draws(4000, seed=2)
    row = interval(case, numbers, 0.0, tau_sigma=0.04)
    z = np.array([n[4] for n in numbers])
    for got, q in ((row.p5, 0.05), (row.p50, 0.5), (row.p95, 0.95)):
        want = np.quantile(2.41 * np.exp(0.04 * z), q, method=INTERVAL_METHOD)
        assert got == pytest.approx(want, rel=1e-12)
    assert np.log(row.p5 / 2.41) == pytest.approx(-Z95 * 0.04, abs=TOL_Z * 0.04)
    assert np.log(row.p95 / 2.41) == pytest.approx(Z95 * 0.04, abs=TOL_Z * 0.04)
    # without it the interval is the point, and misses
    point = interval(case, numbers[:10], 0.0)
    assert point.p5 == point.p95 == 2.41 and not point.covered


def test_an_unbounded_sigma_is_the_factor_s_whole_range_and_is_not_drawn():
    numbers = draws(3, seed=1)
    row = interval(_throughput("t", 1e6, 100.0), numbers, 0.0, cost_sigma=float("inf"))
    assert (row.p5, row.p50, row.p95, row.unbounded) == (0.0, 100.0, float("inf"), True)
    assert row.covered
    # a speedup above what any positive speculative factor gives stays uncovered
    far = _linear_case("none", 4.0, 0.3, 0.2)
    assert spec_factors([far])["none"] == float("inf")
    assert not interval(far, numbers, float("inf"), float("inf")).covered
    near = _linear_case("slow", 1.25, 0.3, 0.2)
    assert interval(near, numbers, float("inf"), 2.5).covered
