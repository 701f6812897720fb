"""Hardware profiles: YAML data files loaded into a frozen dataclass (SI units inside).

A profile file gives every number with its source, in the units of a datasheet::

    memory_gib: {value: 40, source: "NVIDIA A100 datasheet"}

and is converted once, here, to SI units (bytes, bytes/s, FLOP/s, seconds).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from hardware.collectives import Collectives
from hardware.collectives_yaml import parse_collectives
from hardware.kernels import KernelShapes, parse_kernels
from hardware.roofline import AXES, Roofline
from simulator.inputs.catalog import Catalog
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import (
    as_bool,
    as_number,
    as_str,
    check_keys,
    load_yaml_file,
    require_mapping,
)

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
PROFILES = Catalog("hardware", PROFILE_DIR, "--hardware-dir",
                   dir_fix="name a folder that holds profile YAML files")
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")
# Bytes per stored element.  The 4-bit formats carry their block scales: NVFP4 one E4M3
# scale per 16 elements (4.5 bits), MXFP4 one E8M0 scale per 32 (4.25 bits), as the OCP
# Microscaling spec v1.0 and NVIDIA's Blackwell NVFP4 description define them; both run on
# the device's ``fp4`` tensor-core peak.
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1,
               "nvfp4": 0.5625, "mxfp4": 0.53125}
PEAK_KEY = {"nvfp4": "fp4", "mxfp4": "fp4"}  # storage format -> the peak it computes at
# The built-in profiles with FP8 / FP4 tensor cores, named in the error for a device without
# them (tests/hardware/test_blackwell.py checks this against the profiles' peaks).
TENSOR_CORE_DEVICES = {"fp8": "h100-sxm, h200, l40s, b200 or b300", "fp4": "b200 or b300"}
_WIDER = {"fp8": ("bf16",), "fp4": ("fp8", "bf16")}   # what to quantise to instead

GIB = 1024 ** 3
GB = 1e9


@dataclass(frozen=True)
class Link:
    """A point-to-point or collective link: bandwidth per direction and latency per message."""

    name: str
    bandwidth_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True)
class HardwareProfile:
    """One accelerator (or CPU) as the roofline cost model sees it."""

    name: str
    description: str
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    peak_flops_per_s: Mapping[str, float]
    interconnect: Link
    host_link: Link
    compute_efficiency: float
    memory_efficiency: float
    kernel_overhead_s: float   # host cost of one eager kernel launch
    step_overhead_s: float     # host CPU time of one engine step (scheduling, inputs, sampling)
    calibrated: bool = False
    graph_launch_s: float | None = None  # host cost of one CUDA-graph replay; None: no graphs
    cpu_per_seq_s: float = 0.0    # host CPU time per sequence in the step
    # Calibrated efficiency curves: ((operator FLOPs, efficiency), ...) and
    # ((operator bytes, efficiency), ...), interpolated in log10 of the size.
    compute_efficiency_curve: tuple[tuple[float, float], ...] = ()
    memory_efficiency_curve: tuple[tuple[float, float], ...] = ()
    # what the compute curve is indexed by: the operator's FLOPs, or its arithmetic
    # intensity (FLOPs per byte: a skinny GEMM and a square one of equal FLOPs differ)
    compute_efficiency_axis: str = "flops"
    # kernel shapes (hardware/kernels.py): tiles, SMs, latency, floor; None: flat formula
    kernels: KernelShapes | None = None
    # collectives (hardware/collectives.py) from the profile's collectives: block; None here
    # becomes Collectives.from_link(interconnect), today's ring formulas on the link
    collectives: Collectives | None = None
    # moe: block (simulator/cost/moe_kernels.py): the fraction of the bandwidth a fused-MoE
    # grouped GEMM streams block-scaled 8-/4-bit expert weights at; None: the GEMM kind's
    moe_quantized_gemm_efficiency: float | None = None
    # ... the fraction of the 16-bit peak its compute reaches; None: the GEMM kind's
    moe_grouped_gemm_compute_efficiency: float | None = None
    # ... p of its time (compute^p + memory^p)^(1/p), the roofs' imperfect overlap near the
    # ridge point; None: max(compute, memory)
    moe_grouped_gemm_overlap_exponent: float | None = None
    # the same pair for FP8 block-scaled experts, per kernel family: vLLM's Triton fused_moe
    # (experts reached by all-gather) and DeepGEMM's grouped GEMMs (behind DeepEP's
    # dispatch); None: the GEMM kind's rate, the roofs' max
    moe_fp8_triton_compute_efficiency: float | None = None
    moe_fp8_triton_overlap_exponent: float | None = None
    # the fraction of the bandwidth that Triton family streams its FP8 expert weights at,
    # where measured apart (its tuned configs); None: moe_quantized_gemm_efficiency
    moe_fp8_triton_memory_efficiency: float | None = None
    # vLLM's own Triton fused_moe where measured apart from SGLang's (an engine with
    # vllm_fused_moe, simulator/cost/engines.yaml); None: the fp8_triton pair
    moe_fp8_vllm_compute_efficiency: float | None = None
    moe_fp8_vllm_overlap_exponent: float | None = None
    # vLLM's MLA decode module's measured time a layer beyond its priced operators (an engine
    # with vllm_mla_module, simulator/cost/moe_kernels.py); None: nothing more
    mla_vllm_decode_excess_s: float | None = None
    moe_fp8_deepgemm_compute_efficiency: float | None = None
    moe_fp8_deepgemm_overlap_exponent: float | None = None
    # the Triton block-FP8 GEMM's time per 128-deep K step of one program (its serial K
    # loop), the floor of a grid under one wave (simulator/cost/engine_kernels.py); None: no floor
    moe_fp8_triton_k_step_s: float | None = None
    sources: Mapping[str, str] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    path: str = ""

    def __post_init__(self) -> None:
        if self.collectives is None:
            object.__setattr__(self, "collectives", Collectives.from_link(self.interconnect))

    def peak_flops(self, dtype: str, *, field: str = "dtype") -> float:
        """Peak dense FLOP/s for ``dtype``; an unsupported dtype is an error on ``field``.

        fp16 and bf16 are priced alike (same width, same tensor-core rate wherever a device
        has both), so a device listing only one of them serves the other: TPUs run fp16
        checkpoints in bf16.  NVFP4 and MXFP4 weights compute at the ``fp4`` peak.
        """
        peaks = self.peak_flops_per_s
        key = PEAK_KEY.get(dtype, dtype)
        if key not in peaks and key in ("fp16", "bf16"):
            key = "bf16" if key == "fp16" else "fp16"
        if key in peaks:
            return peaks[key]
        raise self._unsupported(dtype, key, field)

    def _unsupported(self, dtype: str, key: str, field: str) -> SpecsimError:
        """The error for a dtype this device has no peak for: what it needs, what it has."""
        has = ", ".join(self.peak_flops_per_s)
        who = f"{self.name} ({self.description})"
        if key not in TENSOR_CORE_DEVICES:
            return SpecsimError(f"dtype {dtype!r} is not supported by {who}; it supports: {has}",
                                field=field, fix="use one of: " + has)
        # the wider formats this device does run, as the alternative to a better device
        alts = [d for d in _WIDER[key] if d in self.peak_flops_per_s
                or (d == "bf16" and "fp16" in self.peak_flops_per_s)]
        fix = f"use {TENSOR_CORE_DEVICES[key]}"
        if alts:
            fix += f", or {field}: {' or '.join(alts)}"
        return SpecsimError(f"{dtype} needs {key.upper()} tensor cores, and {who} has none; "
                            f"it supports: {has}", field=field, fix=fix)

    def roofline(self, dtype: str, *, field: str = "dtype") -> Roofline:
        """The operator formula of this device for ``dtype`` (peaks, efficiencies, curves);
        an unsupported or unknown ``dtype`` is an error on ``field``."""
        if dtype not in DTYPE_BYTES:
            raise SpecsimError(f"unknown dtype {dtype!r}", field=field,
                               fix="use one of: " + ", ".join(DTYPE_BYTES))
        return Roofline(self.peak_flops(dtype, field=field), self.memory_bandwidth_bytes_per_s,
                        compute_efficiency=self.compute_efficiency,
                        memory_efficiency=self.memory_efficiency,
                        compute_curve=self.compute_efficiency_curve,
                        memory_curve=self.memory_efficiency_curve,
                        axis=self.compute_efficiency_axis,
                        # calibrated curves are this device's measurement: they price every
                        # operator, and the (datasheet) kernel shapes step aside
                        kernels=None if self.compute_efficiency_curve
                        or self.memory_efficiency_curve else self.kernels,
                        dtype_bytes=DTYPE_BYTES[dtype])

    def with_overheads(self, enabled: bool) -> "HardwareProfile":
        """This profile, or a copy with kernel and step overheads set to zero."""
        if enabled:
            return self
        return dataclasses.replace(self, kernel_overhead_s=0.0, step_overhead_s=0.0,
                                   graph_launch_s=0.0, cpu_per_seq_s=0.0)

    def plain_roofline(self) -> "HardwareProfile":
        """A copy at datasheet peaks: efficiencies 1, no overheads, no curves."""
        return dataclasses.replace(self, compute_efficiency=1.0, memory_efficiency=1.0,
                                   kernel_overhead_s=0.0, step_overhead_s=0.0,
                                   graph_launch_s=0.0, cpu_per_seq_s=0.0,
                                   compute_efficiency_curve=(), memory_efficiency_curve=(),
                                   kernels=None)


_TOP_KEYS = {"name", "description", "calibrated", "memory_gib", "memory_bandwidth_gb_per_s",
             "peak_tflops", "interconnect", "host_link", "defaults", "calibration", "kernels",
             "collectives", "moe"}
_REQUIRED = ("name", "description", "memory_gib", "memory_bandwidth_gb_per_s", "peak_tflops",
             "interconnect", "host_link", "defaults")
_LINK_KEYS = ("name", "bandwidth_gb_per_s", "latency_us", "source")
_DEFAULT_KEYS = ("compute_efficiency", "memory_efficiency", "kernel_overhead_us",
                 "step_overhead_us")
_OPTIONAL_DEFAULT_KEYS = ("graph_launch_us", "cpu_per_seq_us")
_CALIBRATION_KEYS = ("provenance", "compute_efficiency_curve", "memory_efficiency_curve",
                     "compute_efficiency_axis")


def _sourced(data: Any, *, source: str, field: str, sources: dict, **bounds) -> float:
    """Read ``{value: X, source: "..."}``; the source is mandatory."""
    data = require_mapping(data, source=source, field=field)
    check_keys(data, allowed=("value", "source"), required=("value", "source"), source=source,
               prefix=field + ".")
    sources[field] = as_str(data["source"], source=source, field=field + ".source")
    return as_number(data["value"], source=source, field=field + ".value", **bounds)


def _link(data: Any, *, source: str, field: str, sources: dict) -> Link:
    data = require_mapping(data, source=source, field=field)
    check_keys(data, allowed=_LINK_KEYS, required=_LINK_KEYS, source=source, prefix=field + ".")
    sources[field] = as_str(data["source"], source=source, field=field + ".source")
    return Link(
        name=as_str(data["name"], source=source, field=field + ".name"),
        bandwidth_bytes_per_s=GB * as_number(data["bandwidth_gb_per_s"], source=source,
                                             field=field + ".bandwidth_gb_per_s",
                                             strictly_positive=True, maximum=1e6),
        latency_s=1e-6 * as_number(data["latency_us"], source=source,
                                   field=field + ".latency_us", minimum=0, maximum=1e6),
    )


def _curve(data: Any, *, source: str, field: str) -> tuple[tuple[float, float], ...]:
    if not isinstance(data, list) or len(data) < 2:
        raise SpecsimError("expected a list of at least two [size, efficiency] pairs",
                           source=source, field=field)
    points = []
    for i, pair in enumerate(data):
        if not isinstance(pair, list) or len(pair) != 2:
            raise SpecsimError(f"entry {i} is not a [size, efficiency] pair", source=source,
                               field=field)
        size = as_number(pair[0], source=source, field=f"{field}[{i}][0]",
                         strictly_positive=True)
        eff = as_number(pair[1], source=source, field=f"{field}[{i}][1]",
                        strictly_positive=True, maximum=1.0)
        points.append((float(size), float(eff)))
    sizes = [p[0] for p in points]
    if any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise SpecsimError("sizes must be strictly increasing", source=source, field=field)
    return tuple(points)


def _collectives(data: Mapping[str, Any], *, source: str, sources: dict) -> Collectives | None:
    """The optional collectives: block (hardware/collectives.py); its sources are kept."""
    link = _link(data["interconnect"], source=source, field="interconnect", sources={})
    collectives = parse_collectives(data.get("collectives"), source=source, link=link)
    if collectives is not None:
        sources.update(collectives.sources)
    return collectives


MOE_KEYS = {"quantized_grouped_gemm_memory_efficiency": "moe_quantized_gemm_efficiency",
            "grouped_gemm_compute_efficiency": "moe_grouped_gemm_compute_efficiency",
            "grouped_gemm_overlap_exponent": "moe_grouped_gemm_overlap_exponent",
            "fp8_triton_compute_efficiency": "moe_fp8_triton_compute_efficiency",
            "fp8_triton_overlap_exponent": "moe_fp8_triton_overlap_exponent",
            "fp8_triton_memory_efficiency": "moe_fp8_triton_memory_efficiency",
            "fp8_vllm_compute_efficiency": "moe_fp8_vllm_compute_efficiency",
            "fp8_vllm_overlap_exponent": "moe_fp8_vllm_overlap_exponent",
            "fp8_deepgemm_compute_efficiency": "moe_fp8_deepgemm_compute_efficiency",
            "fp8_deepgemm_overlap_exponent": "moe_fp8_deepgemm_overlap_exponent",
            "fp8_triton_k_step_us": "moe_fp8_triton_k_step_s",
            "vllm_mla_decode_excess_us": "mla_vllm_decode_excess_s"}
MOE_PAIRS = ("grouped_gemm", "fp8_triton", "fp8_vllm", "fp8_deepgemm")  # (compute, overlap)
# microseconds in the YAML, seconds inside
_MOE_SCALE = {"fp8_triton_k_step_us": 1e-6, "vllm_mla_decode_excess_us": 1e-6}


def _moe(data: Mapping[str, Any], *, source: str, sources: dict) -> dict[str, float]:
    """The optional ``moe:`` block, each key ``{value, source}``: HardwareProfile's fields."""
    if "moe" not in data:
        return {}
    moe = require_mapping(data["moe"], source=source, field="moe")
    check_keys(moe, allowed=tuple(MOE_KEYS), source=source, prefix="moe.")
    if not moe:
        raise SpecsimError("the moe block is empty", source=source, field="moe",
                           fix="give one of " + ", ".join(MOE_KEYS) + ", or leave it out")
    bounds = {k: {"strictly_positive": True, "maximum": 1.0} for k in MOE_KEYS}
    # p = 1: the roofs add (no overlap); p -> infinity: their max (perfect overlap)
    for key in ("grouped_gemm_overlap_exponent", "fp8_triton_overlap_exponent",
                "fp8_vllm_overlap_exponent", "fp8_deepgemm_overlap_exponent"):
        bounds[key] = {"minimum": 1.0, "maximum": 100.0}
    for key in ("fp8_triton_k_step_us", "vllm_mla_decode_excess_us"):
        bounds[key] = {"strictly_positive": True, "maximum": 1000.0}
    out = {MOE_KEYS[k]: _MOE_SCALE.get(k, 1.0) * float(_sourced(
        moe[k], source=source, field=f"moe.{k}", sources=sources, **bounds[k])) for k in moe}
    for fit in MOE_PAIRS:  # a fit's two numbers price together (moe_kernels.GroupedGemm)
        keys = [f"{fit}_compute_efficiency", f"{fit}_overlap_exponent"]
        if (keys[0] in moe) != (keys[1] in moe):
            raise SpecsimError(f"moe.{keys[0]} and moe.{keys[1]} are one fit's two numbers: "
                               "give both or neither", source=source, field=f"moe.{keys[0]}",
                               fix=f"add moe.{keys[(keys[0] in moe)]} or remove the other")
    return out


def _defaults(data: Mapping[str, Any], source: str,
              sources: dict[str, str]) -> tuple[dict[str, float], dict[str, float]]:
    """The ``defaults:`` block: the efficiencies, and the overheads in seconds."""
    defaults = require_mapping(data["defaults"], source=source, field="defaults")
    check_keys(defaults, allowed=_DEFAULT_KEYS + _OPTIONAL_DEFAULT_KEYS,
               required=_DEFAULT_KEYS, source=source, prefix="defaults.")
    eff = {k: _sourced(defaults[k], source=source, field=f"defaults.{k}", sources=sources,
                       strictly_positive=True, maximum=1.0)
           for k in ("compute_efficiency", "memory_efficiency")}
    over = {k: 1e-6 * _sourced(defaults[k], source=source, field=f"defaults.{k}",
                               sources=sources, minimum=0, maximum=1e6)
            for k in ("kernel_overhead_us", "step_overhead_us") + _OPTIONAL_DEFAULT_KEYS
            if k in defaults}
    return eff, over


def _calibration(data: Mapping[str, Any], source: str) -> tuple[tuple, tuple, dict, str]:
    """A calibrated profile's efficiency curves, provenance and compute axis (empty curves,
    no provenance and the flops axis without a calibration block)."""
    if "calibration" not in data:
        return (), (), {}, "flops"
    cal = require_mapping(data["calibration"], source=source, field="calibration")
    check_keys(cal, allowed=_CALIBRATION_KEYS, source=source, prefix="calibration.")
    curves = [_curve(cal[k], source=source, field=f"calibration.{k}") if k in cal else ()
              for k in ("compute_efficiency_curve", "memory_efficiency_curve")]
    provenance = dict(require_mapping(cal.get("provenance", {}), source=source,
                                      field="calibration.provenance"))
    axis = as_str(cal["compute_efficiency_axis"], source=source,
                  field="calibration.compute_efficiency_axis", choices=AXES) \
        if "compute_efficiency_axis" in cal else "flops"
    return curves[0], curves[1], provenance, axis


def profile_from_dict(data: Any, *, source: str) -> HardwareProfile:
    """Validate a parsed profile file and convert it to SI units."""
    data = require_mapping(data, source=source)
    check_keys(data, allowed=_TOP_KEYS, required=_REQUIRED, source=source)
    sources: dict[str, str] = {}
    peaks_raw = require_mapping(data["peak_tflops"], source=source, field="peak_tflops")
    check_keys(peaks_raw, allowed=DTYPES, source=source, prefix="peak_tflops.")
    if not peaks_raw:
        raise SpecsimError("at least one dtype is needed", source=source, field="peak_tflops")
    peaks = {dt: 1e12 * _sourced(v, source=source, field=f"peak_tflops.{dt}", sources=sources,
                                 strictly_positive=True, maximum=1e6)
             for dt, v in peaks_raw.items()}
    eff, over = _defaults(data, source, sources)
    calibrated = as_bool(data.get("calibrated", False), source=source, field="calibrated")
    compute_curve, memory_curve, provenance, axis = _calibration(data, source)
    kernels = parse_kernels(data.get("kernels"), source=source)
    if kernels is not None:
        sources.update(kernels.sources)
    # a calibration from kernel measurements carries a fitted kernels: block and its provenance
    if calibrated and not (compute_curve or memory_curve or (kernels is not None and provenance)):
        raise SpecsimError("calibrated: true but no calibration curves", source=source,
                           field="calibration",
                           fix="re-run 'specsim calibrate' or set calibrated: false")
    return HardwareProfile(
        name=as_str(data["name"], source=source, field="name"),
        description=as_str(data["description"], source=source, field="description"),
        memory_bytes=GIB * _sourced(data["memory_gib"], source=source, field="memory_gib",
                                    sources=sources, strictly_positive=True, maximum=1e5),
        memory_bandwidth_bytes_per_s=GB * _sourced(
            data["memory_bandwidth_gb_per_s"], source=source, field="memory_bandwidth_gb_per_s",
            sources=sources, strictly_positive=True, maximum=1e6),
        peak_flops_per_s=peaks,
        interconnect=_link(data["interconnect"], source=source, field="interconnect",
                           sources=sources),
        host_link=_link(data["host_link"], source=source, field="host_link", sources=sources),
        compute_efficiency=eff["compute_efficiency"],
        memory_efficiency=eff["memory_efficiency"],
        kernel_overhead_s=over["kernel_overhead_us"],
        step_overhead_s=over["step_overhead_us"],
        graph_launch_s=over.get("graph_launch_us"),
        cpu_per_seq_s=over.get("cpu_per_seq_us", 0.0),
        calibrated=calibrated,
        compute_efficiency_curve=compute_curve,
        memory_efficiency_curve=memory_curve,
        compute_efficiency_axis=axis,
        kernels=kernels,
        collectives=_collectives(data, source=source, sources=sources),
        **_moe(data, source=source, sources=sources),
        sources=sources,
        provenance=provenance,
        path=source,
    )


def load_profile_file(path: str | Path) -> HardwareProfile:
    """Load one profile YAML file."""
    return profile_from_dict(load_yaml_file(path), source=str(path))


def list_profiles(hardware_dir: str | Path | None = None) -> list[str]:
    """Names of the available profiles (file stems), built-in and user-supplied."""
    return PROFILES.names(hardware_dir)


def load_profile(name: str, hardware_dir: str | Path | None = None) -> HardwareProfile:
    """Load a profile by name, or by path if ``name`` ends in .yaml."""
    return PROFILES.load(name, hardware_dir, load_profile_file)
