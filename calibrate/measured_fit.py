"""Fit a profile's kernel parameters to published kernel measurements (calibrate/measured.py).

What is fitted, each by minimising the mean absolute percentage error of the very formula
hardware/roofline.py prices with (Nelder-Mead on a few parameters, no torch, no scipy):

- GEMMs: the compute efficiency of a full wave of full tiles and the memory efficiency of the
  weight stream (the profile's ``defaults``), and the kernel latency (``kernels.latency_us``);
  the SM count and the tile menu are the base profile's datasheet facts, never fitted.
- each kind of memory-bound kernel present (embedding, norm, rope, activation, residual):
  its memory efficiency and latency (``kernels.<kind>``).
- attention, where an attention CSV is present: the prefill compute efficiency and latency,
  the decode memory efficiency and latency.
- the floor (``kernels.min_kernel_us``): the shortest kernel measured.

The fitted profile is checked through ``measured.predict`` (the validator's path), so the
numbers written are the numbers the validation and the cost model see.
"""
from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from calibrate.measured import (
    DTYPE,
    DTYPE_BYTES,
    ROW_KINDS,
    Measurements,
    attention_terms,
    compare,
    gemm_shape,
    predict,
    transfer_bytes,
)
from hardware.kernels import MAX_L2_EFFICIENCY, KernelShapes, KindRates
from hardware.profile import HardwareProfile
from hardware.roofline import wave_efficiency
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import load_yaml_file

MAX_EFFICIENCY = 1.0
MIN_EFFICIENCY = 1e-3
MAX_LATENCY_S = 1e-3
# the memory-bound kinds (hardware/kernels.py) that ``fit_kinds`` refits by default
SMALL_KINDS = ("embedding", "norm", "activation", "rope", "elementwise")


@dataclass(frozen=True)
class KernelFit:
    """Fitted numbers (SI units) and how well each kind was fitted (in-sample MAPE)."""

    compute_efficiency: float
    memory_efficiency: float
    latency_s: float
    min_kernel_s: float
    kinds: dict[str, KindRates]
    counts: dict[str, int]
    mape: dict[str, float]


def nelder_mead(f: Callable[[np.ndarray], float], x0, step, iters: int = 400,
                tol: float = 1e-7) -> np.ndarray:
    """Minimise ``f`` from ``x0`` (initial simplex ``x0 + step`` per axis): Nelder and Mead
    (1965) with the standard coefficients (reflect 1, expand 2, contract 0.5, shrink 0.5)."""
    x0 = np.asarray(x0, dtype=np.float64)
    pts = [x0] + [x0 + np.eye(len(x0))[i] * step[i] for i in range(len(x0))]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) <= tol * (abs(vals[0]) + 1e-12):
            break
        centre = np.mean(pts[:-1], axis=0)
        xr = centre + (centre - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = centre + 2.0 * (centre - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centre + 0.5 * (pts[-1] - centre)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    return pts[int(np.argmin(vals))]


def _eff(x: float) -> float:
    return float(np.clip(np.exp(x), MIN_EFFICIENCY, MAX_EFFICIENCY))


def _l2(x: float) -> float:
    return float(np.clip(np.exp(x), MIN_EFFICIENCY, MAX_L2_EFFICIENCY))


def _lat(x: float) -> float:
    return float(np.clip(np.exp(x), 0.0, MAX_LATENCY_S))


def _mape(pred: np.ndarray, measured: np.ndarray) -> float:
    return float(np.abs(pred / measured - 1.0).mean())


def _rate(x: float) -> float:
    return float(np.clip(np.exp(x), 1e6, 1e13))


_TRANSFORMS = {"eff": _eff, "time": _lat, "l2": _l2, "rate": _rate}


def _fit_kind(model: Callable[..., np.ndarray], measured: np.ndarray,
              params: tuple[tuple[str, float], ...]) -> tuple[tuple[float, ...], float]:
    """The parameters (each ``(transform, start)``: an efficiency, a time or an L2
    efficiency) minimising the MAPE of ``model(*params)``, from a few starts; and the MAPE."""
    funcs = [_TRANSFORMS[kind] for kind, _ in params]

    def unpack(v):
        return tuple(f(x) for f, x in zip(funcs, v))

    def loss(v):
        return _mape(model(*unpack(v)), measured)

    steps = [1.0 if kind == "time" else 0.3 for kind, _ in params]
    best = None
    for scale in (1.0, 0.6, 1.5):   # restarts: the MAPE surface has flat stretches
        x0 = np.log([max(start * (scale if kind in ("eff", "l2") else 1.0), 1e-7)
                     for kind, start in params])
        x = nelder_mead(loss, x0, steps, iters=800)
        if best is None or loss(x) < best[1]:
            best = (x, loss(x))
    return unpack(best[0]), best[1]


def _fit_transfer(rows: pd.DataFrame, measured: np.ndarray, kind: str, shapes: KernelShapes,
                  bw: float, start: tuple[float, float, float]) -> tuple[KindRates, float]:
    """One memory-bound kind: efficiency, latency, floor, and where the profile knows its L2
    and the kind is one block per row, the L2-resident efficiency and the row bandwidth."""
    b = transfer_bytes(rows)
    cnt = rows["count"].to_numpy(float)
    fits = b <= shapes.l2_bytes if shapes.l2_bytes is not None else np.zeros(len(b), bool)
    row_bytes = b / np.maximum(rows["tokens"].to_numpy(float), 1.0)
    params = [("eff", start[0]), ("time", start[1]), ("time", start[2])]
    use_l2, use_rows = shapes.l2_bytes is not None, kind in ROW_KINDS
    l2_bw = shapes.l2_bandwidth_bytes_per_s or bw   # what the L2 efficiency is a fraction of
    if use_l2:   # started at the HBM rate: the L2 rate is never below it
        params.append(("l2", start[0] * bw / l2_bw))
    if use_rows:
        params.append(("rate", 1e10))   # bytes/s one block reaches; vLLM's rows: ~10 GB/s

    def model(e, t, f, *rest):
        rest = list(rest)
        rate = np.where(fits, max(l2_bw * rest.pop(0), bw * e), bw * e) if use_l2 else bw * e
        roof = b / rate
        if use_rows:
            roof = np.maximum(roof, row_bytes / rest.pop(0))
        return cnt * np.maximum(t + roof, f)

    values, err = _fit_kind(model, measured, tuple(params))
    e, t0, fl, *rest = values
    return KindRates(memory_efficiency=e, latency_s=t0, min_kernel_s=fl,
                     l2_memory_efficiency=rest.pop(0) if use_l2 else None,
                     row_bandwidth_bytes_per_s=rest.pop(0) if use_rows else None), err


def _shapes(base: HardwareProfile) -> KernelShapes:
    if base.kernels is None:
        raise SpecsimError(f"profile {base.name} has no kernels: block (SM count and GEMM "
                           "tiles)", field="--hardware",
                           fix="name a GPU profile with a kernels: block, e.g. a100-80gb")
    return base.kernels


def fit_kernels(kernels: pd.DataFrame, base: HardwareProfile) -> KernelFit:
    """Fit the kernel parameters of ``base`` to a ``Measurements.kernels`` table."""
    shapes = _shapes(base)
    peak = base.peak_flops(DTYPE)
    bw = base.memory_bandwidth_bytes_per_s
    measured = kernels["measured_s"].to_numpy(float)
    floor = float(measured.min())
    kind = kernels["kind"].to_numpy()
    kinds: dict[str, KindRates] = {}
    counts: dict[str, int] = {}
    mape: dict[str, float] = {}
    g = kind == "gemm"
    if not g.any():
        raise SpecsimError("no GEMM kernel among the measurements", field="--from-measurements",
                           fix="give mlp.csv files (they hold the GEMMs)")
    m, n, k = gemm_shape(kernels[g])
    flops, nbytes = 2 * m * n * k, DTYPE_BYTES * (k * n + m * k + m * n)
    q = wave_efficiency(m, n, shapes.gemm_tiles, shapes.sm_count)
    mg = measured[g]

    def gemm(v):
        ec, em, lat = _eff(v[0]), _eff(v[1]), _lat(v[2])
        return np.maximum(lat + np.maximum(flops / (peak * ec * q), nbytes / (bw * em)), floor)

    x = nelder_mead(lambda v: _mape(gemm(v), mg),
                    np.log([base.compute_efficiency, base.memory_efficiency,
                            max(shapes.latency_s, 1e-7)]), [0.2, 0.2, 1.0], iters=600)
    ec, em, lat = _eff(x[0]), _eff(x[1]), _lat(x[2])
    counts["gemm"], mape["gemm"] = int(g.sum()), _mape(gemm(x), mg)
    for kd in sorted(set(kind) - {"gemm", "attention_prefill", "attention_decode"}):
        rows = kind == kd
        kinds[kd], mape[kd] = _fit_transfer(kernels[rows], measured[rows], kd, shapes, bw,
                                            (base.memory_efficiency, lat, floor))
        counts[kd] = int(rows.sum())
    for kd in ("attention_prefill", "attention_decode"):
        rows = kind == kd
        if rows.any():
            kinds[kd], mape[kd] = _fit_attention(kernels[rows], measured[rows], kd, peak, bw,
                                                 (ec, em, lat, floor))
            counts[kd] = int(rows.sum())
    return KernelFit(ec, em, lat, floor, kinds, counts, mape)


def _fit_attention(rows: pd.DataFrame, measured: np.ndarray, kd: str, peak: float, bw: float,
                   start: tuple[float, float, float, float]) -> tuple[KindRates, float]:
    """One attention kind: prefill's compute efficiency or decode's memory efficiency, its
    latency and floor; the other roof at ``start``'s GEMM efficiencies (compute, memory)."""
    ec, em, lat, floor = start
    terms = [attention_terms(r) for r in rows.itertuples(index=False)]
    f_ = np.array([t[0][0] for t in terms])
    b_ = np.array([t[1][0] for t in terms])
    reqs = np.array([len(t[0]) for t in terms], dtype=float)
    if kd == "attention_prefill":
        def model(e, t, f):
            return np.maximum(t + reqs * np.maximum(f_ / (peak * e), b_ / (bw * em)), f)
    else:
        def model(e, t, f):
            return np.maximum(t + reqs * np.maximum(f_ / (peak * ec), b_ / (bw * e)), f)
    (e, t0, fl), err = _fit_kind(model, measured, (("eff", 0.5), ("time", lat), ("time", floor)))
    rates = KindRates(compute_efficiency=e) if kd == "attention_prefill" \
        else KindRates(memory_efficiency=e)
    return dataclasses.replace(rates, latency_s=t0, min_kernel_s=fl), err


def fit_kinds(kernels: pd.DataFrame, base: HardwareProfile,
              kinds=SMALL_KINDS) -> dict[str, tuple[KindRates, float, int]]:
    """Refit only ``kinds`` of ``base`` to the rows of ``kernels`` of those kinds, the GEMM
    numbers, latency and floor left as ``base`` has them: ``{kind: (rates, in-sample MAPE,
    rows)}`` for each kind present.  How the built-in A100 profiles' memory-bound kinds were
    fitted to Vidur's A100 kernels (hardware/profiles/a100-80gb.yaml says so, kind by kind)."""
    shapes = _shapes(base)
    peak, bw = base.peak_flops(DTYPE), base.memory_bandwidth_bytes_per_s
    start = (base.compute_efficiency, base.memory_efficiency, shapes.latency_s,
             shapes.min_kernel_s)
    measured = kernels["measured_s"].to_numpy(float)
    kind = kernels["kind"].to_numpy()
    out = {}
    for kd in kinds:
        rows = kind == kd
        if not rows.any():
            continue
        if kd.startswith("attention"):
            rates, err = _fit_attention(kernels[rows], measured[rows], kd, peak, bw, start)
        else:
            rates, err = _fit_transfer(kernels[rows], measured[rows], kd, shapes, bw,
                                       (base.memory_efficiency, start[2], start[3]))
        out[kd] = (rates, err, int(rows.sum()))
    return out


def fitted_profile(base: HardwareProfile, fit: KernelFit) -> HardwareProfile:
    """``base`` with the fitted numbers (in memory; ``calibrated_dict`` writes them)."""
    shapes = _shapes(base)
    kinds = {**{k: v for k, v in shapes.kinds.items() if k not in fit.kinds}, **fit.kinds}
    return dataclasses.replace(
        base, compute_efficiency=fit.compute_efficiency, memory_efficiency=fit.memory_efficiency,
        kernels=dataclasses.replace(shapes, latency_s=fit.latency_s,
                                    min_kernel_s=fit.min_kernel_s, kinds=kinds))


def _r(x: float) -> float:
    return float(f"{float(x):.12g}")


def calibrated_dict(base: HardwareProfile, fit: KernelFit, ms: Measurements, *, name: str,
                    command: str, excluded=()) -> dict:
    """The calibrated profile as YAML data: the base file's every entry, the fitted numbers
    with their sources (the fit, the files, the statistic), and the provenance."""
    from calibrate.writer import checksum
    data = copy.deepcopy(dict(load_yaml_file(base.path)))
    where = (f"fit to {sum(fit.counts.values())} published kernel timings "
             f"({ms.statistic} of each row) under {ms.root}, models "
             f"{', '.join(sorted(set(ms.kernels['model'])))}")

    def src(kind: str, what: str) -> str:
        return (f"{what}: least mean absolute percentage error over the {fit.counts[kind]} "
                f"{kind} kernels (in-sample MAPE {fit.mape[kind] * 100:.1f}%), {where}")

    data["name"] = name
    data["description"] = f"{base.description}, calibrated from published kernel measurements"
    data["calibrated"] = True
    defaults = dict(data["defaults"])
    defaults["compute_efficiency"] = {
        "value": _r(fit.compute_efficiency),
        "source": src("gemm", "GEMM compute efficiency of a full wave of full tiles")}
    defaults["memory_efficiency"] = {
        "value": _r(fit.memory_efficiency), "source": src("gemm", "GEMM weight-stream efficiency")}
    data["defaults"] = defaults
    kern = dict(data["kernels"])
    kern["latency_us"] = {"value": _r(fit.latency_s * 1e6),
                          "source": src("gemm", "GEMM kernel latency")}
    kern["min_kernel_us"] = {"value": _r(fit.min_kernel_s * 1e6),
                             "source": f"the shortest of the {sum(fit.counts.values())} kernels "
                                       f"measured ({ms.statistic} of its row), {where}"}
    for kind, rates in fit.kinds.items():
        entry = {k: _r(v) for k, v in (("compute_efficiency", rates.compute_efficiency),
                                       ("memory_efficiency", rates.memory_efficiency))
                 if v is not None}
        entry["latency_us"] = _r(rates.latency_s * 1e6)
        entry["min_kernel_us"] = _r(rates.min_kernel_s * 1e6)
        if rates.l2_memory_efficiency is not None:
            entry["l2_memory_efficiency"] = _r(rates.l2_memory_efficiency)
        if rates.row_bandwidth_bytes_per_s is not None:
            entry["row_bandwidth_gb_per_s"] = _r(rates.row_bandwidth_bytes_per_s / 1e9)
        fitted = [k for k, v in (("L2-resident efficiency", rates.l2_memory_efficiency),
                                 ("row bandwidth", rates.row_bandwidth_bytes_per_s)) if v]
        entry["source"] = src(kind, ", ".join([f"{kind} efficiency", "latency", "floor"]
                                              + fitted))
        kern[kind] = entry
    data["kernels"] = kern
    data["calibration"] = {"provenance": {
        "device": f"{ms.root} (published measurements)", "device_type": "cuda", "dtype": DTYPE,
        "statistic": ms.statistic, "threads": "n/a", "torch": "not used",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command, "base_profile": base.name, "measurements": ms.root,
        "models": sorted(set(ms.kernels["model"])), "excluded_models": sorted(excluded),
        "kernels_fitted": int(sum(fit.counts.values())),
        "fit_mape_percent": {k: round(v * 100, 3) for k, v in fit.mape.items()}}}
    data["calibration"]["provenance"]["checksum"] = checksum(data)
    # provenance near the top: the writer recognises its own files by their first 4 KiB
    head = ("name", "description", "calibrated", "calibration")
    return {**{k: data[k] for k in head}, **{k: v for k, v in data.items() if k not in head}}


def measurement_table(ms: Measurements, profile: HardwareProfile) -> tuple[pd.DataFrame, float]:
    """The kernels with the profile's prediction beside each (the CSV written beside a
    calibrated profile), and the MAPE over them."""
    pred = predict(ms.kernels, profile.roofline(DTYPE))
    table = ms.kernels.copy()
    table["predicted_s"] = pred
    table["error"] = pred / table["measured_s"] - 1.0
    return table, compare(ms.kernels, pred)[1]
