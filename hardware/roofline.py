"""The roofline operator formula: the one place an operator's time is computed from its
FLOPs and bytes.

An operator of ``F`` FLOPs moving ``B`` bytes costs
``count * max(F / (peak * eta_c), B / (bandwidth * eta_m)) + overhead`` (DESIGN.md section
4).  The efficiencies are constants, or calibrated curves piecewise linear in log10 of the
operator's bytes (``eta_m``) and of its FLOPs or arithmetic intensity F/B (``eta_c``,
``axis``), clamped at their ends.  The cost model prices every operator of a step with it
and calibration fits the curves to micro-benchmarks through it, so both read one formula
(calibrate/fit.py's loss is its differentiable twin, in torch).
"""
from __future__ import annotations

import numpy as np

from simulator.inputs.errors import SpecsimError

AXES = ("flops", "intensity")   # what a compute-efficiency curve is indexed by

Curve = tuple[tuple[float, float], ...]


def compute_x(flops, nbytes, axis: str):
    """log10 of what the compute curve is read at: the FLOPs, or FLOPs per byte."""
    return _compute_x(flops, nbytes, _by_intensity(axis))


def _by_intensity(axis: str) -> bool:
    if axis not in AXES:
        raise SpecsimError(f"unknown curve axis {axis!r}", field="axis",
                           fix="use one of: " + ", ".join(AXES))
    return axis == "intensity"


def _compute_x(flops, nbytes, by_intensity: bool):
    if by_intensity:
        return np.log10(np.maximum(flops, 1e-12) / np.maximum(nbytes, 1.0))
    return np.log10(np.maximum(flops, 1.0))


def memory_x(nbytes):
    """log10 of what the memory curve is read at: the bytes moved."""
    return np.log10(np.maximum(nbytes, 1.0))


def _knots(curve: Curve) -> tuple[np.ndarray, np.ndarray] | None:
    if not curve:
        return None
    return np.log10([p[0] for p in curve]), np.array([p[1] for p in curve])


class Roofline:
    """One device's operator formula for one dtype: peaks, efficiencies or curves."""

    def __init__(self, peak_flops_per_s: float, bandwidth_bytes_per_s: float, *,
                 compute_efficiency: float = 1.0, memory_efficiency: float = 1.0,
                 compute_curve: Curve = (), memory_curve: Curve = (),
                 axis: str = "flops") -> None:
        self._by_intensity = _by_intensity(axis)
        self.peak_flops_per_s = peak_flops_per_s
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        self.axis = axis
        # the rates of an operator when no curve applies, and their reciprocals
        self.flat_compute_rate = peak_flops_per_s * compute_efficiency
        self.flat_memory_rate = bandwidth_bytes_per_s * memory_efficiency
        self.inverse_compute_rate = 1.0 / self.flat_compute_rate
        self.inverse_memory_rate = 1.0 / self.flat_memory_rate
        self._ccurve = _knots(compute_curve)
        self._mcurve = _knots(memory_curve)
        self.curved = self._ccurve is not None or self._mcurve is not None

    def compute_rate(self, flops, nbytes):
        """FLOP/s an operator of ``flops`` FLOPs moving ``nbytes`` bytes reaches."""
        if self._ccurve is None:
            return self.flat_compute_rate
        x = _compute_x(flops, nbytes, self._by_intensity)
        return self.peak_flops_per_s * np.interp(x, *self._ccurve)

    def memory_rate(self, nbytes):
        """Bytes/s an operator moving ``nbytes`` bytes reaches."""
        if self._mcurve is None:
            return self.flat_memory_rate
        return self.bandwidth_bytes_per_s * np.interp(memory_x(nbytes), *self._mcurve)

    def compute_time(self, flops, nbytes):
        """Seconds of the compute roof (0 for an operator without FLOPs)."""
        if np.ndim(flops) == 0:
            return flops / self.compute_rate(flops, nbytes) if flops else 0.0
        return np.where(flops > 0, flops / self.compute_rate(flops, nbytes), 0.0)

    def memory_time(self, nbytes):
        """Seconds of the memory roof."""
        return nbytes / self.memory_rate(nbytes)

    def time(self, flops, nbytes, *, count=None, overhead_s: float = 0.0):
        """Seconds of ``count`` runs (default one) of an operator, plus ``overhead_s``.

        Without curves the reciprocal rates are multiplied in (the engine's hot path), which
        can differ from ``compute_time`` and ``memory_time`` in the last bit.
        """
        if self.curved:
            roof = np.maximum(self.compute_time(flops, nbytes), self.memory_time(nbytes))
        else:
            roof = np.maximum(flops * self.inverse_compute_rate,
                              nbytes * self.inverse_memory_rate)
        if count is not None:
            roof = count * roof
        return roof + overhead_s if overhead_s else roof
