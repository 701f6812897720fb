"""The split-conformal 90% quantile (simulator/uncertainty/conformal.py; Lei, G'Sell,
Rinaldo, Tibshirani & Wasserman, JASA 2018, Sec. 2.2): its rank on hand-made score lists,
its declared unbounded answer, its exact coverage by enumeration, and its sigma."""
from __future__ import annotations

import math
from statistics import NormalDist

import pytest

from simulator.uncertainty.conformal import (
    Z_TWO_SIDED_90,
    conformal_quantile,
    conformal_rank,
    conformal_sigma,
)


def test_nine_scores_take_the_ninth_the_largest():
    scores = [0.5, 0.1, 0.9, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6]
    assert conformal_rank(9) == 9            # ceil(10 x 0.9)
    assert conformal_quantile(scores) == 0.9


def test_nineteen_scores_take_the_eighteenth():
    scores = [i / 100 for i in range(19, 0, -1)]   # 0.19 .. 0.01, unsorted order
    assert conformal_rank(19) == 18          # ceil(20 x 0.9)
    assert conformal_quantile(scores) == 0.18


@pytest.mark.parametrize("n", [0, 1, 4, 8])
def test_too_few_scores_give_an_unbounded_quantile_not_the_largest(n):
    # n = 4: ceil(5 x 0.9) = 5 > 4 (why COST_SIGMA is not read from the four sim-to-real runs)
    assert conformal_rank(n) > n
    assert conformal_quantile([0.1 * (i + 1) for i in range(n)]) == math.inf
    assert conformal_sigma([0.1 * (i + 1) for i in range(n)]) == math.inf


def test_an_infinite_score_is_larger_than_any_and_a_nan_is_refused():
    assert conformal_quantile([0.1] * 8 + [math.inf]) == math.inf       # rank 9 of 9
    assert conformal_quantile([0.1] * 18 + [math.inf]) == 0.1           # rank 18 of 19
    with pytest.raises(ValueError):
        conformal_quantile([0.1] * 9 + [float("nan")])
    with pytest.raises(ValueError):
        conformal_quantile([0.1] * 8 + [-0.2])


@pytest.mark.parametrize("n, covered", [(9, 9), (10, 10), (19, 18), (29, 27)])
def test_its_coverage_by_exact_enumeration_is_k_over_n_plus_one(n, covered):
    # n + 1 distinct exchangeable scores: each is equally likely the new case; it is covered
    # where it is at most the quantile of the n others. Closed form: k / (n + 1) >= 0.9
    scores = [float(v) for v in range(1, n + 2)]
    hits = sum(scores[i] <= conformal_quantile(scores[:i] + scores[i + 1:])
               for i in range(n + 1))
    assert hits == covered == conformal_rank(n)
    assert hits / (n + 1) >= 0.9


def test_the_sigma_is_q_over_the_normal_two_sided_90_percent_point():
    assert Z_TWO_SIDED_90 == pytest.approx(NormalDist().inv_cdf(0.95), rel=1e-15)
    assert round(Z_TWO_SIDED_90, 4) == 1.6449
    scores = [0.05 * i for i in range(1, 20)]
    q, sigma = conformal_quantile(scores), conformal_sigma(scores)
    assert sigma == q / Z_TWO_SIDED_90
    # a lognormal factor exp(sigma Z) then has its 5% and 95% points at exp(-+q)
    assert NormalDist(0.0, sigma).inv_cdf(0.95) == pytest.approx(q, rel=1e-12)
    assert NormalDist(0.0, sigma).inv_cdf(0.05) == pytest.approx(-q, rel=1e-12)
