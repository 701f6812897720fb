"""Synthetic arrivals and lengths against closed forms, within stated sampling bounds.

Bounds are five standard errors of the estimator (asymptotic formulas in each test), so a
correct generator fails with probability well under 1e-5 per check, while a wrong
parameterisation (rate for scale, sigma for sigma^2, ...) misses by many errors.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from workloads.arrivals import ConstantArrivals, GammaArrivals, PoissonArrivals
from workloads.config import synthetic_workload
from workloads.lengths import EmpiricalLength, FixedLength, LognormalLength, UniformLength

N = 200_001  # 200,000 gaps


def phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def gaps(process, seed=1):
    times = process.sample(N, np.random.default_rng(seed))
    assert times[0] == 0.0 and len(times) == N
    assert np.all(np.diff(times) >= 0)
    return np.diff(times)


@pytest.mark.parametrize("process, cv, kurtosis", [
    (PoissonArrivals(rate_per_s=4.0), 1.0, 9.0),
    (GammaArrivals(rate_per_s=4.0, cv=1.0), 1.0, 9.0),
    (GammaArrivals(rate_per_s=4.0, cv=2.0), 2.0, 3.0 + 6.0 * 4.0),
    (GammaArrivals(rate_per_s=4.0, cv=0.5), 0.5, 3.0 + 6.0 * 0.25),
])
def test_gap_mean_and_cv_match_the_closed_form(process, cv, kurtosis):
    g = gaps(process)
    m = len(g)
    mean = 1.0 / 4.0
    # Mean gap: standard error sigma / sqrt(m) with sigma = cv * mean.
    assert abs(g.mean() - mean) < 5 * cv * mean / math.sqrt(m)
    # Sample CV: delta method, Var(s^2) = sigma^4 (kurtosis - 1) / m (Gamma kurtosis is
    # 3 + 6 cv^2), plus the mean's relative error; both add to the CV's relative error.
    rel_se = 0.5 * math.sqrt((kurtosis - 1) / m) + cv / math.sqrt(m)
    assert abs(g.std() / g.mean() / cv - 1) < 5 * rel_se


def test_poisson_counts_have_unit_dispersion_and_bursty_gamma_does_not():
    # Renewal-process counts (Cox, Renewal Theory, 1962): Var N(t) = sigma^2 t / mu^3 + c0
    # with c0 = 1/12 + 5 sigma^4 / (4 mu^4) - 2 E[X^3] / (3 mu^3).  Poisson: exactly 1.
    # Gamma(k = 1/4, theta = 1): Var N(20) = 320 - 9.9, mean 80, so the ratio is 3.88;
    # with 2,500 windows the estimate's sd is about 0.03 (Poisson) and 0.15 (Gamma).
    def dispersion(process):
        times = process.sample(N, np.random.default_rng(2))
        counts = np.bincount((times // 20.0).astype(int))[:-1]  # 20 s windows, ~80 arrivals
        return counts.var() / counts.mean()

    assert abs(dispersion(PoissonArrivals(rate_per_s=4.0)) - 1.0) < 5 * 0.03
    assert abs(dispersion(GammaArrivals(rate_per_s=4.0, cv=2.0)) - 3.88) < 5 * 0.15


def test_constant_arrivals_are_exact():
    times = ConstantArrivals(rate_per_s=4.0).sample(5, np.random.default_rng(0))
    assert times.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_same_seed_same_draws_different_seed_different():
    for process in (PoissonArrivals(2.0), GammaArrivals(2.0, 3.0)):
        a = process.sample(100, np.random.default_rng(7))
        b = process.sample(100, np.random.default_rng(7))
        c = process.sample(100, np.random.default_rng(8))
        assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize("make, field", [
    (lambda: PoissonArrivals(0.0), "rate_per_s"),
    (lambda: PoissonArrivals(True), "rate_per_s"),
    (lambda: GammaArrivals(1.0, -2.0), "cv"),
    (lambda: ConstantArrivals(float("inf")), "rate_per_s"),
    (lambda: FixedLength(0), "tokens"),
    (lambda: FixedLength(2.5), "tokens"),
    (lambda: UniformLength(10, 5), "max_tokens"),
    (lambda: LognormalLength(400, 400), "mean_tokens"),
    (lambda: LognormalLength(300, 400), "mean_tokens"),
    (lambda: LognormalLength(600, -1), "median_tokens"),
    (lambda: LognormalLength(600, 400, max_tokens=0), "max_tokens"),
    (lambda: EmpiricalLength(np.array([3, 0])), "values"),
    (lambda: EmpiricalLength(np.array([], dtype=int)), "values"),
])
def test_bad_parameters_name_their_field(make, field):
    with pytest.raises(SpecsimError) as info:
        make()
    assert info.value.field == field


def test_fixed_and_uniform_lengths():
    rng = np.random.default_rng(3)
    assert FixedLength(7).sample(4, rng).tolist() == [7, 7, 7, 7]
    values = UniformLength(1, 6).sample(60_000, rng)
    assert values.dtype == np.int64 and values.min() == 1 and values.max() == 6
    # Each face has probability 1/6: binomial standard error sqrt(n p (1 - p)).
    counts = np.bincount(values, minlength=7)[1:]
    assert np.all(np.abs(counts - 10_000) < 5 * math.sqrt(60_000 * (1 / 6) * (5 / 6)))


def test_lognormal_fit_to_mean_and_median_uncapped():
    dist = LognormalLength(mean_tokens=600, median_tokens=400)
    sigma2 = 2 * math.log(1.5)
    assert dist.mu == math.log(400) and math.isclose(dist.sigma ** 2, sigma2)
    x = dist.sample(N, np.random.default_rng(4))
    # Lognormal sd = mean * sqrt(exp(sigma^2) - 1); rounding to integers moves the mean
    # by far less than 0.5 and clipping at 1 removes a mass below 1e-10.
    sd = 600 * math.sqrt(math.exp(sigma2) - 1)
    assert abs(x.mean() - 600) < 5 * sd / math.sqrt(N) + 0.5
    # Sample median: standard error 1 / (2 f(m) sqrt(n)), f(m) = 1 / (m sigma sqrt(2 pi)).
    median_se = 400 * math.sqrt(sigma2) * math.sqrt(2 * math.pi) / (2 * math.sqrt(N))
    assert abs(np.median(x) - 400) < 5 * median_se + 1


def test_lognormal_cap_matches_the_closed_form_of_the_clipped_mean():
    cap = 900
    dist = LognormalLength(mean_tokens=600, median_tokens=400, max_tokens=cap)
    x = dist.sample(N, np.random.default_rng(5))
    assert x.max() == cap and x.min() >= 1
    mu, s = dist.mu, dist.sigma
    # E[min(X, c)] = E[X] Phi((ln c - mu - s^2) / s) + c (1 - Phi((ln c - mu) / s)).
    z = (math.log(cap) - mu) / s
    expected = 600 * phi(z - s) + cap * (1 - phi(z))
    assert abs(x.mean() - expected) < 5 * x.std() / math.sqrt(N) + 0.5
    # Values round to the cap from X >= cap - 0.5.
    p_cap = 1 - phi((math.log(cap - 0.5) - mu) / s)
    assert abs((x == cap).mean() - p_cap) < 5 * math.sqrt(p_cap * (1 - p_cap) / N)


def test_lengths_never_drop_below_one():
    x = LognormalLength(mean_tokens=3.0, median_tokens=1.2).sample(50_000, np.random.default_rng(6))
    assert x.min() == 1


def test_empirical_resamples_only_observed_values_at_their_frequencies():
    dist = EmpiricalLength(np.array([10, 20, 20, 30]), max_tokens=25)
    x = dist.sample(40_000, np.random.default_rng(7))
    assert set(np.unique(x).tolist()) == {10, 20, 25}
    for value, p in ((10, 0.25), (20, 0.5), (25, 0.25)):
        assert abs((x == value).mean() - p) < 5 * math.sqrt(p * (1 - p) / 40_000)


def test_synthetic_workload_draws_in_a_fixed_order():
    rng = np.random.default_rng(9)
    w = synthetic_workload(50, PoissonArrivals(2.0), UniformLength(5, 9), FixedLength(3), rng)
    rng = np.random.default_rng(9)
    assert np.array_equal(w.arrival_s, PoissonArrivals(2.0).sample(50, rng))
    assert np.array_equal(w.prompt_tokens, UniformLength(5, 9).sample(50, rng))
    assert w.output_tokens.tolist() == [3] * 50 and w.name == "synthetic"
