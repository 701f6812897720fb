"""Dense GEMM micro-benchmark: ``F.linear(x[m, k], W[n, k])``, the call every linear layer makes.

FLOPs and bytes are counted as the cost model counts a linear layer: ``2 m n k`` FLOPs, the
weight once plus the activations in and out.  The weight rotates through enough copies to
overflow the last-level cache, because in a real forward every layer streams its own
weights from device memory.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from calibrate.timing import Timing, measure


def gemm_counts(m: int, n: int, k: int, dtype_bytes: int) -> tuple[float, float]:
    """(FLOPs, bytes) of one ``[m, k] x [k, n]`` product, as the cost model counts them."""
    return 2.0 * m * n * k, float(n * k + m * (k + n)) * dtype_bytes


def rotation(operand_bytes: float, cache_bytes: float, *, limit: int = 64) -> int:
    """Operand copies needed so that cycling through them overflows a cache twice."""
    return max(1, min(limit, math.ceil(2.0 * cache_bytes / max(operand_bytes, 1.0))))


def gemm_footprint(m: int, n: int, k: int, dtype_bytes: int, cache_bytes: float) -> float:
    """Bytes the benchmark allocates."""
    w = n * k * dtype_bytes
    return w * rotation(w, cache_bytes) + (m * k + m * n) * dtype_bytes


def run_gemm(m: int, n: int, k: int, *, dtype: torch.dtype, device: torch.device,
             cache_bytes: float, gen: torch.Generator, warmup: int, reps: int) -> Timing:
    """Time ``F.linear`` of an [m, k] activation by a cold [n, k] weight."""
    copies = rotation(n * k * torch.finfo(dtype).bits // 8, cache_bytes)
    weights = [torch.empty(n, k, device=device, dtype=dtype).uniform_(-0.05, 0.05,
                                                                      generator=gen)
               for _ in range(copies)]
    x = torch.empty(m, k, device=device, dtype=dtype).uniform_(-1.0, 1.0, generator=gen)
    return measure(lambda i: F.linear(x, weights[i % copies]), device, warmup=warmup,
                   reps=reps)
