"""The acceptance a catalogued drafter gets when a scenario gives no ``acceptance`` block.

A drafter (a draft model, an EAGLE or EAGLE-3 layer, Medusa heads, a target's MTP modules:
what the policy's ``memory_models`` holds first) with a published measurement gets it as its
default, as an acceptance mapping whose ``source`` cites the table and whose
``measured_for`` names the target and draft it was measured with (catalog names where the
catalog holds that model or, for a head, the stand-in its ``base_model`` names).  Every other
drafter has none, and provenance says "no source for <drafter>".  The numbers, by drafter:

- ``eagle-*`` (EAGLE-1 heads of the six models EAGLE's paper measures): EAGLE (Li et al.,
  ICML 2024, arXiv:2401.15077v3) Table 2 per-position rates (Vicuna-7B, LLaMA2-Chat 70B) or
  the constant rate of Table 5's chain tau, ranks below by the rank hit rate fitted to Table
  5's Vicuna-7B tree tau (``published.eagle_coverage``);
- ``eagle-llama-3.1-8b-instruct``, ``eagle3-llama-3.1-8b-instruct``: vLLM issue #20780
  (2025-07-10; Llama-3.1-8B-Instruct, MT-bench, batch 1) acceptance length at each method's
  best K (EAGLE-1: K=3, AL 2.29; EAGLE-3: K=4, AL 3.08), as the constant alpha of that chain
  (``published.alpha_for_tau``);
- ``medusa-vicuna-*``: Medusa's head accuracies (``medusa.MEDUSA_TOP_K``);
- ``deepseek-v3-mtp``: DeepSeek-V3 Technical Report (arXiv:2412.19437) sec. 5.4.3, second
  token acceptance "between 85% and 90%": the midpoint 0.875, the same at every pass;
- ``eagle3-kimi-k2``: InferenceX's acceptance-length curve of Kimi-K2.5 with its EAGLE-3
  head on vLLM (a stand-in: another target, another head; provenance warns);
- ``llama-68m``: SpecInfer (Miao et al., ASPLOS 2024) Table 1, LLaMA-7B verifying LLaMA-68M
  (``published.specinfer_coverage``, stochastic).

How far each default is from one number (its spread across what its source measured, or
none) is in ``default_spreads``.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from simulator.acceptance import published as pub
from simulator.acceptance.medusa import MEDUSA_SOURCE

EAGLE_PAPER = "EAGLE (Li et al., ICML 2024, arXiv:2401.15077v3)"
# EAGLE heads of the catalog -> the key of EAGLE's tables (the model the paper measured)
EAGLE_HEADS = {"eagle-vicuna-7b": "vicuna-7b", "eagle-vicuna-13b": "vicuna-13b",
               "eagle-vicuna-33b": "vicuna-33b", "eagle-llama-2-7b-chat": "llama-2-7b-chat",
               "eagle-llama-2-13b-chat": "llama-2-13b-chat",
               "eagle-llama-2-70b-chat": "llama-2-70b-chat"}
# vLLM issue #20780 (github.com/vllm-project/vllm/issues/20780, 2025-07-10), "AL" table,
# meta-llama/Llama-3.1-8B-Instruct, MT-bench, batch 1: (best K, its AL) per method's head
VLLM_20780_BEST = {"eagle-llama-3.1-8b-instruct": ("EAGLE 1", 3, 2.29),
                   "eagle3-llama-3.1-8b-instruct": ("EAGLE 3", 4, 3.08)}
# InferenceX (SemiAnalysisAI/InferenceX, golden_al_distribution/kimik2.5_eagle3.yaml,
# Apache-2.0), SPEED-Bench coding, thinking off (temperature 0.6), kimi-k2.5-nvfp4 with vLLM
# EAGLE-3 on B300: AL by num_speculative_tokens (as workloads/scenarios/eagle3_moe.yaml)
KIMI_K25_EAGLE3_AL = {1: 1.80, 2: 2.33, 3: 2.75, 4: 3.06, 5: 3.25, 6: 3.43, 7: 3.46, 8: 3.51}
# DeepSeek-V3 Technical Report sec. 5.4.3: "between 85% and 90%"
DSV3_MTP_RANGE = (0.85, 0.90)


def _eagle(head: str, base: str) -> dict[str, Any]:
    paper = EAGLE_HEADS[head]
    rates = ("Table 2 per-position chain rates" if paper in pub.EAGLE_CHAIN_RATES else
             f"the constant rate of Table 5's chain tau {pub.EAGLE_CHAIN_TAU[paper]}")
    return {"model": "tree_topk",
            "coverage": [[round(float(x), 4) for x in row]
                         for row in pub.eagle_coverage(paper, 10)],
            "source": f"{EAGLE_PAPER}: {paper}, MT-bench, T=0, {rates}; ranks 2-10 by the "
                      "rank hit rate fitted to Table 5's Vicuna-7B tree tau "
                      "(simulator.acceptance.published.eagle_coverage)",
            "measured_for": {"target": base, "draft": head}}


def _vllm_20780(head: str) -> dict[str, Any]:
    method, k, al = VLLM_20780_BEST[head]
    return {"model": "iid", "alpha": round(pub.alpha_for_tau(al, k), 4),
            "source": f"vLLM issue #20780 (2025-07-10): Llama-3.1-8B-Instruct + {head}, "
                      f"MT-bench, batch 1, {method} acceptance length {al} at its best K={k}, "
                      f"as the constant alpha of a chain of {k} (alpha_for_tau)",
            "measured_for": {"target": "llama-3.1-8b", "draft": head}}


def _medusa(size: str) -> dict[str, Any]:
    return {"model": "medusa", "size": size,
            "source": f"{MEDUSA_SOURCE} (Vicuna {size})",
            "measured_for": {"target": f"vicuna-{size}", "draft": f"medusa-vicuna-{size}"}}


def _specinfer() -> dict[str, Any]:
    top1, top5 = pub.SPECINFER_TOPK["stochastic"]
    return {"model": "tree_topk",
            "coverage": [[round(float(x), 4) for x in pub.specinfer_coverage("stochastic")[0]]],
            "source": f"SpecInfer (Miao et al., ASPLOS 2024) Table 1: LLaMA-7B verifying "
                      f"LLaMA-68M's top-k tokens, CIP dataset, stochastic: top-1 {top1}, "
                      f"top-5 {top5}; top-2..4 by published.specinfer_coverage",
            "measured_for": {"target": "LLaMA-7B", "draft": "llama-68m"}}


def _mtp() -> dict[str, Any]:
    low, high = DSV3_MTP_RANGE
    return {"model": "iid", "alpha": round((low + high) / 2, 4),
            "source": f"DeepSeek-V3 Technical Report (arXiv:2412.19437) sec. 5.4.3: second-"
                      f"token acceptance between {low:.0%} and {high:.0%}; the midpoint, the "
                      "same for every further pass of the module (an assumption)",
            "measured_for": {"target": "deepseek-v3", "draft": "deepseek-v3-mtp"}}


def _kimi_eagle3() -> dict[str, Any]:
    return {"model": "curve", "lengths": dict(KIMI_K25_EAGLE3_AL),
            "source": "InferenceX (SemiAnalysisAI/InferenceX, golden_al_distribution/"
                      "kimik2.5_eagle3.yaml, Apache-2.0): SPEED-Bench coding, temperature 0.6, "
                      "thinking off, kimi-k2.5-nvfp4 with vLLM EAGLE-3 (an MLA head) on B300; "
                      "AL by num_speculative_tokens 1-8",
            "measured_for": {"target": "kimi-k2.5-nvfp4", "draft": "eagle3-kimi-k2.5 (MLA)"}}


# drafter name -> the builder of its default; built one at a time (``_built``): a run
# needs its own drafter's only, and the EAGLE fits of all six heads cost tens of ms
_BUILDERS = {**{head: lambda head=head: _eagle(head, _base(head)) for head in EAGLE_HEADS},
             **{head: lambda head=head: _vllm_20780(head) for head in VLLM_20780_BEST},
             **{f"medusa-vicuna-{size}": lambda size=size: _medusa(size)
                for size in ("7b", "13b", "33b")},
             "llama-68m": _specinfer, "deepseek-v3-mtp": _mtp, "eagle3-kimi-k2": _kimi_eagle3}


def _base(head: str) -> str:
    from simulator.models.spec import load_model
    return load_model(head).base_model


@lru_cache(maxsize=None)
def _built(drafter: str) -> dict[str, Any]:
    return _BUILDERS[drafter]()


def drafter_defaults() -> dict[str, dict[str, Any]]:
    """Drafter name -> its published default acceptance mapping (cited, measured_for)."""
    return {name: _built(name) for name in _BUILDERS}


def drafter_default(drafter: str | None) -> dict[str, Any] | None:
    """The published default of ``drafter`` (a copy), or None where none is published."""
    if drafter not in _BUILDERS:
        return None
    found = _built(drafter)
    return {**found, "measured_for": dict(found["measured_for"])}


def drafter_line(drafter: str) -> str:
    """What a scenario with ``drafter`` and no acceptance block uses, in words."""
    found = drafter_default(drafter)
    if found is None:
        return f"no source for {drafter}"
    return f"{found['source']} (the published default for {drafter})"
