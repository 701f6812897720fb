"""Collectives of one device: all-reduce, all-gather, all-to-all and send/recv time by message
size and world.

The form is the nccl-tests one (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md): a collective
of ``S`` bytes over ``p`` ranks moves ``S * factor`` bytes through each rank's link, with
``factor = 2(p-1)/p`` for a ring all-reduce, ``(p-1)/p`` for an all-gather (``S`` = the gathered
size) and 1 for a send/recv; the bus bandwidth ``busbw`` is that traffic over the time.  NCCL
changes protocol (LL, LL128, Simple) and algorithm with the message size, and measured times
have a latency floor below a few MiB, so one straight line does not hold from 2 KiB to 256 MiB.
A world's time is therefore a :class:`Curve` of at most a few pieces, each
``latency_i + bytes * factor / busbw_i`` on its own range of sizes, joined so that the time is
continuous and non-decreasing in the message size (a flat piece has ``busbw = inf``).

World sizes without a curve of their own (:meth:`Collectives.basis` says which rule priced
one): between two measured worlds, their times at the same size interpolated linearly in the
world size; below the smallest, its curve at the bytes a rank moves, ``S factor(p) /
factor(p_min)`` (latency and bus bandwidth held); above the largest, the same plus its zero-size
latency grown linearly in ``p - 1`` (the ring's hops), ``latency_0 (p - p_max) / (p_max - 1)``.

vLLM's custom all-reduce (vllm/distributed/device_communicators/custom_all_reduce.py) replaces
NCCL for world sizes 2, 4, 6, 8 within one node on NVLink (or two PCIe GPUs with P2P) and
messages below its ``max_size`` (8 MiB by default); ``custom=True`` prices it where the profile
has it, NCCL elsewhere.  Fitting to measured files: :mod:`hardware.collectives_fit`
(:func:`fit_collectives`, :func:`fit_pieces`, re-exported here); a profile's ``collectives:``
block read and written back: :mod:`hardware.collectives_yaml`.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hardware.collectives_fit import fit_collectives, fit_pieces
from simulator.inputs.errors import SpecsimError

KIB = 1024
GB = 1e9
US = 1e-6
# vllm/distributed/device_communicators/custom_all_reduce.py: CustomAllreduce
# _SUPPORTED_WORLD_SIZES = [2, 4, 6, 8] and __init__(..., max_size=8192 * 1024).
CUSTOM_WORLDS = (2, 4, 6, 8)
CUSTOM_MAX_BYTES = 8192 * 1024
JOIN_TOLERANCE = 0.01        # pieces that miss each other by more than 1% (+0.01 us) are refused


def all_reduce_factor(world: int) -> float:
    """Bytes through each rank's link per byte all-reduced (ring): 2(p-1)/p."""
    return 2.0 * (world - 1) / world


def all_gather_factor(world: int) -> float:
    """Bytes through each rank's link per byte of the gathered output: (p-1)/p."""
    return (world - 1) / world


def all_to_all_factor(world: int) -> float:
    """Bytes leaving each rank per byte of its all-to-all send buffer: (p-1)/p (nccl-tests
    PERFORMANCE.md: alltoall busbw = algbw (n-1)/n)."""
    return (world - 1) / world


@dataclass(frozen=True)
class Curve:
    """One world's time: piece ``i`` covers ``[starts[i], starts[i+1])`` bytes and costs
    ``latencies[i] + bytes * factor / busbw[i]`` seconds; built by :func:`joined`."""

    world: int
    factor: float
    starts: tuple[float, ...]
    latencies: tuple[float, ...]
    busbw: tuple[float, ...]

    def __call__(self, nbytes):
        """Seconds at ``nbytes`` (a float, or an array of sizes)."""
        if isinstance(nbytes, float):
            i = bisect.bisect_right(self.starts, nbytes) - 1
            return self.latencies[i] + nbytes * self.factor / self.busbw[i]
        i = np.searchsorted(np.asarray(self.starts), nbytes, side="right") - 1
        return np.asarray(self.latencies)[i] + nbytes * self.factor / np.asarray(self.busbw)[i]


def joined(world: int, factor: float, starts: Sequence[float], latency0: float,
           busbw: Sequence[float]) -> Curve:
    """The continuous curve from the first piece's latency and every piece's bus bandwidth:
    each later piece's latency is whatever makes it meet the piece before at its start."""
    lats = [float(latency0)]
    for s, bw_before, bw in zip(starts[1:], busbw, busbw[1:]):
        lats.append(lats[-1] + s * factor * (1.0 / bw_before - 1.0 / bw))
    return Curve(world, factor, tuple(float(s) for s in starts), tuple(lats),
                 tuple(float(b) for b in busbw))


def _sizes(nbytes: Any):
    """A float for one size (the fast path: no numpy), else a float array."""
    if type(nbytes) in (int, float) and 0 <= nbytes < math.inf:
        return float(nbytes)
    if np.ndim(nbytes) == 0 and not isinstance(nbytes, bool):
        try:
            x = float(nbytes)
        except (TypeError, ValueError):
            x = math.nan
        if math.isfinite(x) and x >= 0:
            return x
    arr = np.asarray(nbytes, dtype=float)
    if arr.ndim == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise SpecsimError("message sizes must be finite and >= 0 bytes", field="nbytes",
                           fix="pass the message size in bytes")
    return arr


def _finish(t, x):
    """Zero where there is nothing to send; a float for a float."""
    if isinstance(x, float):
        return float(t) if x > 0 else 0.0
    return np.where(x > 0, t, 0.0)


def _world_time(curves: tuple[Curve, ...], nbytes, world: int,
                factor: Callable[[int], float]):
    """Time at ``world`` from the measured curves (the rules in the module docstring)."""
    worlds = [c.world for c in curves]
    if world in worlds:
        return curves[worlds.index(world)](nbytes)
    if world < worlds[0] or world > worlds[-1]:
        c = curves[0] if world < worlds[0] else curves[-1]
        t = c(nbytes * factor(world) / factor(c.world))
        if world > c.world:
            t = t + c.latencies[0] * (world - c.world) / (c.world - 1)
        return t
    hi = next(i for i, w in enumerate(worlds) if w > world)
    lo_c, hi_c = curves[hi - 1], curves[hi]
    w = (world - lo_c.world) / (hi_c.world - lo_c.world)
    return (1.0 - w) * lo_c(nbytes) + w * hi_c(nbytes)


def _basis(curves: tuple[Curve, ...], world: int) -> str:
    worlds = [c.world for c in curves]
    if world in worlds:
        return f"world {world}: its own curve"
    if world < worlds[0]:
        return f"world {world}: world {worlds[0]}'s curve at the bytes a rank moves"
    if world > worlds[-1]:
        return (f"world {world}: extrapolated from world {worlds[-1]} (latency linear in p-1, "
                "bus bandwidth held)")
    hi = next(w for w in worlds if w > world)
    lo = max(w for w in worlds if w < world)
    return f"world {world}: interpolated between worlds {lo} and {hi} (linear in world size)"


def _check_world(world: Any) -> int:
    if type(world) is int and world >= 1:
        return world
    if isinstance(world, bool) or not isinstance(world, (int, np.integer)) or world < 1:
        raise SpecsimError(f"world size must be a whole number >= 1, got {world!r}",
                           field="world", fix="pass the number of ranks (tensor parallel size)")
    return int(world)


@dataclass(frozen=True)
class Collectives:
    """One device's collectives (seconds, bytes); from a profile's ``collectives:`` block
    (:func:`parse_collectives`) or, without one, from its interconnect (:meth:`from_link`)."""

    all_reduce: tuple[Curve, ...] = ()
    custom_all_reduce: tuple[Curve, ...] = ()
    custom_max_bytes: float = CUSTOM_MAX_BYTES
    all_gather: tuple[Curve, ...] = ()         # empty: the all-reduce curves at half the bytes
    send_recv: Curve | None = None
    all_to_all: tuple[Curve, ...] = ()         # empty: derived from send/recv (all_to_all_s)
    ep_normal: tuple[Curve, ...] = ()          # DeepEP's normal kernels (ep_normal_s)
    gpus_per_node: int = 8                     # the NVLink domain those kernels forward in
    link_bandwidth_bytes_per_s: float = 0.0    # > 0: the ring formulas on one link
    link_latency_s: float = 0.0
    sources: Mapping[str, str] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    block: Mapping[str, Any] = field(default_factory=dict)   # the validated profile block

    def __post_init__(self) -> None:
        if self.link_bandwidth_bytes_per_s <= 0 and (not self.all_reduce or not self.send_recv):
            raise SpecsimError("collectives need all-reduce curves and a send/recv curve, or "
                               "a link", field="collectives",
                               fix="use parse_collectives or Collectives.from_link")

    @classmethod
    def from_link(cls, link: Any, source: str = "") -> "Collectives":
        """Today's formulas on a link (``bandwidth_bytes_per_s``, ``latency_s``): all-reduce
        ``2(p-1) latency + S 2(p-1)/p / bw``, all-gather ``(p-1) latency + S (p-1)/p / bw``,
        send/recv ``latency + S / bw``; no custom all-reduce."""
        text = source or "ring formulas on the profile's interconnect (no collectives: block)"
        return cls(link_bandwidth_bytes_per_s=float(link.bandwidth_bytes_per_s),
                   link_latency_s=float(link.latency_s), sources={"collectives": text})

    @property
    def from_interconnect(self) -> bool:
        return self.link_bandwidth_bytes_per_s > 0 and not self.all_reduce

    def _ring(self, nbytes, hops: float, factor: float):
        return hops * self.link_latency_s + nbytes * factor / self.link_bandwidth_bytes_per_s

    def _nccl_all_reduce(self, nbytes, world: int):
        if self.from_interconnect:
            return self._ring(nbytes, 2 * (world - 1), all_reduce_factor(world))
        return _world_time(self.all_reduce, nbytes, world, all_reduce_factor)

    def all_reduce_s(self, nbytes: Any, world: int, *, custom: bool = True):
        """Seconds to all-reduce ``nbytes`` over ``world`` ranks (an array gives an array)."""
        world, x = _check_world(world), _sizes(nbytes)
        if world == 1:
            return _finish(0.0 * x, x)
        use_custom = custom and self.custom_all_reduce and world in CUSTOM_WORLDS
        if isinstance(x, float):
            if use_custom and x < self.custom_max_bytes:
                return _finish(_world_time(self.custom_all_reduce, x, world,
                                           all_reduce_factor), x)
            return _finish(self._nccl_all_reduce(x, world), x)
        t = self._nccl_all_reduce(x, world)
        if use_custom:
            fast = _world_time(self.custom_all_reduce, x, world, all_reduce_factor)
            t = np.where(x < self.custom_max_bytes, fast, t)
        return _finish(t, x)

    def all_gather_s(self, nbytes_out: Any, world: int):
        """Seconds to all-gather into ``nbytes_out`` bytes (the gathered size) over ``world``
        ranks.  Without an all_gather block: the NCCL all-reduce curve at half the bytes, i.e.
        the same latency and bus bandwidth with the all-gather's (p-1)/p of traffic (the ring
        all-reduce is a reduce-scatter plus an all-gather; nccl-tests PERFORMANCE.md)."""
        world, x = _check_world(world), _sizes(nbytes_out)
        if world == 1:
            return _finish(0.0 * x, x)
        if self.from_interconnect:
            t = self._ring(x, world - 1, all_gather_factor(world))
        elif self.all_gather:
            t = _world_time(self.all_gather, x, world, all_gather_factor)
        else:
            t = self._nccl_all_reduce(x / 2.0, world)
        return _finish(t, x)

    def all_to_all_s(self, nbytes: Any, world: int):
        """Seconds of an all-to-all in which every rank sends ``nbytes`` (its whole send
        buffer, nccl-tests' size; a 1/p share stays on the rank) over ``world`` ranks.

        From a measured ``all_to_all`` block where the profile has one.  Otherwise derived,
        labelled by ``basis``: the send/recv curve at the bytes that leave a rank,
        ``S (p-1)/p``: each rank's p-1 outgoing pieces go out concurrently through its own
        links (a switched fabric: NVSwitch), so the rank's link carries their total as one
        transfer would, at one message latency; on the interconnect formula, one latency
        plus ``S (p-1)/p / bw``.  An upper bound where the fabric is a ring (PCIe without a
        switch), whose hops the derivation does not count."""
        world, x = _check_world(world), _sizes(nbytes)
        if world == 1:
            return _finish(0.0 * x, x)
        if self.all_to_all:
            t = _world_time(self.all_to_all, x, world, all_to_all_factor)
        elif self.send_recv is not None:
            t = self.send_recv(x * all_to_all_factor(world))
        else:
            t = self._ring(x, 1, all_to_all_factor(world))
        return _finish(t, x)

    def ep_normal_s(self, nbytes: Any, world: int):
        """Seconds of a DeepEP normal-mode dispatch or combine over ``world`` ranks that moves
        ``nbytes`` through its bottleneck (``simulator/cost/dp_attention.py``
        ``dispatch_bytes``: a rank's tokens once per node they reach beyond one node, once per
        rank within one), from the profile's ``ep_normal`` block (DeepEP's own convention:
        time = latency + bytes / bottleneck bandwidth); within one node (``world`` at most
        ``gpus_per_node``) the kernels move them over NVLink: the send/recv curve at those
        bytes; without the block, the all-to-all of the same bytes."""
        world, x = _check_world(world), _sizes(nbytes)
        if world == 1:
            return _finish(0.0 * x, x)
        if self.ep_normal and world <= self.gpus_per_node:
            return self.send_recv_s(x)
        if not self.ep_normal:
            return self.all_to_all_s(x, world)
        return _finish(_world_time(self.ep_normal, x, world, lambda _: 1.0), x)

    def send_recv_s(self, nbytes: Any):
        """Seconds to send ``nbytes`` from one pipeline stage to the next."""
        x = _sizes(nbytes)
        t = self._ring(x, 1, 1.0) if self.send_recv is None else self.send_recv(x)
        return _finish(t, x)

    def basis(self, op: str, world: int = 2) -> str:
        """Which rule prices ``op`` ("all_reduce", "custom_all_reduce", "all_gather",
        "send_recv") at ``world``: a measured curve, an interpolation, or the link formula."""
        if op == "send_recv":
            return "send/recv curve" if self.send_recv else "interconnect link formula"
        if op == "ep_normal" and not self.ep_normal:
            return "not available: the all-to-all of the same bytes is used"
        if op == "ep_normal" and _check_world(world) <= self.gpus_per_node:
            return f"world {world}: within one node, the send/recv curve at the same bytes"
        if op == "all_to_all" and not self.all_to_all:
            return ("derived: the send/recv curve at the (p-1)/p of the bytes that leave a "
                    "rank" if self.send_recv else "derived: interconnect link formula at "
                    "(p-1)/p of the bytes, one latency")
        if self.from_interconnect:
            return "interconnect ring formula"
        curves = {"all_reduce": self.all_reduce, "custom_all_reduce": self.custom_all_reduce,
                  "all_gather": self.all_gather or self.all_reduce,
                  "all_to_all": self.all_to_all, "ep_normal": self.ep_normal}.get(op)
        if curves is None:
            raise SpecsimError(f"unknown collective {op!r}", field="op",
                               fix="one of all_reduce, custom_all_reduce, all_gather, "
                                   "all_to_all, send_recv")
        world = _check_world(world)
        if op == "custom_all_reduce" and curves and world not in CUSTOM_WORLDS:
            return f"world {world}: vLLM runs no custom all-reduce there; NCCL's is used"
        if not curves:
            return "not available: NCCL's all-reduce is used"
        derived = op == "all_gather" and not self.all_gather
        return ("NCCL all-reduce at half the bytes, " if derived else "") + _basis(curves, world)


# --- the profile block --------------------------------------------------------------------


__all__ = ["CUSTOM_MAX_BYTES", "CUSTOM_WORLDS", "Collectives", "Curve", "all_gather_factor",
           "all_reduce_factor", "all_to_all_factor", "fit_collectives", "fit_pieces",
           "joined"]
