"""Measured expert popularity of DeepSeek-V3/R1, as the Zipf ``moe.routing_skew`` it implies.

Source: "Scaling Expert Parallelism in TensorRT-LLM (Part 1: Design and Implementation of
Large-scale EP)", NVIDIA TensorRT-LLM team, NVIDIA/TensorRT-LLM
docs/source/blogs/tech_blog/blog4_Scaling_Expert_Parallelism_in_TensorRT-LLM.md, section
"E2E evaluation / Offline EP Load Balancer", Table 1: DeepSeek-R1 (the DeepSeek-V3
architecture: 256 routed experts, top-8) on 32 GB200 GPUs, EP32, a machine-translation
dataset at decode; the routed tokens counted per expert slot and per rank, each layer and
iteration, the imbalance ratio ``(max - mean) / mean`` averaged over layers and iterations:

- by expert slot without EPLB (8 slots a rank): mean 128, std 164.1, imbalance 10.948;
- by rank without EPLB (vLLM's and SGLang's contiguous blocks): imbalance 1.564;
- by rank with EPLB (288 slots, 9 a rank, placed from statistics of another run): 0.109.

The popularity is taken as Zipf over the experts' popularity ranks (simulator/cost/moe.py
``inclusion_probabilities``: ``p_e`` proportional to ``rank^-s``, summing to k), its exponent
the one whose hottest expert carries the measured ``1 + 10.948`` times the mean
(``skew_for_hottest``): s = 0.595.  Two checks on the same table, not used in the fit: the
Zipf's std / mean is 1.13 against the measured 164.1 / 128 = 1.28 (a std fit would give
s = 0.64); and spread over 32 ranks in random positions (the hot experts of a layer sit
where training put them, not in index order) its busiest rank averages 2.3x the mean
(Monte Carlo over placements; 2.6 at s = 0.64), against the measured 2.56.  Index order is
the contiguous placement's worst case: the same profile in sorted blocks of 8 gives 6.0x,
so the measured skew is not a default for EP deployments without EPLB
(rank_load.busiest_rank_share prices sorted blocks); under EPLB the placement follows the
loads and the index order does not matter.
"""
from __future__ import annotations

from simulator.cost.moe import inclusion_probabilities
from simulator.inputs.errors import SpecsimError

HOTTEST_EXPERT_IMBALANCE = 10.948   # (max - mean) / mean by expert slot, no EPLB (Table 1)
DEEPSEEK_EXPERTS, DEEPSEEK_TOP_K = 256, 8


def hottest_over_mean(num_experts: int, k: int, skew: float) -> float:
    """The hottest expert's load over the mean expert's under Zipf routing ``skew``."""
    p = inclusion_probabilities(num_experts, k, skew)
    return float(p.max() / p.mean())


def skew_for_hottest(ratio: float, num_experts: int, k: int) -> float:
    """The Zipf exponent whose hottest expert carries ``ratio`` times the mean load: the
    ratio rises with the exponent until that expert is in every token's picks (inclusion
    probability 1, ratio ``E / k``), so bisection finds the one exponent below that cap."""
    cap = num_experts / k
    if not 1.0 <= ratio < cap:
        raise SpecsimError(f"a hottest expert at {ratio!r} x the mean is impossible with "
                           f"top-{k} of {num_experts} experts",
                           field="hottest_over_mean", fix=f"use 1 <= ratio < {cap:g}")
    lo, hi = 0.0, 1.0
    while hottest_over_mean(num_experts, k, hi) < ratio:
        lo, hi = hi, 2.0 * hi
    for _ in range(60):  # the ratio is monotone on [lo, hi]: 60 halvings reach 1e-18 of hi
        mid = 0.5 * (lo + hi)
        if hottest_over_mean(num_experts, k, mid) < ratio:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def deepseek_measured_skew() -> float:
    """DeepSeek-V3/R1's routing skew from TensorRT-LLM's measured hottest expert (module
    docstring): s = 0.595."""
    return skew_for_hottest(1.0 + HOTTEST_EXPERT_IMBALANCE, DEEPSEEK_EXPERTS, DEEPSEEK_TOP_K)

