"""The optional ``kernels:`` block of a hardware profile: what a kernel of a given shape costs.

Without the block every operator is priced by the flat roofline (one compute and one memory
efficiency, no floor).  With it, hardware/roofline.py's ``gemm_time``, ``transfer_time`` and
``attention_time`` add what kernels really do on a GPU:

- ``sm_count`` and ``gemm_tiles``: a GEMM's output is cut into tiles of ``tile_m x tile_n``,
  one thread block each, run in waves of ``sm_count`` blocks; the padding of the last tile
  row/column (tile quantisation) and of the last wave (wave quantisation) is work the GPU does
  for nothing (NVIDIA, "Matrix Multiplication Background User's Guide", sections on tile and
  wave quantisation).  The library picks the tile; the model takes the best of the menu.
- ``latency_us``: every kernel's fixed GPU-side time (ramp-up and drain), added to its roofline
  time, so that a stream of ``B`` bytes reaches ``eta * B / (B + latency * bw * eta)`` of the
  bandwidth: Hockney's half-performance size, the memory efficiency by transfer size.
- ``min_kernel_us``: the shortest a kernel ever takes on the GPU (not the CPU launch cost,
  which the cost model charges as ``kernel_overhead_us``).
- per kind, ``row_bandwidth_gb_per_s`` (optional): kernels that give each row (token) to one
  thread block, as vLLM's norm, activation and rotary kernels do, take at least one row's bytes
  over the bandwidth one block reaches alone, however few the rows: a latency-bound floor
  that grows with the row's width.
- ``l2_cache_mib`` (optional): a memory-bound kernel whose bytes fit in the L2 cache (its input
  was just written by the kernel before it) streams at its kind's ``l2_memory_efficiency`` times
  ``l2_bandwidth_gb_per_s`` (optional, the device's L2 read bandwidth; without it the HBM
  bandwidth, so that the efficiency is a fraction of HBM's that may exceed 1); weights and KV
  caches are streamed from HBM.
- per kind of kernel, optional overrides of the compute efficiency, memory efficiency, latency,
  floor, L2-resident efficiency and row bandwidth, each with its source.  The kinds are kernel
  implementations: ``gemm``; ``attention_prefill`` and ``attention_decode`` (FlashAttention with
  more than one query per request, or one); ``attention_decode_mla`` (an MLA model's
  one-query decode kernels, FlashMLA-, FlashInfer- or Triton-MLA: where the profile has the
  entry it prices them instead of ``attention_decode``, ``Roofline.for_mla``);
  ``attention_prefill_fa3`` (FlashAttention-3, a
  Hopper kernel: where the engine runs it, simulator/cost/engines.yaml ``prefill_attention``,
  and the profile has the entry, it prices the requests of more than one query instead of
  ``attention_prefill``, on the causal pairs plus ``query_overhead_tokens`` per query row of
  a prefill chunk, simulator/cost/step_models.py ``attention_work``);
  ``elementwise`` (PyTorch's vectorised elementwise
  kernels: residual adds, GELU); ``other`` (a small kernel of no modelled kind: the MoE
  routing, alignment and sum, activation quantisation, MLA's cache write: the block's own
  latency and the flat rates unless the profile gives the kind an entry);
  ``embedding`` (the index_select gather); ``norm`` (vLLM's RMSNorm); ``activation`` (vLLM's
  SiLU-and-multiply); ``rope`` (vLLM's rotary embedding).

Every number carries its source, as everywhere in a profile.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number, as_str, check_keys, require_mapping

GEMM = "gemm"
ATTENTION_PREFILL = "attention_prefill"   # attention of requests with more than one query
ATTENTION_DECODE = "attention_decode"     # attention of requests with one query token
ATTENTION_DECODE_MLA = "attention_decode_mla"  # an MLA model's: attention_decode's if absent
# FlashAttention-3 (Hopper only): the prefill kernel vLLM V1 and SGLang run on sm90, priced on
# the causal pairs it computes plus ``query_overhead_tokens`` keys' worth per query row
ATTENTION_PREFILL_FA3 = "attention_prefill_fa3"
ELEMENTWISE = "elementwise"               # residual adds and plain elementwise kernels
OTHER = "other"  # a small kernel of no modelled kind (MoE routing, quantisation, cache writes)
TRANSFER_KINDS = (ELEMENTWISE, "embedding", "norm", "activation", "rope", OTHER)
KINDS = (GEMM, ATTENTION_PREFILL, ATTENTION_PREFILL_FA3, ATTENTION_DECODE,
         ATTENTION_DECODE_MLA) + TRANSFER_KINDS
_SCALARS = ("sm_count", "gemm_tiles", "latency_us", "min_kernel_us")
_OPTIONAL = ("l2_cache_mib", "l2_bandwidth_gb_per_s")
_KIND_NUMBERS = ("compute_efficiency", "memory_efficiency", "latency_us", "min_kernel_us",
                 "l2_memory_efficiency", "row_bandwidth_gb_per_s", "query_overhead_tokens")
MAX_L2_EFFICIENCY = 10.0    # L2 bandwidth over HBM bandwidth is a few times at most
MAX_TILE = 1024
MAX_TILES = 32


@dataclass(frozen=True)
class KindRates:
    """Overrides for one kind of kernel; None means the profile's default."""

    compute_efficiency: float | None = None
    memory_efficiency: float | None = None
    latency_s: float | None = None
    min_kernel_s: float | None = None
    l2_memory_efficiency: float | None = None
    row_bandwidth_bytes_per_s: float | None = None
    # a prefill attention kernel's fixed work per query row, in keys (its pipeline's fill and
    # epilogue, as if it attended this many more keys); None: priced on the pairs alone
    query_overhead_tokens: float | None = None


@dataclass(frozen=True)
class KernelShapes:
    """A device's kernel-level behaviour (SI units): see the module docstring."""

    sm_count: int
    gemm_tiles: tuple[tuple[int, int], ...]
    latency_s: float
    min_kernel_s: float
    kinds: Mapping[str, KindRates] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    l2_bytes: float | None = None
    l2_bandwidth_bytes_per_s: float | None = None   # None: L2 efficiencies are of HBM's

    def __post_init__(self) -> None:
        if self.sm_count < 1 or not self.gemm_tiles:
            raise SpecsimError("a kernels block needs sm_count >= 1 and at least one tile",
                               field="kernels", fix="give sm_count and gemm_tiles")
        unknown = set(self.kinds) - set(KINDS)
        if unknown:
            raise SpecsimError(f"unknown kernel kind {sorted(unknown)[0]!r}", field="kernels",
                               fix="use one of: " + ", ".join(KINDS))

    def rates(self, kind: str) -> KindRates:
        """The overrides of ``kind`` (all None when it has no entry)."""
        if kind not in KINDS:
            raise SpecsimError(f"unknown kernel kind {kind!r}", field="kind",
                               fix="use one of: " + ", ".join(KINDS))
        return self.kinds.get(kind, KindRates())


def _sourced(data: Any, *, source: str, field: str, sources: dict) -> Any:
    data = require_mapping(data, source=source, field=field)
    check_keys(data, allowed=("value", "source"), required=("value", "source"), source=source,
               prefix=field + ".")
    sources[field] = as_str(data["source"], source=source, field=field + ".source")
    return data["value"]


def _tiles(value: Any, *, source: str, field: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_TILES:
        raise SpecsimError(f"expected a list of 1 to {MAX_TILES} [tile_m, tile_n] pairs",
                           source=source, field=field, fix="write e.g. [[128, 256], [128, 128]]")
    tiles = []
    for i, pair in enumerate(value):
        if not isinstance(pair, list) or len(pair) != 2:
            raise SpecsimError(f"entry {i} is not a [tile_m, tile_n] pair", source=source,
                               field=field, fix="write e.g. [128, 256]")
        tiles.append(tuple(int(as_number(x, source=source, field=f"{field}[{i}]", integer=True,
                                         minimum=1, maximum=MAX_TILE,
                                         fix=f"a tile side is 1 to {MAX_TILE} elements"))
                           for x in pair))
    return tuple(tiles)


def _kind(data: Any, *, source: str, field: str, sources: dict) -> KindRates:
    data = require_mapping(data, source=source, field=field)
    check_keys(data, allowed=_KIND_NUMBERS + ("source",), required=("source",), source=source,
               prefix=field + ".")
    if not any(k in data for k in _KIND_NUMBERS):
        raise SpecsimError("a kind entry needs at least one number", source=source, field=field,
                           fix="give compute_efficiency, memory_efficiency, latency_us or "
                               "min_kernel_us")
    sources[field] = as_str(data["source"], source=source, field=field + ".source")
    eff = {k: float(as_number(data[k], source=source, field=f"{field}.{k}",
                              strictly_positive=True, maximum=1.0,
                              fix="an efficiency is a fraction of the peak, in (0, 1]"))
           for k in ("compute_efficiency", "memory_efficiency") if k in data}
    times = {k: 1e-6 * as_number(data[k], source=source, field=f"{field}.{k}", minimum=0,
                                 maximum=1e6, fix="a time in microseconds, 0 to 1e6")
             for k in ("latency_us", "min_kernel_us") if k in data}
    l2 = None
    if "l2_memory_efficiency" in data:
        l2 = float(as_number(data["l2_memory_efficiency"], source=source,
                             field=f"{field}.l2_memory_efficiency", strictly_positive=True,
                             maximum=MAX_L2_EFFICIENCY,
                             fix="a fraction of l2_bandwidth_gb_per_s (of the HBM bandwidth "
                                 f"without one), in (0, {MAX_L2_EFFICIENCY:g}]"))
    row = None
    if "row_bandwidth_gb_per_s" in data:
        row = 1e9 * as_number(data["row_bandwidth_gb_per_s"], source=source,
                              field=f"{field}.row_bandwidth_gb_per_s", strictly_positive=True,
                              maximum=1e6, fix="one thread block's bandwidth in GB/s")
    overhead = None
    if "query_overhead_tokens" in data:
        overhead = float(as_number(data["query_overhead_tokens"], source=source,
                                   field=f"{field}.query_overhead_tokens", minimum=0,
                                   maximum=1e6, fix="keys' worth of work per query row, >= 0"))
    return KindRates(eff.get("compute_efficiency"), eff.get("memory_efficiency"),
                     times.get("latency_us"), times.get("min_kernel_us"), l2, row, overhead)


def parse_kernels(data: Any, *, source: str) -> KernelShapes | None:
    """Validate a profile's ``kernels:`` block (None when the profile has none)."""
    if data is None:
        return None
    data = require_mapping(data, source=source, field="kernels")
    check_keys(data, allowed=_SCALARS + _OPTIONAL + KINDS, required=_SCALARS, source=source,
               prefix="kernels.")
    sources: dict[str, str] = {}

    def number(key: str, **bounds) -> float:
        f = f"kernels.{key}"
        return as_number(_sourced(data[key], source=source, field=f, sources=sources),
                         source=source, field=f + ".value", **bounds)

    sm_count = int(number("sm_count", integer=True, minimum=1, maximum=100_000,
                          fix="the datasheet's count of streaming multiprocessors"))
    tiles = _tiles(_sourced(data["gemm_tiles"], source=source, field="kernels.gemm_tiles",
                            sources=sources), source=source, field="kernels.gemm_tiles.value")
    latency = 1e-6 * number("latency_us", minimum=0, maximum=1e6,
                            fix="a time in microseconds, 0 to 1e6")
    floor = 1e-6 * number("min_kernel_us", minimum=0, maximum=1e6,
                          fix="a time in microseconds, 0 to 1e6")
    l2 = 2.0 ** 20 * number("l2_cache_mib", strictly_positive=True, maximum=1e6,
                            fix="the datasheet's L2 size in MiB") \
        if "l2_cache_mib" in data else None
    l2_bw = 1e9 * number("l2_bandwidth_gb_per_s", strictly_positive=True, maximum=1e6,
                         fix="the L2 cache's read bandwidth in GB/s") \
        if "l2_bandwidth_gb_per_s" in data else None
    kinds = {k: _kind(data[k], source=source, field=f"kernels.{k}", sources=sources)
             for k in KINDS if k in data}
    return KernelShapes(sm_count, tiles, latency, floor, kinds, sources, l2, l2_bw)


def _r(x: float) -> float:
    return float(f"{float(x):.12g}")


def kernels_to_dict(shapes: KernelShapes) -> dict:
    """The YAML mapping ``parse_kernels`` reads back into ``shapes`` (sources kept)."""
    src = shapes.sources

    def sourced(value: Any, key: str) -> dict:
        return {"value": value, "source": src.get(f"kernels.{key}", "unknown")}

    out: dict[str, Any] = {
        "sm_count": sourced(int(shapes.sm_count), "sm_count"),
        "gemm_tiles": sourced([[int(a), int(b)] for a, b in shapes.gemm_tiles], "gemm_tiles"),
        "latency_us": sourced(_r(shapes.latency_s * 1e6), "latency_us"),
        "min_kernel_us": sourced(_r(shapes.min_kernel_s * 1e6), "min_kernel_us"),
    }
    if shapes.l2_bytes is not None:
        out["l2_cache_mib"] = sourced(_r(shapes.l2_bytes / 2.0 ** 20), "l2_cache_mib")
    if shapes.l2_bandwidth_bytes_per_s is not None:
        out["l2_bandwidth_gb_per_s"] = sourced(_r(shapes.l2_bandwidth_bytes_per_s / 1e9),
                                               "l2_bandwidth_gb_per_s")
    for kind in KINDS:
        if kind not in shapes.kinds:
            continue
        rates = shapes.kinds[kind]
        entry: dict[str, Any] = {}
        if rates.compute_efficiency is not None:
            entry["compute_efficiency"] = _r(rates.compute_efficiency)
        if rates.memory_efficiency is not None:
            entry["memory_efficiency"] = _r(rates.memory_efficiency)
        if rates.latency_s is not None:
            entry["latency_us"] = _r(rates.latency_s * 1e6)
        if rates.min_kernel_s is not None:
            entry["min_kernel_us"] = _r(rates.min_kernel_s * 1e6)
        if rates.l2_memory_efficiency is not None:
            entry["l2_memory_efficiency"] = _r(rates.l2_memory_efficiency)
        if rates.row_bandwidth_bytes_per_s is not None:
            entry["row_bandwidth_gb_per_s"] = _r(rates.row_bandwidth_bytes_per_s / 1e9)
        if rates.query_overhead_tokens is not None:
            entry["query_overhead_tokens"] = _r(rates.query_overhead_tokens)
        entry["source"] = src.get(f"kernels.{kind}", "unknown")
        out[kind] = entry
    return out
