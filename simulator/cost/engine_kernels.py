"""What one engine's DeepSeek-class decode launches beyond the generic MoE/MLA layer, and
the serial K loop of its Triton block-FP8 GEMMs.

The cost model prices a MoE/MLA layer by kernel families every engine runs (moe_kernels.py:
one routing kernel, the align, the quantisations, the latent norms, the cache write, one
rope kernel).  An engine may launch more, and at decode batch sizes each extra launch costs
its GPU latency however little it does (under CUDA graphs, no host time).  SGLang 0.4.1, the
engine of the first DeepSeek-V3 releases, ran in native PyTorch what later engines fused:
the biased grouped top-k (17 launches where one fused kernel stands), the absorbed MLA's
per-tensor FP8 quantisation of the two ``bmm_fp8`` inputs (``input_to_float8``: 12 launches
each), DeepSeek's YaRN rope (13), and the copies that assemble the latent query and key.
``engines.yaml`` counts them per layer, split by kind: pointwise ones priced as the profile's
``elementwise`` kernels, reductions, top-k, scatters and gathers as its ``other`` kind.
The MoE gate's launches run on every token, at the step's tokens' fp32 scores.  The MLA
ones run on the absorbed decode path only (a prefill chunk attends in the expanded form,
mla.py), so, as moe_kernels' decode-path ``mla_kernels``, each is priced at one request's
latent query (a few KB: the kind's latency, whatever the step's tokens; the token tables
know the total, not how many are decodes): priced at every token they cost a 16,384-token
prefill rank 5 x 2 GB a layer; at a large decode batch this leaves out their tensors'
bandwidth (SGLang 0.4.5's five at their own bytes would take the large-EP decode step
from 73.4 to 73.5 ms).

The K loop.  A Triton block-FP8 GEMM (SGLang's and vLLM's ``w8a8_block_fp8_matmul``, and the
``fused_moe`` kernel with block scales) gives each program one BLOCK_M x BLOCK_N output
tile and walks the whole K dimension in 128-deep steps, loading a weight tile and its scale
per step; it has no split-K.  At decode M the grid is a few tiles (N / 128 for a dense
linear, touched experts x N / 128 for the grouped GEMM), under one wave of the SMs, so the
time is one program's serial loop, ``K / 128`` steps, not the weights over the bandwidth:
``latency + ceil(tiles / SMs) * ceil(K / 128) * t_step`` bounds the GEMM's time below,
``t_step`` the profile's ``moe.fp8_triton_k_step_us`` (measured on Hopper, cited there).
At many tiles the bound is the HBM stream again (132 programs a wave each loading a 16 KB
tile a step), so it only binds where few tiles run: small batches, few experts.
``engines.yaml``'s ``fp8_gemm: triton`` turns it on (the fused MoE's: ``vllm_fused_moe``
too).  vLLM 0.7's CUTLASS blockwise GEMM, which takes its linears with N and K multiples
of 128 on sm90, has no split-K either (a persistent 128 x 128 x 128 tile) and walks K the
same way: ``vllm-v0.7`` prices it with this floor, its own step measured within 0.4% of the
Triton one (``CUTLASS_K_STEP_S``).  DeepGEMM runs its own waves (below).

vLLM 0.7.x's absorbed ``W_UV_O`` (``absorbed_uv_o``).  V0's MLA decode folds ``kv_b``'s V
half into ``o_proj`` ahead of time (vllm/attention/backends/mla/utils.py at v0.7.1-v0.7.3,
``VLLM_MLA_PERFORM_MATRIX_ABSORPTION`` on by default: ``W_UV_O = einsum("lnd,hnd -> nlh",
W_UV, W_O)`` re-quantised to 128 x 128 FP8 blocks) and runs the attention's latent output,
``x.flatten(start_dim=1)`` of ``[rows, heads/TP, kv_lora_rank]``, through it as one linear:
K = heads/TP x kv_lora_rank (8,192 for DeepSeek-V3 at TP 8) where ``o_proj`` walks heads/TP
x v_head_dim (2,048).  N (7,168) and K are multiples of 128, so it runs CUTLASS's blockwise
GEMM, one 128 x 128 tile a CTA walking K (fp8_utils.apply_w8a8_block_fp8_linear).  Only the
decode rows take it: ``MLACommonImpl.forward`` splits the step at ``num_prefill_tokens``,
the prefill rows go through ``_forward_prefill`` (the expanded form, ending in
``self.o_proj(output)``, K = heads/TP x v_head_dim) and the decode rows through
``_forward_decode``, whose ``_v_up_proj_and_o_proj`` is the absorbed GEMM (same file); a
verification's tokens are decode rows (mla.py's per-request switch).  Its M is the step's
decode rows, cut into 128-row tiles: ``ceil(rows / 128) x N / 128`` tiles in waves of the
SMs, each wave walking K.  PR #5820's 'vllm' column at N = 7168, K = 16384 bears the tile
out: 75.7-77.2 us from M = 1 to 128, 77.8 at M = 256 (112 tiles, one wave), 149.2 at 512
(224 tiles, two).  So the extra cost a layer over ``o_proj``'s is ``waves(rows) x 48`` steps
at ``CUTLASS_K_STEP_S`` (vLLM's own kernel, measured), none at zero decode rows.  The token
tables know a step's total, not its decodes, so the steps are priced beside them, from each
request's new tokens (``AbsorbedUvO``, ``CostModel._fixed``'s ``decode_rows``).  Under CUDA
graphs the GEMM runs at the captured batch (V0 captures up to 256 rows: one wave however
padded), so the real rows give the same waves.  vLLM dropped the absorption in v0.8.0 (PR
#14770, 'MLA get rid of materialization').

DeepGEMM (``fp8_gemm: deepgemm``: SGLang with ``SGL_ENABLE_JIT_DEEPGEMM=1``, as the large-EP
deployment ran, sgl-project/sglang issue #6017).  At many rows its dense FP8 GEMMs are well
below the GEMM kind's 0.78 of the FP8 peak, the more so the shorter K: the DeepGEMM README's
dense table (H800) at M = 4096 gives 1,358 TFLOPS at DeepSeek-V3's ``o_proj`` (N 7168, K
16384), 1,304 and 1,025 at the shared expert's (4096 x 7168, 7168 x 2048), 1,058 at
``fused_qkv_a_proj`` (2112 x 7168), 990 at ``q_b_proj`` (24576 x 1536) and 590 at
``kv_b_proj`` (32768 x 512).  A persistent kernel's tile pays its K steps and then a fixed
cost (its pipeline's fill and the 128 x 128 BF16 output's store), which a short K does not
amortise: ``ceil(tiles / SMs) x (ceil(K / 128) x t_step + t_tile)``, ``t_step`` one 128 x 128
x 128 step at ``DEEPGEMM_EFFICIENCY`` of an SM's FP8 peak; fitted to those six rows it is
within 1.6% of each, where the roofline's price is 10% to 60% too fast.  Below one wave of
tiles DeepGEMM picks narrower, unaligned blocks that the formula does not describe; from 33
rows to one wave the roofline's price (within 16% of the README's M = 64 and 128 rows but
two, on the H100 SXM's bandwidth) stands.  At 1-32 rows it streams the weight far slower
than the roofline, the more so on an H200's faster HBM.  sgl-project/sglang PR #5820
(2025-04-28, 'main' tables, the 'deepgemm' column, a Hopper GPU the tables do not name,
do_bench times with the launch) gives DeepSeek-V3's N = 3072 x
K = 1536 10.3 us at M = 1 (the roofline on an H200: 4.9), N = 512 x K = 7168 13.6 (8.8) and
N = 7168 x K = 16384 60.4 (31.0), about flat to M = 32; SGLang 0.5.x runs these linears on it at
decode (InferenceX issue #1004's H200 profile: sm90_fp8_gemm<2112x7168>, <7168x2048>,
<3072x1536>).  Its small-M blocks are 64 rows by a narrow N (16 columns and up), one wave
of at most an SM's count of CTAs, each walking the whole K with its slice of the weight:
``latency + DEEPGEMM_TILE_S + (N K / ctas) / DEEPGEMM_SM_STREAM_BPS``, ``ctas`` =
min(SMs, ceil(N / 16)), the per-SM stream fitted to those rows (``deepgemm_decode_floor``,
tests/simulator/cost/test_deepgemm_decode.py: 17.0 GB/s, 2.2 TB/s over 132 SMs).  Past 32
rows PR #5820's times fall (N = 7168 x K = 16384: 57.0 us at 16 rows, 50.2 at 32, 41.9 at
64) and the roofline stands again.  The times are those of the DeepGEMM of April 2025, so
only the engines of its months charge them (``deepgemm_decode_floor`` in engines.yaml:
sglang-v0.4.5); DeepGEMM was rewritten since (its README: a full refactor on 2025-07-20,
#112; on 2025-11-21, #231, its SM90 FP8 kernel's heuristics gained blocks of 16 and 32
rows for M <= 16 and 32 and up to 32 pipeline stages where 12 were the most), and no
measurement of the later kernels' decode rows was found, so SGLang 0.5.x's and vLLM 0.11's
keep the roofline's price there.

Behind DeepEP's low-latency dispatch (``moe_dispatch: all_to_all``) the MoE layer is not the
fused-MoE path the generic families describe: DeepEP's dispatch casts the hidden states to
FP8 and lands each expert's rows in its own slab (no align, no separate quantisation), and
its combine takes the top-k weights and sums the k rows (no ``moe_sum``) (deepseek-ai/DeepEP
README, ``low_latency_dispatch(..., use_fp8=True)`` and ``low_latency_combine(x, topk_idx,
topk_weights, handle)``); moe_kernels drops those three there.  What the engine launches
around it instead is ``ep_kernels``: ``deepep_pointwise_kernels`` a MoE layer (SGLang: the
int64 cast of the top-k ids before the dispatch, DeepGEMM's column-major TMA-aligned copy
of the down projection's input scales), and under EPLB ``eplb_map_kernels`` (the gather of
the logical top-k ids into physical replicas), each at the bytes of the step's top-k ids.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hardware.kernels import ELEMENTWISE, GEMM, OTHER
from hardware.roofline import fast_ndim
from simulator.cost import vllm_linear
from simulator.cost.small_kernel import SmallKernel

K_STEP = 128  # the block scale's depth: BLOCK_SIZE_K of the block-FP8 Triton kernels
# DeepGEMM's dense FP8 GEMM at many rows (module docstring): the least-squares pair on a grid
# (efficiency 0.60-0.95 by 0.01, tile 0-8 us by 0.1) over the six M = 4096 rows of the
# deepseek-ai/DeepGEMM README's "Normal GEMMs for dense models" table (H800, NVCC 12.8, the
# H100 SXM's GH100 die: 132 SMs, same clocks; tests/simulator/cost/test_deepgemm_dense.py):
# every row within 1.6%
DEEPGEMM_EFFICIENCY = 0.74
DEEPGEMM_TILE_S = 2.2e-6
# DeepGEMM's dense FP8 GEMM at decode rows (module docstring): its narrowest block of N, the
# rows the fit covers, one SM's weight stream (least squares on a grid of 0.5 GB/s over
# sgl-project/sglang PR #5820's 'deepgemm' times at M = 1-32, test_deepgemm_decode.py)
DEEPGEMM_MIN_BLOCK_N = 16
DEEPGEMM_DECODE_ROWS = 32
DEEPGEMM_SM_STREAM_BPS = 17.0e9
TILE_N = 128  # BLOCK_SIZE_N: the block scale's 128 output columns
# vLLM's CUTLASS blockwise FP8 GEMM (cutlass_scaled_mm), one 128-deep K step of a one-wave
# grid: the 'vllm' column of sgl-project/sglang PR #5820 (2025-04-28, 'main' tables, the
# tables the profile's Triton step is fitted to; DeepSeek-V3 shapes at N = 7168, M = 1-128,
# a Hopper GPU the tables do not name): 19.2 us at K = 2304, 77.2 us at K = 16384, the
# difference over the 110 steps between them, 0.527 us.  sgl-project/sglang PR #5207 (2025-04)
# timed the same kernel at 92.6 and 103.5 us at K = 16384 and 18432, 0.68 us a step (not
# priced: 29% dearer than the PR #5820 run, where SGLang's Triton kernel also ran faster)
CUTLASS_K_STEP_S = (77.2e-6 - 19.2e-6) / (16384 / K_STEP - 2304 / K_STEP)
# its tile's rows: TileShape 128 x 128 x 128 (csrc scaled_mm_c3x cutlass_3x_gemm_fp8_blockwise,
# engines.yaml's fp8_gemm source); PR #5820's 'vllm' times double from M = 256 to 512 (module
# docstring), as 128-row tiles put 112 and 224 tiles on 132 SMs
CUTLASS_TILE_M = 128
# vLLM's moe_align_block_size of v0.7.1 to v0.9.1 (csrc/moe/moe_align_sum_kernels.cu, read
# in the PyPI sdists vllm-0.7.1 and vllm-0.9.1: the same kernel and dispatch; vLLM PR #12222,
# 2025-01-20, gave it uint16 counters in shared memory): ONE thread block of num_experts
# threads zeroes, counts and prefix-sums a (num_experts + 1) x num_experts table, so at 256
# experts it runs a fixed ~65 us whatever the tokens.  Measured on an H200 in
# sgl-project/sglang PR #4327 (2025-03-12, 'h200:', its 'VLLM' column, vLLM's
# ops.moe_align_block_size): 65.152, 65.184, 65.376 us at 16 tokens, 256 experts, top-k 2, 4,
# 8 (65.66-65.73 at 32 tokens and 66.1-71.4 at 512 in sgl-project/sglang PR #5086's table;
# 71.7-71.8 us at one token on a B200, the 'VLLM(origin)' column of vLLM PR #19572, which
# replaced it in June 2025); the mean of the H200 row.  vLLM 0.7.x's fused_experts calls it
# once a MoE layer and forward (fused_moe.py moe_align_block_size -> ops.moe_align_block_size,
# no other path at 256 experts until vLLM PR #12850, 2025-02-06, routed them to SGLang's
# kernel).  Above 65,535 routed ids (8,192 tokens at top 8) it falls back to a global-memory
# kernel (448.5 us at 8,192 tokens x 8 in PR #5086's table), not priced.
# One thread block: its time is set by one SM's clock and the expert count, not by memory, so
# the H200 rows hold on an H100 (the same GH100 SM).  No profile field names the GPU's
# architecture, so other profiles (A100, B200, ...) are charged the same time, extrapolated
# there (the B200 row above, 71.8 us at one token, is 10% over it; no A100 row was read).
# Priced as the align kernel's own time in moe_kernels' routing family (measured_align_s).
ONE_BLOCK_ALIGN_EXPERTS = 256
ONE_BLOCK_ALIGN_S = (65.152e-6 + 65.184e-6 + 65.376e-6) / 3
# SGLang 0.4.1's align (``global_mem_moe_align``): its fused_moe.py (0.4.1.post2 wheel) sends
# 256 experts to sgl-kernel's moe_align_block_size with the (E + 1) x E int32 count table in
# device memory (token_cnts_buffer), one block of E threads walking it (sgl-kernel's kernel
# before sgl-project/sglang PR #2735, 2025-01-05), the kernel vLLM's
# moe_align_block_size_global_mem_kernel was 'temporarily adapted from' (sglang 31548116).
# vLLM PR #12222 (2025-01-20) moved DeepSeek-V3 from it to the uint16 shared-memory kernel
# above: batch-1 generation 25.3 -> 29.6 token/s ('awq + triton-fused-moe-kernel + cuda-graph':
# a W4A16 DeepSeek-V3 on 8 x A100-80G, the author's PR #12036), the difference over the 58 MoE
# layers its excess, an A100's taken unscaled, added to that kernel's H200 time: 164 us
# (scaled by the SM clock, 1.41 -> 1.98 GHz for one block, 135 us).  Cross-checks
# (tests/simulator/cost/test_moe_align.py): vLLM PR #19572 timed the global kernel on a B200
# at 512 experts (uint16 does not fit), 317.8 us at one token, whose serial loops run E long:
# 158.9 us at 256, supporting the unscaled value; sglang PR #5086's 'VLLM' column at 8,192
# tokens x 8 (256 ids a thread where a decode has 1): 448.5 us, an upper bound
GLOBAL_ALIGN_TOKEN_S = (25.3, 29.6)  # PR #12222 generation token/s: global, then shared
GLOBAL_ALIGN_MOE_LAYERS = 58  # DeepSeek-V3's MoE layers (61 less 3 dense)
GLOBAL_MEM_ALIGN_S = ONE_BLOCK_ALIGN_S + (1.0 / GLOBAL_ALIGN_TOKEN_S[0] - 1.0
                                          / GLOBAL_ALIGN_TOKEN_S[1]) / GLOBAL_ALIGN_MOE_LAYERS
# linears the Triton FP8 engine does not run on its K-loop kernel, nor DeepGEMM at decode
# rows: kv_b's absorbed halves run as flashinfer's bmm_fp8 at decode (SGLang 0.4.1
# deepseek_v2.py forward_absorb; torch.bmm on BF16 halves in 0.5.x, engines.yaml sglang-v0.5)
NOT_TRITON = ("kv_b_proj",)


def k_step_s(cm) -> float | None:
    """The Triton K step's seconds where the engine runs its block-FP8 GEMMs on Triton, the
    model's linears are 8-bit and the profile measured the step; else None (no floor)."""
    spec, m = cm.execution.spec, cm.model
    if spec.fp8_gemm != "triton" or m.dtype != "fp8" or cm._roof.kernels is None:
        return None
    return cm.hardware.moe_fp8_triton_k_step_s


def grouped_k_step_s(cm) -> float | None:
    """The K step of the fused-MoE grouped GEMM: ``k_step_s``'s, or where the engine runs
    vLLM's own Triton fused_moe on block-FP8 experts reached by all-gather (``vllm_fused_moe``)
    the same step whatever its dense linears run on (DeepGEMM in vLLM 0.11): aiconfigurator's
    H200 table of that kernel at 1-16 tokens (tests/simulator/cost/fp8_moe_measured.py)."""
    spec, m = cm.execution.spec, cm.model
    if spec.vllm_fused_moe and cm.parallel.moe_dispatch == "all_gather" \
            and m.dtype == "fp8" and cm._roof.kernels is not None:
        return cm.hardware.moe_fp8_triton_k_step_s
    return k_step_s(cm)


def k_loop_floor(cm, tiles, k: float, step: float):
    """Seconds of a Triton GEMM of ``tiles`` output tiles (an array or a float) over a
    K dimension of ``k``: its waves of programs, each walking ``ceil(k / 128)`` steps."""
    _, _, latency, _ = cm._roof.kind_rates(GEMM)
    waves = np.ceil(np.asarray(tiles, dtype=np.float64) / cm._roof.kernels.sm_count)
    return np.where(waves > 0, latency + waves * np.ceil(k / K_STEP) * step, 0.0)


def deepgemm_floor(cm, tokens, n: float, k: float):
    """DeepGEMM's dense FP8 GEMM ``[tokens x k] @ [k x n]`` where its tiles fill the SMs
    (module docstring, "DeepGEMM"): its waves of 128-row tiles (64 up to 64 rows), each
    ``ceil(k / 128)`` K steps at ``DEEPGEMM_EFFICIENCY`` of an SM's FP8 peak plus
    ``DEEPGEMM_TILE_S``; 0 below one wave, where the roofline's price stands."""
    sms = cm._roof.kernels.sm_count
    t = np.asarray(tokens, dtype=np.float64)
    bm = np.where(t <= 64.0, 64.0, 128.0)
    tiles = np.ceil(t / bm) * np.ceil(n / TILE_N)
    step = 2.0 * bm * TILE_N * K_STEP / (cm._lin_roof.peak_flops_per_s * DEEPGEMM_EFFICIENCY
                                         / sms)
    per_tile = np.ceil(k / K_STEP) * step + DEEPGEMM_TILE_S
    return np.where(tiles >= sms, np.ceil(tiles / sms) * per_tile, 0.0)


def deepgemm_decode_floor(cm, tokens, n: float, k: float, wb: float):
    """DeepGEMM's dense FP8 GEMM ``[tokens x k] @ [k x n]`` at 1-32 rows (module docstring):
    one wave of ``min(SMs, ceil(n / 16))`` CTAs, each streaming its share of the ``wb``-byte
    weight at ``DEEPGEMM_SM_STREAM_BPS`` after the launch and a tile's fixed cost; 0 at no
    rows and past 32, where the roofline (or ``deepgemm_floor``) prices it."""
    sms = cm._roof.kernels.sm_count
    _, _, latency, _ = cm._roof.kind_rates(GEMM)
    ctas = min(sms, math.ceil(n / DEEPGEMM_MIN_BLOCK_N))
    t = latency + DEEPGEMM_TILE_S + n * k * wb / ctas / DEEPGEMM_SM_STREAM_BPS
    rows = np.asarray(tokens, dtype=np.float64)
    return np.where((rows > 0.0) & (rows <= DEEPGEMM_DECODE_ROWS), t, 0.0)


def dense_floor(cm, tokens, out_per_tok: float, in_per_tok: float, wb: float,
                name: str = ""):
    """The K-loop floor of one dense linear ``name`` at ``tokens`` rows (0 where none
    applies: a 16-bit linear such as the router, the absorbed MLA's ``bmm_fp8`` on cuBLASLt
    that the ``kv_b_proj`` term prices at decode, or no Triton FP8 engine); DeepGEMM's
    waves of tiles, or at 1-32 rows its one wave of narrow CTAs, where the engine runs its
    FP8 linears on DeepGEMM."""
    if cm.execution.spec.fp8_gemm == "deepgemm" and wb < cm._b and cm.model.dtype == "fp8" \
            and cm._roof.kernels is not None:
        floor = deepgemm_floor(cm, tokens, out_per_tok, in_per_tok)
        if name not in NOT_TRITON and cm.execution.spec.deepgemm_decode_floor:
            # kv_b's decode rows take the absorbed bmm's
            floor = np.maximum(floor, deepgemm_decode_floor(cm, tokens, out_per_tok,
                                                            in_per_tok, wb))
        floor = vllm_linear.with_floor(cm, floor, tokens, out_per_tok, in_per_tok,
                                       name in NOT_TRITON)
        return float(floor) if fast_ndim(tokens) == 0 else floor
    step = k_step_s(cm)
    if step is None or wb >= cm._b or name in NOT_TRITON:
        return 0.0 if fast_ndim(tokens) == 0 else np.zeros_like(tokens, dtype=np.float64)
    # BLOCK_M 64 (the default config of the kernel; tuned small-M configs use 16-64)
    tiles = np.ceil(np.asarray(tokens, dtype=np.float64) / 64.0) * np.ceil(
        out_per_tok / TILE_N)
    floor = k_loop_floor(cm, tiles, in_per_tok, step)
    return float(floor) if fast_ndim(tokens) == 0 else floor


def grouped_floor(cm, experts, rows, n: float, k: float, block_m: tuple[int, int]):
    """The K-loop floor of a fused-MoE grouped GEMM: ``experts`` touched on the busiest
    device, ``rows`` routed rows between them, each expert's rows in tiles of
    ``block_m[0]`` rows while they fit in one, else ``block_m[1]`` (moe_kernels' choice)."""
    small, large = block_m
    step = grouped_k_step_s(cm)
    experts = np.asarray(experts, dtype=np.float64)
    if step is None:
        return np.zeros_like(experts)
    m_e = np.asarray(rows, dtype=np.float64) / np.maximum(experts, 1e-12)
    bm = np.where(m_e <= small, small, large)
    tiles = experts * np.ceil(m_e / bm) * np.ceil(n / TILE_N)
    return np.where(np.asarray(rows) > 0, k_loop_floor(cm, tiles, k, step), 0.0)


def engine_kernels(cm, T) -> list[tuple[str, list[SmallKernel], int]]:
    """The engine's extra launches per layer (module docstring) as moe_kernels' families:
    ``(name, [SmallKernel(bytes, kind), ...], layers)``; none for a model without MLA or experts."""
    spec, m, b = cm.execution.spec, cm.model, cm._b
    out = []
    if m.is_mla and (spec.mla_pointwise_kernels or spec.mla_other_kernels):
        # one request's latent query (module docstring: decode-path launches)
        nb = np.minimum(T, 1.0) * m.num_heads / cm._tp * m.kv_lora_rank * b
        kern = [SmallKernel(nb, ELEMENTWISE)] * spec.mla_pointwise_kernels \
            + [SmallKernel(nb, OTHER)] * spec.mla_other_kernels
        out.append(("engine_mla_kernels", kern, m.num_layers))
    if m.is_moe and (spec.moe_pointwise_kernels or spec.moe_other_kernels):
        nb = T * m.num_experts * 4.0  # one token's fp32 expert scores
        kern = [SmallKernel(nb, ELEMENTWISE)] * spec.moe_pointwise_kernels \
            + [SmallKernel(nb, OTHER)] * spec.moe_other_kernels
        out.append(("engine_moe_gate", kern, m.moe_layers))
    return out


def mla_module_terms(cm, T) -> list[tuple[str, object, object, int, int]]:
    """vLLM's MLA decode module's measured GPU time a layer beyond the operators the model
    prices for it (``vllm_mla_module`` engines on a profile that measured it:
    ``moe.vllm_mla_decode_excess_us``, h200), as ``(name, bytes, GPU s, kernels, layers)``:
    a whole module timed under a CUDA graph, whose excess no kernel count names, so no
    launch of its own; priced whatever the step's tokens, as the decode-path kernels."""
    excess = cm.hardware.mla_vllm_decode_excess_s
    if not (cm.execution.spec.vllm_mla_module and cm.model.is_mla) or excess is None:
        return []
    return [("vllm_mla_module", 0.0, np.where(np.asarray(T) > 0, excess, 0.0), 0,
             cm.model.num_layers)]


def ep_kernels(cm, T, low_latency: bool, eplb: bool) -> list[SmallKernel]:
    """The engine's launches a MoE layer around DeepEP's low-latency dispatch and EPLB's
    expert map (module docstring), as SmallKernels at ``T`` tokens of the rank."""
    spec, m = cm.execution.spec, cm.model
    nb = T * m.experts_per_token * 12.0  # the top-k ids, 4 bytes in and 8 out
    kern = [SmallKernel(nb, ELEMENTWISE)] * (spec.deepep_pointwise_kernels if low_latency
                                             else 0)
    return kern + [SmallKernel(nb, OTHER)] * (spec.eplb_map_kernels if eplb else 0)


def split_qkv_a_terms(cm, T, quant_bytes) -> list[tuple[str, object, object, int, int]]:
    """An engine that runs ``q_a_proj`` and ``kv_a_proj_with_mqa`` as two linears (SGLang
    0.4.1: two ReplicatedLinear, each quantising the hidden states) where the generic model
    prices one fused GEMM: ``(name, bytes, GPU s, kernels, layers)`` of the difference, the
    two GEMMs (each at least its K loop) and the second quantisation (``quant_bytes``, the
    hidden states' at ``T`` tokens) less the fused GEMM."""
    m = cm.model
    if not (cm.execution.spec.split_qkv_a and m.is_mla and m.q_lora_rank) or not cm._shapes:
        return []
    h, r, a, wb = m.hidden_size, m.q_lora_rank, m.kv_lora_rank + m.qk_rope_head_dim, cm._wb

    def gemm(n):
        return np.maximum(cm._lin_roof.gemm_time(T, n, h), dense_floor(cm, T, n, h, wb))
    quant = cm._roof.transfer_time(quant_bytes, OTHER)
    gpu = np.maximum(gemm(r) + gemm(a) - gemm(r + a), 0.0) + quant
    return [("engine_split_qkv_a", quant_bytes, gpu, 2, m.num_layers)]


def measured_align_s(cm, s) -> float | None:
    """The experts' align's measured GPU seconds a MoE layer of MoeShape ``s`` at the 256
    routed experts it was measured at: SGLang 0.4.1's global-memory one-block kernel
    (``global_mem_moe_align``, ``GLOBAL_MEM_ALIGN_S``) or vLLM 0.7.x's shared-memory one
    (``one_block_moe_align``, ``ONE_BLOCK_ALIGN_S``); None elsewhere, the generic align
    priced at its bytes (moe_kernels)."""
    spec = cm.execution.spec
    if s.num_experts != ONE_BLOCK_ALIGN_EXPERTS:
        return None
    if spec.global_mem_moe_align:
        return GLOBAL_MEM_ALIGN_S
    return ONE_BLOCK_ALIGN_S if spec.one_block_moe_align else None


@dataclass(frozen=True)
class AbsorbedUvO:
    """The absorbed ``W_UV_O``'s K steps beyond ``o_proj``'s (module docstring, vLLM 0.7.x)
    over the model's layers, as a function of the step's decode rows."""

    wave_s: float          # one wave of tiles walking the extra K steps, all layers
    n_tiles: int           # 128-wide output tiles: N / 128
    sm_count: int
    bytes_per_layer: float  # the extra K rows of the weight, read once

    def waves(self, rows: float) -> int:
        """Waves of 128 x 128 tiles at ``rows`` decode rows (0 at none)."""
        return -(-math.ceil(rows / CUTLASS_TILE_M) * self.n_tiles // self.sm_count)

    def time_s(self, rows: float) -> float:
        """GPU seconds of the extra K steps over all layers at ``rows`` decode rows."""
        return self.waves(rows) * self.wave_s if rows > 0 else 0.0


def absorbed_uv_o(cm) -> AbsorbedUvO | None:
    """The engine's absorbed ``W_UV_O`` for ``cm``'s model; None for an engine without the
    absorption, a model without MLA or not in FP8 (the 16-bit path is ``torch.matmul``, not
    the blockwise kernel), or no kernel shapes."""
    m = cm.model
    if not (cm.execution.spec.absorbed_uv_o and m.is_mla and m.dtype == "fp8") \
            or cm._roof.kernels is None:
        return None
    hd = m.num_heads / cm._tp
    steps = math.ceil(hd * m.kv_lora_rank / K_STEP) - math.ceil(hd * m.value_head_dim / K_STEP)
    # no launch of its own: the GEMM replaces o_proj's
    return AbsorbedUvO(wave_s=steps * CUTLASS_K_STEP_S * m.num_layers,
                       n_tiles=math.ceil(m.hidden_size / TILE_N),
                       sm_count=cm._roof.kernels.sm_count,
                       bytes_per_layer=hd * (m.kv_lora_rank - m.value_head_dim)
                       * m.hidden_size * cm._wb)
