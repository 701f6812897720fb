"""A capacity plan: a YAML of candidate deployments (scenario overrides), an SLO, a rate
search, a target rate and a price table; ``plan`` runs each candidate's capacity search
(``capacity.max_sustainable_rate``, ``capacity.min_replicas``) on an executor and returns one
row per deployment with its max sustainable rate, replicas and cost per million tokens."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number, as_str, check_keys, load_yaml_file, require_mapping
from simulator.planning.capacity import (
    MAX_RATE_PER_S,
    MIN_RATE_PER_S,
    CapacitySLO,
    RateSearch,
    max_sustainable_rate,
    min_replicas,
)
from simulator.simulate import scenario_workload

# Plan limits (README.md, "Limits"): each candidate is a capacity search of many simulations.
MAX_PLAN_CANDIDATES = 1_000

MAX_PRICE_PER_HOUR = 1e6

PLAN_KEYS = ("name", "scenario", "fixed", "slo", "search", "target_rate_per_s", "max_replicas",
             "prices", "candidates")

SLO_KEYS = ("p99_ttft_ms", "p99_tpot_ms", "goodput_fraction", "ttft_ms", "tpot_ms")


def load_price_table(prices: Any, *, base_dir: str | Path = ".",
                     source: str = "prices") -> dict[str, float]:
    """A ``{device: $/hour}`` mapping, inline or from a YAML file."""
    if isinstance(prices, (str, Path)):
        path = Path(prices) if Path(prices).is_absolute() else Path(base_dir) / prices
        source = str(path)
        prices = load_yaml_file(path)
    prices = require_mapping(prices, source=source)
    return {name: float(as_number(v, source=source, field=name, strictly_positive=True,
                                  maximum=MAX_PRICE_PER_HOUR))
            for name, v in prices.items()}


def device_price(prices: Mapping[str, float], hardware: str) -> float:
    """The $/hour of one device; a device missing from the table is an error naming it."""
    if hardware not in prices:
        raise SpecsimError(f"no price for device {hardware!r}", field="prices",
                           fix=f"add '{hardware}: <dollars per hour>' to the price table "
                               f"(it lists: {', '.join(sorted(prices)) or 'nothing'})")
    return prices[hardware]


def cost_per_million_tokens(price_per_device_hour: float, devices: int,
                            output_tokens_per_s: float) -> float:
    """Dollars per million output tokens for ``devices`` devices producing that throughput."""
    if not output_tokens_per_s > 0:
        return float("nan")
    return price_per_device_hour * devices / 3600.0 / output_tokens_per_s * 1e6


@dataclass(frozen=True)
class PlanSpec:
    """A validated plan: base scenario, SLO, search, candidates (scenario mappings), prices."""

    candidates: tuple[tuple[str, dict], ...]
    slo: CapacitySLO
    search: RateSearch = RateSearch()
    target_rate_per_s: float | None = None
    max_replicas: int = 64
    prices: Mapping[str, float] | None = None
    base_dir: str = "."
    name: str = "plan"


def plan_from_dict(data: Any, *, source: str, base_dir: str | Path = ".") -> PlanSpec:
    """Validate a parsed plan mapping; every candidate's scenario is checked up front."""
    from simulator.planning.sweep import SweepSpec
    data = require_mapping(data, source=source)
    check_keys(data, allowed=PLAN_KEYS, required=("slo", "candidates"), source=source)
    s = require_mapping(data["slo"], source=source, field="slo")
    check_keys(s, allowed=SLO_KEYS, source=source, prefix="slo.")
    val = {k: as_number(v, source=source, field=f"slo.{k}", strictly_positive=True,
                        maximum=1.0 if k == "goodput_fraction" else 1e9) for k, v in s.items()}
    named = _candidates(data["candidates"], source)
    spec = SweepSpec.simulated([c for _, c in named], scenario=data.get("scenario"),
                               fixed=require_mapping(data.get("fixed") or {}, source=source,
                                                     field="fixed"),
                               source=source, base_dir=base_dir)
    from simulator.scenario import scenario_from_dict
    first = scenario_from_dict(spec.payloads[0], source=source, base_dir=spec.base_dir)
    per_request = {"ttft_s": val["ttft_ms"] / 1e3 if "ttft_ms" in val else first.slo.ttft_s,
                   "tpot_s": val["tpot_ms"] / 1e3 if "tpot_ms" in val else first.slo.tpot_s}
    slo, search = _slo_and_search(data, val, per_request, source)
    target = data.get("target_rate_per_s")
    target = float(as_number(target, source=source, field="target_rate_per_s",
                             strictly_positive=True, maximum=MAX_RATE_PER_S)) \
        if target is not None else None
    max_rep = as_number(data.get("max_replicas", 64), source=source, field="max_replicas",
                        integer=True, minimum=1, maximum=4096)
    prices = load_price_table(data["prices"], base_dir=base_dir, source=f"{source}: prices") \
        if data.get("prices") is not None else None
    if prices is not None:
        for raw in spec.payloads:
            try:
                device_price(prices, scenario_from_dict(raw, source=source).hardware)
            except SpecsimError as exc:
                raise exc.relocated(source=source) from None
    return PlanSpec(tuple((label, raw) for (label, _), raw in zip(named, spec.payloads)), slo,
                    search, target, max_rep, prices, spec.base_dir,
                    as_str(data.get("name", "plan"), source=source, field="name"))


def _candidates(cands: Any, source: str) -> list[tuple[str, dict]]:
    """(label, overrides) per deployment; the label is its name, else its overrides."""
    if not isinstance(cands, list) or not cands:
        raise SpecsimError("expected a non-empty list of deployments", source=source,
                           field="candidates", fix="e.g. - {hardware: a100-40gb, policy: none}")
    if len(cands) > MAX_PLAN_CANDIDATES:
        raise SpecsimError(f"{len(cands):,} deployments; the limit is {MAX_PLAN_CANDIDATES:,}",
                           source=source, field="candidates",
                           fix="split the plan, or sweep the fields with 'specsim sweep'")
    named = []
    for i, c in enumerate(cands):
        c = dict(require_mapping(c, source=source, field=f"candidates[{i}]"))
        label = c.pop("name", None) or ", ".join(f"{k}={v}" for k, v in c.items()) or "base"
        named.append((as_str(label, source=source, field=f"candidates[{i}].name"), c))
    return named


def _slo_and_search(data: Mapping, val: dict, per_request: dict,
                    source: str) -> tuple[CapacitySLO, RateSearch]:
    """The plan's SLO (ms in the YAML, seconds inside) and its rate search."""
    try:
        slo = CapacitySLO(p99_ttft_s=val["p99_ttft_ms"] / 1e3 if "p99_ttft_ms" in val else None,
                          p99_tpot_s=val["p99_tpot_ms"] / 1e3 if "p99_tpot_ms" in val else None,
                          goodput_fraction=val.get("goodput_fraction"), **per_request)
        srch = require_mapping(data.get("search") or {}, source=source, field="search")
        check_keys(srch, allowed=[f.name for f in dataclasses.fields(RateSearch)],
                   source=source, prefix="search.")
        rate = {"min_rate_per_s", "max_rate_per_s"}
        search = RateSearch(**{k: float(as_number(
            v, source=source, field=f"search.{k}", strictly_positive=True,
            minimum=MIN_RATE_PER_S if k in rate else None,
            maximum=MAX_RATE_PER_S if k in rate else None,
            fix=f"rates go from {MIN_RATE_PER_S:g} to {MAX_RATE_PER_S:g} requests/s"
            if k in rate else None)) for k, v in srch.items()})
    except SpecsimError as exc:
        raise exc.relocated(source=source) from None
    return slo, search


def load_plan(path: str | Path) -> PlanSpec:
    """Read and validate a plan YAML file."""
    path = Path(path)
    return plan_from_dict(load_yaml_file(path), source=str(path), base_dir=path.resolve().parent)


def plan_candidate(task: tuple) -> dict[str, Any]:
    """Search one candidate (runs in a worker): max rate, replicas for the target, costs."""
    label, raw, base_dir, slo, search, target, max_rep, prices = task
    from simulator.scenario import scenario_from_dict
    sc = scenario_from_dict(raw, source=label, base_dir=base_dir)
    wl = scenario_workload(sc)
    devices = sc.parallelism.devices * sc.replicas
    row = {"candidate": label, "hardware": sc.hardware, "tensor_parallel":
           sc.parallelism.tensor_parallel, "replicas": sc.replicas, "policy": sc.policy.label,
           "devices": devices}
    row.update(max_sustainable_rate(sc, slo, search, workload=wl))
    row.pop("evaluated")
    mean_out = float(np.mean(wl.output_tokens))
    price = device_price(prices, sc.hardware) if prices is not None else float("nan")
    row["price_per_device_hour"] = price
    row["cost_per_million_tokens"] = cost_per_million_tokens(
        price, devices, row["max_rate_per_s"] * mean_out)
    if target is not None:
        n = min_replicas(sc, slo, target, max_replicas=max_rep, workload=wl,
                         max_in_flight_fraction=search.max_in_flight_fraction)["min_replicas"]
        row["min_replicas_for_target"] = n
        row["cost_per_million_tokens_at_target"] = cost_per_million_tokens(
            price, sc.parallelism.devices * n, target * mean_out) if n == n else float("nan")
    return row


def plan(spec: PlanSpec, *, executor: Any = "serial", workers: int | None = None,
         address: str | None = None,
         progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Search every candidate; a ranked DataFrame (cheapest, else fastest, first).

    ``progress(done, total)`` is called as each deployment's search settles.
    """
    from simulator.planning.executors import Failure, make_executor, run_items
    tasks = [(label, raw, spec.base_dir, spec.slo, spec.search, spec.target_rate_per_s,
              spec.max_replicas, spec.prices) for label, raw in spec.candidates]
    ex = make_executor(executor, workers=workers, address=address) \
        if isinstance(executor, str) else executor
    try:
        results = run_items(plan_candidate, tasks, ex, chunk_size=1, progress=progress)
    finally:
        if isinstance(executor, str):
            ex.close()
    rows = [{"candidate": t[0], "feasible": False, "error": r.error} if isinstance(r, Failure)
            else {**r, "error": None} for t, r in zip(tasks, results)]
    df = pd.DataFrame(rows)
    df["_neg_rate"] = -df.get("max_rate_per_s", pd.Series(np.nan, index=df.index))
    key = ["_neg_rate"]  # ties in cost go to the deployment with the most headroom
    if spec.prices is not None:
        key.insert(0, "cost_per_million_tokens_at_target" if spec.target_rate_per_s
                   is not None else "cost_per_million_tokens")
    df = df.sort_values(key, na_position="last", kind="stable").drop(
        columns=["_neg_rate"], errors="ignore").reset_index(drop=True)
    df.insert(0, "rank", np.arange(1, len(df) + 1))
    return df


