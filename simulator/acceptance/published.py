"""Published acceptance measurements of each method, and the conversions that turn them into
the numbers an acceptance model takes.

Every table below is a measurement of THAT method on a named model and dataset; its source
is in the comment beside it.  Where a paper gives less than a model needs, one of the
documented conversions fills the gap:

- ``alpha_for_tau(tau, gamma)``: the constant alpha whose closed form
  E = (1 - alpha^(gamma+1)) / (1 - alpha) (Leviathan et al., Eq. 1) equals a published mean
  acceptance length tau of a chain of ``gamma`` drafts;
- ``geometric_coverage(top1, h, width)``: top-k coverage rows from per-depth top-1 rates and
  one "rank hit rate" h: each further rank holds the target's token with probability h given
  the ranks above it missed, so P(in top-k) = 1 - (1 - top1) (1 - h)^(k-1);
- ``hit_rate_from_topk(top1, topk, k)``: the h that reproduces a published top-k rate;
- ``fit_hit_rate(top1, tree, tau)``: the h whose expected tree acceptance (product rule,
  ``TopKCoverageAcceptance``) reproduces a published tree tau on the paper's own tree.

The conversions are assumptions of shape, stated where they are used; the published-results
check (``python -m tests.published``) compares what they predict with other published numbers.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from simulator.acceptance.tree_topk import TopKCoverageAcceptance
from simulator.inputs.errors import SpecsimError
from simulator.speculation.closed_forms import expected_tokens
from simulator.speculation.token_tree import TokenTree
from simulator.speculation.tree_shapes import tree_from_choices

# EAGLE (Li et al., ICML 2024, arXiv:2401.15077v3) Table 2: acceptance rate n-alpha on
# MT-bench, T = 0, measured with chain drafts: n-alpha is the rate at draft position n+1
# given the first n drafts were accepted (so these are per-position conditional rates).
EAGLE_CHAIN_RATES = {
    "vicuna-7b": (0.79, 0.74, 0.72, 0.73, 0.67),
    "llama-2-70b-chat": (0.75, 0.69, 0.65, 0.64, 0.64),
}
# EAGLE Table 5 (MT-bench, T = 0): mean acceptance length tau with a chain and with the tree.
EAGLE_CHAIN_TAU = {"vicuna-7b": 3.20, "vicuna-13b": 3.23, "vicuna-33b": 2.97,
                   "llama-2-7b-chat": 3.00, "llama-2-13b-chat": 3.18, "llama-2-70b-chat": 3.12}
EAGLE_TREE_TAU = {"vicuna-7b": 3.94, "vicuna-13b": 3.98, "vicuna-33b": 3.68,
                  "llama-2-7b-chat": 3.62, "llama-2-13b-chat": 3.90, "llama-2-70b-chat": 3.81}
# The chain EAGLE's Table 5 measures is taken as 5 drafts: the depth of its default tree.
EAGLE_CHAIN_LENGTH = 5
# EAGLE's default tree, SafeAILab/EAGLE eagle/model/choices.py ``mc_sim_7b_63`` (25 nodes).
EAGLE_TREE_CHOICES = (
    (0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 0, 0), (0, 0, 0, 0, 1))
# EAGLE-2 (Li et al., EMNLP 2024, arXiv:2406.16858v2) Table 1, Vicuna-7B, MT-bench, T = 0.
EAGLE2_TAU_VICUNA_7B = 4.98
# EAGLE-2 Appendix A: draft tree depth 6, top-10 expansion, 60 draft tokens for 7B models.
EAGLE2_PAPER_KNOBS = {"speculative_num_steps": 6, "speculative_eagle_topk": 10,
                      "speculative_num_draft_tokens": 61}

# SpecInfer (Miao et al., ASPLOS 2024) Table 1: LLaMA-7B verifying LLaMA-68M's top-k tokens,
# CIP dataset, success rate of one verification step with top-1 and top-5 candidates
# (as quoted by the course notes, ../shared/seeds/000, section 4).
SPECINFER_TOPK = {"greedy": (0.70, 0.89), "stochastic": (0.57, 0.97)}
# SpecInfer (ASPLOS '24, doi:10.1145/3620666.3651335) Table 3, LLaMA-7B + LLaMA-68M, tree
# width 5 and depth 8: tokens verified per stochastic step with multi-step speculative
# sampling, per prompt dataset (Table 2's width-5 stochastic column gives the same numbers).
SPECINFER_MSS_BY_DATASET = {"Alpaca": 2.38, "CP": 2.28, "WebQA": 2.21, "CIP": 2.29,
                            "PIQA": 2.21}
SPECINFER_MSS_TOKENS_PER_STEP = (min(SPECINFER_MSS_BY_DATASET.values()),
                                 max(SPECINFER_MSS_BY_DATASET.values()))
# SpecInfer sec. 6.4: the width experiments expand <1, 1, k, 1, 1, 1, 1, 1> (k the width) with
# speculation length 8, so Table 3's width-5 tree is this one
SPECINFER_WIDTH5_EXPANSION = (1, 1, 5, 1, 1, 1, 1, 1)

# Leviathan et al. 2023 (arXiv:2211.17192) Table 3, T5-XXL (11B) target, WMT EnDe, argmax:
# T5-small (77M) drafts alpha 0.75, T5-large (800M) drafts alpha 0.82.
LEVIATHAN_T5_SMALL_ARGMAX = 0.75
LEVIATHAN_T5_LARGE_ARGMAX = 0.82

# Spec-Bench (hemingkx/Spec-Bench Leaderboard.md, A100-80GB, Vicuna-7B-v1.3, greedy, batch 1):
# SpS with the Vicuna-68M draft, #mean accepted tokens per step over the six tasks.
SPEC_BENCH_SPS_TAU = 2.28
# Spec-Bench's SpS is Hugging Face assisted generation, which starts at 5 assistant tokens.
SPEC_BENCH_SPS_GAMMA = 5
# Spec-Bench Leaderboard.md, "Leaderboard on A100" (greedy, FP16, batch 1): Medusa's speedup
# per task, in SPEC_BENCH_TASKS' order, on Vicuna-7B/13B/33B-v1.3.  The leaderboard gives one
# #Mean Accepted Tokens over all six tasks (2.32, 2.39, 2.33), none per task.
SPEC_BENCH_TASKS = ("Multi-turn Conversation", "Translation", "Summarization",
                    "Question Answering", "Mathematical Reasoning", "Retrieval-aug. Generation")
SPEC_BENCH_MEDUSA_TASK_SPEEDUP = {"7b": (2.05, 1.73, 1.57, 1.75, 2.05, 1.51),
                                  "13b": (1.96, 1.66, 1.63, 1.63, 2.00, 1.58),
                                  "33b": (1.98, 1.73, 1.64, 1.66, 2.07, 1.62)}


def alpha_for_tau(tau: float, gamma: int) -> float:
    """The constant alpha with (1 - alpha^(gamma+1)) / (1 - alpha) = tau (bisection)."""
    tau, gamma = float(tau), int(gamma)
    if gamma < 1 or not (1.0 <= tau <= gamma + 1.0):
        raise SpecsimError(f"a chain of {gamma} drafts has tau in [1, {gamma + 1}], got {tau}",
                           field="tau", fix="give the tau measured for that chain length")
    if tau >= gamma + 1.0:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if expected_tokens(mid, gamma) < tau else (lo, mid)
    return 0.5 * (lo + hi)


def geometric_coverage(top1: Sequence[float], h: float, width: int) -> np.ndarray:
    """Rows of cumulative top-k coverage, k = 1..width: 1 - (1 - top1_d) (1 - h)^(k-1)."""
    top1 = np.asarray(top1, dtype=float).reshape(-1)
    if top1.size == 0 or np.any((top1 < 0) | (top1 > 1)) or not 0.0 <= h <= 1.0 or width < 1:
        raise SpecsimError("top-1 rates and h must lie in [0, 1], width >= 1", field="h")
    miss = (1.0 - h) ** np.arange(width)
    return 1.0 - (1.0 - top1)[:, None] * miss[None, :]


def hit_rate_from_topk(top1: float, topk: float, k: int) -> float:
    """The h for which geometric_coverage gives P(in top-k) = ``topk``."""
    if not (0.0 <= top1 <= topk <= 1.0) or top1 == 1.0 or k < 2:
        raise SpecsimError(f"need 0 <= top1 <= topk <= 1, top1 < 1 and k >= 2, got "
                           f"{top1}, {topk}, {k}", field="topk")
    return 1.0 - ((1.0 - topk) / (1.0 - top1)) ** (1.0 / (k - 1))


def tree_tau(top1: Sequence[float], h: float, tree: TokenTree) -> float:
    """1 + expected accepted length of ``tree`` under geometric_coverage(top1, h)."""
    width = int(tree.child_rank.max()) + 1
    model = TopKCoverageAcceptance(tuple(map(tuple, geometric_coverage(top1, h, width))))
    return 1.0 + model.expected_tree_accepted(tree)


def fit_hit_rate(top1: Sequence[float], tree: TokenTree, tau: float) -> float:
    """The h in [0, 1] whose tree_tau equals ``tau`` (tree_tau grows with h: bisection)."""
    low, high = tree_tau(top1, 0.0, tree), tree_tau(top1, 1.0, tree)
    if not low <= tau <= high:
        raise SpecsimError(f"tau {tau} is outside what this tree reaches from these top-1 "
                           f"rates ({low:.3f} to {high:.3f})", field="tau",
                           fix="check the tree and the top-1 rates the tau was measured with")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if tree_tau(top1, mid, tree) < tau else (lo, mid)
    return 0.5 * (lo + hi)


def eagle_tree() -> TokenTree:
    """EAGLE's default static tree (``mc_sim_7b_63``)."""
    return tree_from_choices([list(p) for p in EAGLE_TREE_CHOICES], field="choices")


def eagle_top1(model: str) -> tuple[float, ...]:
    """EAGLE's per-depth top-1 rates for ``model``: Table 2 where it lists the model, else the
    constant alpha matching its Table 5 chain tau (``alpha_for_tau``, chain of 5)."""
    if model in EAGLE_CHAIN_RATES:
        return EAGLE_CHAIN_RATES[model]
    if model not in EAGLE_CHAIN_TAU:
        raise SpecsimError(f"EAGLE publishes no acceptance for {model!r}", field="model",
                           fix="one of: " + ", ".join(EAGLE_CHAIN_TAU))
    return (alpha_for_tau(EAGLE_CHAIN_TAU[model], EAGLE_CHAIN_LENGTH),)


def eagle_hit_rate() -> float:
    """h fitted once, to EAGLE's Vicuna-7B tree tau (Table 5) on its own tree."""
    return fit_hit_rate(EAGLE_CHAIN_RATES["vicuna-7b"], eagle_tree(),
                        EAGLE_TREE_TAU["vicuna-7b"])


def eagle_coverage(model: str = "vicuna-7b", width: int = 10) -> np.ndarray:
    """tree_topk coverage of EAGLE's draft for ``model``: its top-1 rates, ranks below by the
    hit rate fitted on Vicuna-7B (the same kind of draft head on every model)."""
    return geometric_coverage(eagle_top1(model), eagle_hit_rate(), width)


def specinfer_coverage(mode: str = "stochastic", width: int = 5) -> np.ndarray:
    """One coverage row (every depth) from SpecInfer's Table 1 top-1 and top-5 rates."""
    top1, top5 = SPECINFER_TOPK[mode]
    return geometric_coverage([top1], hit_rate_from_topk(top1, top5, 5), width)
