"""Attention micro-benchmark: decode (1 query token) and verification (several per request).

The call is the model's own: ``scaled_dot_product_attention`` of the new tokens' queries
against a KV cache of ``context + query_tokens`` positions, with the prefix-plus-causal mask
of :func:`calibrate.model_torch.step_mask`.  FLOPs and bytes are counted per request, as the
cost model prices attention (each request reads its own KV once).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from calibrate.bench_gemm import rotation
from calibrate.model_torch import step_mask
from calibrate.timing import Timing, measure


def attention_counts(heads: int, kv_heads: int, head_dim: int, context: int,
                     query_tokens: int, dtype_bytes: int) -> tuple[float, float]:
    """(FLOPs, bytes) of one request's attention in one layer, as the cost model counts them."""
    q_size, kv_size = heads * head_dim, kv_heads * head_dim
    flops = 4.0 * q_size * query_tokens * (context + 0.5 * (query_tokens + 1))
    nbytes = (context + query_tokens) * 2.0 * kv_size * dtype_bytes \
        + query_tokens * 2.0 * q_size * dtype_bytes
    return flops, nbytes


def attention_footprint(batch: int, heads: int, kv_heads: int, head_dim: int, context: int,
                        query_tokens: int, dtype_bytes: int, cache_bytes: float) -> float:
    """Bytes the benchmark allocates."""
    kv = 2.0 * batch * kv_heads * (context + query_tokens) * head_dim * dtype_bytes
    scores = 2.0 * batch * heads * query_tokens * (context + query_tokens) * dtype_bytes
    return kv * rotation(kv, cache_bytes) + scores


def run_attention(batch: int, heads: int, kv_heads: int, head_dim: int, context: int,
                  query_tokens: int, *, dtype: torch.dtype, device: torch.device,
                  cache_bytes: float, gen: torch.Generator, warmup: int, reps: int) -> Timing:
    """Time one attention call over a cold KV cache."""
    length = context + query_tokens
    kv_bytes = 2 * batch * kv_heads * length * head_dim * torch.finfo(dtype).bits // 8
    copies = rotation(kv_bytes, cache_bytes)

    def rand(*shape):
        return torch.empty(*shape, device=device, dtype=dtype).uniform_(-1, 1, generator=gen)

    ks = [rand(batch, kv_heads, length, head_dim) for _ in range(copies)]
    vs = [rand(batch, kv_heads, length, head_dim) for _ in range(copies)]
    q = rand(batch, heads, query_tokens, head_dim)
    mask = step_mask(query_tokens, context, None, device)
    extra = {"enable_gqa": True} if heads != kv_heads else {}
    return measure(lambda i: F.scaled_dot_product_attention(q, ks[i % copies], vs[i % copies],
                                                            attn_mask=mask, **extra),
                   device, warmup=warmup, reps=reps)
