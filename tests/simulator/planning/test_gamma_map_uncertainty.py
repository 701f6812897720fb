"""``gamma-map --uncertainty N`` (simulator/planning/gamma_map_uncertainty.py): no spread is
the point map exactly, and, the best gamma being monotone in alpha, its p5/p50/p95 over the
draws are the best gammas at the shifts' own p5/p50/p95."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulator.cli import main
from simulator.planning.gamma_map import gamma_map
from simulator.planning.gamma_map_uncertainty import acceptance_shifts, gamma_map_intervals

GRID = dict(batches=[1, 4, 16], contexts=[128, 512], gammas=range(0, 11))


def build(alpha: float):
    def at(shift: float) -> pd.DataFrame:
        return gamma_map(alpha=float(np.clip(alpha + shift, 0, 1)), **GRID)
    return at


def test_no_spread_is_the_point_map_exactly():
    point = gamma_map(alpha=0.7, **GRID)
    shifts = acceptance_shifts(0.0, 5)
    assert shifts == [0.0] * 5
    out = gamma_map_intervals(point, shifts, build(0.7))
    pd.testing.assert_frame_equal(out[list(point.columns)], point)
    for q in (5, 50, 95):
        assert (out[f"best_gamma_p{q}"] == point["best_gamma"]).all()
        assert (out[f"speedup_p{q}"] == point["speedup"]).all()
    assert (out["best_gamma_agree"] == 1.0).all()


def test_the_best_gammas_interval_is_the_best_gamma_at_the_shifts_quantiles():
    # the best gamma is non-decreasing in alpha, so the q-quantile (inverted_cdf: one of
    # the draws) of the best gammas is the best gamma at the q-quantile of the shifts
    alpha, n = 0.7, 15
    shifts = acceptance_shifts(0.05, n)
    assert shifts == acceptance_shifts(0.05, n)  # the same seed, the same draws
    out = gamma_map_intervals(gamma_map(alpha=alpha, **GRID), shifts, build(alpha))
    for name, q in ((5, 0.05), (50, 0.5), (95, 0.95)):
        at = build(alpha)(float(np.quantile(shifts, q, method="inverted_cdf")))
        assert (out[f"best_gamma_p{name}"] == at["best_gamma"]).all(), name
    assert (out["best_gamma_p5"] < out["best_gamma_p95"]).any()  # the spread shows
    assert ((0 <= out["best_gamma_agree"]) & (out["best_gamma_agree"] <= 1)).all()


@pytest.mark.parametrize("args, field", [
    (["--uncertainty", "0", "--alpha-sd", "0.03"], "--uncertainty"),
    (["--uncertainty", "5"], "--alpha-sd"),
    (["--alpha-sd", "0.03"], "--uncertainty"),
    (["--uncertainty", "5", "--alpha-sd", "0.9"], "--alpha-sd"),
])
def test_bad_uncertainty_flags_exit_2_naming_the_field(capsys, args, field):
    assert main(["gamma-map", "--batch", "1", "--context", "128", *args]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err


def test_the_csv_carries_the_intervals(capsys):
    assert main(["gamma-map", "--batch", "1,4", "--context", "128", "--gamma", "0-8",
                 "--uncertainty", "4", "--alpha-sd", "0.05", "--format", "csv"]) == 0
    import io
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert (df["best_gamma_p5"] <= df["best_gamma_p50"]).all()
    assert (df["best_gamma_p50"] <= df["best_gamma_p95"]).all()
    assert (df["uncertainty_draws"] == 4).all()
