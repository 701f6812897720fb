"""Frames for the optional sections: calibration fits and validation errors.

``calibration`` may be a calibrated HardwareProfile, a calibration outcome with a ``fit``
(compute_curve, memory_curve and fitted scalars), or a DataFrame with measured_s and
predicted_s.  ``validation`` is a table with measured_s and one predicted_<label>_s (and
error_<label>) per hardware profile compared, as calibrate.validate.compare returns.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd

PREDICTED = re.compile(r"^predicted_(.+)_s$")
FIT_SCALARS = ("dtype", "peak_flops_per_s", "bandwidth_bytes_per_s", "kernel_overhead_s",
               "step_overhead_s", "launch_overhead_s", "measured_bandwidth_bytes_per_s",
               "rms_log_error", "statistic")


def efficiency_curve_frame(compute_curve, memory_curve, axis: str = "flops") -> pd.DataFrame:
    """Fitted efficiency against operator size (or intensity): curve, size, efficiency.

    ``axis`` is what the compute curve is indexed by: ``flops`` or ``intensity``.
    """
    parts = []
    compute_unit = "FLOPs per byte" if axis == "intensity" else "FLOPs"
    for name, unit, curve in (("compute", compute_unit, compute_curve),
                              ("memory", "bytes", memory_curve)):
        pts = np.asarray(curve or (), dtype=np.float64).reshape(-1, 2)
        if len(pts):
            parts.append(pd.DataFrame({"curve": f"{name} (size in {unit})", "size": pts[:, 0],
                                       "efficiency": pts[:, 1]}))
    if not parts:
        return pd.DataFrame(columns=["curve", "size", "efficiency"])
    return pd.concat(parts, ignore_index=True)


def calibration_frames(calibration) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(efficiency curves, fitted parameters as field/value, measured-vs-predicted points)."""
    empty = pd.DataFrame()
    if isinstance(calibration, pd.DataFrame):
        points = calibration if {"measured_s", "predicted_s"} <= set(calibration.columns) \
            else empty
        return efficiency_curve_frame((), ()), empty, points
    fit = getattr(calibration, "fit", None)
    if fit is not None and hasattr(fit, "compute_curve"):
        curves = efficiency_curve_frame(fit.compute_curve, fit.memory_curve,
                                        getattr(fit, "axis", "flops"))
        params = {k: getattr(fit, k) for k in FIT_SCALARS if hasattr(fit, k)}
        return curves, pd.DataFrame({"field": list(params), "value": list(params.values())}), \
            empty
    if hasattr(calibration, "compute_efficiency_curve"):  # a HardwareProfile
        curves = efficiency_curve_frame(calibration.compute_efficiency_curve,
                                        calibration.memory_efficiency_curve,
                                        calibration.compute_efficiency_axis)
        prov = dict(getattr(calibration, "provenance", {}) or {})
        params = {"hardware": calibration.name, **{k: v for k, v in prov.items()
                                                   if np.isscalar(v)}}
        return curves, pd.DataFrame({"field": list(params), "value": list(params.values())}), \
            empty
    if dataclasses.is_dataclass(calibration):
        flat = {k: v for k, v in dataclasses.asdict(calibration).items() if np.isscalar(v)}
        return efficiency_curve_frame((), ()), pd.DataFrame(
            {"field": list(flat), "value": list(flat.values())}), empty
    return efficiency_curve_frame((), ()), empty, empty


def validation_points(table: pd.DataFrame, max_points: int = 2000) -> pd.DataFrame:
    """measured_s, predicted_s, kind (the profile label) for every predicted_<label>_s column."""
    if "measured_s" not in table.columns:
        return pd.DataFrame(columns=["measured_s", "predicted_s", "kind"])
    parts = []
    for col in table.columns:
        m = PREDICTED.match(str(col))
        if m:
            parts.append(pd.DataFrame({"measured_s": table["measured_s"].to_numpy(float),
                                       "predicted_s": table[col].to_numpy(float),
                                       "kind": m.group(1)}))
    if not parts:
        return pd.DataFrame(columns=["measured_s", "predicted_s", "kind"])
    out = pd.concat(parts, ignore_index=True)
    out = out[np.isfinite(out["measured_s"]) & np.isfinite(out["predicted_s"])
              & (out["measured_s"] > 0) & (out["predicted_s"] > 0)]
    if len(out) > max_points:  # a fixed stride keeps the picture and the file size bounded
        out = out.iloc[np.linspace(0, len(out) - 1, max_points).astype(int)]
    return out.reset_index(drop=True)


def validation_errors(table: pd.DataFrame) -> pd.DataFrame:
    """Per profile label (and step, if given): cases, MAPE, median and worst signed error."""
    labels = [str(c)[len("error_"):] for c in table.columns if str(c).startswith("error_")]
    rows = []
    for label in labels:
        err = pd.to_numeric(table[f"error_{label}"], errors="coerce")
        groups = table.groupby("step", sort=False) if "step" in table.columns else [("all", table)]
        for step, g in groups:
            e = err.loc[g.index].to_numpy(float)
            e = e[np.isfinite(e)]
            if not e.size:
                continue
            rows.append({"profile": label, "step": step, "cases": int(e.size),
                         "mape": float(np.mean(np.abs(e))), "median_error": float(np.median(e)),
                         "worst_error": float(e[np.argmax(np.abs(e))])})
    return pd.DataFrame(rows, columns=["profile", "step", "cases", "mape", "median_error",
                                       "worst_error"])
