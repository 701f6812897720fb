"""The goodput controller prices its candidates at once (issue 36): every candidate's
predicted seconds by ``rows_predictor`` must be the per-candidate ``predictor``'s float bit
for bit (the draft chain's memoised forwards, the draft model's catch-up, the target's
verification), and the search must choose what the one-candidate-at-a-time search chose
(written out below as it stood before), ties included."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.policies.adaptive_controllers import expected_emitted, goodput_gammas
from simulator.policies.base import PolicyContext
from simulator.policies import draft_control
from simulator.policies.draft_control import ChainControl
from simulator.policies.registry import POLICIES
from simulator.scenario import load_scenario
from simulator.simulate import build_deployment
from tests.helpers import REPO

SCENARIO = REPO / "workloads" / "scenarios" / "adaptive.yaml"


def _one_at_a_time(alpha, cap, step_time, max_candidates=12):
    """The search as it was: each distinct candidate priced and compared in turn."""
    cap = np.maximum(cap.astype(np.int64), 0)
    k_max = int(cap.max(initial=0))
    zero = np.zeros(cap.size, np.int64)
    if k_max == 0:
        return zero
    a = np.clip(alpha, 0.0, 1.0)
    powers = a[:, None] ** np.arange(1, k_max + 1)[None, :]
    allowed = np.arange(1, k_max + 1)[None, :] <= cap[:, None]
    levels = np.unique(powers[allowed])[::-1]
    if levels.size > max_candidates:
        levels = levels[np.linspace(0, levels.size - 1, max_candidates).round().astype(int)]
    candidates = [np.minimum(cap, u) for u in range(1, k_max + 1)]
    candidates += [((powers >= theta) & allowed).sum(axis=1) for theta in levels]
    best_k, best = zero, float(cap.size) / step_time(zero)
    seen = {zero.tobytes()}
    for k in candidates:
        if k.tobytes() in seen:
            continue
        seen.add(k.tobytes())
        value = float(expected_emitted(a, k).sum()) / step_time(k)
        if value > best * (1 + 1e-12):
            best_k, best = k, value
    return best_k


@pytest.fixture(scope="module")
def deployment():
    return build_deployment(load_scenario(SCENARIO, ["workload.max_requests=5"]))


def _batch(rng, n):
    alpha = rng.choice([rng.uniform(0.05, 0.99, n), np.full(n, 0.75), np.ones(n)])
    # caps differing per request, or one cap for all (the search's unmasked path)
    cap = rng.integers(0, 7, n) if rng.random() < 0.7 else np.full(n, rng.integers(1, 7))
    ctx = rng.integers(50, 4000, n)
    return alpha, cap, ctx


def test_search_on_rows_chooses_as_one_at_a_time(deployment):
    """With the shipped scenario's cost models, and with a flat price (every candidate
    tied: the first stays)."""
    policy = POLICIES["adaptive"](
        load_scenario(SCENARIO).policy.params,
        PolicyContext(target_cost=deployment.target_cost, draft_cost=deployment.draft_cost))
    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 9, 40, 130):
        for _ in range(4):
            alpha, cap, ctx = _batch(rng, n)
            ids = np.arange(n)
            single = policy.predictor(ctx, policy.control.predictor(ids, ctx))
            rows = policy.rows_predictor(ctx, policy.control.rows_predictor(ids, ctx))
            got = goodput_gammas(alpha, cap, step_times=rows)
            assert got.tolist() == _one_at_a_time(alpha, cap, single).tolist()
            flat = goodput_gammas(alpha, cap, step_times=lambda ks: np.ones(ks.shape[0]))
            assert flat.tolist() == _one_at_a_time(alpha, cap, lambda k: 1.0).tolist()
            # seconds proportional to the expected tokens: every candidate ties at 1.0
            # (the zero one too: n tokens), and the first, drafting nothing, stays
            tied = goodput_gammas(alpha, cap, step_times=lambda ks: np.array(
                [float(expected_emitted(np.clip(alpha, 0.0, 1.0), k).sum()) for k in ks]))
            assert not tied.any()


def test_rows_are_the_predictor_bit_for_bit(deployment):
    """Draft chains of every length, requests that draft nothing, and requests that skipped
    iterations (the catch-up of their first forward)."""
    rng = np.random.default_rng(5)
    policy = POLICIES["adaptive"](
        load_scenario(SCENARIO).policy.params,
        PolicyContext(target_cost=deployment.target_cost, draft_cost=deployment.draft_cost))
    # chains of up to 6 forwards (each row's times summed by numpy: fewer than 8, left to
    # right) and of up to 11 (summed one by one)
    for gamma, n in [(6, 1), (6, 3), (6, 8), (6, 33), (6, 200), (11, 1), (11, 9), (11, 40)]:
        control = ChainControl(deployment.draft_cost, gamma)
        ids, ctx = np.arange(n), rng.integers(30, 6000, n)
        control._lags = {int(r): int(rng.integers(1, 9)) for r in ids if rng.random() < 0.3}
        ks = np.concatenate([rng.integers(0, gamma + 1, (6, n)), np.zeros((1, n), np.int64),
                             np.full((1, n), gamma), rng.integers(0, 2, (2, n)) * 3])
        single, rows = control.predictor(ids, ctx), control.rows_predictor(ids, ctx)
        assert rows(ks).tolist() == [single(k) for k in ks]
        whole = policy.rows_predictor(ctx, rows)(ks).tolist()
        assert whole == [policy.predictor(ctx, single)(k) for k in ks]


def test_long_caps_choose_as_one_at_a_time():
    """Caps past 255 (the candidates' repeats found on two bytes a gamma, not one), under a
    price growing with the drafted tokens (integer sums: exact in either form)."""
    # one request, gammas 1..300 (a gamma and that gamma + 256 are not the same candidate):
    # near-certain acceptance at a small price per draft, so the longest chain wins
    longest = goodput_gammas(np.array([0.9999]), np.array([300]),
                             step_times=lambda ks: 1.0 + 0.001 * ks.sum(axis=1))
    assert longest.tolist() == [300]
    rng = np.random.default_rng(11)
    for n in (1, 4, 17):
        for top in (255, 256, 400):
            alpha = rng.uniform(0.5, 0.999, n)
            cap = np.where(rng.random(n) < 0.5, top, rng.integers(0, top + 1, n))
            rows = goodput_gammas(alpha, cap, step_times=lambda ks: 1.0 + 0.01 * ks.sum(axis=1))
            single = _one_at_a_time(alpha, cap, lambda k: 1.0 + 0.01 * k.sum())
            assert rows.tolist() == single.tolist()


def test_the_chosen_gammas_come_with_their_verification_priced_as_the_engine_prices_it(
        deployment):
    """What a stretch hands the engine instead of pricing the verification again
    (``VariedPlan.verify_s``): the target's ``step_time`` of the chosen gammas, bit for bit,
    and the gammas ``goodput`` chooses; nothing where nobody may draft."""
    policy = POLICIES["adaptive"](
        load_scenario(SCENARIO).policy.params,
        PolicyContext(target_cost=deployment.target_cost, draft_cost=deployment.draft_cost))
    rng = np.random.default_rng(9)
    for n in (1, 3, 12, 70):
        for _ in range(3):
            _, cap, ctx = _batch(rng, n)
            ids, generated = np.arange(n), rng.integers(0, 40, n)
            output_len = generated + rng.integers(1, 9, n)
            args = (cap, ids, ctx, generated, output_len,
                    policy.control.rows_predictor(ids, ctx))
            k, verify_s = policy.goodput_priced(*args)
            assert k.tolist() == policy.goodput(*args).tolist()
            if not np.minimum(cap, output_len - generated - 1).any():
                assert verify_s is None  # nobody may draft: no candidate was priced
                continue
            tokens = (k + 1).astype(float)
            want = deployment.target_cost.step_time(tokens, ctx.astype(float), tokens)
            assert verify_s == want


def test_forwards_past_the_dense_table_are_looked_up_one_by_one(deployment, monkeypatch):
    """A search's draft forwards come from a dense table of the memo's keys, or, past its
    size limit, from the memo key by key: the per-candidate predictor's floats either way,
    from a fresh memo (every key priced on the way) or a warm one."""
    rng = np.random.default_rng(23)
    n = 40
    ids, ctx = np.arange(n), rng.integers(30, 9000, n)
    ks = np.concatenate([rng.integers(0, 7, (8, n)), np.zeros((1, n), np.int64)])
    want = [ChainControl(deployment.draft_cost, 6).predictor(ids, ctx)(k) for k in ks]
    table = ChainControl(deployment.draft_cost, 6)
    assert table.rows_predictor(ids, ctx)(ks).tolist() == want
    assert table.rows_predictor(ids, ctx)(ks).tolist() == want  # warm
    monkeypatch.setattr(draft_control._Forwards, "LIMIT", 4)
    one_by_one = ChainControl(deployment.draft_cost, 6)
    assert one_by_one.rows_predictor(ids, ctx)(ks).tolist() == want
