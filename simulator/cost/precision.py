"""Precision of a deployment: the weights' storage dtype and the KV cache's, on one device.

``model.dtype`` is the weights' dtype.  8- and 4-bit weights are priced at their bytes
(hardware/profile.py's DTYPE_BYTES, block scales included) and their linears at the device's
peak for that format: FP8 W8A8 on Hopper/Ada runs the FP8 tensor cores (vLLM's Fp8LinearMethod
quantises the activations per token on the fly), NVFP4/MXFP4 on Blackwell the FP4 peak.
Everything else computes in 16 bits: activations (``model.activation_bytes``), attention,
the norms, the router and the LM head (vLLM quantises neither the vocabulary-parallel
LM head nor DeepSeek's gate under fp8).  A dtype the device has no peak for is refused here,
naming the device and the dtypes it supports.
"""
from __future__ import annotations

import dataclasses

from hardware.profile import DTYPE_BYTES, PEAK_KEY, HardwareProfile
from hardware.roofline import Roofline
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import ModelSpec

# vLLM's --quantization for the weights (the storage formats priced) and --kv-cache-dtype
QUANTIZATIONS = ("bf16", "fp16", "fp8", "nvfp4", "mxfp4")
KV_CACHE_DTYPES = ("auto", "fp8")


def compute_dtype(dtype: str) -> str:
    """The 16-bit (or wider) dtype activations and attention run in beside ``dtype`` weights."""
    return dtype if DTYPE_BYTES[dtype] >= 2 else "bf16"


def _has_peak(hardware: HardwareProfile, dtype: str) -> bool:
    try:
        hardware.peak_flops(dtype)
    except SpecsimError:
        return False
    return True


def supported_weight_dtypes(hardware: HardwareProfile) -> list[str]:
    """The weight formats of QUANTIZATIONS that ``hardware`` has a tensor-core peak for."""
    return [d for d in QUANTIZATIONS if _has_peak(hardware, d)]


def _refuse(hardware: HardwareProfile, dtype: str, what: str, field: str) -> SpecsimError:
    ok = supported_weight_dtypes(hardware)
    return SpecsimError(f"{hardware.name} has no {PEAK_KEY.get(dtype, dtype)} tensor-core "
                        f"peak, so it cannot run {what} in {dtype}; it supports "
                        f"{', '.join(ok) or 'none of ' + ', '.join(QUANTIZATIONS)}",
                        field=field, fix=f"use one of {', '.join(ok)} on {hardware.name}, "
                                         f"or a device with {dtype} (H100, H200, L40S: fp8; "
                                         "Blackwell: fp4)")


def linear_roofline(hardware: HardwareProfile, model: ModelSpec) -> Roofline:
    """The roofline of the model's linears: its weights' format's peak on ``hardware``."""
    if not _has_peak(hardware, model.dtype):
        raise _refuse(hardware, model.dtype, f"{model.name}'s weights", "quantization")
    return hardware.roofline(model.dtype)


def check_kv_cache_dtype(hardware: HardwareProfile, model: ModelSpec) -> None:
    """An FP8 KV cache needs FP8 tensor cores (the issue's rule: H100/H200/L40S, not A100)."""
    kv = model.kv_cache_dtype
    if kv and DTYPE_BYTES[kv] < 2 and "fp8" not in supported_weight_dtypes(hardware):
        raise _refuse(hardware, kv, "the KV cache", "kv_cache_dtype")


def with_precision(model: ModelSpec, hardware: HardwareProfile, quantization: str | None,
                   kv_cache_dtype: str = "auto") -> ModelSpec:
    """``model`` served with ``quantization`` weights (None: the file's dtype) and
    ``kv_cache_dtype`` (auto: 16-bit), checked against what ``hardware`` computes."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise SpecsimError(f"unknown weights dtype {quantization!r}", field="quantization",
                           fix="one of " + ", ".join(QUANTIZATIONS))
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise SpecsimError(f"unknown KV cache dtype {kv_cache_dtype!r}",
                           field="kv_cache_dtype", fix="one of " + ", ".join(KV_CACHE_DTYPES))
    out = dataclasses.replace(model, dtype=quantization or model.dtype,
                              kv_cache_dtype="" if kv_cache_dtype == "auto" else kv_cache_dtype)
    linear_roofline(hardware, out)
    check_kv_cache_dtype(hardware, out)
    return out
