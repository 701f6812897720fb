"""Write a calibrated hardware profile (YAML that loads like any other) and its raw CSV.

Numbers are rounded to 12 significant digits when written, so that loading (which converts
to SI units) and saving again reproduces the same file.  A checksum of every number is kept
in ``calibration.provenance.checksum``; :func:`load_calibrated` refuses a file whose numbers
were edited by hand after calibration (delete the checksum to accept an edit on purpose).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import pandas as pd
import yaml

from hardware.collectives_yaml import collectives_to_dict
from hardware.kernels import kernels_to_dict
from hardware.profile import GB, GIB, HardwareProfile, Link, load_profile_file
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import load_yaml_file

if TYPE_CHECKING:  # only for annotations: the measured-kernel path must not import torch
    from calibrate.fit import Fit

REQUIRED_PROVENANCE = ("device", "device_type", "dtype", "statistic", "threads", "torch",
                       "date", "command", "checksum")


def _r(x: float) -> float:
    return float(f"{float(x):.12g}")


def _link_dict(link: Link, source: str) -> dict:
    return {"name": link.name, "bandwidth_gb_per_s": _r(link.bandwidth_bytes_per_s / GB),
            "latency_us": _r(link.latency_s * 1e6), "source": source}


def _curve(points) -> list[list[float]]:
    return [[_r(s), _r(e)] for s, e in points]


def checksum(data: Mapping[str, Any]) -> str:
    """SHA-256 of every number and source in a profile dict, provenance excluded."""
    body = {k: v for k, v in data.items() if k != "calibration"}
    cal = dict(data.get("calibration") or {})
    cal.pop("provenance", None)
    body["calibration"] = cal
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def profile_to_dict(profile: HardwareProfile) -> dict:
    """A profile as the YAML mapping it loads from (datasheet units, every source kept)."""
    src = profile.sources

    def sourced(value: float, key: str) -> dict:
        return {"value": _r(value), "source": src.get(key, "unknown")}

    data: dict[str, Any] = {
        "name": profile.name,
        "description": profile.description,
        "calibrated": bool(profile.calibrated),
        "memory_gib": sourced(profile.memory_bytes / GIB, "memory_gib"),
        "memory_bandwidth_gb_per_s": sourced(profile.memory_bandwidth_bytes_per_s / GB,
                                             "memory_bandwidth_gb_per_s"),
        "peak_tflops": {dt: sourced(v / 1e12, f"peak_tflops.{dt}")
                        for dt, v in profile.peak_flops_per_s.items()},
        "interconnect": _link_dict(profile.interconnect, src.get("interconnect", "unknown")),
        "host_link": _link_dict(profile.host_link, src.get("host_link", "unknown")),
        "defaults": {
            "compute_efficiency": sourced(profile.compute_efficiency,
                                          "defaults.compute_efficiency"),
            "memory_efficiency": sourced(profile.memory_efficiency,
                                         "defaults.memory_efficiency"),
            "kernel_overhead_us": sourced(profile.kernel_overhead_s * 1e6,
                                          "defaults.kernel_overhead_us"),
            "step_overhead_us": sourced(profile.step_overhead_s * 1e6,
                                        "defaults.step_overhead_us"),
        },
    }
    if profile.graph_launch_s is not None:
        data["defaults"]["graph_launch_us"] = sourced(profile.graph_launch_s * 1e6,
                                                      "defaults.graph_launch_us")
    if profile.cpu_per_seq_s:
        data["defaults"]["cpu_per_seq_us"] = sourced(profile.cpu_per_seq_s * 1e6,
                                                     "defaults.cpu_per_seq_us")
    if profile.kernels is not None:
        data["kernels"] = kernels_to_dict(profile.kernels)
    if collectives_to_dict(profile.collectives):
        data["collectives"] = collectives_to_dict(profile.collectives)
    moe = _moe_dict(profile, sourced)
    if moe:
        data["moe"] = moe
    cal: dict[str, Any] = {}
    if profile.provenance:
        cal["provenance"] = dict(profile.provenance)
    if profile.compute_efficiency_curve:
        cal["compute_efficiency_curve"] = _curve(profile.compute_efficiency_curve)
    if profile.memory_efficiency_curve:
        cal["memory_efficiency_curve"] = _curve(profile.memory_efficiency_curve)
    if cal:
        data["calibration"] = cal
    return data


def _moe_dict(profile: HardwareProfile, sourced) -> dict:
    """The profile's ``moe:`` fields that are set, each with its source."""
    k_step, mla_excess = profile.moe_fp8_triton_k_step_s, profile.mla_vllm_decode_excess_s
    return {key: sourced(value, f"moe.{key}") for key, value in (
        ("quantized_grouped_gemm_memory_efficiency", profile.moe_quantized_gemm_efficiency),
        ("grouped_gemm_compute_efficiency", profile.moe_grouped_gemm_compute_efficiency),
        ("grouped_gemm_overlap_exponent", profile.moe_grouped_gemm_overlap_exponent),
        ("fp8_triton_compute_efficiency", profile.moe_fp8_triton_compute_efficiency),
        ("fp8_triton_overlap_exponent", profile.moe_fp8_triton_overlap_exponent),
        ("fp8_triton_memory_efficiency", profile.moe_fp8_triton_memory_efficiency),
        ("fp8_vllm_compute_efficiency", profile.moe_fp8_vllm_compute_efficiency),
        ("fp8_vllm_overlap_exponent", profile.moe_fp8_vllm_overlap_exponent),
        ("fp8_deepgemm_compute_efficiency", profile.moe_fp8_deepgemm_compute_efficiency),
        ("fp8_deepgemm_overlap_exponent", profile.moe_fp8_deepgemm_overlap_exponent),
        ("fp8_triton_k_step_us", None if k_step is None else k_step * 1e6),
        ("vllm_mla_decode_excess_us", None if mla_excess is None else mla_excess * 1e6))
        if value is not None}


class _Dumper(yaml.SafeDumper):
    """Shipped-profile layout: ``{value, source}`` mappings and number pairs on one line."""


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool)) or v is None


def _represent_dict(dumper: yaml.SafeDumper, data: dict):
    flow = "source" in data and all(_scalar(v) for v in data.values())
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=flow)


def _represent_list(dumper: yaml.SafeDumper, data: list):
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data,
                                     flow_style=all(_scalar(v) for v in data))


_Dumper.add_representer(dict, _represent_dict)
_Dumper.add_representer(list, _represent_list)


def dump_profile(data: Mapping[str, Any]) -> str:
    """YAML text of a profile dict, laid out like the shipped profiles."""
    return yaml.dump(dict(data), Dumper=_Dumper, sort_keys=False, width=100,
                     allow_unicode=True)


def save_profile(profile: HardwareProfile, path: str | Path) -> Path:
    """Write ``profile`` to ``path`` as YAML; it loads back equal."""
    path = Path(path)
    path.write_text(dump_profile(profile_to_dict(profile)), encoding="utf-8")
    return path


def _calibrated_peaks(fit: Fit, base: HardwareProfile, datasheet_peaks: bool,
                      measured: str) -> dict[str, dict]:
    """``peak_tflops``: the base's datasheet peaks (``datasheet_peaks``) raised to any
    measurement that beats them, or the measured maxima."""
    def peak_source(dt: str, value: float) -> str:
        if datasheet_peaks and value == base.peak_flops_per_s.get(dt):
            return base.sources.get(f"peak_tflops.{dt}", f"datasheet, profile {base.name}")
        return f"best GEMM FLOP/s {measured}"

    peaks: dict[str, dict] = {}
    if datasheet_peaks:
        for dt, v in base.peak_flops_per_s.items():
            peaks[dt] = {"value": _r(v / 1e12), "source": peak_source(dt, v)}
    for dt, v in fit.measured_peak_flops_per_s.items():
        value = fit.peak_flops_per_s if dt == fit.dtype else \
            max(v, base.peak_flops_per_s.get(dt, 0.0) if datasheet_peaks else 0.0)
        peaks[dt] = {"value": _r(value / 1e12), "source": peak_source(dt, value)}
    return peaks


def _calibrated_defaults(fit: Fit, base: HardwareProfile, measured: str,
                         borrowed: str) -> dict[str, dict]:
    """``defaults``: the curves' plateaus, the fitted overheads, the base's graph and
    per-sequence host costs (said to be borrowed)."""
    curve_note = f"{measured}; used only where a calibration curve is absent"
    return {
        "compute_efficiency": {
            "value": _r(max(e for _, e in fit.compute_curve)),
            "source": "plateau of the compute-efficiency curve " + curve_note},
        "memory_efficiency": {
            "value": _r(fit.memory_curve[-1][1]),
            "source": "largest-size point of the memory-efficiency curve " + curve_note},
        "kernel_overhead_us": {
            "value": _r(fit.kernel_overhead_s * 1e6),
            "source": "slope of a tiny model's step time over its layer count, divided by "
                      "the cost model's kernels per layer, " + measured},
        "step_overhead_us": {
            "value": _r(fit.step_overhead_s * 1e6),
            "source": "intercept of a tiny model's step time over its layer count (less "
                      "the per-step kernels): embedding, final norm, LM head, sampling, "
                      + measured},
        **({} if base.graph_launch_s is None else {"graph_launch_us": {
            "value": _r(base.graph_launch_s * 1e6),
            "source": borrowed + base.sources.get("defaults.graph_launch_us", "")}}),
        **({} if not base.cpu_per_seq_s else {"cpu_per_seq_us": {
            "value": _r(base.cpu_per_seq_s * 1e6),
            "source": borrowed + base.sources.get("defaults.cpu_per_seq_us", "")}}),
    }


def calibrated_profile_dict(fit: Fit, *, name: str, base: HardwareProfile,
                            datasheet_peaks: bool, device_name: str,
                            memory_bytes: float, provenance: Mapping[str, Any]) -> dict:
    """The calibrated profile: measured curves and overheads, the base profile's links.

    With ``datasheet_peaks`` the peaks and bandwidth are the base's datasheet numbers
    (raised to a measurement that beats them) and the curves are relative to them;
    otherwise (a CPU, or a GPU with no matching profile) they are the measured maxima.
    """
    stat = fit.statistic
    measured = (f"measured with torch on {device_name} ({stat} of the repetitions, "
                f"dtype {fit.dtype}, {provenance.get('threads', '?')} threads)")

    peaks = _calibrated_peaks(fit, base, datasheet_peaks, measured)
    bw_source = base.sources.get("memory_bandwidth_gb_per_s", "datasheet") \
        if datasheet_peaks and fit.bandwidth_bytes_per_s == base.memory_bandwidth_bytes_per_s \
        else f"best read/copy bandwidth {measured}"
    borrowed = f"from profile {base.name}, not measured: "
    data = {
        "name": name,
        "description": f"{device_name}, calibrated with torch micro-benchmarks "
                       f"(efficiency curves for {fit.dtype})",
        "calibrated": True,
        "memory_gib": {"value": _r(memory_bytes / GIB),
                       "source": f"total memory torch reports for {device_name}"},
        "memory_bandwidth_gb_per_s": {"value": _r(fit.bandwidth_bytes_per_s / GB),
                                      "source": bw_source},
        "peak_tflops": peaks,
        "interconnect": _link_dict(base.interconnect,
                                   borrowed + base.sources.get("interconnect", "")),
        "host_link": _link_dict(base.host_link, borrowed + base.sources.get("host_link", "")),
        "defaults": _calibrated_defaults(fit, base, measured, borrowed),
        "calibration": {
            "provenance": dict(provenance),
            "compute_efficiency_curve": _curve(fit.compute_curve),
            "memory_efficiency_curve": _curve(fit.memory_curve),
        },
    }
    if fit.axis != "flops":  # only a cost model that knows the key may load this
        data["calibration"]["compute_efficiency_axis"] = fit.axis
    borrowed_collectives = collectives_to_dict(base.collectives)
    if borrowed_collectives:  # not measured by the torch path: the base's, as it says
        data["collectives"] = borrowed_collectives
    data["calibration"]["provenance"]["checksum"] = checksum(data)
    return data


def write_calibration(data: Mapping[str, Any], measurements: pd.DataFrame,
                      out: str | Path) -> tuple[Path, Path]:
    """Write the profile YAML and, beside it, the raw measurements as CSV; check it loads."""
    from simulator.output_paths import write_file_atomic
    out = Path(out)
    if out.suffix not in (".yaml", ".yml"):
        raise SpecsimError("a profile file must end in .yaml", field="--out",
                           source=str(out), fix="name it e.g. my-gpu.yaml")
    out.parent.mkdir(parents=True, exist_ok=True)
    csv_path = measurements_path(out)
    data = {**data, "calibration": {**data["calibration"], "provenance": {
        **data["calibration"]["provenance"], "measurements_csv": csv_path.name}}}
    text = dump_profile(data)
    write_file_atomic(csv_path, lambda p: measurements.to_csv(p, index=False), "--out")
    write_file_atomic(out, lambda p: p.write_text(text, encoding="utf-8"), "--out")
    load_calibrated(out)  # what we write must load back, checksum and all
    return out, csv_path


def measurements_path(profile_path: str | Path) -> Path:
    """The raw measurements CSV written beside a calibrated profile."""
    p = Path(profile_path)
    return p.with_name(p.stem + ".measurements.csv")


def load_calibrated(path: str | Path) -> HardwareProfile:
    """Load a calibrated profile, refusing one that is not calibrated or was hand-edited."""
    profile = load_profile_file(path)
    if not profile.calibrated:
        raise SpecsimError("this profile is not calibrated", source=str(path),
                           field="calibrated", fix="pass a profile written by specsim calibrate")
    missing = [k for k in REQUIRED_PROVENANCE if k not in profile.provenance]
    if missing and missing != ["checksum"]:
        raise SpecsimError("calibration provenance lacks " + ", ".join(missing),
                           source=str(path), field="calibration.provenance",
                           fix="re-run specsim calibrate")
    if "checksum" in profile.provenance:
        if profile.provenance["checksum"] != checksum(load_yaml_file(path)):
            raise SpecsimError("the calibrated numbers were edited after calibration "
                               "(checksum mismatch)", source=str(path),
                               field="calibration.provenance.checksum",
                               fix="re-run specsim calibrate, or delete the checksum line to "
                                   "accept the edit on purpose")
    return profile
