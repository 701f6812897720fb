"""Coverage of the 90% intervals on the published-results check, per case group (issue 39:
between 80% and 97%), and the pieces it is built from: the groups, the leave-one-out
sigma, the reading of a speedup's miss as a speculative-path factor, a range's cover.

The coverage itself (``python -m tests.published --coverage 10``) is slow-marked: it runs
every numeric case ten times over.  A group outside the band is xfail(strict) with the
measured figure (``OUTSIDE``): nothing is tuned to bring it in.
"""
import numpy as np
import pytest

from simulator.uncertainty.spec import NORMAL_MEDIAN_ABS, SPEC_COST_SIGMA
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
    spec_factors,
    spec_sigma,
)
from tests.published.tolerances import SPEEDUP, TAU, Case

DRAWS = 10
# groups measured outside BAND at DRAWS draws (python -m tests.published --coverage 10)
OUTSIDE: dict[str, str] = {
    "tau": ("5/7 (71%) covered: Medusa's and SpecInfer's acceptance sources state no spread "
            "(default_spreads), so their tau intervals are points, and both points miss "
            "(2.41 vs 2.32; 2.65 vs 2.21-2.38); the five EAGLE taus are all covered"),
    "absolute": ("0/9 covered: DeepSeek-V3's token/s on SGLang 0.4.1.post2 is predicted "
                 "+44% to +187% (KNOWN_MISSES), far beyond the cost factor's sigma 0.0549 "
                 "from the sim-to-real runs: that build's per-step cost is not modelled; "
                 "SGLang's large-scale EP cases with two-batch overlap (prefill 1K, 2K, "
                 "4K +51%, +53%, +54%, perfect-EPLB 4K +31%, decode +56%) and the no-TBO "
                 "decode (+22%) are outside it too (moe_cases.py: TBO priced at +65% to "
                 "+73% at prefill against the blog's +27% to +35%)"),
}


def test_every_case_with_a_number_has_a_group_and_no_other():
    for case in CASES:
        kind = case.tolerance.kind
        assert (group(case) is None) == (kind in ("order", "exact", "abs")), case.name
    assert {group(c) for c in CASES} - {None} == set(GROUPS)


def test_leave_one_out_never_reads_the_case_itself():
    factors = {"a": np.exp(0.1), "b": np.exp(-0.3), "c": np.exp(0.5), "d": float("inf")}
    # median of |ln g| over b, c, d: 0.5
    assert spec_sigma(factors, "a") == pytest.approx(0.5 / NORMAL_MEDIAN_ABS)
    # over a, b, c: 0.3; over every case: (0.3 + 0.5) / 2
    assert spec_sigma(factors, "d") == pytest.approx(0.3 / NORMAL_MEDIAN_ABS)
    assert spec_sigma(factors) == pytest.approx(0.4 / NORMAL_MEDIAN_ABS)


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
    _, full = measured
    assert SPEC_COST_SIGMA == pytest.approx(full, abs=5e-5)


def _param(name):
    marks = [pytest.mark.xfail(strict=True, reason=OUTSIDE[name])] if name in OUTSIDE else []
    return pytest.param(name, id=name, marks=[pytest.mark.slow, *marks])


@pytest.mark.parametrize("name", [_param(g) for g in GROUPS])
def test_the_90_percent_intervals_cover_80_to_97_percent(measured, name):
    rows, _ = measured
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
