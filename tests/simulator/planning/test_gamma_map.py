"""Optimal-gamma maps: demo 5's shape, the crossover batch, tree widths, closed-form trees."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.planning.analytic import analytic_point, check_point
from simulator.planning.gamma_map import best_rows, crossover_batch, crossover_table, gamma_map
from simulator.planning.sweep import SweepSpec, expand_grid, run_sweep

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
SEQUOIA = {"model": "sequoia", "rates": [0.8, 0.3, 0.15]}


@pytest.fixture(scope="module")
def chain_map():
    return gamma_map(batches=BATCHES, contexts=[128, 32768], gammas=range(0, 13), alpha=0.8)


def test_short_context_best_gamma_and_speedup_fall_with_batch(chain_map):
    # lecture 000, 2.5 (demo 5): at short context verification turns compute-bound
    short = chain_map[chain_map["context"] == 128].sort_values("batch")
    assert np.all(np.diff(short["best_gamma"]) <= 0)
    assert np.all(np.diff(short["speedup"]) <= 1e-12)
    assert short["best_gamma"].iloc[-1] < short["best_gamma"].iloc[0]
    assert short["speedup"].iloc[-1] < 0.6 * short["speedup"].iloc[0]


def test_long_context_best_gamma_and_speedup_hold_up(chain_map):
    # ... while at long context KV reads dominate and speculation amortises them too
    long = chain_map[chain_map["context"] == 32768].sort_values("batch")
    short = chain_map[chain_map["context"] == 128].sort_values("batch")
    assert np.all(long["speedup"].to_numpy() >= 0.95 * long["speedup"].iloc[0])
    assert np.all(np.diff(long["best_gamma"]) >= 0)
    assert np.all(long["speedup"].to_numpy()[3:] > short["speedup"].to_numpy()[3:])


def test_the_map_holds_the_best_of_the_full_sweep(chain_map):
    points = expand_grid({"batch": [1, 64], "context": [128, 32768],
                          "gamma": list(range(0, 13))})
    full = run_sweep(SweepSpec.analytic(points, fixed={"alpha": 0.8}), executor="serial")
    for (b, ctx), grp in full.groupby(["batch", "context"]):
        row = chain_map[(chain_map["batch"] == b) & (chain_map["context"] == ctx)].iloc[0]
        assert row["speedup"] == grp["speedup"].max()
        assert row["best_gamma"] == grp.loc[grp["speedup"].idxmax(), "gamma"]
        assert row["speedup"] >= 1.0  # gamma 0 (plain decoding) is always on the menu


def test_crossover_batch_equals_a_linear_scan():
    params = {"alpha": 0.6, "context": 16.0}
    gammas = range(1, 9)
    found = crossover_batch(params, gammas=gammas, max_batch=512)

    def pays(b):
        return max(analytic_point({**params, "batch": b, "gamma": g})["speedup"]
                   for g in gammas) > 1.0

    first = next(b for b in range(1, 513) if not pays(b))
    assert found["crossover_batch"] == first
    assert found["last_paying_batch"] == first - 1 and pays(first - 1)


def test_crossover_moves_to_smaller_batches_as_alpha_falls_and_vanishes_at_long_context():
    got = [crossover_batch({"alpha": a, "context": 16.0}, gammas=range(1, 9),
                           max_batch=1024)["crossover_batch"] for a in (0.5, 0.6, 0.7)]
    assert got[0] <= got[1] <= got[2] and got[0] < got[2]
    table = crossover_table({"alpha": 0.6}, [16.0, 32768.0], gammas=range(1, 9), max_batch=1024)
    assert not math.isnan(table["crossover_batch"].iloc[0])
    assert math.isnan(table["crossover_batch"].iloc[1])  # still pays at the largest batch
    assert table["last_paying_batch"].iloc[1] == 1024


def test_tree_expected_tokens_follow_the_sequoia_closed_form():
    r0, r1, r2 = SEQUOIA["rates"]
    one_level = analytic_point({"policy": "tree", "tree_width": 3, "gamma": 1,
                                "acceptance": SEQUOIA})
    # siblings are exclusive: the k-th is tried only after the first k-1 were rejected
    assert one_level["expected_tokens"] == pytest.approx(
        1 + r0 + (1 - r0) * r1 + (1 - r0) * (1 - r1) * r2, rel=1e-12)
    two_levels = analytic_point({"policy": "tree", "tree_width": 2, "gamma": 2,
                                 "acceptance": SEQUOIA})
    p_a, p_b = r0, (1 - r0) * r1
    assert two_levels["expected_tokens"] == pytest.approx(1 + p_a * (1 + r0) + p_b * (1 + r0))
    assert two_levels["draft_tokens"] == 4


def test_a_width_one_tree_is_the_chain():
    for b in (1, 32):
        tree = analytic_point({"policy": "tree", "tree_width": 1, "gamma": 4, "batch": b,
                               "acceptance": SEQUOIA})
        chain = analytic_point({"policy": "chain", "gamma": 4, "batch": b, "alpha": 0.8})
        for col in ("draft_s", "verify_s", "decode_s", "expected_tokens", "speedup"):
            assert tree[col] == pytest.approx(chain[col], rel=1e-12)


def test_best_tree_width_falls_with_batch_at_short_context():
    df = gamma_map(batches=[1, 8, 64, 256], contexts=[128], gammas=range(0, 7),
                   policies=("tree",), tree_widths=(1, 2, 3), acceptance=SEQUOIA)
    widths = df.sort_values("batch")["best_tree_width"].to_numpy()
    assert np.all(np.diff(widths) <= 0) and widths[0] > widths[-1]


@pytest.mark.parametrize("params, field", [
    ({"policy": "tree"}, "acceptance"),
    ({"policy": "chain", "tree_width": 2}, "tree_width"),
    ({"policy": "chain", "draft": None}, "draft"),
    ({"c": 0.1, "c_target_over_draft": 10}, "c_target_over_draft"),
    ({"c": -1}, "c"),
    ({"policy": "beam"}, "policy"),
    ({"batch": 0}, "batch"),
])
def test_bad_points_name_the_field(params, field):
    with pytest.raises(SpecsimError) as err:
        check_point(params)
    assert err.value.field == field


def test_a_map_with_failed_points_is_an_error():
    # rates for two ranks cannot price a tree with four children per node
    with pytest.raises(SpecsimError, match="points failed"):
        gamma_map(batches=[1], contexts=[128], gammas=[1], policies=("tree",),
                  tree_widths=(4,), acceptance={"model": "sequoia", "rates": [0.8, 0.3]})


def test_best_rows_breaks_ties_towards_the_first_row():
    df = pd.DataFrame({"k": [1, 1, 1, 2], "gamma": [0, 3, 5, 1],
                       "speedup": [1.5, 1.5, 0.5, np.nan]})
    best = best_rows(df, ["k"])  # group 2 has no speedup at all: it is left out
    assert best["gamma"].tolist() == [0]


@pytest.mark.parametrize("batch,context", [(1, 128.0), (32, 512.0), (256, 8192.0)])
def test_estimate_and_an_analytic_point_price_the_draft_with_one_formula(batch, context):
    # `specsim estimate` and a sweep/gamma-map point of the same shape share one chain-draft
    # pricer (simulator.cost.drafting.chain_draft_time): equal to the last bit, every gamma
    from hardware.profile import load_profile
    from simulator.cost.cost_model import CostModel
    from simulator.models.spec import load_model
    from simulator.planning.analytic import estimate_table
    hw = load_profile("a100-40gb")
    table = estimate_table(CostModel(hw, load_model("opt-13b")),
                           CostModel(hw, load_model("opt-125m")), batch=batch,
                           context=context, gammas=list(range(9)), alpha=0.8)
    for row in table.itertuples():
        point = analytic_point({"batch": batch, "context": context, "gamma": row.gamma,
                                "policy": "chain" if row.gamma else "none"})
        assert point["draft_s"] == row.draft_s
        assert point["verify_s"] == row.verify_s and point["decode_s"] == row.decode_s
