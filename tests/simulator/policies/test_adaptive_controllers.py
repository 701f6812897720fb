"""The gamma controllers in isolation: schedules, SGLang's EMA, the kill switch, goodput."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.policies.adaptive_controllers import (
    AcceptanceEMA,
    AcceptanceEstimate,
    BatchSizeSchedule,
    KillSwitch,
    expected_emitted,
    goodput_gammas,
)
from simulator.policies.goodput_parts import SPREAD_INDEX, clipped_alpha, descending_distinct
from simulator.speculation.closed_forms import expected_tokens


def parse(value):
    return BatchSizeSchedule.parse(value, source="test", field="sched")


def test_both_schedule_forms_cover_the_same_ranges():
    vllm = parse([[1, 4, 4], [5, 8, 2], [9, 32, 1]])
    trt = parse([[4, 4], [8, 2], [32, 1]])
    trt_dict = parse({4: 4, 8: 2, 32: 1})  # TensorRT-LLM's draft_len_schedule dict
    assert vllm == trt == trt_dict
    got = [vllm.gamma(b) for b in (1, 4, 5, 8, 9, 32, 33, 1000)]
    # above the last range speculation is off (TensorRT-LLM PR #10860's example)
    assert got == [4, 4, 2, 2, 1, 1, 0, 0]


@pytest.mark.parametrize("value, field, words", [
    ([[1, 4, 4], [6, 8, 2]], "sched[1]", "gap"),
    ([[2, 4, 4]], "sched[0]", "gap"),
    ([[1, 4, 4], [4, 8, 2]], "sched[1]", "overlap"),
    ([[8, 4], [8, 2]], "sched[1]", "overlap"),
    ([[8, 4], [4, 2]], "sched[1]", "overlap"),
    ([[1, 4, 4], [5, 8, 2], [10, 12, 1]], "sched[2]", "gap: batch sizes 9..9"),
    ([[1, 8, 4], [9, 5, 2]], "sched[1]", "min_batch 9 > max_batch 5"),
    ([[0, 4, 4]], "sched[0]", "start"),
    ([[1, 4, -1]], "sched[0]", "at least 0"),
    ([[1, 4, 2.5]], "sched[0]", "whole"),
    ([[1, 4, 4], [5, 2]], "sched", "all"),
    ([], "sched", "non-empty"),
    ("fast", "sched", "non-empty"),
])
def test_bad_schedules_are_named(value, field, words):
    with pytest.raises(SpecsimError) as err:
        parse(value)
    assert err.value.field == field
    assert words in str(err.value)


def test_ema_controller_follows_sglangs_thresholds():
    # SGLang adaptive_spec_params.py: rise above step - 0.5 + up, fall to a lower step s
    # when the EMA is at most s - 0.5 + down (0.5 + down for s = 0)
    ema = AcceptanceEMA([1, 3, 5, 7], 3, ema_alpha=0.5, update_interval=1, warmup_batches=0)
    assert (ema.steps, ema.ema) == (3, 2.0)
    ema.update(np.array([4]))          # EMA 3.0 > 2.5: up to 5; 3.0 <= 4.5: not to 7
    assert (ema.steps, ema.ema) == (5, 3.0)
    ema.update(np.array([0]))          # EMA 1.5 <= 3 - 0.5 - 0.25: down to 3, not to 1
    assert (ema.steps, ema.ema) == (3, 1.5)
    for expected in (3, 3, 1):         # EMA 0.75, 0.375, then 0.1875 <= 0.25
        ema.update(np.array([0]))
        assert ema.steps == expected
    off = AcceptanceEMA([0, 2], 2, ema_alpha=0.5, update_interval=1, warmup_batches=0)
    off.update(np.array([0]))          # EMA 0.5 > 0.25: stays
    off.update(np.array([0]))          # EMA 0.25 <= 0.25: off
    assert off.steps == 0
    off.update(np.array([0, 0]))       # off: the EMA rests and the next update probes up
    assert off.steps == 2 and off.ema == 0.25


def test_ema_controller_waits_for_warmup_and_interval():
    ema = AcceptanceEMA([1, 3, 5], 3, ema_alpha=1.0, update_interval=2, warmup_batches=2)
    for _ in range(3):
        ema.update(np.array([5]))
    assert ema.steps == 3              # batches 1, 2 warm up; batch 3 is off-interval
    ema.update(np.array([5]))
    assert ema.steps == 5


def test_kill_switch_trips_on_the_windowed_rate_for_good():
    kill = KillSwitch(window=3, threshold=0.5)
    kill.update(2, 4)
    kill.update(1, 4)
    kill.update(0, 0)                  # an iteration without drafts does not count
    assert not kill.tripped
    kill.update(3, 4)                  # 6 / 12 = 0.5 is not below 0.5
    assert not kill.tripped
    kill.update(0, 4)                  # (1 + 3 + 0) / 12 < 0.5
    assert kill.tripped
    kill.update(4, 4)
    assert kill.tripped


def test_acceptance_estimate_is_the_truncated_geometric_mle():
    est = AcceptanceEstimate(prior_alpha=0.5, prior_weight=2.0, decay=1.0)
    rids = np.array([0, 1, 2])
    est.update(rids, drafted=np.array([4, 4, 2]), accepted=np.array([4, 1, 0]))
    # successes 4, 1, 0 and failures 0, 1, 1; the global rate with its prior is 6 / 9
    assert est.global_alpha == pytest.approx(2 / 3)
    assert est.alpha(rids) == pytest.approx([(4 + 4 / 3) / 6, (1 + 4 / 3) / 4,
                                             (0 + 4 / 3) / 3])
    assert est.alpha(np.array([7])) == pytest.approx([2 / 3])  # unseen: the global rate
    rng = np.random.default_rng(0)
    big = AcceptanceEstimate(prior_weight=0.0, decay=1.0)
    gamma = np.full(20000, 4)
    accepted = np.minimum(rng.geometric(0.3, gamma.size) - 1, gamma)  # iid alpha 0.7
    big.update(np.arange(gamma.size), gamma, accepted)
    assert big.global_alpha == pytest.approx(0.7, abs=0.01)


def test_acceptance_estimate_without_prior_weight_is_the_limit_of_a_small_one():
    """prior_weight 0 (the goodput controller allows it) divided 0 by 0 before any drafting
    (global_alpha) and for an unseen request (alpha): now the limit w -> 0+ of
    (s + w g) / (s + f + w), which a weight of 1e-9 gives to within 1e-8."""
    zero = AcceptanceEstimate(prior_alpha=0.3, prior_weight=0.0, decay=0.5)
    tiny = AcceptanceEstimate(prior_alpha=0.3, prior_weight=1e-9, decay=0.5)
    assert zero.global_alpha == 0.3  # no observation yet: the prior's rate
    assert zero.alpha(np.array([0, 1])).tolist() == [0.3, 0.3]
    rids = np.array([0, 1, 2])
    for est in (zero, tiny):
        est.update(rids, drafted=np.array([4, 4, 0]), accepted=np.array([4, 1, 0]))
    # successes 4 + 1, failures 0 + 1: the global MLE 5 / 6; request 2 drafted nothing
    assert zero.global_alpha == 5 / 6
    assert zero.alpha(np.array([0, 1, 2, 9])).tolist() == [1.0, 0.5, 5 / 6, 5 / 6]
    assert zero.alpha(np.array([0, 1, 2, 9])) == \
        pytest.approx(tiny.alpha(np.array([0, 1, 2, 9])), abs=1e-8)


def test_goodput_controller_runs_with_prior_weight_zero():
    """The scenario key that reaches it (policy.controller.prior_weight, minimum 0): a run,
    no ZeroDivisionError, every request served."""
    from simulator.scenario import load_scenario
    from simulator.simulate import simulate
    sc = load_scenario("workloads/scenarios/adaptive.yaml",
                       ["policy.controller.prior_weight=0",
                        "workload.synthetic.num_requests=12"])
    res = simulate(sc)
    assert len(res.requests) == 12 and res.requests["e2e_s"].notna().all()


def test_expected_emitted_is_leviathans_formula():
    for a in (0.0, 0.3, 0.8, 1.0):
        for g in range(6):
            assert expected_emitted(np.array([a]), np.array([g]))[0] == \
                pytest.approx(expected_tokens(a, g) if a < 1 else g + 1)


def _brute(alpha, cap, step_time):
    best, best_k = -1.0, None
    for ks in itertools.product(*[range(c + 1) for c in cap]):
        k = np.array(ks)
        v = expected_emitted(alpha, k).sum() / step_time(k)
        if v > best + 1e-12:
            best, best_k = v, k
    return best, best_k


def test_goodput_finds_the_optimum_when_time_is_additive():
    rng = np.random.default_rng(1)
    for _ in range(30):
        alpha = rng.uniform(0.05, 0.95, size=3)
        cap = rng.integers(0, 4, size=3)
        a, b = rng.uniform(0.5, 2.0), rng.uniform(0.02, 0.5)

        def step_time(k):
            return a + b * k.sum()

        best, _ = _brute(alpha, cap, step_time)
        k = goodput_gammas(alpha, cap, step_time)
        assert (k <= cap).all()
        assert expected_emitted(alpha, k).sum() / step_time(k) == pytest.approx(best)


def test_goodput_with_a_shared_draft_chain_beats_every_uniform_gamma():
    rng = np.random.default_rng(2)
    for _ in range(30):
        alpha = rng.uniform(0.05, 0.95, size=4)
        cap = np.full(4, 3)

        def step_time(k):  # a draft chain costs max(k) forwards for the whole batch
            return 1.0 + 0.3 * k.max() + 0.05 * k.sum()

        best, _ = _brute(alpha, cap, step_time)
        k = goodput_gammas(alpha, cap, step_time)
        value = expected_emitted(alpha, k).sum() / step_time(k)
        uniform = max(expected_emitted(alpha, np.full(4, u)).sum() / step_time(np.full(4, u))
                      for u in range(4))
        assert uniform - 1e-12 <= value <= best + 1e-12


def test_goodput_without_room_drafts_nothing():
    assert goodput_gammas(np.array([0.9, 0.9]), np.array([0, 0]), lambda k: 1.0).tolist() == [0, 0]
    # drafts that cost more than they return are not made
    k = goodput_gammas(np.array([0.1, 0.1]), np.array([4, 4]), lambda k: 1.0 + k.sum())
    assert k.tolist() == [0, 0]


def test_the_levels_are_numpys_distinct_values_descending():
    """The search's levels (``descending_distinct``: numpy's sort without its layers)
    are ``np.unique``'s values in reverse, ties and zeros included."""
    rng = np.random.default_rng(8)
    for shape in [(1,), (7,), (3, 4), (40, 6), (100, 6), (513,), (600,)]:
        for values in (rng.uniform(0.0, 1.0, shape), rng.integers(0, 5, shape) / 4.0,
                       np.zeros(shape)):
            got = descending_distinct(values)
            assert got.dtype == np.float64
            assert got.tolist() == np.unique(values)[::-1].tolist()


def test_the_clip_is_skipped_only_strictly_inside():
    """``clipped_alpha``: alpha itself where every value is in (0, 1) (np.clip changes nothing
    there), np.clip's values otherwise (0, 1, outside, NaN-free edges)."""
    inside = np.array([0.25, 0.5, 0.999])
    got, flag = clipped_alpha(inside)
    assert flag and got is inside
    for alpha in (np.array([0.0, 0.5]), np.array([0.5, 1.0]), np.array([-0.25, 1.5]),
                  np.array([0.5, -0.0]), np.array([], np.float64)):
        got, flag = clipped_alpha(alpha)
        assert not flag and got.tolist() == np.clip(alpha, 0.0, 1.0).tolist()


def test_spread_is_linspace_rounded():
    """The search's evenly spread candidate levels: numpy's linspace rounded, exactly, for
    every size and count up to these (exact enumeration, the degenerate ones included)."""
    for size in range(0, 300):
        for count in range(0, 30):
            want = np.linspace(0, size - 1, count).round().astype(np.int64).tolist()
            assert SPREAD_INDEX[(size, count)].tolist() == want, (size, count)


def _reference_rows(alpha, cap, max_candidates=12):
    """The search's candidates as first written: none, the uniform choices min(cap, u), the
    thresholds' counts by a sum of booleans, the repeats dropped by np.unique's first
    indices; one request like any other."""
    cap = np.maximum(cap.astype(np.int64), 0)
    k_max = int(cap.max())
    a = np.clip(alpha, 0.0, 1.0)
    powers = a[:, None] ** np.arange(1, k_max + 1)
    allowed = np.arange(1, k_max + 1) <= cap[:, None]
    levels = np.unique(powers[allowed])[::-1]
    if levels.size > max_candidates:
        levels = levels[np.linspace(0, levels.size - 1, max_candidates).round().astype(int)]
    uniform = np.minimum(cap, np.arange(1, k_max + 1)[:, None])
    counts = ((powers[None] >= levels[:, None, None]) & allowed).sum(axis=2)
    ks = np.vstack([np.zeros((1, cap.size), np.int64), uniform, counts])
    _, first = np.unique(ks, axis=0, return_index=True)
    return ks[np.sort(first)]


def _first_rows(ks):
    """The rows of ``ks`` without repeats, each where it first appears."""
    _, first = np.unique(ks, axis=0, return_index=True)
    return ks[np.sort(first)]


def test_the_candidates_are_the_reference_rows():
    """``goodput_choice``'s candidates (the thresholds counted by a product with ones, one
    request's rows 0 .. cap without thresholds, repeats kept) are the reference's once
    repeats are dropped, in its order, for batches of 1 to 40 requests, uniform and mixed
    caps, alphas at and past 0 and 1; and its choice is the reference rows' (the same
    strict comparison over the rows without repeats) under a step time of the whole row."""
    from simulator.policies.adaptive_controllers import goodput_choice
    rng = np.random.default_rng(36)
    for case in range(600):
        n = int(rng.integers(1, 41)) if case % 3 else 1
        alpha = rng.uniform(0.0, 1.0, n)
        if case % 5 == 0:
            alpha = np.where(rng.random(n) < 0.3, rng.choice([0.0, 1.0, -0.5, 1.5], n), alpha)
        top = int(rng.integers(1, 9))
        cap = np.full(n, top) if case % 2 else rng.integers(0, top + 1, n)
        if not cap.max():
            continue
        w, base = rng.uniform(0.0, 0.2, n), rng.uniform(0.5, 2.0)
        seconds = lambda ks: np.array(  # noqa: E731  (each row alone: repeats price alike)
            [base + 0.1 * row.max() + row @ w for row in ks])
        ks, best = goodput_choice(alpha, cap, step_times=seconds)
        want = _reference_rows(alpha, cap)
        assert (_first_rows(ks) == want).all(), case
        gains = [expected_emitted(np.clip(alpha, 0.0, 1.0), row).sum() for row in want]
        times = seconds(want).tolist()
        pick, value = 0, gains[0] / times[0]
        for c in range(1, len(want)):
            if gains[c] / times[c] > value * (1 + 1e-12):
                pick, value = c, gains[c] / times[c]
        assert ks[best].tolist() == want[pick].tolist(), case
