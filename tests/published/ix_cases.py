"""InferenceX's published DeepSeek-R1 points beyond SGLang TP8 on H200 at 1k/1k (dp_cases.py):
the 8k/1k H200 table, B200, and one disaggregated point with MTP on H100 (issue 38 item 5).

Sources (InferenceX's own published rows, quoted in its repository's threads):

- H200: InferenceX PR #3173 (github.com/SemiAnalysisAI/InferenceX/pull/3173, description of
  2026-09-16; the same rows in PR #3288, 2026-09-19), "Baseline: 2026-05-17 ·
  lmsysorg/sglang:v0.5.12-cu130", mean latency, the family ``dsr1-fp8-h200-sglang``
  (DeepSeek-R1-0528, FP8, H200, SGLang, no speculative decoding), rows "8k/1k cC TP8 EP1":
  Output tok/s/GPU and TPOT ms at concurrency 4, 8, 16, 32, 64;
- B200: InferenceX PR #3363 (.../pull/3363, description of 2026-09-22), "Baseline:
  2026-05-22 · lmsysorg/sglang:v0.5.12-cu130", the family ``dsr1-fp8-b200-sglang``
  (DeepSeek-R1-0528, FP8, B200, SGLang, no speculative decoding): rows "1k/1k cC TP8 EP1"
  (C = 4, 16, 64), "8k/1k c1 TP8 EP1 734c7e", "8k/1k c1 TP4 EP1 685589", "8k/1k c2 TP4 EP1
  c25f6c" (the table lists a second 8k/1k c1 row each for TP8 and TP4 and a second c2 TP4
  row, all N/A: the rows with numbers are taken);
- disaggregated, MTP on: InferenceX issue #1580 (.../issues/1580, 2026-05-28), which quotes
  "the published InferenceX DeepSeek-R1 H100 1P1D disaggregated SGLang results ... max-dep":
  prefill TP16 / EP1 / DP attention off / 1 worker, decode TP16 / EP16 / DP attention on /
  1 worker, MTP on, closed loop, 1k/1k at concurrency 64: "Output throughput 1564.8 tok/s,
  Mean TPOT 36.99 ms" (the issue's own reproduction beside it is not a case).  The family
  is ``dsr1-fp8-h100-dynamo-sglang`` (configs/nvidia-master.yaml at 843c625: image
  lmsysorg/sglang:v0.5.8-cu130, dynamo router, NIXL KV transfer).  No MTP-off twin is given.

No InferenceX table of an MTP-on H200/B200 family nor of an NVIDIA disaggregated family with
numbers was found in the stored threads: PR #2955 names dsr1-fp8-h200-sglang-mtp's baseline
(2026-05-20, TP8 EP1, EAGLE MTP 2 steps, 8k/1k c4-c64) but its rows were not in the stored
text; the bot's baseline tables of dsr1-fp8-h200-dynamo-sglang, dsr1-fp4-b200-dynamo-sglang-mtp
and the GB200/GB300 disagg families print N/A; PR #666's SGLANG-DISAGG (MTP) rows are MI355X.

What ran (InferenceX at commit ed5867f9e, 2026-05-12, the scripts in effect on both baseline
dates: benchmarks/single_node/dsr1_fp8_h200.sh and dsr1_fp8_b200.sh; their later moves to
fixed_seq_len/ change only paths).  H200, 8k/1k: ``--tensor-parallel-size 8
--data-parallel-size 1 --disable-radix-cache --max-running-requests 256 --cuda-graph-max-bs
256 --chunked-prefill-size 32768 --max-prefill-tokens 32768 --mem-fraction-static 0.82
--attention-backend flashinfer``.  B200 at TP8: ``--max-running-requests 128
--mem-fraction-static 0.82 --kv-cache-dtype fp8_e4m3 --chunked-prefill-size 32768
--attention-backend trtllm_mla --moe-runner-backend flashinfer_trtllm --quantization fp8``;
at TP4 (8k/1k only): ``--max-running-requests 32 --mem-fraction-static 0.95
--chunked-prefill-size 8192``, the rest the same.  The client (both):
``--num-prompts CONC*10 --max-concurrency CONC --random-range-ratio 0.8`` (the workflow's
RANDOM_RANGE_RATIO, .github/workflows/benchmark-tmpl.yml and benchmark-multinode-tmpl.yml):
lengths uniform in [0.8 L, L] (utils/bench_serving/benchmark_serving.py sample_uniform),
mean 0.9 L: 7,373 for 8,192 and 922 for 1,024.

Assumed, not stated: the lengths fixed at those means (as dp_cases' issue #870 cases); the
engine ``sglang-0.5`` (engines.yaml ``sglang-v0.5``, its 0.5.x-era DeepSeek decode path read
on Hopper) for v0.5.12 on H200 and v0.5.8 on H100; on B200 ``sglang-0.5-blackwell``
(``sglang-v0.5-blackwell``): the same path with the script's
``--enable-flashinfer-allreduce-fusion`` (the residual add and RMSNorm fused into each
all-reduce, read in the sglang-0.5.12 wheel, simulator/cost/ar_fusion.py); its TRT-LLM MLA
attention and FlashInfer TRT-LLM MoE kernels are not modelled apart (the generic families
price them near aiconfigurator's B200 measurements of those kernels, engines.yaml).  The
mean TPOT at concurrency 1 went from 9.29 to 8.30 ms at TP8 (7.39 published) and from
10.11 to 9.12 ms at TP4 (7.96).  For the H100 point: the client
sends 10 x 64 requests at 922 / 922 tokens as the single-node one does; the decode instance
is DP attention over 16 ranks with the experts spread 16 ways (SGLang ``--tp 16 --dp 16
--enable-dp-attention --ep 16``), SGLang's default MoE exchange (all-gather /
reduce-scatter, no ``--moe-a2a-backend`` in the family's stored sibling recipe
ishandhanani/srt-slurm recipes/h100/1k1k/mtp/h100-fp8-2p4d-max-dep-mtp.yaml at 6a30b5d), and
its limits (``--max-running-requests 512``, ``--max-prefill-tokens 65536``,
``--mem-fraction-static 0.82``) taken as this recipe's decode side's; MTP as there,
``--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3`` (a
chain of two draft tokens); its acceptance the DeepSeek-V3 report's 0.85-0.90 for the MTP
token (arXiv:2412.19437 sec. 5.4.3), 0.875 a token, as current_cases' SGLang MTP cases
(InferenceX's random prompts state none); the KV link between two 2-node instances 16 x 50
GB/s (DGX H100: eight ConnectX-7 400 Gb/s NICs a node, NVIDIA DGX H100 datasheet), 5 us,
layer-wise, as workloads/scenarios/deepseek_disagg.yaml.  The prefill instance's TP16 spans
two nodes: its all-reduces are priced from the profile's one-node curve
(hardware/collectives.py extrapolates a world of 16 from the measured 8), not InfiniBand --
a known limit of what the profile measures.

Tolerance, fixed by the kind of claim before any case was predicted: an absolute throughput
or latency on a named device and engine within 25% (``ABSOLUTE``): the per-GPU output
throughput at the published concurrency and its mean TPOT (the per-user speed it is matched
at).
"""
from __future__ import annotations

from tests.published.harness import ENGINES, serve_data
from tests.published.tolerances import ABSOLUTE, Case

ENGINE = "sglang-0.5"
B200_ENGINE = "sglang-0.5-blackwell"  # the B200 script's flags (engines.yaml)
MEAN_8K, MEAN_1K = 7373, 922          # 0.9 x 8192 and 0.9 x 1024 (range ratio 0.8)
PROMPTS_PER_SLOT = 10                 # --num-prompts CONC*10

H200_SRC = ("github.com/SemiAnalysisAI/InferenceX/pull/3173 (InferenceX baseline 2026-05-17, "
            "DeepSeek-R1-0528 FP8, SGLang v0.5.12, 8 x H200, TP8 EP1, 8k/1k at range ratio "
            "0.8, --max-concurrency C, 10 C prompts)")
# concurrency: (Output tok/s/GPU, TPOT ms), rows "8k/1k cC TP8 EP1"
H200_8K = {4: (43.12, 10.94), 8: (68.33, 13.88), 16: (93.89, 20.02), 32: (121.01, 31.37),
           64: (150.98, 49.33)}
H200_BATCHING = {"max_num_seqs": 256, "max_num_batched_tokens": 32768,
                 "enable_chunked_prefill": True, "mem_fraction_static": 0.82}

B200_SRC = ("github.com/SemiAnalysisAI/InferenceX/pull/3363 (InferenceX baseline 2026-05-22, "
            "DeepSeek-R1-0528 FP8, SGLang v0.5.12, B200, EP1, FP8 KV cache, range ratio 0.8, "
            "--max-concurrency C, 10 C prompts)")
# (ISL, TP, concurrency): (Output tok/s/GPU, TPOT ms)
B200_POINTS = {(1024, 8, 4): (53.72, 8.82), (1024, 8, 16): (145.25, 13.09),
               (1024, 8, 64): (338.97, 21.73), (8192, 8, 1): (16.18, 7.39),
               (8192, 4, 1): (29.78, 7.96), (8192, 4, 2): (51.72, 9.13)}
B200_BATCHING = {8: {"max_num_seqs": 128, "max_num_batched_tokens": 32768,
                     "enable_chunked_prefill": True, "mem_fraction_static": 0.82},
                 4: {"max_num_seqs": 32, "max_num_batched_tokens": 8192,
                     "enable_chunked_prefill": True, "mem_fraction_static": 0.95}}

H100_SRC = ("github.com/SemiAnalysisAI/InferenceX/issues/1580 (published InferenceX result "
            "quoted, DeepSeek-R1 FP8, SGLang, 1P1D on 4 x 8 H100: prefill TP16, decode TP16 "
            "EP16 DP attention, MTP on, 1k/1k, concurrency 64)")
H100_OUTPUT_TOKS, H100_TPOT_MS, H100_CONC = 1564.8, 36.99, 64
DSV3_MTP_ALPHA = 0.875                # DeepSeek-V3 report sec. 5.4.3: 85-90% for the MTP token
# the recipe's --mem-fraction-static (decode 0.82; its prefill's 0.75 cannot be given apart,
# one batching block serving both pools): SGLang's own default, computed from the 65,536-token
# prefill budget on an 80 GB GPU, is below zero (memory_plan.sglang_mem_fraction_static)
DISAGG_BATCHING = {"max_num_seqs": 512, "max_num_batched_tokens": 65536,
                   "enable_chunked_prefill": True, "mem_fraction_static": 0.82}
DGX_H100_LINK = {"bandwidth_gb_per_s": 800, "latency_us": 5,
                 "source": "16 x ConnectX-7 400 Gb/s (50 GB/s), one NIC per GPU of a 2-node "
                           "instance (NVIDIA DGX H100 datasheet); 5 us setup, assumed"}


def _workload(n: int, prompt: int, output: int, conc: int) -> dict:
    return {"synthetic": {"num_requests": n,
                          "arrival": {"process": "poisson", "rate_per_s": 1e6},
                          "prompt": {"dist": "fixed", "tokens": prompt},
                          "output": {"dist": "fixed", "tokens": output}},
            "max_concurrency": conc}


def _aggregated(hardware: str, tp: int, prompt: int, conc: int, batching: dict,
                engine: str = ENGINE, **extra) -> dict:
    """One SGLang replica of ``tp`` GPUs (experts tensor-parallel: EP1), the closed-loop
    client at ``conc`` in flight, no speculation."""
    return {"name": f"inferencex-{hardware}-tp{tp}-c{conc}", "seed": 0, "hardware": hardware,
            "target": "deepseek-v3", "policy": {"name": "none"},
            "parallelism": {"tensor_parallel": tp}, "batching": batching,
            "execution": ENGINES[engine], **extra,
            "workload": _workload(PROMPTS_PER_SLOT * conc, prompt, MEAN_1K, conc)}


def h200_8k(conc: int) -> dict:
    return _aggregated("h200", 8, MEAN_8K, conc, H200_BATCHING)


def b200(isl: int, tp: int, conc: int) -> dict:
    prompt = MEAN_8K if isl == 8192 else MEAN_1K
    return _aggregated("b200", tp, prompt, conc, B200_BATCHING[tp], B200_ENGINE,
                       kv_cache_dtype="fp8")


def h100_disagg() -> dict:
    """1P1D: a TP16 prefill instance and a DP-attention 16 / EP16 decode instance, MTP of
    two draft tokens, the closed-loop client at 64 in flight."""
    decode = {"tensor_parallel": 1, "data_parallel_attention": 16, "expert_parallel": True}
    return {"name": "inferencex-h100-1p1d-mtp", "seed": 0, "hardware": "h100-sxm",
            "target": "deepseek-v3", "policy": {"name": "mtp", "num_speculative_tokens": 2},
            "acceptance": {"model": "iid", "alpha": DSV3_MTP_ALPHA},
            "disaggregation": {
                "prefill": {"replicas": 1, "parallelism": {"tensor_parallel": 16}},
                "decode": {"replicas": 1, "parallelism": decode},
                "link": DGX_H100_LINK, "transfer": "layerwise", "draft_kv": "transferred"},
            "batching": DISAGG_BATCHING, "execution": ENGINES[ENGINE],
            "workload": _workload(PROMPTS_PER_SLOT * H100_CONC, MEAN_1K, MEAN_1K, H100_CONC)}


def output_per_gpu(make, gpus: int):
    """Predictor: every request's output tokens over the client's duration, per GPU."""
    def predict(engine: str) -> float:
        data = make()
        syn = data["workload"]["synthetic"]
        tokens = syn["num_requests"] * syn["output"]["tokens"]
        return tokens / serve_data(data).duration_s / gpus
    return predict


def mean_tpot_ms(make):
    return lambda engine: 1e3 * serve_data(make()).tpot_s


def _pair(name: str, source: str, toks: float, tpot: float, make, gpus: int,
          engine: str = ENGINE) -> list[Case]:
    return [Case(f"{name}-output-per-gpu", f"{source}: {toks} output tokens/s per GPU", toks,
                 ABSOLUTE, output_per_gpu(make, gpus), engine),
            Case(f"{name}-mean-tpot", f"{source}: mean TPOT {tpot} ms", tpot, ABSOLUTE,
                 mean_tpot_ms(make), engine)]


def _cases() -> list[Case]:
    cases = []
    for conc, (toks, tpot) in H200_8K.items():
        cases += _pair(f"inferencex-dsr1-h200-sglang-tp8-8k1k-conc{conc}",
                       f"{H200_SRC}: 8k/1k, concurrency {conc}", toks, tpot,
                       lambda c=conc: h200_8k(c), 8)
    for (isl, tp, conc), (toks, tpot) in B200_POINTS.items():
        shape = "8k/1k" if isl == 8192 else "1k/1k"
        cases += _pair(f"inferencex-dsr1-b200-sglang-tp{tp}-{shape.replace('/', '')}"
                       f"-conc{conc}", f"{B200_SRC}: {shape} TP{tp}, concurrency {conc}",
                       toks, tpot, lambda i=isl, t=tp, c=conc: b200(i, t, c), tp, B200_ENGINE)
    name = "inferencex-dsr1-h100-sglang-1p1d-mtp-conc64"
    cases += [Case(f"{name}-output-toks", f"{H100_SRC}: {H100_OUTPUT_TOKS} output tokens/s "
                   "(all 32 GPUs)", H100_OUTPUT_TOKS, ABSOLUTE,
                   output_per_gpu(h100_disagg, 1), ENGINE),
              Case(f"{name}-mean-tpot", f"{H100_SRC}: mean TPOT {H100_TPOT_MS} ms",
                   H100_TPOT_MS, ABSOLUTE, mean_tpot_ms(h100_disagg), ENGINE)]
    return cases


IX_CASES: list[Case] = _cases()

# outside their tolerance today, with the measured miss (cases.KNOWN_MISSES takes them in).
# The H200 8k/1k points at concurrency 8-32 (-25% to -27% output tokens/s per GPU) pass since
# issue 38 priced the Triton fused MoE at SGLang's tuned kernel measured on an H200
# (hardware/profiles/h200.yaml moe.fp8_triton_*, ai-dynamo/aiconfigurator's table).
IX_KNOWN_MISSES: dict[str, str] = {
    "inferencex-dsr1-h100-sglang-1p1d-mtp-conc64-output-toks": (
        "predicted 3,711 vs published 1,564.8 output tokens/s (+137%), mean TPOT 16.38 vs "
        "36.99 ms (-56%): the issue that quotes the point (#1580) reports that the published "
        "decode looks too slow: its reproduction of the stated setup gave 2,639.0-2,939.8 "
        "output tokens/s and a mean TPOT of 19.35-21.60 ms (the prediction is +26% to +41% "
        "and -15% to -24% from those); the maintainers' answer and the run's artifacts were "
        "not found. Also assumed, each of which moves the point: the acceptance (the "
        "DeepSeek-V3 report's 0.875 a token for both draft tokens: InferenceX's random "
        "prompts state none, and a second pass of the one MTP module accepts less), the "
        "decode instance's MoE exchange and limits (the 1P1D recipe itself was not found), "
        "and the TP16 prefill's all-reduces over two nodes priced on the one-node NVLink "
        "curve (cheap: the prefill is a small part at 1k/1k)"),
    "inferencex-dsr1-h100-sglang-1p1d-mtp-conc64-mean-tpot": (
        "predicted 16.38 vs published 36.99 ms (-56%): see the output-tokens case (the "
        "issue's own reproduction measured 19.35-21.60 ms)"),
}
