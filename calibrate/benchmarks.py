"""The calibration suite: which micro-benchmarks to run on a device, and running them.

A :class:`Plan` lists the grids (GEMM shapes and dtypes, buffer sizes, attention shapes,
tiny-model layer counts); :func:`make_plan` gives the full or ``quick`` plan for a CPU or a
GPU; :func:`run_suite` runs it and returns one record per measurement.  A case that would
not fit in the device's free memory (or that runs out of memory) is skipped with a note,
never a crash.  Every record carries FLOPs and bytes counted as the cost model counts them,
so that :mod:`calibrate.fit` can fit the cost model's own formulas to the measurements.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch

from calibrate import bench_attention, bench_gemm, bench_memory, bench_overhead
from calibrate.model_torch import torch_dtype
from calibrate.timing import ProgressFn, free_memory_bytes, last_level_cache_bytes, resolve_device
from hardware.profile import DTYPE_BYTES
from simulator.inputs.errors import SpecsimError

COLUMNS = ("kind", "dtype", "m", "n", "k", "batch", "heads", "kv_heads", "head_dim",
           "context", "query_tokens", "arch", "layers", "vocab", "flops", "bytes", "count",
           "median_s", "min_s", "reps", "status", "note")
KINDS = ("gemm", "read", "copy", "attention", "launch", "tiny_forward", "sampling")



@dataclass(frozen=True)
class Plan:
    """What to measure on one device; ``dtype`` is the one the efficiency curves are fitted for."""

    device: str
    dtype: str
    gemm_m: tuple[int, ...]
    gemm_kn: tuple[tuple[int, int], ...]
    extra_dtypes: tuple[str, ...] = ()
    extra_gemms: tuple[tuple[int, int, int], ...] = ()   # (m, k, n) for the extra dtypes
    memory_bytes: tuple[int, ...] = ()
    attention_batches: tuple[int, ...] = ()
    attention_contexts: tuple[int, ...] = ()
    attention_query_tokens: tuple[int, ...] = ()
    attention_heads: tuple[tuple[int, int, int], ...] = ((16, 16, 64),)  # heads, kv, dim
    tiny_layers: tuple[int, ...] = (1, 4, 8)
    sampling_vocab: tuple[int, ...] = (512, 32000)
    warmup: int = 2
    reps: int = 5
    overhead_reps: int = 30
    memory_limit_bytes: float | None = None  # None: what the device has free, less a margin


def make_plan(device: str, *, quick: bool = False, dtype: str | None = None,
              reps: int | None = None, memory_limit_bytes: float | None = None) -> Plan:
    """The full (a few minutes) or quick (under a minute) plan for ``cpu`` or ``cuda``."""
    resolve_device(device)
    gpu = device == "cuda"
    dtype = dtype or ("fp16" if gpu else "fp32")
    torch_dtype(dtype)
    if gpu:
        plan = Plan(
            device=device, dtype=dtype,
            gemm_m=(1, 4, 16, 64, 256, 1024, 4096) if quick else
            (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
            gemm_kn=((4096, 4096), (4096, 14336), (14336, 4096), (8192, 32000)) if quick else
            ((2048, 2048), (4096, 4096), (4096, 12288), (4096, 14336), (14336, 4096),
             (8192, 8192), (8192, 28672), (28672, 8192), (4096, 32000), (8192, 128256)),
            extra_dtypes=tuple(d for d in ("bf16", "fp16", "fp32") if d != dtype),
            extra_gemms=((4096, 8192, 8192), (1, 8192, 8192)) if quick else
            ((4096, 8192, 8192), (1024, 8192, 8192), (64, 8192, 8192), (1, 8192, 8192)),
            memory_bytes=tuple(2 ** e for e in (range(16, 33, 4) if quick else range(14, 33))),
            attention_batches=(1, 16) if quick else (1, 4, 16, 64),
            attention_contexts=(512, 8192) if quick else (256, 1024, 4096, 16384),
            attention_query_tokens=(1, 5) if quick else (1, 3, 5, 9, 17),
            attention_heads=((32, 8, 128),) if quick else ((32, 8, 128), (32, 32, 128)),
            tiny_layers=(1, 4, 8) if quick else (1, 2, 4, 8, 16),
            sampling_vocab=(32000, 128256),
            warmup=5, reps=10 if quick else 20, overhead_reps=50,
            memory_limit_bytes=memory_limit_bytes)
    else:
        plan = Plan(
            device=device, dtype=dtype,
            gemm_m=(1, 4, 16, 64, 256) if quick else (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            gemm_kn=((512, 2048), (2048, 512), (1024, 1024), (1024, 32768)) if quick else
            ((512, 512), (1024, 1024), (1024, 4096), (4096, 1024), (2048, 2048),
             (2048, 8192), (8192, 2048), (1024, 32768)),
            extra_dtypes=tuple(d for d in ("bf16", "fp32") if d != dtype),
            extra_gemms=((256, 1024, 1024),) if quick else
            ((512, 2048, 2048), (64, 2048, 2048), (1, 2048, 2048)),
            memory_bytes=tuple(2 ** e for e in (range(16, 29, 2) if quick else range(14, 31))),
            attention_batches=(1, 8) if quick else (1, 4, 16),
            attention_contexts=(256, 2048) if quick else (128, 512, 2048, 8192),
            attention_query_tokens=(1, 5) if quick else (1, 3, 5, 9),
            tiny_layers=(1, 4, 8) if quick else (1, 2, 4, 8, 16),
            warmup=2 if quick else 3, reps=5 if quick else 9, overhead_reps=30,
            memory_limit_bytes=memory_limit_bytes)
    return replace(plan, reps=reps) if reps is not None else plan


def _record(kind: str, **values) -> dict:
    rec = {c: np.nan for c in COLUMNS}
    rec.update(kind=kind, dtype="", arch="", status="ok", note="", count=1.0)
    rec.update(values)
    return rec


def _cases(plan: Plan, dev: torch.device, rng: np.random.Generator, cache: float):
    """(label, footprint bytes, record fields, timing thunk) for every measurement."""
    gen = torch.Generator(device=dev)
    gen.manual_seed(int(rng.integers(0, 2**62)))
    w, r = plan.warmup, plan.reps
    out = []
    gemms = [(plan.dtype, m, k, n) for k, n in plan.gemm_kn for m in plan.gemm_m]
    gemms += [(dt, m, k, n) for dt in plan.extra_dtypes for m, k, n in plan.extra_gemms]
    for dt, m, k, n in gemms:
        b = DTYPE_BYTES[dt]
        flops, nbytes = bench_gemm.gemm_counts(m, n, k, b)
        out.append((f"gemm {dt} {m}x{k}x{n}", bench_gemm.gemm_footprint(m, n, k, b, cache),
                    dict(kind="gemm", dtype=dt, m=m, n=n, k=k, flops=flops, bytes=nbytes),
                    lambda dt=dt, m=m, k=k, n=n: bench_gemm.run_gemm(
                        m, n, k, dtype=torch_dtype(dt), device=dev, cache_bytes=cache,
                        gen=gen, warmup=w, reps=r)))
    for kind in bench_memory.MEMORY_KINDS:
        for size in plan.memory_bytes:
            out.append((f"{kind} {size} B", bench_memory.memory_footprint(kind, size, cache),
                        dict(kind=kind, dtype="fp32", flops=0.0,
                             bytes=bench_memory.memory_counts(kind, size)),
                        lambda kind=kind, size=size: bench_memory.run_memory(
                            kind, size, device=dev, cache_bytes=cache, warmup=w, reps=r)))
    b = DTYPE_BYTES[plan.dtype]
    for heads, kvh, hd in plan.attention_heads:
        for batch in plan.attention_batches:
            for ctx in plan.attention_contexts:
                for qt in plan.attention_query_tokens:
                    flops, nbytes = bench_attention.attention_counts(heads, kvh, hd, ctx, qt, b)
                    out.append((
                        f"attention b{batch} ctx{ctx} q{qt} h{heads}/{kvh}",
                        bench_attention.attention_footprint(batch, heads, kvh, hd, ctx, qt, b,
                                                            cache),
                        dict(kind="attention", dtype=plan.dtype, batch=batch, heads=heads,
                             kv_heads=kvh, head_dim=hd, context=ctx, query_tokens=qt,
                             flops=flops, bytes=nbytes, count=float(batch)),
                        lambda heads=heads, kvh=kvh, hd=hd, batch=batch, ctx=ctx, qt=qt:
                        bench_attention.run_attention(
                            batch, heads, kvh, hd, ctx, qt, dtype=torch_dtype(plan.dtype),
                            device=dev, cache_bytes=cache, gen=gen, warmup=w, reps=r)))
    o = plan.overhead_reps
    out.append(("launch", 0.0, dict(kind="launch", flops=0.0, bytes=0.0),
                lambda: bench_overhead.run_launch(device=dev, warmup=w, reps=o)))
    for arch in bench_overhead.TINY_ARCHES:
        for layers in plan.tiny_layers:
            out.append((f"tiny {arch} {layers} layers", 0.0,
                        dict(kind="tiny_forward", dtype=plan.dtype, arch=arch, layers=layers,
                             flops=0.0, bytes=0.0),
                        lambda arch=arch, layers=layers: bench_overhead.run_tiny_forward(
                            arch, layers, dtype=torch_dtype(plan.dtype), dtype_name=plan.dtype,
                            device=dev, rng=rng, warmup=w + 3, reps=o)))
    for vocab in plan.sampling_vocab:
        out.append((f"sampling vocab {vocab}", 2.0 * vocab * b,
                    dict(kind="sampling", dtype=plan.dtype, batch=1, vocab=vocab, flops=0.0,
                         bytes=float(vocab * b)),
                    lambda vocab=vocab: bench_overhead.run_sampling(
                        1, vocab, dtype=torch_dtype(plan.dtype), device=dev, gen=gen,
                        warmup=w, reps=o)))
    return out


def _is_oom(exc: BaseException) -> bool:
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(exc, oom)) or "out of memory" in str(exc).lower()


def run_suite(plan: Plan, *, rng: np.random.Generator,
              progress: ProgressFn | None = None) -> pd.DataFrame:
    """Run every micro-benchmark of ``plan``; one row per measurement (see ``COLUMNS``)."""
    dev = resolve_device(plan.device)
    cache = last_level_cache_bytes(dev)
    cases = _cases(plan, dev, rng, cache)
    rows = []
    for done, (label, footprint, fields, thunk) in enumerate(cases):
        budget = plan.memory_limit_bytes if plan.memory_limit_bytes is not None \
            else 0.8 * free_memory_bytes(dev)
        if footprint > budget:
            rows.append(_record(status="skipped", note=f"needs {footprint / 2**30:.3g} GiB, "
                                f"{budget / 2**30:.3g} GiB available", **fields))
        else:
            try:
                t = thunk()
                rows.append(_record(median_s=t.median_s, min_s=t.min_s, reps=t.reps,
                                    **fields))
            except (RuntimeError, MemoryError) as exc:
                if not _is_oom(exc) and not isinstance(exc, MemoryError):
                    raise
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
                rows.append(_record(status="skipped", note="out of memory", **fields))
        if progress is not None:
            progress(done + 1, len(cases), label)
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    if not (frame["status"] == "ok").any():
        raise SpecsimError("every micro-benchmark was skipped: the device has too little "
                           "free memory", field="--device", fix="free device memory or use "
                           "a device with more")
    return frame
