"""The ``adaptive`` wrapper's iterations that are its chain's own (``VariedDraft.fixed_chain``:
the fixed controller at the chain's gamma, nobody catching up) taken by the chain's stretch
(issue 36): the same DataFrames as the step-by-step reference bit for bit, and, where the
wrapper never lowers a gamma, the same as the chain alone (the wrapper then is the chain)."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

import simulator.engine.varied_stretch as varied_stretch
from simulator.acceptance.iid import IIDAcceptance
from simulator.policies.base import PolicyContext
from simulator.policies.registry import POLICIES
from simulator.scenario import PolicyConfig, load_scenario
from simulator.simulate import build_deployment
from tests.helpers import REPO, scenario, workload
from tests.simulator.engine.test_fast_forward import _both, assert_identical

SCENARIO = REPO / "workloads" / "scenarios" / "adaptive.yaml"
CHAIN = {"name": "chain", "num_speculative_tokens": 6}


def _counting(monkeypatch, name: str) -> list:
    """Count the calls of varied_stretch's ``name`` (the calls go on as before)."""
    calls, real = [], getattr(varied_stretch, name)

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(varied_stretch, name, spy)
    return calls


def test_the_fixed_wrapper_is_its_chain(monkeypatch):
    """adaptive.yaml's wrapper with the fixed controller and no schedule drafts the chain's
    gamma every iteration: its tables are the chain's, fast-forward on and off, and none
    of its iterations is taken one by one (the chain's stretch takes them all here: no
    admission, KV pressure or long context interrupts a stretch in this workload)."""
    one_by_one = _counting(monkeypatch, "_iteration")
    fixed = load_scenario(SCENARIO, ["workload.max_requests=80", "policy={name: adaptive, "
                                     "controller: fixed, base: {name: chain, "
                                     "num_speculative_tokens: 6}}"])
    on, off = _both(fixed)
    assert_identical(on, off)
    assert not one_by_one
    chain = dataclasses.replace(fixed, policy=PolicyConfig("chain", {
        "num_speculative_tokens": 6}))
    chain_on, _ = _both(chain)
    pd.testing.assert_frame_equal(on.requests, chain_on.requests, check_exact=True)
    pd.testing.assert_frame_equal(on.steps, chain_on.steps, check_exact=True)
    assert np.array_equal(on.accepted_hist, chain_on.accepted_hist)
    assert on.info["engine"]["vectorised"] == chain_on.info["engine"]["vectorised"]


@pytest.mark.parametrize("gamma", [2, 5])
def test_requests_that_skipped_catch_up_one_by_one(monkeypatch, gamma):
    """Batches of 4 or more do not speculate (speculative_disable_by_batch_size): their
    requests skip drafts and lag; the first iteration after, whose draft forward catches
    up, is the wrapper's, the rest the chain's stretch: identical to the step-by-step
    reference, with both kinds taken."""
    chained = _counting(monkeypatch, "advance_chain")
    one_by_one = _counting(monkeypatch, "_iteration")
    rng = np.random.default_rng(gamma)
    sc = scenario("none", hardware="a100-40gb", target="llama-2-7b", draft="llama-68m",
                  seed=gamma)
    sc = dataclasses.replace(sc, policy=PolicyConfig("adaptive", {
        "base": {"name": "chain", "num_speculative_tokens": gamma},
        "speculative_disable_by_batch_size": 4}))
    n = 40
    wl = workload(np.sort(rng.uniform(0, 4, n)), rng.integers(20, 400, n),
                  rng.integers(5, 120, n))
    on, off = _both(sc, wl)
    assert_identical(on, off)
    assert chained and one_by_one


@pytest.fixture(scope="module")
def deployment():
    return build_deployment(load_scenario(SCENARIO, ["workload.max_requests=5"]))


def _stretch_of(deployment, raw: dict):
    """The adaptive policy of ``raw`` parameters and its ``VariedDraft``."""
    params = POLICIES["adaptive"].parse_params(raw, source="test", prefix="policy.")
    policy = POLICIES["adaptive"](params, PolicyContext(
        target_cost=deployment.target_cost, draft_cost=deployment.draft_cost,
        acceptance=IIDAcceptance(0.75)))
    return policy, policy.varied_draft()


def test_fixed_chain_only_where_nothing_can_change_the_gammas(deployment):
    """The chain's stretch where the gammas are the chain's and stay so; never while a
    request catches up, under a cap below the gamma, a kill switch or a learning
    controller."""
    ids = np.array([3, 7])
    policy, spec = _stretch_of(deployment, {"base": CHAIN})
    got = spec.fixed_chain(ids, 2)
    assert got is not None and got.gamma == 6
    policy.control._lags = {7: 2}  # request 7 skipped two tokens: its draft catches up
    assert spec.fixed_chain(ids, 2) is None
    assert spec.fixed_chain(np.array([3, 8]), 2) is not None
    _, spec = _stretch_of(deployment, {"base": CHAIN, "num_speculative_tokens_per_batch_size":
                                       [[1, 2, 6], [3, 256, 2]]})
    assert spec.fixed_chain(ids, 2) is not None and spec.fixed_chain(ids, 3) is None
    for raw in ({"base": CHAIN, "controller": "goodput"},
                {"base": CHAIN, "controller": "acceptance_ema"},
                {"base": CHAIN, "acceptance_rate_window_size": 4,
                 "acceptance_rate_threshold": 0.5}):
        _, spec = _stretch_of(deployment, raw)
        assert spec.fixed_chain(ids, 2) is None


def test_a_kill_switch_that_cannot_trip_leaves_the_chain_its_stretch(deployment, monkeypatch):
    """A kill switch at threshold 0 is off (no acceptance rate falls below 0): the gammas
    follow the schedule alone, so the chain's stretch takes its iterations (fixed_chain),
    and the tables are the wrapper's without the switch, fast-forward on and off."""
    _, spec = _stretch_of(deployment, {"base": CHAIN, "acceptance_rate_window_size": 4,
                                       "acceptance_rate_threshold": 0.0})
    assert spec.fixed_chain(np.array([3, 7]), 2) is not None
    chained = _counting(monkeypatch, "advance_chain")
    path = REPO / "workloads" / "scenarios" / "adaptive_schedule.yaml"
    off = load_scenario(path, ["workload.max_requests=60",
                               "policy.acceptance_rate_threshold=0.0"])
    on_ff, off_ff = _both(off)
    assert_identical(on_ff, off_ff)
    assert chained
    none = load_scenario(path, ["workload.max_requests=60", (
        "policy={name: adaptive, base: {name: chain, num_speculative_tokens: 4}, "
        "num_speculative_tokens_per_batch_size: [[1, 16, 4], [17, 48, 2], [49, 256, 1]], "
        "speculative_disable_by_batch_size: 128}")])  # adaptive_schedule.yaml's, no switch
    without, _ = _both(none)
    pd.testing.assert_frame_equal(on_ff.requests, without.requests, check_exact=True)
    pd.testing.assert_frame_equal(on_ff.steps, without.steps, check_exact=True)


def test_all_speculable_is_every_request_speculable(deployment):
    """The wrapper's one-comparison test that every request fits the draft's context (the
    longest sequence plus gamma below it) agrees with the chain's per-request rule on
    batches around the limit (exact enumeration of the lengths that straddle it)."""
    _, spec = _stretch_of(deployment, {"base": CHAIN, "controller": "goodput"})
    limit, gamma = spec.chain.draft_max_context, spec.chain.gamma
    assert limit is not None and spec._limited
    edge = limit - gamma  # a sequence this long is the first that does not fit
    for a in range(edge - 3, edge + 2):
        for b in range(edge - 3, edge + 2):
            prompt, generated = np.array([a - 40, b - 40, 30]), np.array([40, 40, 2])
            want = bool(spec._speculable(prompt, generated).all())
            assert spec._all_speculable(prompt, generated) is want, (a, b)
    assert spec._all_speculable(np.zeros(0, np.int64), np.zeros(0, np.int64))
