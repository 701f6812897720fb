"""``specsim calibrate`` as a library call: measure, fit, and build the calibrated profile."""
from __future__ import annotations

import datetime as _dt
import platform
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from calibrate.benchmarks import Plan, run_suite
from calibrate.fit import Fit, fit
from calibrate.timing import ProgressFn, device_name, resolve_device, total_memory_bytes
from calibrate.writer import calibrated_profile_dict
from hardware.profile import HardwareProfile, list_profiles, load_profile
from simulator.inputs.errors import SpecsimError

# GPU marketing-name fragments -> shipped profile whose datasheet numbers apply
GPU_PROFILES = {"B300": "b300", "B200": "b200", "H200": "h200", "H100": "h100-sxm", "A100-SXM4-80GB": "a100-80gb",
                "A100 80GB": "a100-80gb", "A100": "a100-40gb", "L40S": "l40s", "A10": "a10"}


@dataclass(frozen=True)
class Calibration:
    """The outcome of a calibration run: the profile mapping, the raw rows and the fit."""

    profile: dict
    measurements: pd.DataFrame
    fit: Fit
    base: str
    datasheet_peaks: bool


def detect_base(device: str, name: str) -> str | None:
    """The shipped profile for this device: ``cpu`` for a CPU, a name match for a GPU."""
    if device == "cpu":
        return "cpu"
    for fragment, profile in GPU_PROFILES.items():
        if fragment.lower() in name.lower():
            return profile
    return None


def calibrate_device(plan: Plan, *, rng: np.random.Generator, name: str,
                     base: str | None = None, statistic: str = "median", command: str = "",
                     axis: str = "intensity", progress: ProgressFn | None = None) -> Calibration:
    """Run ``plan``'s micro-benchmarks, fit them and build the calibrated profile ``name``.

    ``base`` names the shipped profile that supplies the links (and, for a recognised GPU or
    when named explicitly, the datasheet peaks the curves are relative to); by default it
    is detected from the device's name.  ``axis`` is what the compute curve is indexed by:
    ``intensity`` (FLOPs per byte, the default: a skinny GEMM over a few tokens and a square
    one of the same FLOPs run at very different rates) or ``flops``.  A CPU's peaks are always the measured maxima
    unless ``base`` is given, since no datasheet can be matched to a CPU reliably.
    """
    dev = resolve_device(plan.device)
    dev_name = device_name(dev)
    chosen = base or detect_base(plan.device, dev_name)
    if chosen is None:
        raise SpecsimError(f"no shipped profile matches {dev_name!r}", field="--base",
                           fix="name the closest profile with --base; valid names are: "
                               + ", ".join(list_profiles()))
    base_profile: HardwareProfile = load_profile(chosen)
    datasheet = base is not None or plan.device == "cuda"
    frame = run_suite(plan, rng=rng, progress=progress)
    result = fit(frame, dtype=plan.dtype, statistic=statistic, axis=axis,
                 datasheet_peak_flops_per_s=base_profile.peak_flops_per_s.get(plan.dtype)
                 if datasheet else None,
                 datasheet_bandwidth_bytes_per_s=base_profile.memory_bandwidth_bytes_per_s
                 if datasheet else None)
    skipped = frame[frame["status"] != "ok"]
    provenance = {
        "device": dev_name,
        "device_type": dev.type,
        "dtype": plan.dtype,
        "statistic": statistic,
        "threads": torch.get_num_threads(),
        "torch": str(torch.__version__),
        "cuda": str(torch.version.cuda or "none"),
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "base_profile": chosen,
        "peaks": "datasheet" if datasheet else "measured",
        "warmup": plan.warmup,
        "reps": plan.reps,
        "measurements": int((frame["status"] == "ok").sum()),
        "skipped": int(len(skipped)),
        "fit_rms_log_error": round(result.rms_log_error, 6),
        "launch_overhead_us": round(result.launch_overhead_s * 1e6, 6),
        "measured_peak_tflops": {dt: round(v / 1e12, 9)
                                 for dt, v in result.measured_peak_flops_per_s.items()},
        "measured_bandwidth_gb_per_s": round(result.measured_bandwidth_bytes_per_s / 1e9, 6),
    }
    data = calibrated_profile_dict(result, name=name, base=base_profile,
                                   datasheet_peaks=datasheet, device_name=dev_name,
                                   memory_bytes=total_memory_bytes(dev), provenance=provenance)
    return Calibration(data, frame, result, chosen, datasheet)
