"""Published measurements of large-MoE serving as it is deployed: DeepSeek-V3 with
prefill/decode disaggregation, DP attention and wide expert parallelism (DeepEP) on SGLang.

Source: "Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96
H100 GPUs", The SGLang Team, 2025-05-05, https://lmsys.org/blog/2025-05-05-large-scale-ep
(the lm-sys/lm-sys.github.io file blog/2025-05-05-large-scale-ep.md).  Setup, section
"Evaluation / Experimental Setup": DeepSeek-V3 on 12 nodes of 8 x H100 "connected via
InfiniBand"; "SGLang with PD Disaggregation": PD disaggregation, full EP (DeepEP, DeepGEMM,
two-batch overlap), EPLB with a distribution matching the input/output data.  The prefill
and decode phases were measured apart, "assuming unlimited resources for the non-tested
phase" (section "Performance Analysis of Prefill and Decode Phases"):

- prefill on 4 nodes (EP32): "per-node throughputs of 57,674, 54,543, and 50,302 tokens per
  second for prompt lengths of 1K, 2K, and 4K"; the "Overall Throughput" table gives the
  4K point's batch: 16,384 tokens per device, input length 4,096, 50,302 per node ("SGLang
  (Default)" expert distribution).  The 1K and 2K bars state no batch: taken as the same
  16,384 tokens per device (the two-batch-overlap batch of the "Ablation Study: Two-batch
  Overlap" section), an assumption of these two cases;
- the same 4K prefill with "simulated perfect EPLB (random expert selection following
  group-limited routing semantics)": 59,337 per node (same table).  The simulator's
  routing (routing_skew 0: every expert equally likely, the busiest rank's draw priced) is
  this column's assumption, not the default one's real expert distribution;
- decode on 9 nodes (EP72): the "Overall Throughput" decode table, "SGLang (Default)":
  batch size 256 (per device, as DeepSeek's 128 beside it), KV cache length 2,000, 9 nodes,
  22,282 tokens/s per node (no MTP; the simulated-MTP column, 17,373, inserts dummy
  kernels to match DeepSeek's attention time and is not predicted);
- decode without two-batch overlap: "Ablation Study: Two-batch Overlap", real test cases:
  "The speedup reaches 25.5% at 256 tokens with a performance of 22,310 tokens per second",
  so 22,310 / 1.255 = 17,777 tokens/s per node with TBO off at the same batch.  The
  simulator runs a step's communication after its compute (no overlap): this is the point
  its step corresponds to; the TBO figure above is predicted by the same number.

The blog's headline "52.3k input tokens per second" at 2,000-token inputs is not the
evaluation's 2K prefill bar (54,543); the evaluation's own numbers are used.

How each is predicted: a scenario of one phase's deployment (``deployment``: h100-sxm,
deepseek-v3, DP attention over every GPU of the phase with EP, SGLang's DeepEP modes --
``deepep_normal`` at prefill, ``all_to_all`` (low latency) at decode -- and the replica's
batching limits holding the stated batch), resolved and planned as ``simulate`` does (the
planned KV cache must hold the decode batch), and its engine step at the stated operating
point priced by the deployment's cost model: per node, 8 GPUs' tokens over that step's time
(the steady state the blog measures).  Each case runs the mechanism the blog ran: two-batch
overlap (``enable_two_batch_overlap``, simulator/cost/tbo.py) on, except the TBO ablation's
"off" case, with DeepEP's normal kernels holding 24 SMs at prefill (``deepep_num_sms: 24``:
the blog's prefill command, sgl-project/sglang issue #6017 "Instruction for Running DeepSeek
with Large-scale PD and EP", passes ``--deepep-config``, the file SGLang's
benchmark/kernels/deepep/tuning_deepep.py tunes at its ``--num-sms`` default 24 -- the
issue's own run of it: "Namespace(num_sms=24, output_path='deepep_tuned.json' ..." -- as
DeepEP's tests/test_internode.py and DeepSeek's prefill profile, 108 SMs computing and 24
communicating); the default-EPLB cases with EPLB placing 256 + 32 redundant experts
(``enable_eplb``, ``ep_num_redundant_experts: 32``: the blog's EPLB section, "288 experts
enables ... parallelism sizes of 12 or 72", so EP72 decode ran with 32 redundant; the same
32 at prefill, where 288 / 32 = 9 a rank, is an assumption), the perfect-EPLB case without
(its "random expert selection" is the simulator's uniform routing, kept uniform:
``routing_skew: 0``).  The default-EPLB cases route with DeepSeek's measured expert
popularity (simulator/cost/expert_load.py: TensorRT-LLM tech blog 4, Table 1, the hottest
expert 11.9x the mean, a Zipf skew of 0.595) placed by EPLB from those loads: the busiest
rank carries 1.0016x the mean rank's rows at EP32 (288 slots) and 1.037x at EP72 (where
uniform routing gives 1.125: 288 slots cannot hold 256 equal loads evenly over 72 ranks), so
EPLB takes back all but 0.2% of the skew at prefill.  What EPLB leaves in live traffic is
priced on top (simulator/cost/eplb_live.py, the spread TensorRT-LLM measured by rank under
EPLB at EP32, Table 1: std 52.0 at 1,024 rows a rank): the busiest rank 1.085x the mean at
prefill (the step's draw 0.3% at 131k rows a rank, the rest 4.0%), 1.147x at EP72 decode
(1.159 in each micro-batch), on its expert rows and its dispatch and combine.  The perfect-
EPLB column, uniform and without EPLB, prices no draw: at prefill it would be 0.6%.
Tolerance: an absolute throughput on a named device and engine, within 25%
(``tolerances.ABSOLUTE``), fixed by the kind of claim before any of these was predicted; the
TBO prefill ablation's speedup (two runs' ratio) within 20% (``tolerances.SPEEDUP``).
"""
from __future__ import annotations

import numpy as np

from simulator.cost import expert_load
from simulator.deployment import plan_deployment, resolve_deployment
from simulator.scenario import scenario_from_dict
from tests.published.harness import ENGINES, current_draw
from tests.published.tolerances import ABSOLUTE, SPEEDUP, Case

BLOG = ("lmsys.org/blog/2025-05-05-large-scale-ep (SGLang, DeepSeek-V3, 12 x 8 H100, PD "
        "disaggregation, DP attention, DeepEP, TBO, EPLB)")
GPUS_PER_NODE = 8
PREFILL_NODES, DECODE_NODES = 4, 9          # EP32 prefill, EP72 decode
PREFILL_TOKENS_PER_DEVICE = 16_384
PREFILL_PER_NODE = {1024: 57_674, 2048: 54_543, 4096: 50_302}   # tokens/s per node
PERFECT_EPLB_PREFILL_4K = 59_337
DECODE_BATCH_PER_DEVICE, DECODE_KV = 256, 2_000
DECODE_PER_NODE = 22_282
TBO_DECODE_PER_NODE, TBO_SPEEDUP = 22_310, 1.255
# the TBO prefill ablation ("Ablation Study: Two-batch Overlap"): "TBO achieves a 27% to 35%
# throughput increase compared to the vanilla setup, even when processing the same token count
# per device", the vanilla setup holding "up to 8,192 tokens before encountering out-of-memory
# (OOM) errors at 16,384"; its breakdown compares TBO and no-TBO at 8k.  Taken: 8,192 tokens a
# device of 4,096-token prompts (the profile's input length, an assumption: the blog's figure
# states neither), the stated range's midpoint
TBO_PREFILL_TOKENS, TBO_PREFILL_PROMPT, TBO_PREFILL_SPEEDUP = 8_192, 4_096, (1.27 + 1.35) / 2


# default-EPLB columns: EPLB's placement over the measured DeepSeek expert popularity
# (simulator/cost/expert_load.py); the perfect-EPLB column's "random expert selection" is
# uniform routing, kept uniform on purpose
SKEW = "routing_skew"
EPLB = {"enable_eplb": True, "ep_num_redundant_experts": 32,
        SKEW: expert_load.deepseek_measured_skew()}
UNIFORM = {SKEW: 0.0}
TBO = {"enable_two_batch_overlap": True}
# at prefill DeepEP's normal kernels hold 24 SMs beside the compute (module docstring)
PREFILL_TBO = {**TBO, "deepep_num_sms": 24}


def deployment(ranks: int, dispatch: str, seqs_per_rank: int, tokens_per_rank: int,
               engine: str, mechanism: dict):
    """One phase's DP-attention deployment of DeepSeek-V3 on ``ranks`` H100s, planned, with
    ``mechanism``'s TBO and EPLB settings (parallelism keys) and its routing: the measured
    skew where EPLB places the experts, uniform where the blog's routing was."""
    mechanism = dict(mechanism)
    skew = mechanism.pop(SKEW)
    data = {"moe": {"routing_skew": skew}, "name": "sglang-large-ep", "seed": 0,
            "hardware": "h100-sxm",
            "target": "deepseek-v3", "policy": {"name": "none"},
            "parallelism": {"tensor_parallel": 1, "data_parallel_attention": ranks,
                            "expert_parallel": True, "moe_dispatch": dispatch,
                            **mechanism},
            "batching": {"max_num_seqs": ranks * seqs_per_rank,
                         "max_num_batched_tokens": ranks * tokens_per_rank,
                         "enable_chunked_prefill": True},
            "execution": ENGINES[engine],
            "workload": {"synthetic": {
                "num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                "prompt": {"dist": "fixed", "tokens": 128},
                "output": {"dist": "fixed", "tokens": 16}}}}
    scenario = scenario_from_dict(data, source="tests/published/moe_cases")
    draw = current_draw()  # under a coverage draw: its device cost factor (no speculation)
    if draw is not None:
        scenario = draw.plain().apply(scenario, None)
    res = resolve_deployment(scenario)
    return plan_deployment(scenario, res, max_verify_tokens=1)


def prefill_per_node(prompt: int, mechanism: dict, tokens: int = PREFILL_TOKENS_PER_DEVICE):
    """Input tokens/s per node: every rank prefilling ``tokens`` tokens (16,384 unless
    told) of ``prompt``-token requests (whole prompts, no cached prefix)."""
    def predict(engine: str) -> float:
        ranks = PREFILL_NODES * GPUS_PER_NODE
        per_rank = tokens // prompt
        dep = deployment(ranks, "deepep_normal", per_rank, tokens, engine, mechanism)
        n = ranks * per_rank
        step = dep.target_cost.step_time(np.full(n, float(prompt)), np.zeros(n), np.ones(n))
        return GPUS_PER_NODE * tokens / step
    return predict


def tbo_prefill_speedup(engine: str) -> float:
    """The TBO prefill ablation's throughput with two-batch overlap over without, the same
    8,192 tokens a device (default EPLB, as the ablation's other runs)."""
    on, off = (prefill_per_node(TBO_PREFILL_PROMPT, mech, TBO_PREFILL_TOKENS)(engine)
               for mech in ({**PREFILL_TBO, **EPLB}, EPLB))
    return on / off


def decode_per_node(mechanism: dict):
    """Output tokens/s per node: 256 requests a rank, each with 2,000 tokens of KV, one
    token a step; the decode pool's planned KV cache must hold them."""
    return lambda engine: _decode_per_node(engine, mechanism)


def _decode_per_node(engine: str, mechanism: dict) -> float:
    ranks = DECODE_NODES * GPUS_PER_NODE
    b = DECODE_BATCH_PER_DEVICE
    dep = deployment(ranks, "all_to_all", b, b, engine, mechanism)
    n = ranks * b
    if dep.memory.kv_tokens < n * (DECODE_KV + 1):
        raise AssertionError(f"the decode pool holds {dep.memory.kv_tokens} KV tokens, "
                             f"fewer than its batch's {n * (DECODE_KV + 1)}")
    step = dep.target_cost.step_time(np.ones(n), np.full(n, float(DECODE_KV)), np.ones(n))
    return GPUS_PER_NODE * b / step


MOE_CASES: list[Case] = [
    *[Case(f"sglang-large-ep-dsv3-prefill-{p // 1024}k-per-node",
           BLOG + f": prefill on 4 nodes (EP32), {p}-token prompts, 16,384 tokens per device"
           + ("" if p == 4096 else " (assumed, as the 4K point)") + f": {x:,} input "
           "tokens/s per node", x, ABSOLUTE, prefill_per_node(p, {**PREFILL_TBO, **EPLB}),
           "sglang-2025")
      for p, x in PREFILL_PER_NODE.items()],
    Case("sglang-large-ep-dsv3-prefill-4k-perfect-eplb-per-node",
         BLOG + ": prefill as the 4K point with simulated perfect EPLB (uniform expert "
         f"choice): {PERFECT_EPLB_PREFILL_4K:,} input tokens/s per node",
         PERFECT_EPLB_PREFILL_4K, ABSOLUTE, prefill_per_node(4096, {**PREFILL_TBO, **UNIFORM}),
         "sglang-2025"),
    Case("sglang-large-ep-dsv3-decode-2k-per-node",
         BLOG + ": decode on 9 nodes (EP72), 256 requests per device, KV length 2,000, no "
         f"MTP: {DECODE_PER_NODE:,} output tokens/s per node", DECODE_PER_NODE, ABSOLUTE,
         decode_per_node({**TBO, **EPLB}), "sglang-2025"),
    Case("sglang-large-ep-dsv3-decode-2k-no-tbo-per-node",
         BLOG + ": decode as above with two-batch overlap off: 22,310 tokens/s per node with "
         "it, a 25.5% speedup (TBO ablation), so 22,310 / 1.255 without",
         TBO_DECODE_PER_NODE / TBO_SPEEDUP, ABSOLUTE, decode_per_node(EPLB), "sglang-2025"),
    Case("sglang-large-ep-dsv3-prefill-tbo-speedup",
         BLOG + ": prefill on 4 nodes (EP32) with two-batch overlap over without, the same "
         "token count per device: 'a 27% to 35% throughput increase' (TBO ablation; taken "
         "at 8,192 tokens a device of 4,096-token prompts, the midpoint)",
         TBO_PREFILL_SPEEDUP, SPEEDUP, tbo_prefill_speedup, "sglang-2025",
         speculative=False),
]

# outside their tolerance today, with the measured miss (cases.KNOWN_MISSES takes them in):
# none.  The three default-EPLB prefill cases missed by +32% to +35% (76,055 / 73,145 /
# 67,926) until the live traffic EPLB leaves (eplb_live.py), the FP8 quantisation of the
# down projection's input at the rank's routed rows and SGLang's contiguous-layout permutes
# behind DeepEP's normal dispatch (moe_kernels.py, dp_attention.py) were priced: 69,676 /
# 67,201 / 62,843 (+20.8%, +23.2%, +24.9%, the 4K at the edge of its 25%), then 60,345 /
# 59,255 / 56,321 (+4.6%, +8.6%, +12.0%; perfect EPLB 65,244 -> 58,602) when DeepEP's normal
# kernels were priced slower beside compute (tbo_measured.py): two-batch overlap, which hid
# +57%, +54%, +50% over the serial step (44,511 / 43,582 / 41,836), now +36%, +36%, +35%
# (the blog's ablation +27% to +35%; its case above 1.490 -> 1.337, a pass either way: at
# +-20% that case cannot tell the two apart, the per-node cases above can).  What is left: the
# default column is priced 1.04x slower than the perfect-EPLB one (58,602 at 4K)
# where the blog measured 1.18x (59,337 / 50,302): its run's expert imbalance, "communication
# kernels exhibit longer execution times and higher variance", is above the spread measured
# by TensorRT-LLM on its own dataset.
MOE_KNOWN_MISSES: dict[str, str] = {}
