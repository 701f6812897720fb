"""Fit the cost model's efficiencies and overheads to micro-benchmark measurements.

Overheads: a tiny model's step time grows linearly with its layer count.  The cost model is
asked how many kernel overheads it charges per layer and per step (a probe with a free
roofline), so the slope over the first is the per-kernel overhead and the intercept, less
the second times it, is the fixed per-step overhead, whatever the cost model's accounting.

Efficiencies: the cost model prices an operator with hardware/roofline.py's formula,
``max(count * max(F / (peak * eta_c), B / (bandwidth * eta_m)), launch)`` with ``eta_m``
piecewise linear in log10 of the bytes and ``eta_c`` in log10 of the FLOPs (``axis="flops"``,
what the cost model reads today) or of the arithmetic intensity F/B (``axis="intensity"``).
The knot values, every half decade over the measured range, are fitted by least squares on
log time over every GEMM, read, copy and attention measurement at once, with a penalty on
the curves' curvature whose weight is chosen by k-fold cross-validation over those same
micro-benchmarks (knots without data follow their neighbours; conflicting points cannot
carve spikes).  Fitting the
model's own formula, max and all, makes the curves whatever lets the cost model reproduce the
micro-benchmarks; no validation case is ever seen here.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from calibrate.bench_overhead import TINY_CONTEXT, tiny_spec
from hardware.profile import HardwareProfile, Link
from hardware.roofline import Roofline, compute_x
from simulator.cost.cost_model import CostModel
from simulator.inputs.errors import SpecsimError

STATISTICS = ("median", "min")
CURVE_KINDS = ("gemm", "read", "copy", "attention")
KNOTS_PER_DECADE = 2
SMOOTHINGS = (1e-4, 1e-3, 1e-2, 1e-1)   # candidates, chosen by cross-validation
FOLDS = 4
MIN_EFFICIENCY = 1e-6


@dataclass(frozen=True)
class Fit:
    """Fitted roofline parameters of one device for one dtype (SI units)."""

    dtype: str
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    compute_curve: tuple[tuple[float, float], ...]
    memory_curve: tuple[tuple[float, float], ...]
    kernel_overhead_s: float
    step_overhead_s: float
    launch_overhead_s: float
    measured_peak_flops_per_s: dict[str, float] = field(default_factory=dict)
    measured_bandwidth_bytes_per_s: float = 0.0
    rms_log_error: float = 0.0   # of the fitted formula over the curve measurements
    statistic: str = "median"
    axis: str = "flops"
    smoothing: float = 0.0       # curvature weight chosen by cross-validation


def _times(frame: pd.DataFrame, statistic: str) -> np.ndarray:
    if statistic not in STATISTICS:
        raise SpecsimError(f"unknown statistic {statistic!r}", field="statistic",
                           fix="use one of: " + ", ".join(STATISTICS))
    return frame[f"{statistic}_s"].to_numpy(dtype=float)


def charged_kernels(dtype: str) -> tuple[float, float]:
    """Kernel overheads the cost model charges (per layer, per step) for a tiny model."""
    free = HardwareProfile(
        name="probe", description="free roofline, 1 s per kernel", memory_bytes=1e15,
        memory_bandwidth_bytes_per_s=1e30, peak_flops_per_s={dtype: 1e30},
        interconnect=Link("probe", 1e30, 0.0), host_link=Link("probe", 1e30, 0.0),
        compute_efficiency=1.0, memory_efficiency=1.0, kernel_overhead_s=1.0,
        step_overhead_s=0.0)
    one, two = (CostModel(free, tiny_spec("opt", n, dtype)).decode_time(1, TINY_CONTEXT)
                for n in (1, 2))
    return two - one, 2 * one - two


def fit_overheads(frame: pd.DataFrame, statistic: str = "median",
                  dtype: str = "fp32") -> tuple[float, float]:
    """(kernel overhead, step overhead) in seconds from the tiny-model forwards."""
    tiny = frame[(frame["kind"] == "tiny_forward") & (frame["status"] == "ok")]
    if tiny["layers"].nunique() < 2:
        raise SpecsimError("need tiny-model timings at two or more layer counts",
                           field="tiny_layers", fix="keep at least two tiny_layers")
    slope, intercept = np.polyfit(tiny["layers"].to_numpy(dtype=float),
                                  _times(tiny, statistic), 1)
    per_layer, per_step = charged_kernels(dtype)
    kernel = max(float(slope), 0.0) / per_layer
    return kernel, max(float(intercept) - per_step * kernel, 0.0)


def _knots(values: np.ndarray) -> np.ndarray:
    """log10 knots: the smallest and largest value and every half decade between them."""
    lo, hi = np.log10(values.min()), np.log10(values.max())
    inner = np.arange(np.floor(lo * KNOTS_PER_DECADE) + 1, np.ceil(hi * KNOTS_PER_DECADE)) \
        / KNOTS_PER_DECADE
    inner = inner[(inner > lo + 0.05) & (inner < hi - 0.05)]
    return np.concatenate([[lo], inner, [max(hi, lo + 1.0 / KNOTS_PER_DECADE)]])


def _interp_matrix(x: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """Rows of weights so that ``W @ y`` is ``np.interp(x, knots, y)`` (clamped at the ends)."""
    x = np.clip(x, knots[0], knots[-1])
    hi = np.clip(np.searchsorted(knots, x, side="right"), 1, len(knots) - 1)
    lo = hi - 1
    frac = (x - knots[lo]) / (knots[hi] - knots[lo])
    w = np.zeros((x.size, knots.size))
    w[np.arange(x.size), lo] = 1.0 - frac
    w[np.arange(x.size), hi] += frac
    return w


def predict(frame: pd.DataFrame, *, peak_flops_per_s: float, bandwidth_bytes_per_s: float,
            compute_curve, memory_curve, kernel_overhead_s: float,
            axis: str = "flops") -> np.ndarray:
    """Seconds the cost model's operator formula gives for each GEMM/read/copy/attention row:
    its roofline, or the launch when kernels launched back to back are shorter than it
    (``max(count * roofline, launch)``, as the cost model prices an eager operator)."""
    roof = Roofline(peak_flops_per_s, bandwidth_bytes_per_s, compute_curve=tuple(compute_curve),
                    memory_curve=tuple(memory_curve), axis=axis)
    return np.maximum(roof.time(frame["flops"].to_numpy(dtype=float),
                                frame["bytes"].to_numpy(dtype=float),
                                count=frame["count"].to_numpy(dtype=float)), kernel_overhead_s)


def _initial(eff: np.ndarray, x: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """Per-knot median of direct efficiency estimates; empty knots copy the nearest one."""
    init = np.full(knots.size, np.nan)
    nearest = np.abs(x[:, None] - knots[None, :]).argmin(axis=1)
    for j in range(knots.size):
        if np.any(nearest == j):
            init[j] = np.median(eff[nearest == j])
    filled = np.flatnonzero(np.isfinite(init))
    for j in np.flatnonzero(~np.isfinite(init)):
        init[j] = init[filled[np.abs(filled - j).argmin()]]
    return np.clip(init, 1e-4, 0.95)


def _curve_rows(frame: pd.DataFrame) -> pd.DataFrame:
    rows = frame[frame["kind"].isin(CURVE_KINDS) & (frame["status"] == "ok")]
    if not (rows["kind"] == "gemm").any() or not rows["kind"].isin(("read", "copy")).any():
        raise SpecsimError("need at least one GEMM and one memory measurement",
                           field="measurements", fix="re-run specsim calibrate")
    return rows.reset_index(drop=True)


def _fit_inputs(rows: pd.DataFrame, statistic: str, axis: str, peak_flops_per_s: float,
                bandwidth_bytes_per_s: float) -> tuple:
    """The measurements as arrays, the curves' axes and knots, and each curve's start."""
    flops = rows["flops"].to_numpy(dtype=float)
    nbytes = rows["bytes"].to_numpy(dtype=float)
    count = rows["count"].to_numpy(dtype=float)
    times = _times(rows, statistic)
    # the part of a measurement the roofline must explain, per counted operator (a start)
    net = times / count
    has_flops = flops > 0
    cx = compute_x(flops, nbytes, axis)
    mx = np.log10(nbytes)
    cknots = _knots(10.0 ** cx[has_flops])
    mknots = _knots(nbytes)
    c0 = _initial(flops[has_flops] / (peak_flops_per_s * net[has_flops]), cx[has_flops], cknots)
    m0 = _initial(nbytes[~has_flops] / (bandwidth_bytes_per_s * net[~has_flops]),
                  mx[~has_flops], mknots)
    return flops, nbytes, count, times, cx, mx, cknots, mknots, c0, m0


def _fit_batch(rows: pd.DataFrame, weights: np.ndarray, smoothing: np.ndarray, *,
               peak_flops_per_s: float, bandwidth_bytes_per_s: float,
               kernel_overhead_s: float, statistic: str, axis: str, max_iter: int):
    """Fit one pair of curves per row of ``weights`` (which measurements count) at once.

    The variants share nothing but the knots, so one L-BFGS run over their summed
    objectives fits them all (cross-validation folds and smoothing weights in one go).
    Returns (compute knots, memory knots, compute eff [V, kc], memory eff [V, km],
    weighted mean squared log error per variant).
    """
    flops, nbytes, count, times, cx, mx, cknots, mknots, c0, m0 = _fit_inputs(
        rows, statistic, axis, peak_flops_per_s, bandwidth_bytes_per_s)

    def t(a) -> torch.Tensor:
        return torch.tensor(np.asarray(a, dtype=float), dtype=torch.float64)

    variants = weights.shape[0]
    wc, wm = t(_interp_matrix(cx, cknots)), t(_interp_matrix(mx, mknots))
    f_t, b_t, n_t, log_t = t(flops), t(nbytes), t(count), t(np.log(times))
    w_t = t(weights / weights.sum(axis=1, keepdims=True))
    lam = t(smoothing)

    def start(e0):  # log_eff(v) = log(e0): v = log(e0 / (1 - e0)), one row per variant
        return t(np.tile(np.log(e0 / (1.0 - e0)), (variants, 1))).requires_grad_(True)

    vc, vm = start(c0), start(m0)

    def log_eff(v):  # smooth, at most 0, and equal to v well below it
        return -torch.nn.functional.softplus(-v)

    def losses():  # Roofline.time (hardware/roofline.py) in torch, differentiable in eta
        lc, lm = log_eff(vc), log_eff(vm)
        compute = torch.where(f_t > 0, f_t / (peak_flops_per_s * (torch.exp(lc) @ wc.T)),
                              torch.zeros_like(f_t))
        memory = b_t / (bandwidth_bytes_per_s * (torch.exp(lm) @ wm.T))
        pred = torch.clamp(n_t * torch.maximum(compute, memory), min=kernel_overhead_s)
        data = (w_t * (torch.log(pred) - log_t).pow(2)).sum(dim=1)
        # curvature of log efficiency per half decade: knots without data follow their
        # neighbours, and conflicting points cannot carve spikes
        smooth = sum((u[:, 2:] - 2 * u[:, 1:-1] + u[:, :-2]).pow(2).sum(dim=1)
                     for u in (lc, lm) if u.shape[1] > 2)
        return data, lam * smooth

    opt = torch.optim.LBFGS([vc, vm], lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-10, tolerance_change=1e-12)

    def closure():
        opt.zero_grad()
        data, smooth = losses()
        total = (data + smooth).sum()
        total.backward()
        return total

    opt.step(closure)
    with torch.no_grad():
        data, _ = losses()
        ceff = np.clip(torch.exp(log_eff(vc)).numpy(), MIN_EFFICIENCY, 1.0)
        meff = np.clip(torch.exp(log_eff(vm)).numpy(), MIN_EFFICIENCY, 1.0)
    return cknots, mknots, ceff, meff, data.numpy()


def fit_curves(frame: pd.DataFrame, *, peak_flops_per_s: float, bandwidth_bytes_per_s: float,
               kernel_overhead_s: float, statistic: str = "median", axis: str = "flops",
               smoothing: float = 1e-3, max_iter: int = 500):
    """(compute curve, memory curve, rms log error) fitted to the curve measurements."""
    rows = _curve_rows(frame)
    cknots, mknots, ceff, meff, data = _fit_batch(
        rows, np.ones((1, len(rows))), np.array([smoothing]), peak_flops_per_s=peak_flops_per_s,
        bandwidth_bytes_per_s=bandwidth_bytes_per_s, kernel_overhead_s=kernel_overhead_s,
        statistic=statistic, axis=axis, max_iter=max_iter)
    compute_curve = tuple((float(10 ** x), float(e)) for x, e in zip(cknots, ceff[0]))
    memory_curve = tuple((float(10 ** x), float(e)) for x, e in zip(mknots, meff[0]))
    return compute_curve, memory_curve, float(np.sqrt(data[0]))


def choose_smoothing(frame: pd.DataFrame, *, peak_flops_per_s: float,
                     bandwidth_bytes_per_s: float, kernel_overhead_s: float,
                     statistic: str = "median", axis: str = "flops") -> float:
    """The smoothing weight whose fits best predict held-out micro-benchmarks (k-fold).

    Noise-free data earns little smoothing, noisy or conflicting data more; the smoother
    weight wins a near tie.  Only micro-benchmarks are involved; the knots are those of
    the whole set.
    """
    rows = _curve_rows(frame)
    fold = np.arange(len(rows)) % FOLDS
    lams = np.repeat(SMOOTHINGS, FOLDS)
    held = np.tile(np.arange(FOLDS), len(SMOOTHINGS))
    weights = (fold[None, :] != held[:, None]).astype(float)
    common = dict(peak_flops_per_s=peak_flops_per_s, bandwidth_bytes_per_s=bandwidth_bytes_per_s,
                  kernel_overhead_s=kernel_overhead_s, axis=axis)
    cknots, mknots, ceff, meff, _ = _fit_batch(rows, weights, lams, statistic=statistic,
                                               max_iter=300, **common)
    log_t = np.log(_times(rows, statistic))
    scores = np.zeros(len(SMOOTHINGS))
    for v in range(len(lams)):
        test = rows[fold == held[v]]
        pred = predict(test, compute_curve=tuple(zip(10 ** cknots, ceff[v])),
                       memory_curve=tuple(zip(10 ** mknots, meff[v])), **common)
        scores[v // FOLDS] += ((np.log(pred) - log_t[fold == held[v]]) ** 2).sum()
    # within 1% of the best counts as a tie; the smoothest such weight wins
    return float(max(lam for lam, sc in zip(SMOOTHINGS, scores) if sc <= scores.min() * 1.01))


def fit(frame: pd.DataFrame, *, dtype: str, datasheet_peak_flops_per_s: float | None = None,
        datasheet_bandwidth_bytes_per_s: float | None = None, statistic: str = "median",
        axis: str = "flops") -> Fit:
    """Fit everything: peaks (datasheet, or the measured maximum), curves and overheads.

    A datasheet peak below what was measured is raised to the measurement, so that every
    efficiency stays at most 1.
    """
    ok = frame[frame["status"] == "ok"]
    gemm = ok[ok["kind"] == "gemm"]
    rates = gemm["flops"] / _times(gemm, statistic)
    measured_peaks = {str(dt): float(r.max()) for dt, r in rates.groupby(gemm["dtype"])}
    if dtype not in measured_peaks:
        raise SpecsimError(f"no GEMM of dtype {dtype} was measured", field="dtype",
                           fix="re-run specsim calibrate with room for the GEMM grid")
    mem = ok[ok["kind"].isin(("read", "copy"))]
    if mem.empty:
        raise SpecsimError("no memory-bandwidth measurement", field="measurements",
                           fix="re-run specsim calibrate")
    measured_bw = float((mem["bytes"] / _times(mem, statistic)).max())
    peak = max(datasheet_peak_flops_per_s or 0.0, measured_peaks[dtype])
    bw = max(datasheet_bandwidth_bytes_per_s or 0.0, measured_bw)
    kernel, step = fit_overheads(ok, statistic, dtype)
    own = ok[(ok["dtype"] == dtype) | ok["kind"].isin(("read", "copy"))]
    common = dict(peak_flops_per_s=peak, bandwidth_bytes_per_s=bw, kernel_overhead_s=kernel,
                  statistic=statistic, axis=axis)
    smoothing = choose_smoothing(own, **common)
    ccurve, mcurve, rms = fit_curves(own, smoothing=smoothing, **common)
    launch = ok[ok["kind"] == "launch"]
    return Fit(dtype=dtype, peak_flops_per_s=peak, bandwidth_bytes_per_s=bw,
               compute_curve=ccurve, memory_curve=mcurve, kernel_overhead_s=kernel,
               step_overhead_s=step,
               launch_overhead_s=float(_times(launch, statistic)[0]) if len(launch) else 0.0,
               measured_peak_flops_per_s=measured_peaks,
               measured_bandwidth_bytes_per_s=measured_bw, rms_log_error=rms,
               statistic=statistic, axis=axis, smoothing=smoothing)
