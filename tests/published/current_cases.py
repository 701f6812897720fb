"""Published measurements on current engines: EAGLE-3 on vLLM V1 and SGLang, DeepSeek-V3's
MTP on SGLang at batch 1 and under load (batch 32), and DeepSeek-V3's absolute throughput on
SGLang at three batch sizes (MoE).

Every number is quoted from its source (named beside it); every tolerance was written, and
committed, before the case was first predicted (``tests.published.tolerances``): a speedup
within 20%, the best K within +-1, an absolute throughput within 25%, an order exactly.
The acceptance each run uses comes from a measurement other than the compared number: the
acceptance lengths printed beside the timings, or DeepSeek-V3's technical report for its MTP
module.  Where a source names no GPU, the case says which it is taken to be and why.
"""
from __future__ import annotations

from functools import lru_cache

from simulator.acceptance import published as pub
from simulator.acceptance.tree_topk import TopKCoverageAcceptance
from simulator.policies.tree_acceptance import exclusive_table
from simulator.speculation.tree_shapes import dynamic_tree
from tests.published.engine_cases import LARGE_BATCH_ROUNDS, VLLM_20780_AL
from tests.published.harness import speedup, throughput, tpot_speedup
from tests.published.tolerances import ABSOLUTE, BEST_K, ORDER, SPEEDUP, Case

# ------------------------------------------------ vLLM V1: EAGLE-3 on Llama-3.1-8B, H100
# vLLM issue #20780 (2025-07-10; the H100 reading as in engine_cases), EAGLE 3 columns:
# yuhuili/EAGLE3-LLaMA3.1-Instruct-8B on MT-bench, batch 1; "AL" per K and "TPOT ms" per K
# (vanilla 7.07 ms), "Best K: 4".
VLLM_20780_E3_AL = {2: 2.36, 3: 2.79, 4: 3.08, 5: 3.32, 6: 3.46, 7: 3.54}
VLLM_20780_E3_TPOT_MS = {0: 7.07, 2: 4.32, 3: 4.09, 4: 4.05, 5: 4.13, 6: 4.20, 7: 4.29}
VLLM_20780_E3_BEST_K = 4
E3_20780 = ("vLLM issue #20780 (2025-07-10): Llama-3.1-8B-Instruct + EAGLE3-LLaMA3.1-Instruct-8B "
            "chain, MT-bench, batch 1, vLLM V1 defaults, H100 (inferred)")


def _vllm_8b(method: str, k: int, al: float, engine: str) -> dict:
    draft = {"eagle": "eagle-llama-3.1-8b-instruct",
             "eagle3": "eagle3-llama-3.1-8b-instruct"}[method]
    return dict(hardware="h100-sxm", target="llama-3.1-8b", draft=draft, engine=engine,
                policy={"name": method, "num_speculative_tokens": k},
                acceptance={"model": "iid", "alpha": pub.alpha_for_tau(al, k)})


def _call(fn, spec: dict) -> float:
    return fn(spec.pop("hardware"), spec.pop("target"), spec.pop("policy"), **spec)


def e3_tpot_at(k: int):
    """Predictor: vLLM's EAGLE-3 chain of ``k``, TPOT speedup over plain decoding."""
    return lambda engine: _call(tpot_speedup, _vllm_8b("eagle3", k, VLLM_20780_E3_AL[k],
                                                        engine))


def e3_best_k(engine: str) -> int:
    """The K of the highest simulated EAGLE-3 TPOT speedup over the K vLLM measured."""
    got = {k: e3_tpot_at(k)(engine) for k in VLLM_20780_E3_AL}
    return max(got, key=got.get)


# vLLM PR #16937 ("[V1][Spec Decode] EAGLE-3 Support", comment of 2025-04-24): "Output
# tokens/s on H100 BS1", examples/offline_inference/eagle.py on MT-bench (80 prompts,
# --max_num_seqs 1): vanilla 133; EAGLE 1 K=2 201.69 (1.51x), K=4 198 (1.48x), K=7 169.92
# (1.27x); EAGLE 3 K=2 220.21 (1.65x).  Wall time of offline generation (prefill included):
# the makespan ratio.  The PR prints no acceptance length: issue #20780's (same models,
# same dataset, same author, later build) are used.
PR_16937 = ("vLLM PR #16937 (2025-04-24): Llama-3.1-8B-Instruct on H100, batch 1, MT-bench, "
            "offline output tokens/s, vanilla 133")
PR_16937_SPEEDUP = {("eagle", 2): 201.69 / 133, ("eagle", 4): 198 / 133,
                    ("eagle", 7): 169.92 / 133, ("eagle3", 2): 220.21 / 133}


def offline_speedup(method: str, k: int):
    al = (VLLM_20780_AL if method == "eagle" else VLLM_20780_E3_AL)[k]
    return lambda engine: _call(speedup, _vllm_8b(method, k, al, engine))


# ------------------------------------------------ SGLang: EAGLE-3 on Llama-3.1-8B
# sgl-project/sglang PR #5318 ("Add Speculative Decoding Eagle3 topk > 1", 2025-04-12),
# "Final Send One Test for CUDA Graph + Torch Compile", LLaMA 3.1 8B: No Spec 148.66 token/s;
# spec "314" (--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-
# tokens 4) acceptance length 2.12, 214.14 token/s; "548" (5 steps, topk 4, 8 draft tokens)
# 2.56, 204.46 token/s.  The PR names no GPU: H100 taken (its no-spec 148.66 token/s, 6.7 ms
# a token, is above the H100's 4.8 ms weight-read floor and far above an H200's 3.3 ms).
PR_5318 = ("sglang PR #5318 (2025-04-12): Llama-3.1-8B-Instruct + EAGLE3 (FA3 backend, CUDA "
           "graph + torch.compile), send_one at batch 1, no spec 148.66 token/s, H100 "
           "(inferred)")
PR_5318_TOKS = {"none": 148.66, "chain3": 214.14, "tree548": 204.46}
PR_5318_AL = {"chain3": 2.12, "tree548": 2.56}
PR_5318_TREE = {"speculative_num_steps": 5, "speculative_eagle_topk": 4,
                "speculative_num_draft_tokens": 8}


def _tree_tau(top1: float, knobs: dict) -> float:
    """tau of SGLang's dynamic tree ``knobs`` under a constant top-1 rate and EAGLE's rank hit
    rate (``pub.eagle_hit_rate``), as engine_cases._tree_tau for the EAGLE code's tree."""
    k, steps = knobs["speculative_eagle_topk"], knobs["speculative_num_steps"]
    model = TopKCoverageAcceptance(tuple(map(tuple, pub.geometric_coverage(
        [top1], pub.eagle_hit_rate(), k))))
    table = exclusive_table(model, steps, k, field="coverage")
    tree = dynamic_tree(table, steps, k, knobs["speculative_num_draft_tokens"] - 1)
    return 1.0 + model.expected_tree_accepted(tree)


@lru_cache(maxsize=None)
def tree_top1(tau: float) -> float:
    """The constant top-1 rate whose PR_5318_TREE tau is ``tau`` (bisection)."""
    lo, hi = 0.0, 0.999
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _tree_tau(mid, PR_5318_TREE) < tau else (lo, mid)
    return 0.5 * (lo + hi)


def _sglang_e3(name: str, engine: str) -> dict:
    if name == "chain3":
        policy = {"name": "eagle3", "num_speculative_tokens": 3}
        acceptance = {"model": "iid", "alpha": pub.alpha_for_tau(PR_5318_AL[name], 3)}
    else:
        policy = {"name": "eagle3", "num_speculative_tokens": 5, "speculative_eagle_topk": 4,
                  "speculative_num_draft_tokens": 8}
        cov = pub.geometric_coverage([tree_top1(PR_5318_AL[name])], pub.eagle_hit_rate(), 4)
        acceptance = {"model": "tree_topk", "coverage": cov.tolist()}
    return dict(hardware="h100-sxm", target="llama-3.1-8b",
                draft="eagle3-llama-3.1-8b-instruct", engine=engine, policy=policy,
                acceptance=acceptance)


def sglang_e3_speedup(name: str):
    return lambda engine: _call(speedup, _sglang_e3(name, engine))


def sglang_e3_order(engine: str) -> tuple[str, ...]:
    got = {name: sglang_e3_speedup(name)(engine) for name in ("chain3", "tree548")}
    return tuple(sorted(got, key=got.get, reverse=True))


# ------------------------------------------------ SGLang: DeepSeek-V3 (MoE, MLA), H200 TP8
# SGLang docs, docs/references/deepseek.md, "Multi-token Prediction" (the version that names
# lmsys/DeepSeek-V3-0324-NextN, 2025): "the decoding speed can be improved by 1.8x for batch
# size 1 and 1.5x for batch size 32 respectively on H200 TP8 setting", its example with
# --speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2 (one
# MTP draft).  Acceptance: DeepSeek-V3 Technical Report (arXiv:2412.19437) sec. 5.4.3, "the
# acceptance rate of the second token prediction ranges between 85% and 90%": 0.875.
SGL_MTP = ("SGLang docs (references/deepseek.md, Multi-token Prediction): DeepSeek-V3 MTP, "
           "one draft, H200 TP8, decoding speed {x}x at batch size {b}")
SGL_MTP_SPEEDUP = {1: 1.8, 32: 1.5}
DSV3_MTP_ALPHA = 0.875


def dsv3_mtp(batch: int):
    def predict(engine: str) -> float:
        rounds = {"rounds": LARGE_BATCH_ROUNDS} if batch >= 32 else {}
        return tpot_speedup("h200", "deepseek-v3", {"name": "mtp", "num_speculative_tokens": 1},
                            tensor_parallel=8, batch=batch, engine=engine, **rounds,
                            acceptance={"model": "iid", "alpha": DSV3_MTP_ALPHA})
    return predict


# sgl-project/sglang PR #2643 ("chore: bump v0.4.1.post2", 2024-12-29): DeepSeek-V3 with
# --tp 8, "Using CUDA Graph and FP8 GEMM Tuning": "batch 1, input 128, output 256: 30.29
# token/s; batch 8 ...: 206.32 token/s; batch 32 ...: 760.52 token/s" (read as output
# tokens/s).  No GPU named: H200 taken, since TP8 on 80 GB cards cannot hold the 671B FP8
# weights (about 671 GB against 640 GB) and SGLang's DeepSeek-V3 launch ran on 8 x H200.
PR_2643_TOKS = {1: 30.29, 8: 206.32, 32: 760.52}
PR_2643 = ("sglang PR #2643 (v0.4.1.post2, 2024-12-29): DeepSeek-V3 TP8 (H200, inferred), "
           "input 128, output 256, no speculation, output token/s at batch {b}")


def dsv3_throughput(batch: int):
    def predict(engine: str) -> float:
        # every batch is alike (fixed lengths, all at once): a few rounds suffice
        rounds = {"rounds": LARGE_BATCH_ROUNDS} if batch >= 32 else {"rounds": 2}
        return throughput("h200", "deepseek-v3", {"name": "none"}, tensor_parallel=8,
                          batch=batch, engine=engine, prompt=128, output=256, **rounds)
    return predict


CURRENT_CASES: list[Case] = [
    Case("vllm-eagle3-llama31-8b-best-k", E3_20780 + ": best K (lowest TPOT) among K = 2..7 "
         "is 4", VLLM_20780_E3_BEST_K, BEST_K, e3_best_k, "vllm"),
    *[Case(f"vllm-eagle3-llama31-8b-k{k}-tpot-speedup", E3_20780 + f": TPOT 7.07 ms vanilla / "
           f"{VLLM_20780_E3_TPOT_MS[k]} ms at K={k}",
           VLLM_20780_E3_TPOT_MS[0] / VLLM_20780_E3_TPOT_MS[k], SPEEDUP, e3_tpot_at(k), "vllm")
      for k in (2, 4, 7)],
    *[Case(f"vllm-{m}-llama31-8b-k{k}-offline-speedup", PR_16937 + f", {m.upper()} K={k}: "
           f"{PR_16937_SPEEDUP[(m, k)] * 133:g} (acceptance: issue #20780's AL)",
           PR_16937_SPEEDUP[(m, k)], SPEEDUP, offline_speedup(m, k), "vllm")
      for m, k in PR_16937_SPEEDUP],
    Case("sglang-eagle3-llama31-8b-chain3-speedup", PR_5318 + ": steps 3, topk 1, 4 draft "
         "tokens, acceptance length 2.12, 214.14 token/s",
         PR_5318_TOKS["chain3"] / PR_5318_TOKS["none"], SPEEDUP, sglang_e3_speedup("chain3"),
         "sglang-2025"),
    Case("sglang-eagle3-llama31-8b-tree548-speedup", PR_5318 + ": steps 5, topk 4, 8 draft "
         "tokens, acceptance length 2.56, 204.46 token/s",
         PR_5318_TOKS["tree548"] / PR_5318_TOKS["none"], SPEEDUP,
         sglang_e3_speedup("tree548"), "sglang-2025"),
    Case("sglang-eagle3-llama31-8b-chain-over-tree", PR_5318 + ": the chain (214.14 token/s) "
         "beats the tree (204.46) despite its lower acceptance length (2.12 vs 2.56)",
         ("chain3", "tree548"), ORDER, sglang_e3_order, "sglang-2025"),
    *[Case(f"sglang-mtp-dsv3-h200-batch{b}-speedup", SGL_MTP.format(x=x, b=b) + "; "
           "acceptance 0.85-0.90 (DeepSeek-V3 report sec. 5.4.3)", x, SPEEDUP, dsv3_mtp(b),
           "sglang") for b, x in SGL_MTP_SPEEDUP.items()],
    *[Case(f"sglang-dsv3-h200-batch{b}-throughput", PR_2643.format(b=b) + f": {x} token/s",
           x, ABSOLUTE, dsv3_throughput(b), "sglang") for b, x in PR_2643_TOKS.items()],
]
