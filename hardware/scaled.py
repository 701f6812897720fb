"""A profile whose every step runs ``factor`` times slower: one draw of the cost model's
error (simulator/uncertainty), applied to the device rather than to the cost model, so that
every cost model built on it (target, draft, a policy's own) and every fast path prices
with it unchanged.

Rates (peak FLOP/s, HBM, L2 and link bandwidths, collective bus bandwidths) are divided by
``factor`` and times (launch, host and kernel latencies, collective latencies) multiplied
by it; efficiencies and their curves are fractions of a rate and stay.  The steps of a run
are then ``factor`` times as long, within rounding (tests/simulator/test_uncertainty.py).
"""
from __future__ import annotations

import dataclasses

from hardware.collectives import Collectives, Curve
from hardware.kernels import KindRates
from hardware.profile import HardwareProfile, Link


def slower_by(hw: HardwareProfile, factor: float) -> HardwareProfile:
    """``hw`` with every rate divided and every latency multiplied by ``factor`` (> 0)."""
    f = float(factor)
    kernels = hw.kernels
    if kernels is not None:
        kernels = dataclasses.replace(
            kernels, latency_s=kernels.latency_s * f, min_kernel_s=kernels.min_kernel_s * f,
            l2_bandwidth_bytes_per_s=None if kernels.l2_bandwidth_bytes_per_s is None
            else kernels.l2_bandwidth_bytes_per_s / f,
            kinds={k: _kind(r, f) for k, r in kernels.kinds.items()})
    return dataclasses.replace(
        hw, memory_bandwidth_bytes_per_s=hw.memory_bandwidth_bytes_per_s / f,
        peak_flops_per_s={k: v / f for k, v in hw.peak_flops_per_s.items()},
        interconnect=_link(hw.interconnect, f), host_link=_link(hw.host_link, f),
        kernel_overhead_s=hw.kernel_overhead_s * f, step_overhead_s=hw.step_overhead_s * f,
        graph_launch_s=None if hw.graph_launch_s is None else hw.graph_launch_s * f,
        cpu_per_seq_s=hw.cpu_per_seq_s * f, kernels=kernels,
        collectives=_collectives(hw.collectives, f))


def _link(link: Link, f: float) -> Link:
    return dataclasses.replace(link, bandwidth_bytes_per_s=link.bandwidth_bytes_per_s / f,
                               latency_s=link.latency_s * f)


def _kind(r: KindRates, f: float) -> KindRates:
    def times(x: float | None) -> float | None:
        return None if x is None else x * f
    return dataclasses.replace(r, latency_s=times(r.latency_s),
                               min_kernel_s=times(r.min_kernel_s),
                               row_bandwidth_bytes_per_s=None if r.row_bandwidth_bytes_per_s
                               is None else r.row_bandwidth_bytes_per_s / f)


def _curve(c: Curve, f: float) -> Curve:
    return dataclasses.replace(c, latencies=tuple(x * f for x in c.latencies),
                               busbw=tuple(b / f for b in c.busbw))


def _collectives(c: Collectives | None, f: float) -> Collectives | None:
    if c is None:
        return None
    def each(curves: tuple[Curve, ...]) -> tuple[Curve, ...]:
        return tuple(_curve(x, f) for x in curves)
    return dataclasses.replace(
        c, all_reduce=each(c.all_reduce), custom_all_reduce=each(c.custom_all_reduce),
        all_gather=each(c.all_gather), all_to_all=each(c.all_to_all), send_recv=None if c.send_recv is None else _curve(c.send_recv, f),
        link_bandwidth_bytes_per_s=c.link_bandwidth_bytes_per_s / f,
        link_latency_s=c.link_latency_s * f)
