"""``mixed_step_time`` of one-token decodes and one prefill chunk, bound once per cost model.

Under chunked prefill about two iterations a request carry its prompt's chunk beside the
running decodes (vLLM's mixed batch; Vidur's workload: 24k of a 10k run's 135k
iterations).  ``step_models.mixed_time`` prices such a forward through about ten calls
(the mode, the tables, the chunk's attention, the replays, the host time), each reading the
cost model's numbers again.  ``one_chunk_pricer`` reads them once and returns the same
arithmetic as one function of ``(n, ctx_sum, chunk, chunk_ctx, logits)``: the same
operations in the same order, so the same float (tests/simulator/cost/test_mixed_chunk.py
holds it to ``mixed_step_time`` bit for bit on every profile and execution mode).
"""
from __future__ import annotations

from bisect import bisect_left

from simulator.cost.mla import DECODE_MAX_QUERY


def one_chunk_pricer(cm, line):
    """``sm.mixed_time(cm, line, n, ctx_sum, [chunk], [chunk_ctx], logits)`` as a function
    of those five numbers, for a ``CostModel`` itself (``cm._closed``) with the decode
    ``line`` (``sm.decode_line``), no MLA and no absorbed ``W_UV_O``; None elsewhere (the
    caller calls ``mixed_step_time``).  A chunk of fewer than 2 tokens, or no decode, goes to
    ``mixed_step_time`` itself."""
    if line is None or cm._mla is not None or cm._uv_o is not None or not cm._closed:
        return None
    slope, intercept, latency, floor = line
    ex, tables, layers = cm.execution, cm._tables, cm._layers
    sizes = tuple(ex.capture_sizes) if ex.cuda_graphs and ex.capture_sizes else ()
    last, graph_s, launch = len(sizes), ex.graph_launch_s, cm._launch_s * layers
    replays = layers * graph_s
    fixed_of = tables.fixed
    host, cpu_step, cpu_seq, overlap = cm.host, ex.cpu_step_s, ex.cpu_per_seq_s, \
        ex.async_scheduling
    attention = _chunk_attention(cm)

    def price(n: int, ctx_sum: float, c: int, x: int, logits: float) -> float | None:
        if c < 2 or n < 1:
            return cm.mixed_step_time(n, ctx_sum, [c], [x], logits)
        tokens = float(n + c)  # Execution.graph_tokens(tokens, False)
        i = bisect_left(sizes, tokens) if tokens > 0 else last
        if i == last:
            mode, padded = "eager", tokens
        else:
            mode, padded = "piecewise", float(sizes[i])
        fixed = fixed_of(tokens, logits, mode, padded)  # CostModel._fixed without W_UV_O
        decode = max(slope * ctx_sum + (float(n) * intercept + latency), floor)
        a_time = (decode + attention(c, x)) * layers  # CostModel._step_from
        a_time = max(a_time, launch)  # never "full": a chunk is not a uniform batch
        device = fixed + a_time
        if mode == "piecewise":  # CostModel._with_replays
            device = max(device, replays) + graph_s
        if not host:  # CostModel._host_time
            return device + 0.0
        h = cpu_step + cpu_seq * (n + 1)
        return device + (max(h - device, 0.0) if overlap else h)
    return price


def _chunk_attention(cm):
    """``sm._chunk_attention(cm, [c], [x])`` as a function of ``(c, x)`` (no MLA), ``c`` > 1."""
    pair, kvb, qb = cm._attn_flops_per_pair, cm._kv_bytes_per_token, cm._q_io_bytes_per_token
    roof = cm._roof
    if cm._shapes:
        crate, mrate, latency, floor = roof.kind_rates(cm._prefill_kind)
        causal, overhead = cm._prefill_causal, cm._prefill_overhead

        def shaped(c: int, x: int) -> float:
            # prefill_width(cm, c)
            w = (0.5 * (c + 1.0) + (0.0 if c <= DECODE_MAX_QUERY else overhead)) if causal \
                else float(c)
            total = 0.0 + max(pair * c * (x + w) / crate, (float(x + c) * kvb + c * qb) / mrate)
            return max(total + latency, floor)
        return shaped
    inv_c, inv_m = roof.inverse_compute_rate, roof.inverse_memory_rate
    return lambda c, x: 0.0 + max(pair * c * (x + 0.5 * (c + 1.0)) * inv_c,
                                  ((x + c) * kvb + c * qb) * inv_m)
