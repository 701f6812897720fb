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
(:func:`fit_collectives`, :func:`fit_pieces`, re-exported here).
"""
from __future__ import annotations

import bisect
import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hardware.collectives_fit import fit_collectives, fit_pieces
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_bool, as_number, as_str, check_keys, require_mapping

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
        if op == "all_to_all" and not self.all_to_all:
            return ("derived: the send/recv curve at the (p-1)/p of the bytes that leave a "
                    "rank" if self.send_recv else "derived: interconnect link formula at "
                    "(p-1)/p of the bytes, one latency")
        if self.from_interconnect:
            return "interconnect ring formula"
        curves = {"all_reduce": self.all_reduce, "custom_all_reduce": self.custom_all_reduce,
                  "all_gather": self.all_gather or self.all_reduce,
                  "all_to_all": self.all_to_all}.get(op)
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

_TOP = ("all_reduce", "custom_all_reduce", "all_gather", "all_to_all", "send_recv",
        "from_interconnect")
_OP_KEYS = ("source", "provenance", "worlds")
_CUSTOM_KEYS = ("source", "provenance", "worlds", "available", "max_kib")
_SEND_KEYS = ("source", "provenance", "pieces")
_PIECE_KEYS = ("from_kib", "latency_us", "busbw_gb_per_s")


def _pieces(data: Any, *, world: int, factor: float, source: str, field: str) -> Curve:
    if not isinstance(data, list) or not 1 <= len(data) <= 16:
        raise SpecsimError("expected a list of 1 to 16 pieces", source=source, field=field,
                           fix="write pieces: [{from_kib: 0, latency_us: ..., "
                               "busbw_gb_per_s: ...}, ...]")
    starts, lats, bws = [], [], []
    for i, piece in enumerate(data):
        f = f"{field}[{i}]"
        piece = require_mapping(piece, source=source, field=f)
        check_keys(piece, allowed=_PIECE_KEYS, required=("from_kib", "latency_us"),
                   source=source, prefix=f + ".")
        start = KIB * as_number(piece["from_kib"], source=source, field=f + ".from_kib",
                                minimum=0, maximum=1e9, fix="the piece's first message size, "
                                "in KiB (0 to 1e9)")
        if (i == 0 and start != 0) or (i > 0 and start <= starts[-1]):
            raise SpecsimError("pieces must start at 0 KiB and then at increasing sizes",
                               source=source, field=f + ".from_kib",
                               fix="order the pieces by from_kib, the first from 0")
        starts.append(start)
        lats.append(US * as_number(piece["latency_us"], source=source, field=f + ".latency_us",
                                   minimum=0, maximum=1e6, fix="a latency in microseconds, "
                                   "0 to 1e6 (the piece's time at zero bytes)"))
        bw = piece.get("busbw_gb_per_s")
        bws.append(math.inf if bw is None else GB * as_number(
            bw, source=source, field=f + ".busbw_gb_per_s", strictly_positive=True,
            maximum=1e6, fix="a bus bandwidth in GB/s (0 to 1e6); leave it out for a flat "
            "piece"))
    curve = joined(world, factor, starts, lats[0], bws)
    for i in range(1, len(starts)):
        want, got = curve.latencies[i], lats[i]
        at = want + starts[i] * factor / bws[i]
        if abs(got - want) > JOIN_TOLERANCE * at + 0.01 * US:
            raise SpecsimError(
                f"piece {i} does not join piece {i - 1}: at {starts[i] / KIB:g} KiB the one "
                f"before ends at {at / US:.3f} us", source=source, field=f"{field}[{i}]"
                ".latency_us", fix=f"set latency_us to {want / US:.3f} (pieces must be "
                "continuous and non-decreasing in message size)")
    return curve


def _worlds(data: Any, factor: Callable[[int], float], *, source: str,
            field: str) -> tuple[Curve, ...]:
    if not isinstance(data, list) or not data:
        raise SpecsimError("expected a list of {world: N, pieces: [...]} entries",
                           source=source, field=field, fix="give at least one world")
    curves: list[Curve] = []
    for i, entry in enumerate(data):
        f = f"{field}[{i}]"
        entry = require_mapping(entry, source=source, field=f)
        check_keys(entry, allowed=("world", "pieces"), required=("world", "pieces"),
                   source=source, prefix=f + ".")
        world = as_number(entry["world"], source=source, field=f + ".world", integer=True,
                          minimum=2, maximum=4096, fix="a world size (ranks), 2 to 4096")
        if curves and world <= curves[-1].world:
            raise SpecsimError("worlds must be listed in increasing order, each once",
                               source=source, field=f + ".world", fix="sort them by world")
        curves.append(_pieces(entry["pieces"], world=world, factor=factor(world),
                              source=source, field=f + ".pieces"))
    return tuple(curves)


def _op_block(data: Any, keys: tuple, required: tuple, *, source: str, field: str,
              sources: dict, provenance: dict) -> Mapping[str, Any]:
    data = require_mapping(data, source=source, field=field)
    check_keys(data, allowed=keys, required=required, source=source, prefix=field + ".")
    sources[field] = as_str(data["source"], source=source, field=field + ".source")
    if "provenance" in data:
        provenance[field] = dict(require_mapping(data["provenance"], source=source,
                                                 field=field + ".provenance"))
    return data


def _custom(data: Any, *, source: str, sources: dict, provenance: dict) -> tuple:
    field = "collectives.custom_all_reduce"
    data = _op_block(data, _CUSTOM_KEYS, ("source",), source=source, field=field,
                     sources=sources, provenance=provenance)
    available = as_bool(data.get("available", True), source=source, field=field + ".available")
    if not available:
        if "worlds" in data or "max_kib" in data:
            raise SpecsimError("available: false takes no worlds or max_kib", source=source,
                               field=field, fix="drop them, or set available: true")
        return (), CUSTOM_MAX_BYTES
    if "worlds" not in data:
        raise SpecsimError("missing required key", source=source, field=field + ".worlds",
                           fix="add 'worlds: ...', or set available: false")
    max_bytes = KIB * as_number(data.get("max_kib", CUSTOM_MAX_BYTES / KIB), source=source,
                                field=field + ".max_kib", strictly_positive=True, maximum=1e7,
                                fix="vLLM's max_size in KiB (8192 by default)")
    curves = _worlds(data["worlds"], all_reduce_factor, source=source, field=field + ".worlds")
    return curves, max_bytes


def parse_collectives(data: Any, *, source: str, link: Any = None) -> Collectives | None:
    """A profile's ``collectives:`` block as a :class:`Collectives` (None when absent).

    ``all_reduce`` (NCCL) and ``send_recv`` are required; ``all_gather`` and
    ``custom_all_reduce`` are optional.  ``from_interconnect: {source: ...}`` instead says the
    profile's interconnect ring formulas are meant (``link`` is that interconnect)."""
    if data is None:
        return None
    data = require_mapping(data, source=source, field="collectives")
    check_keys(data, allowed=_TOP, source=source, prefix="collectives.")
    sources: dict[str, str] = {}
    provenance: dict[str, Any] = {}
    custom, max_bytes = (), CUSTOM_MAX_BYTES
    if "custom_all_reduce" in data:
        custom, max_bytes = _custom(data["custom_all_reduce"], source=source, sources=sources,
                                    provenance=provenance)
    if "from_interconnect" in data:
        _op_block(data["from_interconnect"], ("source",), ("source",), source=source,
                  field="collectives.from_interconnect", sources=sources, provenance=provenance)
        others = sorted(set(data) - {"from_interconnect", "custom_all_reduce"})
        if others or custom or link is None:
            raise SpecsimError("from_interconnect stands alone (a custom_all_reduce block may "
                               "only say available: false) and needs the profile's "
                               "interconnect", source=source, field="collectives."
                               + (others[0] if others else "from_interconnect"),
                               fix="drop the other blocks, or drop from_interconnect")
        return Collectives(link_bandwidth_bytes_per_s=float(link.bandwidth_bytes_per_s),
                           link_latency_s=float(link.latency_s), sources=sources,
                           provenance=provenance, block=copy.deepcopy(dict(data)))
    check_keys(data, allowed=_TOP, required=("all_reduce", "send_recv"), source=source,
               prefix="collectives.")
    ar = _op_block(data["all_reduce"], _OP_KEYS, ("source", "worlds"), source=source,
                   field="collectives.all_reduce", sources=sources, provenance=provenance)
    gather: tuple[Curve, ...] = ()
    if "all_gather" in data:
        ag = _op_block(data["all_gather"], _OP_KEYS, ("source", "worlds"), source=source,
                       field="collectives.all_gather", sources=sources, provenance=provenance)
        gather = _worlds(ag["worlds"], all_gather_factor, source=source,
                         field="collectives.all_gather.worlds")
    a2a: tuple[Curve, ...] = ()
    if "all_to_all" in data:
        aa = _op_block(data["all_to_all"], _OP_KEYS, ("source", "worlds"), source=source,
                       field="collectives.all_to_all", sources=sources, provenance=provenance)
        a2a = _worlds(aa["worlds"], all_to_all_factor, source=source,
                      field="collectives.all_to_all.worlds")
    sr = _op_block(data["send_recv"], _SEND_KEYS, ("source", "pieces"), source=source,
                   field="collectives.send_recv", sources=sources, provenance=provenance)
    return Collectives(
        all_reduce=_worlds(ar["worlds"], all_reduce_factor, source=source,
                           field="collectives.all_reduce.worlds"),
        custom_all_reduce=custom, custom_max_bytes=max_bytes, all_gather=gather,
        all_to_all=a2a,
        send_recv=_pieces(sr["pieces"], world=2, factor=1.0, source=source,
                          field="collectives.send_recv.pieces"),
        sources=sources, provenance=provenance, block=copy.deepcopy(dict(data)))


def collectives_to_dict(collectives: Collectives) -> dict | None:
    """The profile's ``collectives:`` block as it was read (None for a profile without one),
    so that a profile written back (calibrate/writer.py) keeps it."""
    return copy.deepcopy(dict(collectives.block)) if collectives.block else None



__all__ = ["CUSTOM_MAX_BYTES", "CUSTOM_WORLDS", "Collectives", "Curve", "all_gather_factor",
           "all_reduce_factor", "all_to_all_factor", "collectives_to_dict", "fit_collectives",
           "fit_pieces", "joined", "parse_collectives"]
