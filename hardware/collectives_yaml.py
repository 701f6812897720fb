"""A hardware profile's ``collectives:`` block: parsed into :class:`Collectives` (each piece
checked, worlds joined into continuous curves) and written back as it was read."""
from __future__ import annotations

import copy
import math
from typing import Any, Callable, Mapping

from hardware.collectives import (
    CUSTOM_MAX_BYTES,
    GB,
    JOIN_TOLERANCE,
    KIB,
    US,
    Collectives,
    Curve,
    all_gather_factor,
    all_reduce_factor,
    all_to_all_factor,
    joined,
)
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_bool, as_number, as_str, check_keys, require_mapping

_TOP = ("all_reduce", "custom_all_reduce", "all_gather", "all_to_all", "ep_normal",
        "send_recv", "from_interconnect")
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


def _ep_normal(data: Any, *, source: str, sources: dict, provenance: dict) -> dict:
    """The ``ep_normal`` block (DeepEP's normal kernels) as Collectives keywords."""
    field = "collectives.ep_normal"
    block = _op_block(data, _OP_KEYS + ("gpus_per_node",), ("source", "worlds",
                      "gpus_per_node"), source=source, field=field, sources=sources,
                      provenance=provenance)
    # DeepEP's bottleneck bandwidth is bytes over time: no (p-1)/p factor
    curves = _worlds(block["worlds"], lambda _: 1.0, source=source, field=field + ".worlds")
    per_node = as_number(block["gpus_per_node"], source=source, field=field + ".gpus_per_node",
                         integer=True, minimum=1, maximum=1024,
                         fix="the GPUs of one node's NVLink domain, e.g. 8")
    return {"ep_normal": curves, "gpus_per_node": per_node}


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
    optional: dict[str, tuple[Curve, ...]] = {}  # measured all-gather / all-to-all, if any
    for op, factor in (("all_gather", all_gather_factor), ("all_to_all", all_to_all_factor)):
        if op in data:
            block = _op_block(data[op], _OP_KEYS, ("source", "worlds"), source=source,
                              field=f"collectives.{op}", sources=sources,
                              provenance=provenance)
            optional[op] = _worlds(block["worlds"], factor, source=source,
                                   field=f"collectives.{op}.worlds")
    node = _ep_normal(data["ep_normal"], source=source, sources=sources,
                      provenance=provenance) if "ep_normal" in data else {}
    sr = _op_block(data["send_recv"], _SEND_KEYS, ("source", "pieces"), source=source,
                   field="collectives.send_recv", sources=sources, provenance=provenance)
    return Collectives(
        all_reduce=_worlds(ar["worlds"], all_reduce_factor, source=source,
                           field="collectives.all_reduce.worlds"),
        custom_all_reduce=custom, custom_max_bytes=max_bytes, **optional, **node,
        send_recv=_pieces(sr["pieces"], world=2, factor=1.0, source=source,
                          field="collectives.send_recv.pieces"),
        sources=sources, provenance=provenance, block=copy.deepcopy(dict(data)))


def collectives_to_dict(collectives: Collectives) -> dict | None:
    """The profile's ``collectives:`` block as it was read (None for a profile without one),
    so that a profile written back (calibrate/writer.py) keeps it."""
    return copy.deepcopy(dict(collectives.block)) if collectives.block else None
