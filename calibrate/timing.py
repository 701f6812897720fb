"""Time a callable on a device: warm-up, synchronisation, median over repetitions.

On a GPU each repetition is bracketed by CUDA events recorded on the current stream (the
kernels' own time, not the host's), and the device is synchronised before the events are
read.  On a CPU a repetition is ``time.perf_counter`` around the call; torch's CPU kernels
return when their work is done, so no synchronisation is needed.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from simulator.inputs.errors import SpecsimError

# progress(done, total, label): the library's one progress style (simulator.cli.progress
# draws it), with the step being timed as the label
ProgressFn = Callable[[int, int, str], None]

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median and the minimum over ``reps`` timed calls."""

    median_s: float
    min_s: float
    reps: int


def resolve_device(name: str) -> torch.device:
    """``cpu`` or ``cuda`` as a torch device; unknown names and absent CUDA are input errors."""
    if name not in DEVICES:
        raise SpecsimError(f"unknown device {name!r}", field="--device",
                           fix="use one of: " + ", ".join(DEVICES))
    if name == "cuda" and not torch.cuda.is_available():
        raise SpecsimError("CUDA is not available on this machine (torch "
                           f"{torch.__version__}, built with CUDA {torch.version.cuda})",
                           field="--device",
                           fix="run on a machine with an NVIDIA GPU and a CUDA build of torch, "
                               "or use --device cpu")
    return torch.device(name)


def set_threads(threads: int) -> None:
    """Run torch's CPU kernels on ``threads`` threads."""
    torch.set_num_threads(threads)


def threads() -> int:
    """The number of threads torch's CPU kernels run on."""
    return torch.get_num_threads()


def synchronize(device: torch.device) -> None:
    """Wait until the device has finished all queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(fn: Callable[[int], object], device: torch.device, *, warmup: int = 2,
            reps: int = 5) -> Timing:
    """Median and minimum seconds of ``fn(i)`` over ``reps`` calls after ``warmup`` calls.

    ``fn`` receives the repetition index so that it can rotate through operand copies
    (cold caches, as in a real forward where every layer reads its own weights).
    """
    if reps < 1:
        raise SpecsimError(f"must be >= 1, got {reps}", field="reps")
    for i in range(warmup):
        fn(i)
    synchronize(device)
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            starts[i].record()
            fn(warmup + i)
            ends[i].record()
        torch.cuda.synchronize(device)
        times = np.array([s.elapsed_time(e) for s, e in zip(starts, ends)]) * 1e-3
    else:
        times = np.empty(reps)
        for i in range(reps):
            t0 = time.perf_counter()
            fn(warmup + i)
            times[i] = time.perf_counter() - t0
    return Timing(float(np.median(times)), float(times.min()), reps)


def free_memory_bytes(device: torch.device) -> float:
    """Bytes that new tensors may still take on ``device`` (free device or host memory)."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return float(free)
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def total_memory_bytes(device: torch.device) -> float:
    """Total memory of the device (host RAM for the CPU)."""
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def last_level_cache_bytes(device: torch.device) -> float:
    """Size of the last-level cache (GPU L2 or CPU L3); a conservative guess if unknown."""
    if device.type == "cuda":
        size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
        return float(size) if size else 64.0 * 2**20
    best = 0.0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            path = os.path.join(base, entry, "size")
            if os.path.exists(path):
                with open(path, encoding="ascii") as fh:
                    text = fh.read().strip()
                scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
                best = max(best, float(text.rstrip("KMG")) * scale)
    except (OSError, ValueError):
        pass
    return best or 64.0 * 2**20


def device_name(device: torch.device) -> str:
    """A human name for the device: the GPU's marketing name or the CPU model."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine() or "cpu"
