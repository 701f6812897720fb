"""What EPLB leaves in live traffic: the busiest EP rank's rows over the mean rank's, beyond
the expected loads EPLB placed (rank_load.busiest_rank_share prices those).

EPLB balances the expected load of each expert, from statistics of earlier traffic.  The
rows a rank receives in one step still spread about its expectation, and the MoE layer waits
for the rank that received the most (its grouped GEMMs, and the dispatch and combine that
carry its rows).  Two parts of that spread, as relative standard deviations of one rank's
rows about the mean rank's ``mu``:

- the step's own draw: a layer's ``ep x mu`` routed copies land on a rank with probability
  about ``1 / ep`` each, so the rank's count is binomial, ``sigma_draw^2 = (1 - 1/ep) / mu``
  (the k distinct picks of a token and DeepSeek's group-limited routing are not modelled);
- the rest (``sigma_rest``): the served loads drifting from the statistics EPLB placed from,
  requests of one batch routing alike, which do not average out with the step's rows.  Taken
  from the one measurement of DeepSeek's expert loads under EPLB by rank: "Scaling Expert
  Parallelism in TensorRT-LLM (Part 1)", NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/
  blog4_Scaling_Expert_Parallelism_in_TensorRT-LLM.md, "Offline EP Load Balancer", Table 1:
  DeepSeek-R1 (the DeepSeek-V3 architecture), a machine-translation dataset, EPLB with 9
  slots a rank at EP32, placed from the statistics of an earlier run on the same dataset
  (the blog's "Reproducing steps": statistics from iterations 100-200, then a second run with
  the generated placement); routed tokens by rank: average 1,024, standard deviation 52.0,
  imbalance ratio (max - mean) / mean 0.109, each averaged over layers and iterations.  So
  ``sigma_rest^2 = (52.0 / 1024)^2 - sigma_draw(1024, 32)^2``: 0.0404 of the mean.

Not usable for it: DeepSeek's profile-data (its README: "we simulate an absolutely balanced
MoE routing strategy for profiling"), and the SGLang large-EP blog's balancedness figure
(lmsys.org/blog/2025-05-05-large-scale-ep, "Expert Parallelism Load Balancer": a simulation
of tokens per GPU, given as an image only).

The busiest of ``ep`` ranks is then ``1 + z_ep sqrt(sigma_draw^2 + sigma_rest^2)`` times the
mean, ``z_ep`` the expected maximum of ``ep`` independent standard normals (``z_max``).  Two
checks on the same table, not used in the fit: it gives 0.105 at its own EP32 row against the
measured 0.109, and 0.108 against 0.115 at its EP36 row (8 slots a rank, its own std 53.9
unused: with it, 0.111).  Added to
EPLB's placement share (an upper bound: the rank of the largest expectation need not be the
one that draws highest): at SGLang's large-EP prefill (16,384 tokens a rank, EP32, 131,072
rows a rank: sigma_draw 0.0027) the busiest rank carries 1.084x the mean; at its EP72 decode
(256 tokens a rank: 2,048 rows, sigma_draw 0.022) about 1.11x beyond the placement's own.
"""
from __future__ import annotations

import functools
import math

import numpy as np

# TensorRT-LLM tech blog 4, Table 1, "EPLB (9 per-rank slots and EP 32)", by rank
MEASURED_EP, MEASURED_MEAN_ROWS, MEASURED_STD_ROWS = 32, 1024.0, 52.0


@functools.lru_cache(maxsize=None)
def z_max(n: int) -> float:
    """E[max of ``n`` independent standard normals]: ``int x n phi(x) Phi(x)^(n-1) dx`` (the
    maximum's density), trapezoid on a fixed grid, step 1e-3 over [-12, 12]; 0 for n = 1."""
    if n <= 1:
        return 0.0
    x = np.linspace(-12.0, 12.0, 24_001)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    f = x * n * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi) * cdf ** (n - 1)
    return float(np.sum(0.5 * (f[1:] + f[:-1]) * np.diff(x)))


def draw_sigma(rows, ep: int):
    """The step's own draw: a rank's rows' relative standard deviation at ``rows`` routed
    rows on the mean rank (binomial, module docstring); ``rows`` a float or an array."""
    return np.sqrt((1.0 - 1.0 / ep) / np.maximum(np.asarray(rows, dtype=np.float64), 1.0))


@functools.lru_cache(maxsize=None)
def rest_sigma() -> float:
    """What the draw does not explain in TensorRT-LLM's measured spread (module docstring)."""
    measured = MEASURED_STD_ROWS / MEASURED_MEAN_ROWS
    return math.sqrt(measured ** 2 - float(draw_sigma(MEASURED_MEAN_ROWS, MEASURED_EP)) ** 2)


def live_excess(ep: int, rows):
    """The busiest of ``ep`` ranks' rows over the mean rank's, less 1, under EPLB at ``rows``
    routed rows on the mean rank: ``z_ep sqrt(sigma_draw^2 + sigma_rest^2)``."""
    if ep <= 1:
        return np.zeros_like(np.asarray(rows, dtype=np.float64))
    return z_max(ep) * np.sqrt(draw_sigma(rows, ep) ** 2 + rest_sigma() ** 2)
