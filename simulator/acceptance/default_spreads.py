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
- ``medusa-vicuna-*``: one accuracy per head and rank from one training run: none;
- ``eagle3-kimi-k2``: InferenceX measures thinking on and off (a spread of lengths), but
  the default is a curve of lengths, with no probability a shift applies to: none;
- ``llama-68m``: SpecInfer Table 3's tokens per step over five datasets (2.21-2.38) are of
  its own tree, which its tables do not give: not convertible into a coverage shift, none.
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


def _none(drafter: str, why: str) -> DefaultSpread:
    return DefaultSpread(drafter, source=f"no spread: {why}")


@lru_cache(maxsize=None)
def default_spreads() -> dict[str, DefaultSpread]:
    """Drafter name -> the spread of its published default (every default has an entry)."""
    out = {head: _eagle(head) for head in EAGLE_HEADS}
    out.update({head: _none(head, "vLLM issue #20780 gives one acceptance length per K, on "
                                  "MT-bench alone") for head in VLLM_20780_BEST})
    out.update({f"medusa-vicuna-{s}": _none(f"medusa-vicuna-{s}", "Medusa's medusa_acc.csv "
                                            "gives one accuracy per head and rank, from one "
                                            "training run") for s in ("7b", "13b", "33b")})
    out["deepseek-v3-mtp"] = _mtp()
    out["eagle3-kimi-k2"] = _kimi()
    low, high = pub.SPECINFER_MSS_TOKENS_PER_STEP
    out["llama-68m"] = _none("llama-68m", f"SpecInfer Table 3 gives {low}-{high} tokens per "
                             "step over five datasets, of its own tree, which its tables do not "
                             "give: not convertible into a shift of the top-k coverage")
    return out


def default_spread(drafter: str | None) -> DefaultSpread | None:
    """The spread entry of ``drafter``'s published default; None where it has no default."""
    return default_spreads().get(drafter or "")
