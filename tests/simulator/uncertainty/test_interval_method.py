"""How an interval is read from N draws: Hyndman & Fan (1996) type 6, whose [p5, p95] holds
a fresh value 90% of the time on average from 19 draws up, and the draws' range, expected
coverage (N - 1) / (N + 1), below that."""
import numpy as np
import pytest

from simulator.uncertainty.propagate import INTERVAL_METHOD, METRICS, intervals

# 100,000 samples of N uniform draws. For U(0, 1), F(x) = x, so hi - lo is the exact chance
# that a fresh value falls inside [lo, hi]. Between two order statistics hi - lo is
# Beta(c (N + 1), (1 - c)(N + 1)) for coverage c, sd sqrt(c (1 - c) / (N + 2)) <= 0.145
# for N >= 10 (interpolating between order statistics only narrows it), so the mean's
# standard error is below 0.145 / sqrt(1e5) = 4.6e-4: five of them.
SAMPLES, TOL = 100_000, 5 * 4.6e-4


def _expected_coverage(n: int, method: str) -> float:
    u = np.random.default_rng(20260).random((SAMPLES, n))
    lo, hi = np.quantile(u, (0.05, 0.95), axis=1, method=method)
    return float(np.mean(hi - lo))


@pytest.mark.parametrize("n, closed_form", [
    (10, 9 / 11),       # h = 0.55 and 10.45 clip to x_(1) and x_(10): (N - 1) / (N + 1)
    (18, 17 / 19),      # still clipped (h = 0.95, 18.05)
    (20, 18.9 / 21),    # h = 1.05 and 19.95: E[F(X_(k))] = k / (N + 1)
    (40, 36.9 / 41),    # h = 2.05 and 38.95
])
def test_the_interval_s_expected_coverage_is_the_closed_form(n, closed_form):
    assert _expected_coverage(n, INTERVAL_METHOD) == pytest.approx(closed_form, abs=TOL)


def test_numpy_s_default_would_under_cover_so_the_check_above_can_fail():
    # type 7: h = (N - 1) p + 1, so [x_(1.45), x_(9.55)] and [x_(1.95), x_(19.05)]
    assert _expected_coverage(10, "linear") == pytest.approx(8.1 / 11, abs=TOL)
    assert _expected_coverage(20, "linear") == pytest.approx(17.1 / 21, abs=TOL)
    assert abs(17.1 / 21 - 18.9 / 21) > 10 * TOL


def _table(col: np.ndarray) -> np.ndarray:
    """Draws (rows) of every metric, each column ``col``."""
    return np.repeat(col[:, None], len(METRICS), axis=1)


@pytest.mark.parametrize("n", [9, 10, 19, 20, 21])
def test_the_median_is_the_middle_draw_or_the_mean_of_the_middle_two(n):
    col = np.random.default_rng(n).lognormal(0.0, 0.5, n)
    s = np.sort(col)
    middle = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    out = intervals(_table(col))
    assert out[f"{METRICS[0]}_p50"] == pytest.approx(middle, rel=1e-12)
    assert out[f"{METRICS[0]}_p50"] == pytest.approx(np.quantile(col, 0.5), rel=1e-12)


def test_below_19_draws_the_interval_is_the_draws_range():
    col = np.random.default_rng(3).normal(10.0, 1.0, 10)
    out = intervals(_table(col))
    assert (out[f"{METRICS[0]}_p5"], out[f"{METRICS[0]}_p95"]) == (col.min(), col.max())


def test_at_20_draws_p5_and_p95_sit_at_positions_1_05_and_19_95():
    s = np.sort(np.random.default_rng(4).normal(10.0, 1.0, 20))
    out = intervals(_table(s[::-1].copy()))
    assert out[f"{METRICS[0]}_p5"] == pytest.approx(s[0] + 0.05 * (s[1] - s[0]), rel=1e-14)
    assert out[f"{METRICS[0]}_p95"] == pytest.approx(s[18] + 0.95 * (s[19] - s[18]),
                                                     rel=1e-14)


def test_equal_draws_give_the_point_exactly():
    out = intervals(_table(np.full(7, 0.123456789)))
    assert {out[f"{m}_p{k}"] for m in METRICS for k in (5, 50, 95)} == {0.123456789}
