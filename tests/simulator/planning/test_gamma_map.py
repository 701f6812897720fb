"""Optimal-gamma maps: demo 5's shape, the crossover batch, tree widths, closed-form trees."""
from __future__ import annotations

import math
import re

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
    # on an H200 every cell at context 128 fits: OPT-13B's KV is 819,200 B/token (DESIGN.md 4)
    return gamma_map(hardware="h200", batches=BATCHES, contexts=[128, 1024],
                     gammas=range(0, 13), alpha=0.8)


def _raw_best(points: pd.DataFrame) -> pd.DataFrame:
    """Best gamma per (batch, context) over raw analytic points, feasible or not."""
    idx = points.groupby(["batch", "context"])["speedup"].idxmax()
    return points.loc[idx].sort_values(["context", "batch"])


def test_short_context_best_gamma_and_speedup_fall_with_batch(chain_map):
    # lecture 000, 2.5 (demo 5): at short context verification turns compute-bound
    short = chain_map[chain_map["context"] == 128].sort_values("batch")
    assert short["feasible"].all()
    # the best gamma falls with the batch; near-ties may flip it up by one where CUDA-graph
    # padding or GEMM tile quantisation favours a neighbouring length (as on a real GPU)
    assert np.all(np.diff(short["best_gamma"].to_numpy(int)) <= 1)
    assert np.all(np.diff(short["speedup"]) <= 1e-12)
    assert short["best_gamma"].iloc[-1] < short["best_gamma"].iloc[0]
    assert short["speedup"].iloc[-1] < 0.6 * short["speedup"].iloc[0]


def test_long_context_best_gamma_and_speedup_hold_up_in_the_cost_model():
    # ... while at long context KV reads dominate and speculation amortises them too.  The
    # shape of the cost model, read off raw points: 32k tokens is past OPT's max_context
    # (2048) and the KV of one replica, so the map marks these cells; it is not a map's claim
    points = run_sweep(SweepSpec.analytic(expand_grid(
        {"batch": BATCHES, "context": [128, 32768], "gamma": list(range(0, 13))}),
        fixed={"alpha": 0.8}), executor="serial")
    assert not points.loc[points["context"] == 32768, "feasible"].any()
    best = _raw_best(points)
    long, short = best[best["context"] == 32768], best[best["context"] == 128]

    def falloff(frame):  # the share of batch 1's speedup lost by batch 256
        return 1.0 - frame["speedup"].iloc[-1] / frame["speedup"].iloc[0]

    assert falloff(long) < 0.25 * falloff(short)
    # at the largest batch the short context's best gamma and speedup have collapsed
    assert long["gamma"].iloc[-1] > short["gamma"].iloc[-1]
    assert long["speedup"].iloc[-1] > short["speedup"].iloc[-1]


def test_the_map_holds_the_best_feasible_point_of_the_full_sweep(chain_map):
    points = expand_grid({"batch": [1, 64, 256], "context": [128, 1024],
                          "gamma": list(range(0, 13))})
    full = run_sweep(SweepSpec.analytic(points, fixed={"alpha": 0.8, "hardware": "h200"}),
                     executor="serial")
    for (b, ctx), grp in full.groupby(["batch", "context"]):
        row = chain_map[(chain_map["batch"] == b) & (chain_map["context"] == ctx)].iloc[0]
        ok = grp[grp["feasible"]]
        assert row["feasible"] == (len(ok) > 0)
        if not len(ok):
            assert pd.isna(row["best_gamma"]) and math.isnan(row["speedup"])
            continue
        assert row["speedup"] == ok["speedup"].max()
        assert row["best_gamma"] == ok.loc[ok["speedup"].idxmax(), "gamma"]
        assert row["speedup"] >= 1.0  # gamma 0 (chain drafting nothing) is on the menu


def test_crossover_batch_equals_a_linear_scan_over_feasible_points():
    params = {"alpha": 0.6, "context": 16.0}
    gammas = range(1, 9)
    found = crossover_batch(params, gammas=gammas, max_batch=512)

    def pays(b):
        return any(pt["feasible"] and pt["speedup"] > 1.0 for pt in
                   (analytic_point({**params, "batch": b, "gamma": g}) for g in gammas))

    first = next(b for b in range(1, 513) if not pays(b))
    assert found["crossover_batch"] == first
    assert found["last_paying_batch"] == first - 1 and pays(first - 1)


def test_crossover_moves_to_smaller_batches_as_alpha_falls_and_stops_at_the_kv_limit():
    got = [crossover_batch({"alpha": a, "context": 16.0}, gammas=range(1, 9),
                           max_batch=1024)["crossover_batch"] for a in (0.5, 0.6, 0.7)]
    assert got[0] <= got[1] <= got[2] and got[0] < got[2]
    table = crossover_table({"alpha": 0.6}, [16.0, 1500.0], gammas=range(1, 9),
                            max_batch=1024)
    assert not math.isnan(table["crossover_batch"].iloc[0])
    long = table.iloc[1]  # OPT-13B's KV on one A100-40GB: a handful of 1.5k-token requests
    assert math.isnan(long["crossover_batch"]) and long["limit"] == "kv"
    assert long["last_paying_batch"] == long["largest_batch"] < 1024
    top = int(long["largest_batch"])
    fits = [any(analytic_point({"alpha": 0.6, "context": 1500.0, "batch": b, "gamma": g})
                ["feasible"] for g in range(1, 9)) for b in (top, top + 1)]
    assert fits == [True, False]


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
    df = gamma_map(hardware="h200", batches=[1, 8, 64, 256], contexts=[128],
                   gammas=range(0, 7), policies=("tree",), tree_widths=(1, 2, 3),
                   acceptance=SEQUOIA)  # a tree has no gamma 0: depths 1-6 are tried
    assert df["feasible"].all()
    widths = df.sort_values("batch")["best_tree_width"].to_numpy(int)
    assert np.all(np.diff(widths) <= 0) and widths[0] > widths[-1]


@pytest.mark.parametrize("params, field", [
    ({"policy": "tree"}, "acceptance"),
    ({"policy": "chain", "tree_width": 2}, "tree_width"),
    ({"policy": "chain", "draft": None}, "draft"),
    ({"c": 0.1, "c_target_over_draft": 10}, "c_target_over_draft"),
    ({"c": -1}, "c"),
    ({"policy": "beam"}, "policy"),
    ({"batch": 0}, "batch"),
    ({"policy": "tree", "gamma": 0, "acceptance": SEQUOIA}, "gamma"),  # specinfer needs >= 1
    ({"gpu_memory_utilization": 0.0}, "gpu_memory_utilization"),
    ({"block_size": 0}, "block_size"),
])
def test_bad_points_name_the_field(params, field):
    with pytest.raises(SpecsimError) as err:
        check_point(params)
    assert err.value.field == field


def test_a_map_with_failed_points_is_an_error(monkeypatch):
    # rates for two ranks cannot price a tree with four children per node: the configuration
    # check names it first; past that check (switched off here), a failed point still stops
    # the map rather than leave a hole in it
    import simulator.planning.gamma_map as gm
    kwargs = dict(batches=[1], contexts=[128], gammas=[1], policies=("tree",),
                  tree_widths=(4,), acceptance={"model": "sequoia", "rates": [0.8, 0.3]})
    with pytest.raises(SpecsimError, match="policy tree, gamma 1, tree width 4: rates"):
        gamma_map(**kwargs)
    monkeypatch.setattr(gm, "check_configurations", lambda payloads: None)
    with pytest.raises(SpecsimError, match="points failed"):
        gamma_map(**kwargs)


def test_best_rows_breaks_ties_towards_the_first_row_and_skips_infeasible_rows():
    df = pd.DataFrame({"k": [1, 1, 1, 2], "gamma": [0, 3, 5, 1],
                       "speedup": [1.5, 1.5, 0.5, np.nan]})
    best = best_rows(df, ["k"])  # group 2 has no speedup at all: it is left out
    assert best["gamma"].tolist() == [0]
    df["feasible"] = [False, True, True, True]
    assert best_rows(df, ["k"])["gamma"].tolist() == [3]


@pytest.mark.parametrize("batch,context", [(1, 128.0), (32, 512.0), (256, 8192.0)])
def test_estimate_and_an_analytic_point_price_the_draft_with_one_formula(batch, context):
    # `specsim estimate` and a sweep/gamma-map point of the same shape share one chain-draft
    # pricer (simulator.cost.drafting.chain_draft_time): equal to the last bit, every gamma
    from simulator.planning.analytic import estimate_table, point_cost_models
    def models(gamma):  # what `specsim estimate` passes: the point's models per gamma
        return point_cost_models("a100-40gb", None, "opt-13b", "opt-125m", 1, True, None,
                                 "chain", gamma)
    table = estimate_table(models, None, batch=batch, context=context,
                           gammas=list(range(9)), alpha=0.8)
    for row in table.itertuples():
        point = analytic_point({"batch": batch, "context": context, "gamma": row.gamma})
        assert point["draft_s"] == row.draft_s
        assert point["verify_s"] == row.verify_s and point["decode_s"] == row.decode_s
    # gamma 0 is chain drafting nothing: plain decoding's step time, speedup exactly 1
    none = analytic_point({"batch": batch, "context": context, "policy": "none"})
    assert table["draft_s"].iloc[0] == 0.0 and table["verify_s"].iloc[0] == none["decode_s"]
    assert table["speedup"].iloc[0] == 1.0


@pytest.mark.parametrize("kwargs, message", [
    ({"policies": ("mtp",)}, "policy mtp, gamma 1: policy.name: opt-13b ships no"),
    ({"tensor_parallel": 3}, "not divisible by tensor_parallel=3"),
    ({"policies": ("chain", "tree"), "acceptance": {"model": "sequoia", "rates": [0.8, 0.3]},
      "tree_widths": (1, 4)}, "policy tree, gamma 1, tree width 4: rates"),
])
def test_a_configuration_error_comes_before_any_point_runs(monkeypatch, kwargs, message):
    """Issue 37: the default map ran 612 points (49-65 s) before saying 'opt-13b ships no
    MTP modules'; now one point per (policy, width, gamma) is checked and the map never
    starts."""
    import simulator.planning.sweep as sweep

    def no_map(*a, **k):
        raise AssertionError("the map ran before its configurations were checked")
    monkeypatch.setattr(sweep, "run_sweep", no_map)
    with pytest.raises(SpecsimError, match=re.escape(message)):
        gamma_map(batches=(1, 8, 64), contexts=(128, 1024), gammas=range(0, 5), **kwargs)


def test_the_configuration_check_lets_infeasible_points_through():
    """A point that does not fit is a result (marked in the map), not a configuration error."""
    df = gamma_map(batches=(1,), contexts=(128,), gammas=(0, 1), hardware="a100-40gb",
                   target="opt-13b", memory={"gpu_memory_utilization": 0.01})
    assert not df["feasible"].any()
