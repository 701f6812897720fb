"""The ``disaggregation:`` section of a scenario: prefill and decode pools (xPyD).

    disaggregation:
      prefill: {replicas: 1, parallelism: {tensor_parallel: 8, expert_parallel: true}}
      decode:  {replicas: 1, parallelism: {tensor_parallel: 8, expert_parallel: true}}
      link: {bandwidth_gb_per_s: 400, latency_us: 5, source: "..."}
      transfer: layerwise        # or after_prefill
      draft_kv: transferred      # the MTP/draft KV goes with the target's (or: rebuilt,
                                 # the decode side's draft prefills the prompt again)

Names follow the engines: SGLang's ``--disaggregation-mode prefill|decode`` servers, vLLM's
``kv_producer``/``kv_consumer`` instances, llm-d's and Dynamo's xPyD pools.  Each pool is a
set of replicas with its own parallelism on the scenario's hardware; ``link`` is the
aggregate bandwidth between one prefill instance and one decode instance (GB/s, 1e9 bytes)
and the one-way latency of a transfer; ``source`` names where those numbers come from.
The semantics live in docs/scenarios.md and simulator/simulate_disagg.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from simulator.cost.parallelism import Parallelism, parallelism_from_dict
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number, as_str, check_keys, require_mapping

TRANSFERS = ("layerwise", "after_prefill")
DRAFT_KV = ("transferred", "rebuilt")


@dataclass(frozen=True)
class Pool:
    """One side of the deployment: how many instances, each sharded by ``parallelism``."""

    replicas: int
    parallelism: Parallelism


@dataclass(frozen=True)
class Link:
    """The KV link between a prefill and a decode instance."""

    bandwidth_bytes_per_s: float
    latency_s: float
    source: str


@dataclass(frozen=True)
class Disaggregation:
    """A prefill pool, a decode pool, the link between them and how KV crosses it."""

    prefill: Pool
    decode: Pool
    link: Link
    transfer: str = "layerwise"
    draft_kv: str = "transferred"


def _pool(data: Any, side: str, source: str) -> Pool:
    field = f"disaggregation.{side}"
    data = require_mapping(data, source=source, field=field)
    check_keys(data, allowed=("replicas", "parallelism"), required=("replicas",),
               source=source, prefix=f"{field}.")
    replicas = as_number(data["replicas"], source=source, field=f"{field}.replicas",
                         integer=True, minimum=1, maximum=4096)
    try:
        par = parallelism_from_dict(data.get("parallelism"), source)
    except SpecsimError as exc:
        raise exc.relocated(prefix=f"{field}.") from None
    return Pool(int(replicas), par)


def _link(data: Any, source: str) -> Link:
    data = require_mapping(data, source=source, field="disaggregation.link")
    check_keys(data, allowed=("bandwidth_gb_per_s", "latency_us", "source"),
               required=("bandwidth_gb_per_s", "source"), source=source,
               prefix="disaggregation.link.")
    bw = as_number(data["bandwidth_gb_per_s"], source=source, strictly_positive=True,
                   field="disaggregation.link.bandwidth_gb_per_s", maximum=1e12,
                   fix="write the link's aggregate bandwidth in GB/s (> 0)")
    lat = as_number(data.get("latency_us", 0.0), source=source, minimum=0.0, maximum=1e9,
                    field="disaggregation.link.latency_us",
                    fix="write the transfer's one-way latency in microseconds (>= 0)")
    where = as_str(data["source"], source=source, field="disaggregation.link.source")
    return Link(float(bw) * 1e9, float(lat) * 1e-6, where)


def parse_disaggregation(data: Any, source: str) -> Disaggregation:
    """Validate a scenario's ``disaggregation`` mapping."""
    data = require_mapping(data, source=source, field="disaggregation")
    check_keys(data, allowed=("prefill", "decode", "link", "transfer", "draft_kv"),
               required=("prefill", "decode", "link"), source=source,
               prefix="disaggregation.")
    transfer = as_str(data.get("transfer", "layerwise"), source=source, choices=TRANSFERS,
                      field="disaggregation.transfer")
    draft_kv = as_str(data.get("draft_kv", "transferred"), source=source, choices=DRAFT_KV,
                      field="disaggregation.draft_kv")
    return Disaggregation(_pool(data["prefill"], "prefill", source),
                          _pool(data["decode"], "decode", source), _link(data["link"], source),
                          transfer, draft_kv)


def refuse_top_level(data: Mapping[str, Any], source: str) -> None:
    """A disaggregated scenario's pools set their own replicas and parallelism; top-level
    ones would be ignored, so they are refused (a plan or sweep varying them included)."""
    for key in ("parallelism", "replicas"):
        if data.get(key) is not None:
            raise SpecsimError(f"{key} at the top level of a disaggregated scenario would be "
                               "ignored: each pool sets its own", source=source, field=key,
                               fix=f"move it into disaggregation.prefill and "
                                   f"disaggregation.decode ({key}: ...)")

