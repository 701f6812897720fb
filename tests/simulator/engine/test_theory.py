"""The engine against theory: sums of step times, M/D/1 waiting, alpha = 0 and 1 costs."""
import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import resolve_execution
from simulator.models.spec import load_model
from simulator.simulate import simulate
from tests.helpers import ConstantCost, scenario, workload


def test_single_request_latency_is_the_sum_of_its_steps():
    wl = workload([0.0], [300], [40])
    res = simulate(scenario("none"), workload=wl)
    steps = res.steps
    req = res.requests.iloc[0]
    assert req["e2e_s"] == pytest.approx(steps["duration_s"].sum(), rel=1e-12)
    assert req["ttft_s"] == pytest.approx(steps["duration_s"].iloc[0], rel=1e-12)
    # steps are back to back: each starts where the previous ended
    ends = (steps["start_s"] + steps["duration_s"]).to_numpy()
    assert steps["start_s"].to_numpy()[1:] == pytest.approx(ends[:-1])


def test_md1_mean_waiting_time():
    # One server, Poisson arrivals at rate lam, deterministic service D (one forward per
    # request: prefill emits its single token), so M/D/1: Wq = rho * D / (2 (1 - rho)).
    rng = np.random.default_rng(42)
    n, lam, d = 20000, 0.5, 1.0
    arrivals = np.cumsum(rng.exponential(1 / lam, n))
    wl = workload(arrivals, np.full(n, 16), np.ones(n, np.int64))
    sc = scenario("none", batching={"max_num_seqs": 1})
    res = simulate(sc, workload=wl, target_cost=ConstantCost(d))
    rho = lam * d
    expected = rho * d / (2 * (1 - rho))  # 0.5 s
    waits = res.requests["queueing_s"].to_numpy()
    # batch-means standard error: waits are autocorrelated, so use 20 batches
    means = waits.reshape(20, -1).mean(axis=1)
    se = means.std(ddof=1) / np.sqrt(len(means))
    assert abs(waits.mean() - expected) < 4 * se + 0.01
    assert se < 0.05  # the bound is informative


def _chain_run(alpha, gamma, output=24):
    wl = workload([0.0], [200], [output])
    sc = scenario(f"chain:num_speculative_tokens={gamma}", alpha=alpha)
    return simulate(sc, workload=wl, record_events=True)


def test_alpha_zero_costs_exactly_gamma_drafts_plus_one_verification():
    gamma, prompt = 3, 200
    res = _chain_run(0.0, gamma)
    hw = load_profile("a100-40gb")
    # the deployment's execution: CUDA graphs sized for gamma speculative tokens (vLLM)
    ex = resolve_execution(hw, max_num_seqs=scenario("chain").batching.max_num_seqs,
                           num_speculative_tokens=gamma,
                           max_num_batched_tokens=scenario("chain").batching
                           .max_num_batched_tokens)
    target = CostModel(hw, load_model("opt-13b"), execution=ex)
    draft = CostModel(hw, load_model("opt-125m"), execution=ex, host=False)  # inside the step
    decode_steps = res.steps[res.steps["num_decode"] == 1]
    assert (decode_steps["emitted_tokens"] == 1).all()
    for i, row in enumerate(decode_steps.itertuples()):
        ctx = prompt + i  # tokens in KV before this step (prompt + emitted - 1)
        expected = sum(draft.step_time([1], [ctx + j]) for j in range(gamma)) \
            + target.step_time([gamma + 1], [ctx])
        assert row.duration_s == pytest.approx(expected, rel=1e-12)
        assert row.draft_s + row.verify_s == pytest.approx(row.duration_s, rel=1e-12)


def test_alpha_one_emits_gamma_plus_one_per_iteration():
    gamma = 4
    res = _chain_run(1.0, gamma, output=1 + 5 * (gamma + 1))
    toks = res.events[res.events["event"] == "token"]["tokens"].tolist()
    assert toks == [gamma + 1] * 5
    assert res.summary()["mean_acceptance_length"] == gamma + 1
