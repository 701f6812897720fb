"""How far each published default acceptance (``drafter_defaults``) is from being one number:
its measured spread, with its source, or none and why.

A spread is one additive shift on every probability of the default (a normal ``sd`` or a
uniform ``range``), the form ``uncertainty: {acceptance: default}`` draws
(docs/uncertainty.md).  It is given only where the source itself measures the method more
than once, and only in the default's own units; where the source gives one number, or a
spread of a quantity the default's model has no probability for, there is none, and the
entry says so (nothing is invented to fill the gap):

- ``eagle-*``: EAGLE (arXiv:2401.15077v3) Table 5 measures the chain on six targets (MT-bench,
  T=0): their taus read as constant alphas of a chain of 5 (``alpha_for_tau``) have a sample
  sd, the spread of the method's acceptance over the models the paper measured.  The tables
  the project holds give no per-dataset acceptance, so this is the spread over targets, not
  over tasks;
- ``deepseek-v3-mtp``: the technical report's own range (sec. 5.4.3, "between 85% and 90%")
  around the midpoint the default takes: uniform over it;
- ``eagle-llama-3.1-8b-instruct``, ``eagle3-llama-3.1-8b-instruct``: vLLM issue #20780 gives
  one acceptance length per K on MT-bench alone: none;
- ``medusa-vicuna-*``: Spec-Bench's leaderboard (A100, greedy, batch 1) measures Medusa on
  each Vicuna on six tasks, as a speedup per task (one mean accepted length over all six).
  Its own tree on one device, so the speedups are read as proportional to the task's tau
  (the step's cost ratio taken as the same on every task: where a task's longer prompts make
  the verification dearer, that reads as lower acceptance, so this spread is an upper
  bound).  Each task's tau, the default's tree tau times the task's speedup over the six
  tasks' mean, is turned into the shift of the default's accuracies that gives it on the
  default's tree (``medusa.medusa_tree``); the spread is those six shifts' sample sd, per
  size from its own row;
- ``eagle3-kimi-k2``: InferenceX measures thinking on and off (a spread of lengths), but
  the default is a curve of lengths, with no probability a shift applies to: none;
- ``llama-68m``: SpecInfer Table 3 measures tokens per step on five datasets (2.21-2.38) on
  the width-5 tree of its sec. 6.4 (<1,1,5,1,1,1,1,1>); the same reading as Medusa's, on that
  tree.  (Its Table 1, the default's own top-1 rate on the five datasets, 0.52-0.57, has a
  spread of the same size.)
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from simulator.acceptance import published as pub
from simulator.acceptance.drafter_defaults import (
    DSV3_MTP_RANGE,
    EAGLE_HEADS,
    EAGLE_PAPER,
    KIMI_K25_EAGLE3_AL,
    VLLM_20780_BEST,
)
from simulator.acceptance.medusa import MEDUSA_TOP_K, MEDUSA_TREE_NODES, medusa_tree
from simulator.acceptance.tree_topk import TopKCoverageAcceptance
from simulator.inputs.errors import SpecsimError
from simulator.speculation.token_tree import TokenTree

# InferenceX (SemiAnalysisAI/InferenceX, golden_al_distribution/kimik2.5_eagle3.yaml,
# Apache-2.0), the same runs as KIMI_K25_EAGLE3_AL with thinking on (temperature 1.0):
# AL by num_speculative_tokens
KIMI_K25_EAGLE3_AL_THINKING = {1: 1.83, 2: 2.43, 3: 2.88, 4: 3.24, 5: 3.46, 6: 3.62,
                               7: 3.71, 8: 3.77}


@dataclass(frozen=True)
class DefaultSpread:
    """A published default's spread (a shift ``sd`` or ``range`` on its probabilities) and
    where it comes from; neither given: the source states none, and ``source`` says why."""

    drafter: str
    source: str
    sd: float | None = None
    range: tuple[float, float] | None = None

    @property
    def given(self) -> bool:
        return self.sd is not None or self.range is not None


def eagle_alphas() -> dict[str, float]:
    """EAGLE Table 5's chain tau per target, as the constant alpha of a chain of 5."""
    return {m: pub.alpha_for_tau(t, pub.EAGLE_CHAIN_LENGTH)
            for m, t in pub.EAGLE_CHAIN_TAU.items()}


def _eagle(head: str) -> DefaultSpread:
    alphas = eagle_alphas()
    sd = float(np.std(list(alphas.values()), ddof=1))
    listed = ", ".join(f"{m} {a:.3f}" for m, a in alphas.items())
    return DefaultSpread(head, sd=round(sd, 4), source=(
        f"{EAGLE_PAPER} Table 5: the chain tau on its six targets (MT-bench, T=0) read as "
        f"constant alphas of a chain of 5 ({listed}): sample sd {sd:.4f}, the spread over "
        "the targets the paper measured (no per-dataset acceptance in the tables used)"))


def _mtp() -> DefaultSpread:
    low, high = DSV3_MTP_RANGE
    mid = (low + high) / 2
    return DefaultSpread("deepseek-v3-mtp", range=(round(low - mid, 4), round(high - mid, 4)),
                         source=(f"DeepSeek-V3 Technical Report (arXiv:2412.19437) sec. 5.4.3: "
                                 f"second-token acceptance between {low:.0%} and {high:.0%}; "
                                 "uniform over that range around the default's midpoint"))


def _kimi() -> DefaultSpread:
    gap = max(abs(KIMI_K25_EAGLE3_AL_THINKING[k] / v - 1) for k, v in KIMI_K25_EAGLE3_AL.items())
    return DefaultSpread("eagle3-kimi-k2", source=(
        "no spread: InferenceX (golden_al_distribution/kimik2.5_eagle3.yaml) measures thinking "
        f"on and off, whose acceptance lengths differ by up to {gap:.1%}, but the default is "
        "a curve of lengths, with no probability a shift applies to"))


def shifted_tree_tau(coverage, tree: TokenTree, shift: float = 0.0) -> float:
    """1 + the expected accepted length of ``tree`` with every coverage entry moved by
    ``shift`` and clipped to [0, 1], as a draw moves it."""
    moved = np.clip(np.asarray(coverage, dtype=float) + shift, 0.0, 1.0)
    return 1.0 + TopKCoverageAcceptance(tuple(map(tuple, moved))).expected_tree_accepted(tree)


def shift_for_tau(coverage, tree: TokenTree, tau: float) -> float:
    """The shift whose ``shifted_tree_tau`` is ``tau`` (it grows with the shift: bisection)."""
    low, high = shifted_tree_tau(coverage, tree, -1.0), shifted_tree_tau(coverage, tree, 1.0)
    if not low <= tau <= high:
        raise SpecsimError(f"tau {tau} is outside what this tree reaches ({low:.3f} to "
                           f"{high:.3f})", field="tau", fix="check the tree the tau was "
                           "measured on")
    lo, hi = -1.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if shifted_tree_tau(coverage, tree, mid) < tau else (lo, mid)
    return 0.5 * (lo + hi)


def task_shifts(coverage, tree: TokenTree, measured) -> np.ndarray:
    """Per measurement, the shift that moves the default's tree tau by the measurement's
    ratio to the measurements' mean (the spread of a method over its tasks, in the
    default's units)."""
    values = np.asarray(measured, dtype=float)
    base = shifted_tree_tau(coverage, tree)
    return np.array([shift_for_tau(coverage, tree, base * v / values.mean()) for v in values])


def _medusa(size: str) -> DefaultSpread:
    speedups = pub.SPEC_BENCH_MEDUSA_TASK_SPEEDUP[size]
    sd = float(np.std(task_shifts(MEDUSA_TOP_K[size], medusa_tree(size), speedups), ddof=1))
    listed = ", ".join(f"{t} {v:.2f}x" for t, v in zip(pub.SPEC_BENCH_TASKS, speedups))
    return DefaultSpread(f"medusa-vicuna-{size}", sd=round(sd, 4), source=(
        f"Spec-Bench Leaderboard.md (A100, greedy, batch 1), Medusa on Vicuna-{size.upper()}: "
        f"speedup per task ({listed}) read as proportional to the task's tau (the step's "
        "cost ratio taken as the same on every task: an upper bound); each as the shift of "
        f"the head accuracies giving that tau on the default's {MEDUSA_TREE_NODES}-node "
        f"tree: sample sd {sd:.4f}"))


def _specinfer() -> DefaultSpread:
    tree = TokenTree.from_config(pub.SPECINFER_WIDTH5_EXPANSION)
    taus = pub.SPECINFER_MSS_BY_DATASET
    sd = float(np.std(task_shifts(pub.specinfer_coverage("stochastic"), tree,
                                  list(taus.values())), ddof=1))
    listed = ", ".join(f"{d} {v:.2f}" for d, v in taus.items())
    expansion = ",".join(map(str, pub.SPECINFER_WIDTH5_EXPANSION))
    return DefaultSpread("llama-68m", sd=round(sd, 4), source=(
        f"SpecInfer (ASPLOS '24) Table 3: tokens verified per stochastic step on five "
        f"datasets ({listed}), tree <{expansion}> (sec. 6.4); each as the shift of the "
        f"default's coverage giving that tau relative to their mean: sample sd {sd:.4f}"))


def _none(drafter: str, why: str) -> DefaultSpread:
    return DefaultSpread(drafter, source=f"no spread: {why}")


@lru_cache(maxsize=None)
def default_spreads() -> dict[str, DefaultSpread]:
    """Drafter name -> the spread of its published default (every default has an entry)."""
    out = {head: _eagle(head) for head in EAGLE_HEADS}
    out.update({head: _none(head, "vLLM issue #20780 gives one acceptance length per K, on "
                                  "MT-bench alone") for head in VLLM_20780_BEST})
    out.update({f"medusa-vicuna-{size}": _medusa(size) for size in MEDUSA_TOP_K})
    out["deepseek-v3-mtp"] = _mtp()
    out["eagle3-kimi-k2"] = _kimi()
    out["llama-68m"] = _specinfer()
    return out


def default_spread(drafter: str | None) -> DefaultSpread | None:
    """The spread entry of ``drafter``'s published default; None where it has no default."""
    return default_spreads().get(drafter or "")
