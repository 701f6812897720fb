"""Step models beside the per-operator sum: a micro-batched pipeline, the lecture's single
roofline, the closed form of a uniform batch, and a decode batch carrying prefill chunks.

``CostModel.breakdown`` hands a step to ``pipelined_step`` when ``pipeline_parallel > 1`` with
several micro-batches: each micro-batch is priced by the cost model's own operators, the
makespan is the sum of one stage's work over the micro-batches plus (pp - 1) times the
slowest micro-batch's stage time, and the stage-to-stage sends are added.  With
``step_model: single_roofline`` it folds the operators into ``single_roofline``'s one max.

A uniform batch (n requests of u new tokens each: decode, chain verification) whose attention
stays under one roof at every context has a step time that depends on (n, u, S) alone, S the
sum of the contexts: ``uniform_step`` gathers what does not depend on S, ``uniform_time``
finishes the sum for one S or a vector of them with the same IEEE operations.  A batch of
one-token decodes that also carries prefill chunks (about two steps a request under chunked
prefill) prices its decodes by the same line and its few chunks one by one (``mixed_time``):
no per-request arrays for the decodes; so does a chain's step of gamma + 1 token
verifications with chunks (``mixed_verify_time``: one multi-query kernel for all of them).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hardware.kernels import ATTENTION_DECODE
from simulator.cost.mla import DECODE_MAX_QUERY
from simulator.cost.execution import KERNELS_OUTSIDE_GRAPH
from simulator.cost.op_cost import OpCost, StepCost
from simulator.cost.stream import StreamParts

COLLECTIVE_OPS = ("all_reduce", "logits_gather")
# Equal query lengths up to this count are a "uniform decode" batch (vLLM's full-graph
# case: 1 + num_speculative_tokens per request); longer ones are prefill chunks.
UNIFORM_MAX_QUERY = 128


def pipelined_step(cm, new, ctx, logits) -> StepCost:
    """The StepCost of ``cm`` (a CostModel) over micro-batches of the step (``new``,
    ``ctx``: tokens and context per request; ``logits``: tokens through the LM head)."""
    pp, mb = cm.parallel.pipeline_parallel, cm.parallel.micro_batches
    per_stage_layers = cm._layers / pp
    groups = [g for g in np.array_split(np.arange(new.size), min(mb, new.size)) if g.size]
    total_tokens = float(new.sum()) or 1.0
    stage_times, all_ops, replay = [], [], 0.0
    for g in groups:
        share = float(new[g].sum()) / total_tokens
        ops, mode = cm._layer_ops(new[g], ctx[g], logits * share, cm._layers, True)
        all_ops.append(ops)
        replay += cm._with_replays(mode, 0.0)
        stage_times.append(sum(op.time_s for op in ops) * per_stage_layers / cm._layers)
    merged = [OpCost(name=ops0.name,
                     flops=sum(o[i].flops for o in all_ops),
                     hbm_bytes=sum(o[i].hbm_bytes for o in all_ops),
                     host_bytes=sum(o[i].host_bytes for o in all_ops),
                     compute_s=sum(o[i].compute_s for o in all_ops),
                     memory_s=sum(o[i].memory_s for o in all_ops),
                     host_s=sum(o[i].host_s for o in all_ops),
                     overhead_s=sum(o[i].overhead_s for o in all_ops),
                     roofline_s=None if ops0.roofline_s is None
                     else sum(o[i].roofline_s for o in all_ops))
              for i, ops0 in enumerate(all_ops[0])]
    busy = sum(op.time_s for op in merged)
    # Work is spread over pp stages; the makespan is sum of one stage's work over the
    # micro-batches plus (pp - 1) times the slowest micro-batch's stage time.
    makespan = sum(stage_times) + (pp - 1) * max(stage_times)
    transfer = cm._pipeline_transfer(total_tokens / len(groups), pp) * len(groups)
    pipe = makespan - busy + transfer
    device = makespan + transfer + replay
    cpu = cm._host_time(int(np.count_nonzero(new)), device)
    return StepCost(tuple(merged), cpu, pipe, device + cpu, launch_s=replay,
                    mode="pipelined")


def single_roofline(cm, ops: list[OpCost], mode: str) -> list[OpCost]:
    """The lecture's step model: one roofline over the whole step's FLOPs and bytes,
    ``max(F / (peak * eta_c), B / (bandwidth * eta_m))`` at the flat efficiencies, with
    elementwise traffic fused away (as vLLM's fused kernels do).  Eager launches are a
    third roof over the whole step; the collectives are added as they are."""
    # collectives have no FLOPs or HBM bytes of their own: they stay separate operators
    collectives = [op for op in ops if op.name in COLLECTIVE_OPS]
    kept = [op for op in ops if op.name != "elementwise" and op.name not in COLLECTIVE_OPS]
    flops = sum(op.flops for op in kept)
    nbytes = sum(op.hbm_bytes for op in kept)
    kernels = {"full": KERNELS_OUTSIDE_GRAPH,
               "piecewise": cm._layers + KERNELS_OUTSIDE_GRAPH}.get(mode, cm._kernels)
    roof = max(flops * cm._inv_crate, nbytes * cm._inv_mrate,
               sum(op.host_s for op in kept))
    return [OpCost("step", flops, nbytes, sum(op.host_bytes for op in kept),
                   flops * cm._inv_crate, nbytes * cm._inv_mrate,
                   sum(op.host_s for op in kept),
                   max(kernels * cm._launch_s - roof, 0.0))] + collectives


@dataclass(frozen=True, slots=True)
class UniformStep:
    """What a uniform forward's time is made of, apart from the context sum S."""

    slope_s: float          # one layer's attention seconds per context token (all requests)
    base_s: float           # one layer's attention seconds at S = 0, kernel latency included
    floor_s: float          # the attention kernel's floor (0 without kernel shapes)
    layers: int
    launch_s: float | None  # the attention's eager launches over the layers; None: full graph
    fixed_s: float          # everything but attention and host time (CostModel._fixed)
    mode: str               # full, piecewise, eager
    replay_s: float         # one graph replay
    replays_s: float        # one replay per layer (piecewise graphs)
    host_s: float | None    # the engine step's host CPU time; None: no host step of its own
    overlap: bool           # async scheduling: the host time hides behind the device time
    # every forward eager: the stream apart from its attention (eager_stream.py), whose end
    # is the device time; None: ``fixed_s`` plus attention at least its launches
    stream: StreamParts | None = None


def uniform_step(cm, n: int, u: float, logits: float) -> UniformStep | None:
    """The S-free parts of ``cm``'s forward of ``n`` requests with ``u`` new tokens each and
    ``logits`` tokens through the LM head; None where no closed form applies: a micro-batched
    pipeline, the single roofline, ``u`` not a whole number >= 1, curved efficiencies, or an
    attention whose roof can switch with the context (``Roofline.attention_line``)."""
    if (cm.parallel.pipeline_parallel > 1 and cm.parallel.micro_batches > 1) \
            or cm.execution.step_model != "sum_of_operators" or n < 1 or u < 1 \
            or not float(u).is_integer():
        return None
    pair, kv, q_io, up = cm._attention_coefficients(u)
    # per request at context x: FLOPs pair*u*(x + w) + up*x (the kernel's u*(x+u) pairs with
    # shapes, the causal u*(x + (u+1)/2) without; up: MLA's expanded form), bytes
    # (x + u)*kv + u*q_io, as CostModel._attention_work
    width = prefill_width(cm, u)
    line = cm._roof.attention_line(ATTENTION_DECODE if u == 1 else cm._prefill_kind,
                                   pair * u + up, pair * u * width, kv, u * kv + u * q_io)
    if line is None:
        return None
    slope, intercept, latency, floor = line
    tokens = float(n) * u
    mode, padded = cm.execution.graph_tokens(tokens, u <= UNIFORM_MAX_QUERY)
    graph_s = cm.execution.graph_launch_s
    fixed = cm._fixed(tokens, float(logits), mode, padded, cm._uniform_decode_rows(n, u))
    stream = None if cm._stream is None else fixed  # an eager stream's parts
    return UniformStep(slope_s=slope,
                       base_s=float(n) * intercept + latency, floor_s=floor,
                       layers=cm._layers,
                       launch_s=None if mode == "full" else cm._launch_s * cm._layers,
                       fixed_s=0.0 if stream is not None else fixed, mode=mode,
                       replay_s=graph_s, replays_s=cm._layers * graph_s,
                       host_s=cm.execution.host_s(n) if cm.host else None,
                       overlap=cm.execution.async_scheduling, stream=stream)


def uniform_time(k: UniformStep, ctx_sum, maximum):
    """The step time at context sum ``ctx_sum``: a float with ``maximum=max``, an array with
    ``np.maximum`` and an array of sums, the same operations in the same order either way
    (CostModel.step_time's: attention, launches, replays, host time)."""
    if k.stream is not None:
        device = k.stream.device_s(maximum(k.slope_s * ctx_sum + k.base_s, k.floor_s), maximum)
        return _with_host(k, device, maximum)
    attention = maximum(k.slope_s * ctx_sum + k.base_s, k.floor_s) * k.layers
    if k.launch_s is not None:
        attention = maximum(attention, k.launch_s)
    device = k.fixed_s + attention
    if k.mode == "full":
        device = device + k.replay_s
    elif k.mode == "piecewise":
        device = maximum(device, k.replays_s) + k.replay_s
    return _with_host(k, device, maximum)


def _with_host(k: UniformStep, device, maximum):
    """``device`` with the host time the step shows (``uniform_time``'s tail)."""
    if k.host_s is None:
        return device
    if k.overlap:
        return device + maximum(k.host_s - device, 0.0)
    return device + k.host_s


def chain_decode(cm, ctx: np.ndarray, steps: int) -> float:
    """``CostModel.chain_decode_time``: the uniform closed form over the steps' context sums,
    else every request's attention at every step in one array (a flat roofline whose roof
    may switch with the context), else one ``step_time`` per step."""
    n = ctx.size
    if steps <= 0 or n == 0:
        return 0.0
    times = cm.uniform_step_times(n, 1, float(ctx.sum()) + n * np.arange(steps), n)
    if times is not None:
        return float(times.sum())
    if cm._general_only or cm._roof.curved or cm._shapes or cm._stream is not None or \
            (cm.host and cm.execution.async_scheduling):
        ones = np.ones(n)
        return sum(cm.step_time(ones, ctx + j) for j in range(steps))
    mode, padded = cm._mode(np.ones(n), float(n))
    fixed = cm._fixed(float(n), float(n), mode, padded, cm._uniform_decode_rows(n, 1.0))
    # per request and step j: flops ~ (ctx + j + 1), bytes ~ (ctx + j + 1) kv + q io
    grid = ctx[None, :] + np.arange(1.0, steps + 1.0)[:, None]
    a_time = np.maximum(grid * (cm._attn_flops_per_pair * cm._inv_crate),
                        grid * (cm._kv_bytes_per_token * cm._inv_mrate)
                        + cm._q_io_bytes_per_token * cm._inv_mrate)
    per_step = a_time.sum(axis=1) * cm._layers
    if mode != "full":
        per_step = np.maximum(per_step, cm._launch_s * cm._layers)
    host = cm._host_time(n, 0.0) if cm.host else 0.0
    replay = cm._with_replays(mode, 0.0)  # a uniform forward: full graph or eager
    return steps * (fixed + host + replay) + float(per_step.sum())


def decode_line(cm, u: float = 1.0) -> tuple[float, float, float, float] | None:
    """One request's attention in one layer at ``u`` new tokens (1: a decode; gamma + 1: a
    chain's verification) as a line in its context ``x``: ``(slope, intercept, latency,
    floor)`` (``Roofline.attention_line``), the line ``uniform_step`` uses; None where the
    roof can switch or the efficiencies curve."""
    if (cm.parallel.pipeline_parallel > 1 and cm.parallel.micro_batches > 1) \
            or cm.execution.step_model != "sum_of_operators":
        return None
    pair, kv, q_io, up = cm._attention_coefficients(u)
    if u == 1:  # the kernel's 1 x (x + 1) pairs with shapes, the causal 1 x (x + 1) without
        return cm._roof.attention_line(ATTENTION_DECODE, pair + up, pair, kv, kv + q_io)
    width = prefill_width(cm, u)  # as uniform_step
    return cm._roof.attention_line(cm._prefill_kind, pair * u + up, pair * u * width, kv,
                                   u * kv + u * q_io)


def mixed_time(cm, line: tuple[float, float, float, float], n: int, ctx_sum: float,
               chunks: list[int], chunk_ctx: list[int], logits: float) -> float | None:
    """A forward of ``n >= 1`` one-token decodes whose contexts sum to ``ctx_sum`` and of
    prefill chunks (``chunks[i]`` new tokens over ``chunk_ctx[i]`` cached ones, at least one
    chunk longer than one token), ``logits`` tokens through the LM head: ``step_time``'s sum
    with the decodes' attention kernel by ``line`` (``decode_line``), as a pure decode batch
    prices it (``uniform_time``), and each chunk's by request, as ``step_time`` does.  A
    1-token chunk is a decode to attention (one query over its cache).  None when every
    chunk has one token (a uniform batch: ``step_time``'s closed form)."""
    slope, intercept, latency, floor = line
    long_c, long_x = [], []
    for c, x in zip(chunks, chunk_ctx):
        if c == 1:
            n, ctx_sum = n + 1, ctx_sum + x
        else:
            long_c.append(c)
            long_x.append(x)
    if not long_c:
        return None
    active = n + len(long_c)
    tokens = float(n + sum(long_c))
    mode, padded = cm.execution.graph_tokens(tokens, False)
    rows = float(n) + cm._decode_rows(long_c) if cm._uv_o is not None else 0.0
    fixed = cm._fixed(tokens, logits, mode, padded, rows)
    decode = max(slope * ctx_sum + (float(n) * intercept + latency), floor)
    return cm._step_from(mode, fixed, decode + _chunk_attention(cm, long_c, long_x), active)


def mixed_verify_time(cm, n: int, u: int, ctx_sum: float, chunks: list[int],
                      chunk_ctx: list[int], logits: float) -> float | None:
    """``mixed_time`` for ``n >= 1`` verifications of ``u > 1`` tokens each (a chain's decodes)
    beside prefill chunks of at least 2 tokens, not all of ``u``: with kernel shapes every
    request is in one multi-query kernel, the verifications' part by ``decode_line`` at
    ``u`` (memoised in ``cm._verify_lines``: ``n`` intercepts, the slope times their context
    sum), each chunk's as ``step_time`` prices it, one latency and floor for the kernel;
    without, the per-request sum.  ``n == 0``: the chunks alone (a draft model's prefill;
    ``u`` unused), ``_chunk_attention``.  None where no line applies (the multi-query
    kernel's, at ``u`` or 2), for MLA, a 1-token chunk (a kernel of its own) or a uniform
    batch (``step_time``'s closed form)."""
    uniform = u if n else chunks[0]  # the length every request would share
    u = u if n else 2  # the chunks alone: the multi-query kernel's line says if it applies
    if cm._mla is not None or min(chunks) < 2 or all(c == uniform for c in chunks):
        return None
    line = cm._verify_lines.get(u, cm)
    if line is cm:
        line = cm._verify_lines[u] = decode_line(cm, float(u))
    if line is None:
        return None
    if not n:
        tokens = float(sum(chunks))
        mode, padded = cm.execution.graph_tokens(tokens, False)
        # decode rows 0.0: MLA (the absorbed path's) returned None above
        fixed = cm._fixed(tokens, logits, mode, padded, 0.0)
        return cm._step_from(mode, fixed, _chunk_attention(cm, chunks, chunk_ctx), len(chunks))
    slope, intercept, latency, floor = line
    total = slope * ctx_sum + float(n) * intercept
    pair, kvb, qb = cm._attn_flops_per_pair, cm._kv_bytes_per_token, cm._q_io_bytes_per_token
    roof = cm._roof
    if cm._shapes:
        crate, mrate, _, _ = roof.kind_rates(cm._prefill_kind)
        for c, x in zip(chunks, chunk_ctx):
            kv = float(x + c)
            total += max(pair * c * (x + prefill_width(cm, c)) / crate,
                         (kv * kvb + c * qb) / mrate)
        total = max(total + latency, floor)
    else:
        inv_c, inv_m = roof.inverse_compute_rate, roof.inverse_memory_rate
        for c, x in zip(chunks, chunk_ctx):
            total += max(pair * c * (x + 0.5 * (c + 1.0)) * inv_c,
                         ((x + c) * kvb + c * qb) * inv_m)
    tokens = float(n * u + sum(chunks))
    mode, padded = cm.execution.graph_tokens(tokens, False)
    fixed = cm._fixed(tokens, logits, mode, padded, 0.0)  # not MLA (above)
    return cm._step_from(mode, fixed, total, n + len(chunks))


def attention_work(cm, new: np.ndarray, ctx: np.ndarray, causal: bool,
                    overhead: float = 0.0):
    """One layer's attention (FLOPs, bytes) per request: ``causal`` the new tokens'
    causal half on average, else the kernel's new x (context + new) pairs, plus
    ``overhead`` keys per query of a prefill chunk (causal only: FA3's; a full query tile's
    fixed cost spread over its rows, so not charged to requests of up to DECODE_MAX_QUERY
    tokens, verification, whose few rows read the KV memory-bound); MLA's two forms by
    request (simulator/cost/mla.py)."""
    if cm._mla is not None:
        return cm._mla.arrays(new, ctx, causal, overhead)
    if causal:
        w = 0.5 * (new + 1.0) + (np.where(new > DECODE_MAX_QUERY, overhead, 0.0)
                                 if overhead else 0.0)
        return (cm._attn_flops_per_pair * new * (ctx + w),
                (ctx + new) * cm._kv_bytes_per_token + new * cm._q_io_bytes_per_token)
    kv = ctx + new
    return (cm._attn_flops_per_pair * new * kv,
            kv * cm._kv_bytes_per_token + new * cm._q_io_bytes_per_token)


def prefill_width(cm, u: float) -> float:
    """``w`` of a request of ``u`` > 1 new tokens whose attention does ``u * (x + w)``
    query-key pairs' work at context ``x``: the kernel's ``u`` (FA2-class kind with shapes),
    the causal ``(u + 1) / 2`` (flat rates), plus FA3's per-query overhead (CostModel's
    ``attention_work``: none up to DECODE_MAX_QUERY tokens)."""
    if not cm._prefill_causal:
        return float(u)
    return 0.5 * (u + 1.0) + (0.0 if u <= DECODE_MAX_QUERY else cm._prefill_overhead)


def _chunk_attention(cm, chunks: list[int], chunk_ctx: list[int]) -> float:
    """One layer's attention seconds of the prefill chunks (each > 1 token): with kernel
    shapes one multi-query kernel over ``new x (context + new)`` pairs, else each chunk's
    causal half at the flat rates (``CostModel._attention_s``'s two cases, written out for
    a few Python numbers: 2 us against its 27 us on one-element arrays; the tests hold the
    two within 1e-12)."""
    roof = cm._roof
    if cm._mla is not None:  # MLA's expanded form by request: the array formulas
        new, ctx = np.asarray(chunks, np.float64), np.asarray(chunk_ctx, np.float64)
        flops, nbytes = cm._attention_work(new, ctx, cm._prefill_causal, cm._prefill_overhead)
        if cm._shapes:
            return roof.attention_time(flops, nbytes, new, cm._prefill_kind)
        return float(roof.time(flops, nbytes).sum())
    pair, kvb, qb = cm._attn_flops_per_pair, cm._kv_bytes_per_token, cm._q_io_bytes_per_token
    total = 0.0
    if cm._shapes:
        crate, mrate, latency, floor = roof.kind_rates(cm._prefill_kind)
        for c, x in zip(chunks, chunk_ctx):
            kv = float(x + c)
            total += max(pair * c * (x + prefill_width(cm, c)) / crate,
                         (kv * kvb + c * qb) / mrate)
        return max(total + latency, floor)
    inv_c, inv_m = roof.inverse_compute_rate, roof.inverse_memory_rate
    for c, x in zip(chunks, chunk_ctx):
        total += max(pair * c * (x + 0.5 * (c + 1.0)) * inv_c,
                     ((x + c) * kvb + c * qb) * inv_m)
    return total
