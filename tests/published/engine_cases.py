"""Published measurements on serving engines (vLLM, SGLang): speedups, the best
``num_speculative_tokens``, a crossover by batch size, a batch/tensor-parallel effect.

Every number below is quoted from its source (named beside it), and every tolerance was
written before the prediction was run:

- a speedup: within 20% (as ``cases.SPEEDUP``);
- the best length: within +-1 of the published argmax (``BEST_K``);
- a crossover or an ordering: exactly the published signs / order.

The acceptance each run uses comes from a measurement other than the number it is compared
with: the per-K acceptance lengths vLLM printed next to its TPOTs, EAGLE's own tables
(``simulator.acceptance.published``), or the acceptance length an EAGLE user measured for the
Llama-3-70B head (``llama3_70b_top1``), converted as that module documents.
"""
from __future__ import annotations

from functools import lru_cache

from simulator.acceptance import published as pub
from simulator.acceptance.tree_topk import TopKCoverageAcceptance
from simulator.policies.tree_acceptance import exclusive_table
from simulator.speculation.tree_shapes import dynamic_tree
from tests.published.harness import run, speedup, tpot_speedup

# Runs at batch 32 and 64 simulate 4 full batches (128 or 256 requests), not the harness's
# 16: every batch is alike (fixed lengths, all requests at once), and it keeps the check fast.
LARGE_BATCH_ROUNDS = 4


def _rounds(batch: int) -> dict:
    return {"rounds": LARGE_BATCH_ROUNDS} if batch >= 32 else {}


# ------------------------------------------------ vLLM: EAGLE-1 on Llama-3.1-8B-Instruct
# vLLM issue #20780 (github.com/vllm-project/vllm/issues/20780, ekagra-ranjan, 2025-07-10):
# meta-llama/Llama-3.1-8B-Instruct with yuhuili/EAGLE-LLaMA3.1-Instruct-8B (vLLM V1, method
# eagle, a chain of K), MT-bench, batch size 1.  "AL" table, EAGLE 1 column: mean acceptance
# length per K; "TPOT ms" table: vanilla 7.07 ms, EAGLE 1 per K; "Best K: 3".
VLLM_20780_AL = {2: 2.10, 3: 2.29, 4: 2.39, 5: 2.43, 6: 2.45, 7: 2.47}
VLLM_20780_TPOT_MS = {0: 7.07, 2: 4.37, 3: 4.29, 4: 4.48, 5: 4.71, 6: 4.94, 7: 5.20}
VLLM_20780_BEST_K = 3
# The issue names no GPU.  H100: the same author's series on this model and dataset is
# "Output tokens/s on H100 BS1" (vLLM PR #16937), and 7.07 ms is below the A100-80GB's
# weight-read floor (16.06 GB of bf16 weights / 2.04 TB/s = 7.9 ms).
VLLM_20780_HW = "h100-sxm"
VLLM_20780 = ("vLLM issue #20780 (2025-07-10): Llama-3.1-8B-Instruct + "
              "EAGLE-LLaMA3.1-Instruct-8B chain, MT-bench, batch 1, vLLM defaults, H100 "
              "(inferred: the issue names no GPU)")


def vllm_eagle_8b(k: int, engine: str, *, batch: int = 1) -> dict:
    """vLLM's EAGLE chain of ``k`` with the acceptance length vLLM measured at that ``k``."""
    alpha = pub.alpha_for_tau(VLLM_20780_AL[k], k)
    return dict(hardware=VLLM_20780_HW, target="llama-3.1-8b",
                draft="eagle-llama-3.1-8b-instruct", engine=engine, batch=batch,
                **_rounds(batch),
                policy={"name": "eagle", "num_speculative_tokens": k},
                acceptance={"model": "iid", "alpha": alpha})


def _tpot(spec: dict) -> float:
    return tpot_speedup(spec.pop("hardware"), spec.pop("target"), spec.pop("policy"), **spec)


def _speed(spec: dict) -> float:
    return speedup(spec.pop("hardware"), spec.pop("target"), spec.pop("policy"), **spec)


def tpot_at(k: int):
    """Predictor: the TPOT speedup of vLLM's EAGLE chain of ``k`` on the given engine."""
    return lambda engine: _tpot(vllm_eagle_8b(k, engine))


def best_k(engine: str) -> int:
    """The K of the highest simulated TPOT speedup over the K vLLM measured."""
    got = {k: _tpot(vllm_eagle_8b(k, engine)) for k in VLLM_20780_AL}
    return max(got, key=got.get)


# ------------------------------------------------ SGLang: EAGLE on Llama-2-7b-chat, H100
# sgl-project/sglang PR #2150 ("Eagle speculative decoding part 4: Add EAGLE2 worker",
# 2024-11-24; repeated in SafeAILab/EAGLE PR #173): "obtained on a single H100", one request
# "[INST] Give me a simple FastAPI server. Show the python code. [/INST]", temperature 0,
# max_new_tokens 256.  Normal decoding (SGLang) 156 token/s; EAGLE decoding (SGLang)
# 297 token/s with lmzheng/sglang-EAGLE-llama2-chat-7B, --speculative-num-steps 5
# --speculative-eagle-topk 8 --speculative-num-draft-tokens 64; "Official eagle code:
# 200 token/s".  The draft is taken as yuhuili/EAGLE-llama2-chat-7B (the catalog's
# eagle-llama-2-7b-chat), of which lmzheng's is SGLang's packaging: an assumption of shapes.
SGLANG_2150_TOKS = {"sglang": 156.0, "sglang_eagle": 297.0, "eagle_code": 200.0}
SGLANG_2150_KNOBS = {"speculative_num_steps": 5, "speculative_eagle_topk": 8,
                     "speculative_num_draft_tokens": 64}
# The prompt above is about two dozen Llama-2 tokens (counted by eye); the answer runs to
# the 256-token cap.
SGLANG_2150_PROMPT, SGLANG_2150_OUTPUT = 24, 256


def sglang_eagle_7b(engine: str) -> float:
    """SGLang's EAGLE (its EAGLE-2 tree) with EAGLE's own acceptance for LLaMA2-Chat 7B:
    the speedup over plain decoding on the same engine."""
    cov = pub.eagle_coverage("llama-2-7b-chat", SGLANG_2150_KNOBS["speculative_eagle_topk"])
    return _speed(dict(hardware="h100-sxm", target="llama-2-7b",
                       draft="eagle-llama-2-7b-chat", engine=engine,
                       prompt=SGLANG_2150_PROMPT, output=SGLANG_2150_OUTPUT,
                       policy={"name": "eagle2", **SGLANG_2150_KNOBS},
                       acceptance={"model": "tree_topk", "coverage": cov.tolist()}))


# The official EAGLE code then (SafeAILab/EAGLE eagle/model/ea_model.py at f230747,
# 2024-11): EAGLE-2's tree with total_token=59, depth=5 (6 draft forwards), top_k=10.
EAGLE_CODE_TREE = {"speculative_num_steps": 6, "speculative_eagle_topk": 10,
                   "speculative_num_draft_tokens": 60}


def engine_ratio(engines: str) -> float:
    """PR #2150's two EAGLE runs on one H100: SGLang's (its knobs) against the official
    EAGLE code's (its defaults) -- output tokens/s of the second engine of ``"hf/sglang"``
    over the first's, each with EAGLE's acceptance for LLaMA2-Chat 7B."""
    first, second = engines.split("/")

    def seconds(engine: str, knobs: dict) -> float:
        cov = pub.eagle_coverage("llama-2-7b-chat", knobs["speculative_eagle_topk"])
        return run("h100-sxm", "llama-2-7b", {"name": "eagle2", **knobs},
                   draft="eagle-llama-2-7b-chat", engine=engine, prompt=SGLANG_2150_PROMPT,
                   output=SGLANG_2150_OUTPUT,
                   acceptance={"model": "tree_topk", "coverage": cov.tolist()}).makespan_s
    return seconds(first, EAGLE_CODE_TREE) / seconds(second, SGLANG_2150_KNOBS)


# ------------------------------------------------ Llama-3-70B-Instruct's EAGLE head
# SafeAILab/EAGLE issue #106 (2024-07-24): meta-llama/Meta-Llama-3-70B-Instruct +
# yuhuili/EAGLE-LLaMA3-Instruct-70B, the EAGLE repo's code and MT-bench (80 questions):
# "12234 total decoding steps and 36611 total accept length", the bonus token not counted
# (the poster: "the accept length should +1").  The repo's defaults were already those of
# EAGLE_CODE_TREE (eagle/model/ea_model.py at 8009b6d, 2024-07).
EAGLE_106_TAU = 1.0 + 36611 / 12234


def _tree_tau(top1: float) -> float:
    """tau of EAGLE-2's tree (the repo defaults) under a constant top-1 rate and EAGLE's rank
    hit rate (``pub.eagle_hit_rate``, fitted once on Vicuna-7B)."""
    k = EAGLE_CODE_TREE["speculative_eagle_topk"]
    model = TopKCoverageAcceptance(tuple(map(tuple, pub.geometric_coverage(
        [top1], pub.eagle_hit_rate(), k))))
    steps = EAGLE_CODE_TREE["speculative_num_steps"]
    table = exclusive_table(model, steps, k, field="coverage")
    tree = dynamic_tree(table, steps, k, EAGLE_CODE_TREE["speculative_num_draft_tokens"] - 1)
    return 1.0 + model.expected_tree_accepted(tree)


@lru_cache(maxsize=None)
def llama3_70b_top1() -> float:
    """The constant top-1 rate whose EAGLE-2 tree tau is issue #106's measurement
    (bisection: the tree's tau grows with the rate)."""
    lo, hi = 0.0, 0.999
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _tree_tau(mid) < EAGLE_106_TAU else (lo, mid)
    return 0.5 * (lo + hi)


# ------------------------------------------------ SpecDecode-Bench (vLLM / SGLang, H100)
# "Speculative Decoding: Performance or Illusion?" (Liu, Yu, Park, Stoica, Cheung,
# arXiv:2601.11580; blog specdecode-bench.github.io, index.md), H100 80GB, 4 GPUs with
# tensor parallelism for the 70B.  Figure 2 (SGLang v0.5.9, "tree depth is fixed to 3 ...
# trees use k=6 (branching factor 2) and k=21 (branching factor 4)"): "by batch size 64,
# the k=21 tree falls below 1x speedup on all workloads"; panels (e)-(h), Llama3-70B with
# EAGLE, show it above 1x at batch size 1.  k=21 with branching 4 and depth 3 is read as
# SGLang's --speculative-num-steps 3 --speculative-eagle-topk 4
# --speculative-num-draft-tokens 22 (21 drafts and the root).  The blog names the method,
# not the checkpoints (the paper's Table 5, not read here); taken as the EAGLE README's heads
# yuhuili/EAGLE-LLaMA3-Instruct-70B and yuhuili/EAGLE-LLaMA3.1-Instruct-8B.
SDB_TREE21 = {"speculative_num_steps": 3, "speculative_eagle_topk": 4,
              "speculative_num_draft_tokens": 22}
SDB_CROSSOVER_BATCHES = (1, 64)
# End-to-end section (vLLM v0.10.1, chain k=3): "For EAGLE on ShareGPT, going from batch 1
# to 32 reduces speedup by 4.3% on the 8B model but by 14.0% on the 70B model".
SDB_BATCH_DROP = {"llama-3-70b-tp4": 0.140, "llama-3.1-8b": 0.043}
SDB = "SpecDecode-Bench (arXiv:2601.11580, specdecode-bench.github.io)"


def eagle_70b(policy: dict, *, engine: str, batch: int) -> dict:
    """Llama-3-70B-Instruct's EAGLE head on 4 x H100 with issue #106's acceptance."""
    k = policy.get("speculative_eagle_topk", 1)
    cov = pub.geometric_coverage([llama3_70b_top1()], pub.eagle_hit_rate(), max(k, 1))
    return dict(hardware="h100-sxm", target="llama-3.1-70b", tensor_parallel=4,
                draft="eagle-llama-3-70b-instruct", engine=engine, batch=batch,
                **_rounds(batch),
                policy=policy, acceptance={"model": "tree_topk", "coverage": cov.tolist()})


def crossover(engine: str) -> tuple[str, ...]:
    """Whether the k=21 tree gains or loses at each batch size of ``SDB_CROSSOVER_BATCHES``."""
    return tuple("gain" if _speed(eagle_70b({"name": "eagle2", **SDB_TREE21},
                                            engine=engine, batch=b)) > 1.0 else "loss"
                 for b in SDB_CROSSOVER_BATCHES)


def batch_drop_order(engine: str) -> tuple[str, ...]:
    """The two models ordered by how much EAGLE's chain-of-3 speedup falls from batch 1
    to 32 (largest drop first).  Acceptance: the 8B's is vLLM #20780's AL at K=3 (MT-bench;
    the study gives no ShareGPT AL), the 70B's issue #106's top-1 rate as a chain; each is
    the same at both batch sizes, so the drop is the cost model's."""
    chain = {"name": "eagle", "num_speculative_tokens": 3}
    drops = {}
    for name, make in (("llama-3-70b-tp4", lambda b: eagle_70b(dict(chain), engine=engine,
                                                                batch=b)),
                       ("llama-3.1-8b", lambda b: vllm_eagle_8b(3, engine, batch=b))):
        drops[name] = 1.0 - _speed(make(32)) / _speed(make(1))
    return tuple(sorted(drops, key=drops.get, reverse=True))
