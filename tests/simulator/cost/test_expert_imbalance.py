"""Expert load across EP ranks (rank_load.busiest_rank_share, dp_attention.ep_shape): the
busiest rank's expected rows against Monte Carlo, EPLB's placement against enumeration,
uniform routing without EPLB exactly as before."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost import moe, rank_load
from simulator.cost.dp_attention import DpAttentionCostModel, ep_shape
from simulator.cost.parallelism import Parallelism
from simulator.models.spec import load_model

EP8 = dict(tensor_parallel=1, data_parallel_attention=8, expert_parallel=8)


def _systematic_picks(p: np.ndarray, tokens: int, rng: np.random.Generator) -> np.ndarray:
    """Each token's k distinct experts, expert e included with probability exactly p_e
    (Madow's systematic sampling: the cumulative p cut at u, u + 1, ..., u + k - 1)."""
    edges = np.concatenate([[0.0], np.cumsum(p)])
    u = rng.random(tokens)[:, None] + np.arange(int(round(p.sum())))[None, :]
    return np.searchsorted(edges, u, side="right") - 1     # [tokens, k]


def test_busiest_rank_rows_against_monte_carlo():
    E, k, ep, T, draws = 8, 2, 4, 2000, 400
    p = moe.inclusion_probabilities(E, k, 1.0)
    share = rank_load.busiest_rank_share(p, ep)
    rng = np.random.default_rng(7)
    maxima, means = [], np.zeros(ep)
    for _ in range(draws):
        rank = _systematic_picks(p, T, rng) // (E // ep)   # contiguous blocks of 2
        loads = np.bincount(rank.ravel(), minlength=ep)
        maxima.append(loads.max())
        means += loads / draws
    # each rank's mean load is T times its experts' inclusion probabilities
    blocks = p.reshape(ep, E // ep).sum(axis=1)
    se = np.sqrt(T * k * k / 4 / draws)                     # Hoeffding's variance proxy
    assert np.all(np.abs(means - T * blocks) < 4 * se)
    # E[max] >= max E (Jensen), and above it by at most sigma sqrt(2 ln ep) (a token adds
    # 0..k rows to a rank: sub-Gaussian with variance proxy T k^2 / 4)
    model, mc = T * k * share, float(np.mean(maxima))
    assert model <= mc + 4 * np.std(maxima) / math.sqrt(draws)
    assert mc <= model + math.sqrt(2 * math.log(ep) * T * k * k / 4)


def test_eplb_packing_against_enumeration():
    load = np.array([0.5, 0.3, 0.15, 0.05]) * 2          # k = 2
    got = rank_load.busiest_rank_share(load, 2, eplb=True)
    best = min(max(load[list(a)].sum(), load[[i for i in range(4) if i not in a]].sum())
               for a in itertools.combinations(range(4), 2))
    assert got == pytest.approx(best / load.sum(), rel=1e-12)   # {0.5, 0.05} {0.3, 0.15}
    assert rank_load.busiest_rank_share(load, 2) == pytest.approx(0.8, rel=1e-12)


def test_eplb_replicates_the_hottest_expert():
    # 0.9 and 0.1 on 2 ranks with 2 redundant slots: expert 0 gets 3 replicas of 0.3 (0.45
    # > 0.1, then 0.3 > 0.1); packed 2 a rank: {0.3, 0.3} and {0.3, 0.1}
    got = rank_load.busiest_rank_share(np.array([0.9, 0.1]), 2, eplb=True, redundant=2)
    assert got == pytest.approx(0.6, rel=1e-12)


def test_uniform_routing_without_eplb_is_the_shape_as_before():
    m = load_model("deepseek-v3")
    par = Parallelism(**EP8)
    assert ep_shape(m, par, 0.0) == moe.MoeShape.of(m, 1, 8, 0.0)
    # uniform loads over whole blocks: every rank 1/ep, and EPLB without replicas the same
    p = moe.inclusion_probabilities(256, 8)
    assert rank_load.busiest_rank_share(p, 8) == 1 / 8
    assert rank_load.busiest_rank_share(p, 8, eplb=True) == pytest.approx(1 / 8, rel=1e-12)


def test_skew_slows_the_step_and_eplb_wins_it_back():
    hw, m = load_profile("h100-sxm"), load_model("deepseek-v3")
    n = 8 * 512
    batch = (np.full(n, 1.0), np.full(n, 1000.0), np.ones(n))

    def step(skew: float, eplb: bool) -> float:
        par = Parallelism(**EP8, moe_dispatch="all_to_all", eplb=eplb,
                          redundant_experts=32 if eplb else 0)
        return DpAttentionCostModel(hw, m, par, routing_skew=skew).step_time(*batch)

    uniform, skewed, balanced = step(0.0, False), step(1.0, False), step(1.0, True)
    assert skewed > uniform
    assert uniform <= balanced < skewed
