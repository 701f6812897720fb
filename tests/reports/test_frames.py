"""The report's aggregations: checked against closed forms and against Results.summary()."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reports import frames
from reports.model_frames import (
    OperatingPoint,
    default_grid_axes,
    gamma_grid_frame,
    operating_point,
    roofline_frames,
    scenario_alpha,
    scenario_pricing,
)
from simulator.engine.recorder import Recorder
from simulator.results import Results
from simulator.scenario import SLO, PolicyConfig, Scenario

INFO = {"flops_per_token": 2.6e10, "attn_flops_per_pair": 8.2e5, "peak_flops_per_s": 3.12e14,
        "peak_bandwidth_bytes_per_s": 1.555e12, "weight_bytes_per_step": 2.6e10,
        "kv_bytes_per_token": 8.2e5}


def make_results(label: str, ttft_s, tpot_s, *, steps: pd.DataFrame | None = None,
                 accepted=None, drafted=None, status=None, itl_s=None) -> Results:
    """A Results with the given per-request latencies (every request 11 output tokens)."""
    ttft_s, tpot_s = np.asarray(ttft_s, float), np.asarray(tpot_s, float)
    n = ttft_s.size
    arrival = np.arange(n, dtype=float)
    out = np.full(n, 11)
    e2e = ttft_s + 10 * tpot_s
    req = pd.DataFrame({
        "request_id": np.arange(n), "status": pd.Categorical(
            status if status is not None else ["finished"] * n,
            categories=["pending", "waiting", "running", "finished", "rejected"]),
        "arrival_s": arrival, "first_scheduled_s": arrival, "first_token_s": arrival + ttft_s,
        "finish_s": arrival + e2e, "prompt_tokens": np.full(n, 100), "output_tokens": out,
        "emitted_tokens": out, "preemptions": np.zeros(n, int),
        "num_drafts": np.zeros(n, int), "num_draft_tokens": np.zeros(n, int),
        "num_accepted_tokens": np.zeros(n, int), "queueing_s": np.zeros(n),
        "ttft_s": ttft_s, "e2e_s": e2e, "tpot_s": tpot_s})
    if steps is None:
        steps = pd.DataFrame(columns=Recorder.STEP_FIELDS)
    acc = np.zeros(8, np.int64) if accepted is None else np.asarray(accepted, np.int64)
    dr = np.zeros(8, np.int64) if drafted is None else np.asarray(drafted, np.int64)
    sc = Scenario(name="t", slo=SLO(), policy=PolicyConfig(name=label.split(":")[0]))
    return Results(label=label, requests=req, steps=steps,
                   itl_s=np.asarray(itl_s if itl_s is not None else tpot_s, float),
                   accepted_hist=acc, drafted_hist=dr, scenario=sc, info=dict(INFO))


def make_steps(start_s, duration_s, **columns) -> pd.DataFrame:
    n = len(start_s)
    data = {f: np.zeros(n) for f in Recorder.STEP_FIELDS}
    data.update(start_s=np.asarray(start_s, float), duration_s=np.asarray(duration_s, float))
    data.update({k: np.asarray(v, float) for k, v in columns.items()})
    return pd.DataFrame(data)


# ------------------------------------------------------------------ latency CDFs
def test_cdf_of_evenly_spaced_latencies_is_linear_in_the_quantile():
    # 1000 TTFTs of 1, 2, ..., 1000 ms: the linearly interpolated q-quantile is 1 + 999 q ms.
    ttft = np.arange(1, 1001) * 1e-3
    cdf = frames.cdf_frame([make_results("none", ttft, np.full(1000, 0.02))], "ttft")
    np.testing.assert_allclose(cdf["value_ms"], 1 + 999 * cdf["quantile"], rtol=1e-9)
    assert cdf["quantile"].iloc[0] == 0.0 and cdf["quantile"].iloc[-1] == 1.0
    assert (np.diff(cdf["value_ms"]) >= 0).all()


def test_cdf_skips_unfinished_requests_and_uses_itl_array_for_itl():
    status = ["finished"] * 9 + ["rejected"]
    ttft = np.r_[np.full(9, 0.1), 99.0]
    r = make_results("none", ttft, np.full(10, 0.02), status=status, itl_s=[0.001, 0.003])
    assert frames.cdf_frame([r], "ttft")["value_ms"].max() == pytest.approx(100.0)
    itl = frames.cdf_frame([r], "itl")
    assert itl["value_ms"].min() == pytest.approx(1.0)
    assert itl["value_ms"].max() == pytest.approx(3.0)


def test_cdf_size_depends_on_policies_not_requests():
    small = frames.cdf_frame([make_results("a", np.ones(10), np.ones(10))], "e2e")
    big = frames.cdf_frame([make_results("a", np.ones(50_000), np.ones(50_000))], "e2e")
    assert len(small) == len(big) == len(frames.CDF_QUANTILES)


# ------------------------------------------------------------------ timelines
def test_timeline_single_bin_is_the_duration_weighted_mean_of_summary():
    rng = np.random.default_rng(0)
    n = 500
    dur = rng.uniform(0.01, 0.1, n)
    steps = make_steps(np.cumsum(dur) - dur, dur, kv_occupancy=rng.uniform(0, 1, n),
                       batch_size=rng.integers(1, 64, n))
    r = make_results("none", np.ones(5), np.ones(5), steps=steps)
    tl = frames.timeline_frame([r], "kv_occupancy", max_points=1)
    assert len(tl) == 1
    # Results.summary() computes the same duration-weighted mean independently.
    assert tl["value"].iloc[0] == pytest.approx(r.summary()["mean_kv_occupancy"], rel=1e-12)


def test_timeline_bins_by_hand():
    # two steps in the first half (durations 1 and 3, batch 2 and 6), one in the second.
    steps = make_steps([0.0, 1.0, 10.0], [1.0, 3.0, 1.0], batch_size=[2, 6, 5])
    tl = frames.timeline_frame([make_results("x", [1.0], [1.0], steps=steps)], "batch_size", 2)
    assert tl["value"].tolist() == pytest.approx([(2 * 1 + 6 * 3) / 4, 5.0])
    assert tl["time_s"].tolist() == pytest.approx([2.5, 7.5])


def test_timeline_is_bounded_and_constant_signal_stays_constant():
    n = 100_000
    steps = make_steps(np.arange(n) * 0.01, np.full(n, 0.01), queue_len=np.full(n, 7.0))
    tl = frames.timeline_frame([make_results("x", [1.0], [1.0], steps=steps)], "queue_len", 300)
    assert len(tl) == 300
    np.testing.assert_allclose(tl["value"], 7.0)


# ------------------------------------------------------------------ acceptance
def truncated_geometric_counts(alpha_num: int, alpha_den: int, gamma: int, total: int):
    """Exact counts of min(Geometric, gamma) accepted tokens, alpha = num/den."""
    a = alpha_num / alpha_den
    p = [a ** k * (1 - a) for k in range(gamma)] + [a ** gamma]
    counts = np.rint(np.array(p) * total).astype(np.int64)
    assert counts.sum() == total
    return counts


def test_position_rates_of_iid_acceptance_are_powers_of_alpha():
    # iid acceptance with alpha = 1/2 and gamma = 4: P(first i accepted) = alpha^i.
    acc = np.zeros(8, np.int64)
    acc[:5] = truncated_geometric_counts(1, 2, 4, 1600)
    dr = np.zeros(8, np.int64)
    dr[4] = 1600
    r = make_results("chain", [1.0], [1.0], accepted=acc, drafted=dr)
    pos = frames.position_rate_frame([r])
    assert pos["position"].tolist() == [1, 2, 3, 4]
    assert pos["rate"].tolist() == pytest.approx([0.5, 0.25, 0.125, 0.0625])
    hist = frames.acceptance_length_frame([r])
    assert hist["accepted_tokens"].tolist() == [0, 1, 2, 3, 4]
    assert hist["fraction"].tolist() == pytest.approx([0.5, 0.25, 0.125, 0.0625, 0.0625])


def test_acceptance_frames_leave_out_policies_that_never_drafted():
    none = make_results("none", [1.0], [1.0])
    assert frames.acceptance_length_frame([none]).empty
    assert frames.position_rate_frame([none]).empty


# ------------------------------------------------------------------ summary and sweep
def test_summary_speedup_is_relative_to_none_tpot():
    base = make_results("none", np.full(4, 0.1), np.full(4, 0.030))
    fast = make_results("chain", np.full(4, 0.1), np.full(4, 0.012))
    df = frames.summary_frame([base, fast])
    assert df["speedup_vs_none"].tolist() == pytest.approx([1.0, 2.5])
    assert df["p50_tpot_s"].tolist() == pytest.approx([0.030, 0.012])
    assert np.isnan(frames.summary_frame([fast])["speedup_vs_none"].iloc[0])


def test_sweep_frame_converts_latency_to_ms_and_names_the_rate():
    sweep = pd.DataFrame({"policy": ["none", "none", "chain"], "rate_per_s": [1, 2, 1],
                          "p99_tpot_s": [0.02, 0.03, 0.01], "output_tokens_per_s": [5, 9, 6]})
    long = frames.sweep_frame(sweep)
    tpot = long[long["metric"] == frames.SWEEP_METRICS["p99_tpot_s"]]
    assert sorted(tpot["value"]) == pytest.approx([10.0, 20.0, 30.0])
    thr = long[long["metric"] == frames.SWEEP_METRICS["output_tokens_per_s"]]
    assert sorted(thr["value"]) == [5, 6, 9]
    assert frames.sweep_frame(pd.DataFrame({"x": [1]})).empty


# ------------------------------------------------------------------ cost-model frames
@pytest.fixture(scope="module")
def pricing():
    return scenario_pricing(Scenario(hardware="a100-40gb", target="opt-13b", draft="opt-125m"))


def test_gamma_grid_never_speculates_when_nothing_is_accepted(pricing):
    # alpha = 0: E = 1 token whatever gamma, so any draft only costs time: gamma 0, speedup 1.
    grid = gamma_grid_frame(pricing.target_cost, pricing.draft_cost, alpha=0.0,
                            batches=[1, 16], contexts=[128, 1024])
    assert grid["best_gamma"].tolist() == [0, 0, 0, 0]
    assert grid["speedup"].tolist() == pytest.approx([1.0] * 4)


def test_gamma_grid_covers_the_axes_and_speedup_is_at_least_one(pricing):
    batches, contexts = default_grid_axes(64, pricing.target.max_context)
    assert batches == [1, 2, 4, 8, 16, 32, 64]
    assert contexts[0] == 128 and contexts[-1] < pricing.target.max_context
    grid = gamma_grid_frame(pricing.target_cost, pricing.draft_cost, alpha=0.8,
                            batches=batches, contexts=contexts)
    assert len(grid) == len(batches) * len(contexts)
    assert (grid["speedup"] >= 1.0 - 1e-12).all()
    assert grid["best_gamma"].between(0, 8).all()


def test_roofline_intensity_matches_the_linear_layer_closed_form(pricing):
    # fp16 linear layer, T tokens: FLOPs 2TW over bytes 2W + 2T(in+out) -> just under T.
    point = OperatingPoint(batch=8, context=512, gamma=4)
    ops, roofs = roofline_frames(pricing, point)
    for step, tokens in (("decode", 8), ("verify (gamma=4)", 8 * 5)):
        mlp = ops[(ops["step"] == step) & (ops["op"] == "mlp_up")].iloc[0]
        assert 0.98 * tokens <= mlp["arithmetic_intensity"] <= tokens
    # NVIDIA A100 datasheet: 312 TFLOP/s fp16 dense, 1,555 GB/s HBM2 (40 GB).
    assert roofs["flops_per_s"].max() == pytest.approx(312e12)
    low = roofs[roofs["arithmetic_intensity"] < 312e12 / 1555e9]
    np.testing.assert_allclose(low["flops_per_s"], low["arithmetic_intensity"] * 1555e9)
    # no operator beats its roof
    roof_at = np.minimum(312e12, ops["arithmetic_intensity"] * 1555e9)
    assert (ops["flops_per_s"] <= roof_at * (1 + 1e-9)).all()
    assert set(ops["bound"]) <= {"compute", "memory", "host"}


def test_operating_point_from_the_run():
    steps = make_steps([0, 1, 2, 3], [1, 1, 1, 1], num_decode=[0, 6, 8, 10])
    r = make_results("chain", np.ones(3), np.ones(3), steps=steps)
    r.requests["num_drafts"] = [10, 10, 0]
    r.requests["num_draft_tokens"] = [40, 40, 0]
    point = operating_point([r], max_context=2048)
    # median decode batch 8; context = prompt 100 + half of 11 output tokens = 105.5 -> 105
    assert point == OperatingPoint(batch=8, context=105, gamma=4)


def test_alpha_comes_from_the_scenario_or_the_run():
    r = make_results("chain", [1.0], [1.0])
    r.requests["num_draft_tokens"] = [10]
    r.requests["num_accepted_tokens"] = [7]
    r.requests["num_drafts"] = [2]
    iid = Scenario(acceptance={"model": "iid", "alpha": 0.6})
    assert scenario_alpha(iid, [r])[0] == 0.6
    other = Scenario(acceptance={"model": "positional", "rates": [0.9, 0.5]})
    assert scenario_alpha(other, [r])[0] == pytest.approx(0.7)


def test_sorted_quantiles_match_numpy_linear_quantiles():
    rng = np.random.default_rng(3)
    values = rng.lognormal(0, 2, 1001)
    q = frames.CDF_QUANTILES
    np.testing.assert_allclose(frames.sorted_quantiles(values, q), np.quantile(values, q),
                               rtol=1e-12)
    assert frames.sorted_quantiles(np.array([5.0]), q).tolist() == [5.0] * q.size


@pytest.mark.parametrize("name", ["mtp_moe", "deepseek_dp_attention"])
def test_verify_ratio_of_a_moe_target_spread_over_its_gpus(name):
    # TP 8 + EP and DP attention 8 + EP: the dense counterpart has no experts to spread, so
    # it is priced without expert parallelism (it used to be refused); the MoE model's
    # verification of 4 tokens costs more than a decode at batch 1 (more experts touched)
    from reports.model_frames import verify_ratio_frame
    from simulator.scenario import load_scenario
    from tests.helpers import REPO

    sc = load_scenario(str(REPO / "workloads" / "scenarios" / f"{name}.yaml"))
    ratio = verify_ratio_frame(scenario_pricing(sc), OperatingPoint(1, 1024, 3), (1, 64))
    moe = ratio[ratio.model == "deepseek-v3"].set_index("batch").ratio
    assert set(ratio.model) == {"deepseek-v3", "dense counterpart of deepseek-v3"}
    assert moe[1] > 1.0
