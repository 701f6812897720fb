"""A capacity plan: a YAML of candidate deployments (scenario overrides), an SLO, a rate
search, a target rate and a price table; ``plan`` runs each candidate's capacity search
(``capacity.max_sustainable_rate``, ``capacity.min_replicas``) on an executor and returns one
row per deployment with its max sustainable rate, replicas and cost per million tokens."""
from __future__ import annotations

import dataclasses
import functools
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
    rate_search_bound,
    replica_search_bound,
)
from simulator.planning.preflight import fit_context
from simulator.simulate import acceptance_columns, scenario_workload

# Plan limits (docs/limits.md): each candidate is a capacity search of many simulations.
MAX_PLAN_CANDIDATES = 1_000
MAX_PRICE_PER_HOUR = 1e6

PLAN_KEYS = ("name", "scenario", "fixed", "slo", "search", "target_rate_per_s", "max_replicas",
             "prices", "over_context", "candidates")

# what a plan does with a request whose prompt + output exceed the target's max_context:
# reject (the engine's rule, simulator/deployment.py admissible: rejected with a reason),
# drop it from the trace, or truncate its output to fit (a prompt leaving no room for one
# output token is dropped)
OVER_CONTEXT = ("reject", "drop", "truncate")

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
    over_context: str = "reject"


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
                    as_str(data.get("name", "plan"), source=source, field="name"),
                    as_str(data.get("over_context", "reject"), source=source,
                           field="over_context", choices=OVER_CONTEXT))


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


def plan_candidate(task: tuple, tick: Callable[[], None] | None = None) -> dict[str, Any]:
    """Search one candidate (runs in a worker): max rate, replicas for the target, costs.

    ``tick()`` is called after each simulation (in-process progress)."""
    label, raw, base_dir, slo, search, target, max_rep, prices, mode = task
    from simulator.scenario import scenario_from_dict
    sc = scenario_from_dict(raw, source=label, base_dir=base_dir)
    from simulator.models.spec import load_model
    wl = fit_context(scenario_workload(sc), int(load_model(sc.target).max_context), mode)
    devices = sc.parallelism.devices * sc.replicas
    row = {"candidate": label, "hardware": sc.hardware, "tensor_parallel":
           sc.parallelism.tensor_parallel, "replicas": sc.replicas, "policy": sc.policy.label,
           "devices": devices, "trace_requests": len(wl), "trace_rate_per_s":
           wl.mean_rate_per_s, "router": sc.router, **acceptance_columns(sc)}
    row.update(max_sustainable_rate(sc, slo, search, workload=wl, on_evaluation=tick))
    row.pop("evaluated")
    # the rate search rescales the trace's arrival times: > 1 stretches it (slower)
    row["time_stretch_at_max_rate"] = wl.mean_rate_per_s / row["max_rate_per_s"]
    mean_out = float(np.mean(wl.output_tokens))
    price = device_price(prices, sc.hardware) if prices is not None else float("nan")
    row["price_per_device_hour"] = price
    row["cost_per_million_tokens"] = cost_per_million_tokens(
        price, devices, row["max_rate_per_s"] * mean_out)
    if target is not None:
        found = min_replicas(sc, slo, target, max_replicas=max_rep, workload=wl,
                             max_in_flight_fraction=search.max_in_flight_fraction,
                             on_evaluation=tick)
        n = found["min_replicas"]
        row["min_replicas_for_target"] = n
        row["replica_evaluations"] = found["evaluations"]
        row["cost_per_million_tokens_at_target"] = cost_per_million_tokens(
            price, sc.parallelism.devices * n, target * mean_out) if n == n else float("nan")
        row.update(_target_check(found, wl.mean_rate_per_s / target))
    return row


def _target_check(found: dict, stretch: float) -> dict[str, Any]:
    """Columns of the simulation run at the target rate with the answer's replicas (or the
    most tried), and what failed with one fewer."""
    seen, below = found["checked"] or found["largest"], found["below"]
    return {"time_stretch_at_target": stretch,
            "replicas_checked_at_target": int(found["checked_replicas"]),
            "p99_ttft_s_at_target": seen["p99_ttft_s"], "p99_tpot_s_at_target":
            seen["p99_tpot_s"], "goodput_fraction_at_target": seen["goodput_fraction"],
            "violated_at_target": seen["violated"],
            "violated_one_fewer": below["violated"] if below is not None else ""}


def plan_bound(spec: PlanSpec) -> int:
    """Most simulations one candidate's searches run (progress totals, ETAs)."""
    return rate_search_bound(spec.search) + (replica_search_bound(
        spec.max_replicas) if spec.target_rate_per_s is not None else 0)


def plan(spec: PlanSpec, *, executor: Any = "serial", workers: int | None = None,
         address: str | None = None,
         progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Search every candidate; a ranked DataFrame (cheapest, else fastest, first).

    ``progress(done, total)`` counts simulations: ``total`` starts at the bound
    (``plan_bound`` per candidate) and drops as searches end sooner.  In this process
    (the serial executor, or the local pool given one candidate, which it would not
    parallelise) it ticks per simulation; elsewhere as each deployment's search settles.
    """
    from simulator.planning.executors import Failure, make_executor, run_items
    tasks = [(label, raw, spec.base_dir, spec.slo, spec.search, spec.target_rate_per_s,
              spec.max_replicas, spec.prices, spec.over_context)
             for label, raw in spec.candidates]
    if executor == "local" and len(tasks) == 1:
        executor = "serial"
    ex = make_executor(executor, workers=workers, address=address) \
        if isinstance(executor, str) else executor
    count = _SimulationCount(plan_bound(spec), len(tasks), progress)
    fn = functools.partial(plan_candidate, tick=count.tick) \
        if ex.name == "serial" else plan_candidate
    try:
        results = run_items(fn, tasks, ex, chunk_size=1, on_result=count.settled)
    finally:
        if isinstance(executor, str):
            ex.close()
    rows = [{"candidate": t[0], "feasible": False, "error": r.error} if isinstance(r, Failure)
            else {**r, "error": None} for t, r in zip(tasks, results)]
    return _ranked(pd.DataFrame(rows), spec)


class _SimulationCount:
    """Simulations done of a shrinking bound: ticks in this process, and each settled
    search's own count (a worker's, or what it left of its bound unused)."""

    def __init__(self, per_task: int, tasks: int,
                 progress: Callable[[int, int], None] | None) -> None:
        self.per_task, self.total, self.done, self.progress = per_task, per_task * tasks, 0, \
            progress
        self._since = 0  # ticks of the search now running in this process

    def tick(self) -> None:
        self.done += 1
        self._since += 1
        self._report()

    def settled(self, index: int, result: Any) -> None:
        ran = result.get("evaluations", 0) + result.get("replica_evaluations", 0) \
            if isinstance(result, dict) else self._since
        if not self._since:  # it ran in a worker: nothing ticked here
            self.done += ran
        self.total -= self.per_task - ran
        self._since = 0
        self._report()

    def _report(self) -> None:
        self.total = max(self.total, self.done)
        if self.progress is not None:
            self.progress(self.done, self.total)


def _ranked(df: pd.DataFrame, spec: PlanSpec) -> pd.DataFrame:
    df["_neg_rate"] = -df.get("max_rate_per_s", pd.Series(np.nan, index=df.index))
    key = ["_neg_rate"]  # ties in cost go to the deployment with the most headroom
    if spec.prices is not None:
        key.insert(0, "cost_per_million_tokens_at_target" if spec.target_rate_per_s
                   is not None else "cost_per_million_tokens")
    df = df.sort_values(key, na_position="last", kind="stable").drop(
        columns=["_neg_rate"], errors="ignore").reset_index(drop=True)
    df.insert(0, "rank", np.arange(1, len(df) + 1))
    return df
