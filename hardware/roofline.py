"""The roofline operator formula: the one place an operator's time is computed from its
FLOPs and bytes.

An operator of ``F`` FLOPs moving ``B`` bytes costs
``count * max(F / (peak * eta_c), B / (bandwidth * eta_m)) + overhead`` (DESIGN.md section
4).  The efficiencies are constants, or calibrated curves piecewise linear in log10 of the
operator's bytes (``eta_m``) and of its FLOPs or arithmetic intensity F/B (``eta_c``,
``axis``), clamped at their ends.  The cost model prices every operator of a step with it
and calibration fits the curves to micro-benchmarks through it, so both read one formula
(calibrate/fit.py's loss is its differentiable twin, in torch).

Kernel-level methods (``gemm_time``, ``transfer_time``, ``attention_time``) price one kernel
of a given shape.  With a profile's ``kernels:`` block (hardware/kernels.py) they add tile and
wave quantisation, a fixed per-kernel latency and a floor; without one they are exactly the
flat formula ``max(F / (peak * eta_c), B / (bandwidth * eta_m))``.  The cost model and
``specsim validate --measurements`` both price kernels through them: one formula.
"""
from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np

from hardware.kernels import (
    ATTENTION_DECODE,
    ATTENTION_DECODE_MLA,
    ATTENTION_PREFILL,
    ATTENTION_PREFILL_FA3,
    ELEMENTWISE,
    GEMM,
    KernelShapes,
)
from simulator.inputs.errors import SpecsimError

AXES = ("flops", "intensity")   # what a compute-efficiency curve is indexed by
_ADD = np.add.reduce            # a sum without the ndarray.sum method layer
_NUMBERS = (float, int, type(None))  # np.ndim 0 without its exception path


def fast_ndim(x) -> int:
    """``np.ndim(x)``; 0 at once for a Python float, int or None (``np.ndim`` reads ``x.ndim``
    and, where there is none, converts ``x`` to an array after the AttributeError)."""
    return 0 if x.__class__ in _NUMBERS else np.ndim(x)


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
                 axis: str = "flops", kernels: KernelShapes | None = None,
                 dtype_bytes: int = 2) -> None:
        self._by_intensity = _by_intensity(axis)
        self.kernels = kernels          # None: the flat formula for every kernel
        self._kind_cache: dict[str, tuple] = {}
        self.dtype_bytes = dtype_bytes  # bytes of one element of the GEMM operands
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
        if fast_ndim(flops) == 0:
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

    # ------------------------------------------------------------ kernel-level methods
    def kind_rates(self, kind: str) -> tuple[float, float, float, float]:
        """(compute FLOP/s, memory bytes/s, latency s, floor s) of a ``kind`` of kernel
        (hardware/kernels.py); without a kernels block the flat rates, no latency, no floor."""
        k = self.kernels
        if k is None:
            return self.flat_compute_rate, self.flat_memory_rate, 0.0, 0.0
        hit = self._kind_cache.get(kind)
        if hit is not None:
            return hit[:4]
        r = k.rates(kind)
        c = self.flat_compute_rate if r.compute_efficiency is None \
            else self.peak_flops_per_s * r.compute_efficiency
        m = self.flat_memory_rate if r.memory_efficiency is None \
            else self.bandwidth_bytes_per_s * r.memory_efficiency
        # an L2-resident transfer's rate: its efficiency times the L2 bandwidth (HBM's
        # where the profile gives none), never below the HBM rate (bytes in L2 are not
        # fetched slower than from HBM); None where the kind or the profile has no L2 figure
        l2_rate = None if r.l2_memory_efficiency is None or k.l2_bytes is None else max(
            m, r.l2_memory_efficiency * (k.l2_bandwidth_bytes_per_s or self.bandwidth_bytes_per_s))
        out = (c, m, k.latency_s if r.latency_s is None else r.latency_s,
               k.min_kernel_s if r.min_kernel_s is None else r.min_kernel_s,
               l2_rate, r.row_bandwidth_bytes_per_s)
        self._kind_cache[kind] = out  # a kind's numbers never change: asked every step
        return out[:4]

    @staticmethod
    def _kernel(roof, latency: float, floor: float, launched):
        """A kernel's time from its roofline time: latency added, the floor applied, 0 for a
        kernel that is not launched (``launched`` False)."""
        t = np.maximum(roof + latency, floor)
        return np.where(launched, t, 0.0) if np.ndim(t) else (float(t) if launched else 0.0)

    def gemm_time(self, m, n, k):
        """Seconds of ONE GEMM kernel ``[m x k] @ [k x n]`` in this roofline's dtype.

        Moves the weights (``k*n``) and the activations (``m*k + m*n``) once; vectorised over
        ``m``.  With a kernels block the compute roof is divided by the tile and wave
        quantisation (``wave_efficiency``), the kernel's latency is added and its floor
        applied; without one it is exactly ``max(F / (peak eta_c), B / (bw eta_m))``.
        """
        m = np.asarray(m, dtype=np.float64) if fast_ndim(m) else float(m)
        flops = 2.0 * m * n * k
        nbytes = self.dtype_bytes * (k * n + m * k + m * n)
        if self.kernels is None:
            return np.maximum(self.compute_time(flops, nbytes), self.memory_time(nbytes))
        crate, mrate, latency, floor = self.kind_rates(GEMM)
        q = wave_efficiency(m, n, self.kernels.gemm_tiles, self.kernels.sm_count)
        if m.__class__ is float:  # scalar fast path (the cost model's hot path)
            if m <= 0:
                return 0.0
            compute = flops / (crate * q) if q > 0 else 0.0
            return max(max(compute, nbytes / mrate) + latency, floor)
        compute = np.where(q > 0, flops / (crate * np.maximum(q, 1e-300)), 0.0)
        roof = np.maximum(compute, nbytes / mrate)
        return self._kernel(roof if np.ndim(roof) else float(roof), latency, floor,
                            np.asarray(m) > 0)

    def transfer_time(self, nbytes, kind: str = ELEMENTWISE, rows=None):
        """Seconds of ONE memory-bound kernel moving ``nbytes`` (residual add, norm,
        activation, rope, embedding gather: hardware/kernels.py's kinds); vectorised.

        A transfer that fits in the L2 cache streams at its kind's ``l2_memory_efficiency``
        times the L2 bandwidth (hardware/kernels.py) where the profile gives one.  ``rows``
        (the tokens of a one-block-per-token kernel) bounds the time below by one row over
        the kind's ``row_bandwidth_gb_per_s``.  Without a kernels block: ``nbytes / (bw
        eta_m)``, today's formula.
        """
        if self.kernels is None:
            return self.memory_time(nbytes)
        _, mrate, latency, floor = self.kind_rates(kind)
        l2, row_bw = self._kind_cache[kind][4:]
        if not fast_ndim(nbytes) and not fast_ndim(rows):  # scalar fast path (the cost model's)
            if nbytes <= 0:
                return 0.0
            if l2 is not None and nbytes <= self.kernels.l2_bytes:
                mrate = l2
            roof = nbytes / mrate
            if rows is not None and row_bw is not None:
                roof = max(roof, nbytes / (max(rows, 1) * row_bw))
            return max(roof + latency, floor)
        if l2 is not None:
            mrate = np.where(np.asarray(nbytes) <= self.kernels.l2_bytes, l2, mrate)
            mrate = mrate if np.ndim(mrate) else float(mrate)
        roof = np.asarray(nbytes) / mrate if np.ndim(nbytes) or np.ndim(mrate) \
            else nbytes / mrate
        if rows is not None and row_bw is not None:
            roof = np.maximum(roof, np.asarray(nbytes) / (np.maximum(rows, 1) * row_bw))
        return self._kernel(roof if np.ndim(roof) else float(roof), latency, floor,
                            np.asarray(nbytes) > 0)

    def attention_time(self, flops, nbytes, query_tokens,
                       prefill_kind: str = ATTENTION_PREFILL) -> float:
        """Seconds of the attention kernels of one step, given per-request arrays.

        Requests with one query token (decode) run in one kernel, requests with more (prefill
        chunks, verification) in another, each priced ``sum_i max(F_i / compute rate,
        B_i / memory rate)`` at its kind's efficiencies, plus one latency and the floor per
        kernel launched; ``prefill_kind`` is the multi-query kernel the engine runs on this GPU
        (``prefill_kind_for``).  Without a kernels block: the plain sum of per-request roofline
        times, today's formula.  Requests with 0 query tokens are not in the step.
        """
        flops = _vector(flops)
        nbytes = _vector(nbytes)
        queries = _vector(query_tokens)
        if self.kernels is None:
            roof = np.maximum(self.compute_time(flops, nbytes), self.memory_time(nbytes))
            return float(np.where(queries > 0, roof, 0.0).sum())
        total, size = 0.0, queries.size
        decode = queries == 1
        n_decode = int(np.count_nonzero(decode))
        if n_decode:  # all decode (the common case): no gather
            total += self._attention_kernel(ATTENTION_DECODE, flops, nbytes,
                                            None if n_decode == size else decode)
        if n_decode < size:
            prefill = queries > 1
            n_prefill = int(np.count_nonzero(prefill))
            if n_prefill:  # all verification or chunks (a chain's steps): no mask either
                total += self._attention_kernel(prefill_kind, flops, nbytes,
                                                None if n_prefill == size else prefill)
        return total

    def prefill_kind_for(self, kernel: str) -> tuple[str, float]:
        """(kind, query overhead in keys) of the multi-query attention kernel an engine asking
        for ``kernel`` (simulator/cost/spec_catalog.py PREFILL_KERNELS) runs here: FlashAttention-3
        where the profile prices it (a Hopper profile's ``attention_prefill_fa3``), else the
        FlashAttention-2-class ``attention_prefill`` with no overhead."""
        k = self.kernels
        if kernel == "fa3" and k is not None and ATTENTION_PREFILL_FA3 in k.kinds:
            return ATTENTION_PREFILL_FA3, k.kinds[ATTENTION_PREFILL_FA3].query_overhead_tokens \
                or 0.0
        return ATTENTION_PREFILL, 0.0

    def for_mla(self) -> Roofline:
        """This roofline for an MLA model: its one-query attention kernel priced by the
        profile's ``attention_decode_mla`` entry where it has one (itself otherwise: the
        ``attention_decode`` entry prices MLA's decode kernels too)."""
        k = self.kernels
        if k is None or ATTENTION_DECODE_MLA not in k.kinds:
            return self
        out = copy.copy(self)
        out.kernels = dataclasses.replace(
            k, kinds={**k.kinds, ATTENTION_DECODE: k.kinds[ATTENTION_DECODE_MLA]})
        out._kind_cache = {}
        return out

    def _attention_kernel(self, kind: str, flops, nbytes, members) -> float:
        """One attention kernel over the requests in ``members`` (None: all of them); a
        masked sum rather than a gather (fewer passes over a step's small arrays)."""
        per_request = self.attention_roofs(kind, flops, nbytes)
        roof = float(_ADD(per_request) if members is None else _ADD(per_request, where=members))
        return self.attention_kernel_s(kind, roof)

    def attention_roofs(self, kind: str, flops, nbytes):
        """Per request, its roof time in a ``kind`` attention kernel (elementwise: any shape;
        ``attention_time`` sums them over a kernel's requests)."""
        crate, mrate, _, _ = self.kind_rates(kind)
        return np.maximum(flops / crate, nbytes / mrate)

    def attention_kernel_s(self, kind: str, roof, maximum=max):
        """A ``kind`` attention kernel's seconds from its requests' summed roofs: one
        latency, at least the floor (``maximum=np.maximum``: of an array of such sums)."""
        _, _, latency, floor = self.kind_rates(kind)
        return maximum(roof + latency, floor)

    def attention_line(self, kind: str, flops_slope: float, flops_base: float,
                       bytes_slope: float, bytes_base: float) -> tuple[float, ...] | None:
        """One request's attention time as a line in its context ``x`` when one roof holds for
        every ``x >= 0``: ``(slope s, intercept s, latency s, floor s)`` of the ``kind`` of
        kernel, from its FLOPs ``flops_slope * x + flops_base`` and bytes ``bytes_slope * x +
        bytes_base``.  ``max`` of two lines is one line on ``x >= 0`` iff one line's slope and
        intercept are both at least the other's; None where the roof can switch, and for
        curved efficiencies (not lines at all).  Without kernels the reciprocal rates are
        multiplied in (``time``'s flat formula), with them the kind's rates divide (as in
        ``attention_time``)."""
        if self.curved:
            return None
        if self.kernels is None:
            c_rate, m_rate = self.inverse_compute_rate, self.inverse_memory_rate
            comp = (flops_slope * c_rate, flops_base * c_rate)
            mem = (bytes_slope * m_rate, bytes_base * m_rate)
            latency = floor = 0.0
        else:
            crate, mrate, latency, floor = self.kind_rates(kind)
            comp = (flops_slope / crate, flops_base / crate)
            mem = (bytes_slope / mrate, bytes_base / mrate)
        if comp[0] >= mem[0] and comp[1] >= mem[1]:
            return comp + (latency, floor)
        if mem[0] >= comp[0] and mem[1] >= comp[1]:
            return mem + (latency, floor)
        return None


def _vector(values) -> np.ndarray:
    """A 1-D float64 array (no copy when it already is one)."""
    arr = np.asarray(values, dtype=np.float64)
    return arr.reshape(1) if arr.ndim == 0 else arr


def wave_efficiency(m, n, tiles, sm_count: int):
    """Useful over padded work of an ``m x n`` GEMM output: the best tile of ``tiles``.

    A tile ``(tm, tn)`` cuts the output into ``ceil(m/tm) * ceil(n/tn)`` thread blocks, run in
    ``waves = ceil(blocks / sm_count)`` waves; the GPU works as if on ``waves * sm_count``
    full tiles, so the efficiency is ``m * n / (waves * sm_count * tm * tn)`` (tile and wave
    quantisation, NVIDIA "Matrix Multiplication Background User's Guide").  0 when ``m`` or
    ``n`` is 0; vectorised over ``m`` (and ``n``).
    """
    if not fast_ndim(m) and not fast_ndim(n):  # the cost model's case: plain floats, fast
        m, n = float(m), float(n)
        out = 0.0
        for tm, tn in tiles:
            padded = math.ceil(math.ceil(m / tm) * math.ceil(n / tn) / sm_count) \
                * (sm_count * tm * tn)
            if padded > 0:
                out = max(out, m * n / padded)
        return out
    m_arr = np.asarray(m, dtype=np.float64)
    if not fast_ndim(n) and m_arr.ndim == 1 and n > 0:  # the cost model's tables' case
        return _waves_by_m(m_arr, float(n), tiles, sm_count)
    n_arr = np.asarray(n, dtype=np.float64)
    best = np.zeros(np.broadcast(m_arr, n_arr).shape)
    for tm, tn in tiles:
        blocks = np.ceil(m_arr / tm) * np.ceil(n_arr / tn)
        padded = np.ceil(blocks / sm_count) * (sm_count * tm * tn)
        best = np.maximum(best, np.where(padded > 0, m_arr * n_arr / np.maximum(padded, 1.0),
                                         0.0))
    return best if best.ndim else float(best)


def _waves_by_m(m: np.ndarray, n: float, tiles, sm_count: int) -> np.ndarray:
    """``wave_efficiency`` of counts ``m`` by one ``n``, the same floats in fewer passes:
    where the tiles pad to ``p_t > 0`` (every tile alike: ``m > 0`` and ``n > 0``), the best
    of ``m n / p_t`` is ``m n / min p_t`` (a correctly rounded quotient of a positive
    numerator does not rise with its divisor, so the rounded maximum is the rounded quotient
    by the least), and ``ceil(m / tm)`` is shared by the tiles of one ``tm``."""
    by_tm: dict = {}
    least = None
    for tm, tn in tiles:
        rows = by_tm.get(tm)
        if rows is None:
            rows = by_tm[tm] = np.ceil(m / tm)
        padded = np.ceil(rows * float(math.ceil(n / tn)) / sm_count) * (sm_count * tm * tn)
        least = padded if least is None else np.minimum(least, padded)
    return np.where(least > 0, m * n / np.maximum(least, 1.0), 0.0)
