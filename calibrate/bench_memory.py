"""Memory-bandwidth micro-benchmarks: a streaming read (a sum) and a copy, over buffer sizes.

Bytes are counted as the cost model counts an elementwise operator: a read moves the buffer
once, a copy reads and writes it.  Buffers rotate so that small ones come from device memory,
not from a warm cache.
"""
from __future__ import annotations

import torch

from calibrate.bench_gemm import rotation
from calibrate.timing import Timing, measure

MEMORY_KINDS = ("read", "copy")


def memory_counts(kind: str, nbytes: int) -> float:
    """Bytes moved by one read or copy of a buffer of ``nbytes``."""
    return float(nbytes) * (2.0 if kind == "copy" else 1.0)


def memory_footprint(kind: str, nbytes: int, cache_bytes: float) -> float:
    """Bytes the benchmark allocates."""
    return nbytes * rotation(nbytes, cache_bytes) * (2 if kind == "copy" else 1)


def run_memory(kind: str, nbytes: int, *, device: torch.device, cache_bytes: float,
               warmup: int, reps: int) -> Timing:
    """Time one read (``sum``) or copy (``copy_``) of an fp32 buffer of ``nbytes``."""
    elems = max(1, nbytes // 4)
    copies = rotation(nbytes, cache_bytes)
    src = [torch.ones(elems, device=device) for _ in range(copies)]
    if kind == "read":
        return measure(lambda i: src[i % copies].sum(), device, warmup=warmup, reps=reps)
    dst = [torch.empty(elems, device=device) for _ in range(copies)]
    return measure(lambda i: dst[i % copies].copy_(src[i % copies]), device, warmup=warmup,
                   reps=reps)
