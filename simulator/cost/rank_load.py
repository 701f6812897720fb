"""The EP ranks' expert loads a MoE layer waits for: the busiest rank's touched experts and
rows under uniform or skewed routing, with and without EPLB's placement (the grouped GEMMs
and small kernels priced at those loads: moe_kernels.py)."""
from __future__ import annotations

import math

import numpy as np

from simulator.inputs.errors import SpecsimError


def busiest_experts(shape, tokens) -> np.ndarray:
    """Expected touched experts on the busiest EP rank of a MoeShape at ``tokens`` tokens (a
    float or an array); without EP, every touched expert (each rank a slice of each).  Under
    uniform routing with whole ranks the rank counts are iid Binomial(E/ep, q): its closed
    form; otherwise the Poisson-binomial convolution (``expected_max_count``)."""
    t = np.asarray(tokens, dtype=np.float64)
    E, ep = shape.num_experts, shape.ep
    if ep <= 1:
        return np.asarray(shape.distinct(t), dtype=np.float64)
    if shape.probs is not None or E % ep:
        return expected_max_count(touched_probabilities(shape, t), ep)
    per = E // ep
    q = (1.0 - (1.0 - shape.k / E) ** t)[..., None]
    j = np.arange(per + 1, dtype=np.float64)
    comb = np.array([math.comb(per, int(i)) for i in j], dtype=np.float64)
    cdf = np.cumsum(comb * q ** j * (1.0 - q) ** (per - j), axis=-1)
    return (1.0 - np.minimum(cdf[..., :-1], 1.0) ** ep).sum(axis=-1)


def expected_max_count(probs_touched: np.ndarray, ep: int) -> np.ndarray:
    """Expected maximum over ``ep`` ranks of the touched experts a rank holds, from each
    expert's chance of being touched (``probs_touched[..., E]``, experts in index order, rank
    r holding a contiguous block of ceil(E/ep)); ``ep`` 1: the sum."""
    q = np.asarray(probs_touched, dtype=np.float64)
    if ep <= 1:
        return q.sum(axis=-1)
    per = -(-q.shape[-1] // ep)  # a rank's experts; the last ranks hold fewer when E % ep
    pad = np.zeros(q.shape[:-1] + (per * ep - q.shape[-1],))
    ranks = np.concatenate([q, pad], axis=-1).reshape(q.shape[:-1] + (ep, per))
    pmf = np.zeros(q.shape[:-1] + (ep, per + 1))
    pmf[..., 0] = 1.0
    for j in range(per):  # Poisson-binomial by convolution, one expert at a time
        p = ranks[..., j:j + 1]
        pmf[..., 1:] = pmf[..., 1:] * (1.0 - p) + pmf[..., :-1] * p
        pmf[..., 0] *= 1.0 - p[..., 0]
    cdf = np.cumsum(pmf, axis=-1)                        # P(count_r <= j)
    below = np.prod(np.minimum(cdf, 1.0), axis=-2)       # P(max <= j), j = 0..per
    return (1.0 - below[..., :-1]).sum(axis=-1)          # E[max] = sum_{j>=1} P(max >= j)


def busiest_rank_share(probs: np.ndarray, ep: int, eplb: bool = False,
                       redundant: int = 0) -> float:
    """The busiest EP rank's share of a layer's routed rows, from each expert's inclusion
    probability ``probs`` (sum k): under expert parallelism every rank waits for the one
    with the most rows.  Without EPLB, rank r holds the contiguous block
    [r ceil(E/ep), (r+1) ceil(E/ep)) (vLLM's and SGLang's default placement); with it, the
    placement of DeepSeek's EPLB global policy (deepseek-ai/EPLB eplb.py
    ``replicate_experts`` then ``balanced_packing``): each of ``redundant`` extra slots
    replicates the expert of the highest load per replica (a replica serves an equal share
    of its expert's tokens), then the ``E + redundant`` replicas, heaviest first, go to the
    lightest rank that still has room (``(E + redundant) / ep`` replicas a rank).  The share
    is of the expected loads, what EPLB balances: at a step's thousands of rows a rank's
    draw stays within a few per cent of its expectation (Hoeffding), which is left out."""
    p = np.asarray(probs, dtype=np.float64)
    if not eplb:
        per = -(-p.size // ep)
        pad = np.concatenate([p, np.zeros(per * ep - p.size)])
        return float(pad.reshape(ep, per).sum(axis=1).max() / p.sum())
    loads = eplb_rank_loads(p, ep, redundant)
    return float(loads.max() / p.sum())


def eplb_rank_loads(load: np.ndarray, ep: int, redundant: int) -> np.ndarray:
    """Each rank's expected load under EPLB's global policy (``busiest_rank_share``)."""
    slots = load.size + redundant
    if slots % ep:
        raise SpecsimError(f"{load.size} experts + {redundant} redundant = {slots} replicas "
                           f"do not split evenly over {ep} EP ranks",
                           field="parallelism.ep_num_redundant_experts",
                           fix=f"use a count making experts + redundant a multiple of {ep}")
    replicas = np.ones(load.size)
    for _ in range(redundant):  # replicate_experts: the max load per replica, first index
        replicas[int(np.argmax(load / replicas))] += 1
    weights = np.repeat(load / replicas, replicas.astype(int))
    per = slots // ep
    ranks, room = np.zeros(ep), np.full(ep, per)
    for w in np.sort(weights)[::-1]:  # balanced_packing: heaviest to the lightest open rank
        r = int(np.argmin(np.where(room > 0, ranks, np.inf)))
        ranks[r] += w
        room[r] -= 1
    return ranks


def touched_probabilities(shape, tokens) -> np.ndarray:
    """Each expert's chance of being touched by ``tokens`` tokens: ``[..., E]``."""
    t = np.asarray(tokens, dtype=np.float64)[..., None]
    p = np.full(shape.num_experts, shape.k / shape.num_experts) if shape.probs is None \
        else shape.probs
    return 1.0 - (1.0 - p) ** t
