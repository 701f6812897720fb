"""What a run is made of, before and around the engine: the seed's random streams, the
trace, the deployment and policies (``prepare``), the requests the engine can serve, the
prefix-cache keys and the engine's statistics.  ``simulate`` (simulator/simulate.py) and the
disaggregated runner (simulator/simulate_disagg.py) both build on it; ``simulate`` re-exports
its public names.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from simulator.acceptance.provenance import (
    acceptance_columns as provenance_columns,
    acceptance_provenance,
    effective_acceptance,
)
from simulator.deployment import (
    Deployment,
    admissible,
    build_policy,
    plan_deployment,
    resolve_deployment,
)
from simulator.engine.block_keys import BlockKeys, block_keys
from simulator.engine.replica import Replica
from simulator.engine.requests import EngineLimits, RequestTable
from simulator.engine_overrides import engine_batching
from simulator.inputs.errors import SpecsimError
from simulator.scenario import Scenario



def seed_streams(seed: int) -> tuple[np.random.Generator, ...]:
    """The three independent random streams of a scenario's seed: the workload, the
    per-request acceptance parameters, the engine's draws (in that order).  Everything
    that rebuilds a scenario's trace (capacity searches, sweeps) splits the seed here."""
    return tuple(np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))


def scenario_workload(scenario: Scenario, rng: np.random.Generator | None = None):
    """The trace ``simulate(scenario)`` replays, drawn from the seed's workload stream
    (``rng``: that stream, when the caller already split the seed)."""
    from workloads.config import workload_from_config
    rng = seed_streams(scenario.seed)[0] if rng is None else rng
    return workload_from_config(scenario.workload, rng=rng, base_dir=Path(scenario.base_dir),
                                source=scenario.name)


def scenario_inputs(scenario: Scenario, workload=None):
    """(trace, bound acceptance model, engine stream) of the scenario's seed; ``workload``
    replaces the scenario's trace (the acceptance parameters are drawn for it)."""
    from simulator.acceptance import acceptance_from_config

    wl_rng, acc_rng, rng = seed_streams(scenario.seed)
    if workload is None:
        workload = scenario_workload(scenario, wl_rng)
    acceptance = acceptance_from_config(effective_acceptance(scenario), source="acceptance",
                                        base_dir=Path(scenario.base_dir)).bind(
        len(workload), acc_rng, tasks=workload.task)
    return workload, acceptance, rng


@dataclass(frozen=True)
class Prepared:
    """Everything ``simulate`` runs: the deployment, one policy per replica, the trace, the
    engine's random stream and the target's step pricer."""

    deployment: Deployment
    policies: list
    workload: object
    rng: np.random.Generator
    target_cost: object


def prepare(scenario: Scenario, *, workload=None, target_cost=None,
            draft_cost=None) -> Prepared:
    """Resolve the names (a deployment that cannot fit, or a draft on another vocabulary, is
    reported before the trace is drawn), draw the trace and the acceptance parameters, build
    the policies, and plan memory once for their verification width."""
    res = resolve_deployment(scenario)
    workload, acceptance, rng = scenario_inputs(scenario, workload)
    tcost = target_cost or res.target_cost
    policies = [build_policy(scenario, res, workload, acceptance, tcost, draft_cost)
                for _ in range(scenario.replicas)]
    dep = plan_deployment(scenario, res, policies[0].max_verify_tokens)  # the memory plan, once
    return Prepared(dep, policies, workload, rng, tcost)


def acceptance_columns(scenario: Scenario) -> dict[str, str]:
    """The acceptance_source and acceptance_warning of a run of ``scenario`` (a plan row's),
    known without simulating it."""
    return provenance_columns(acceptance_provenance(scenario))


def build_deployment(scenario: Scenario) -> Deployment:
    """The deployment ``simulate(scenario)`` runs on (its memory plan is for the built
    policy's verification width)."""
    return prepare(scenario).deployment


def cache_keys(workload, table: RequestTable, limits: EngineLimits,
               max_verify: int) -> BlockKeys:
    """The prefix cache's block keys (block_keys.py): the workload's shared prefixes, if it
    names any (the cache runs from the start), then each request's own blocks (without
    shared prefixes the cache runs only while a preempted request waits: own_cache.py)."""
    bs = limits.block_size
    shared = block_keys(workload.prompt_tokens, bs, prefix_hashes=workload.prefix_hashes,
                        hash_block_tokens=workload.hash_block_tokens,
                        prompt_ids=workload.prompt_ids, prefix_group=workload.prefix_group,
                        shared_prefix_tokens=workload.shared_prefix_tokens)
    return BlockKeys(shared, -(-(table.prompt_len + table.output_len + max_verify) // bs))


def servable(scenario: Scenario, run: Prepared) -> tuple[RequestTable, np.ndarray]:
    """The request table and which requests can be admitted; an error when a verification
    step cannot fit a batch or no request can be served."""
    b, dep, workload = scenario.batching, run.deployment, run.workload
    max_verify = dep.max_verify_tokens
    if b.max_num_batched_tokens < max_verify:
        raise SpecsimError(
            f"max_num_batched_tokens={b.max_num_batched_tokens} cannot hold one request's "
            f"verification step of {max_verify} tokens", field="batching.max_num_batched_tokens",
            fix=f"raise it to at least {max_verify} or lower num_speculative_tokens")
    table = RequestTable(workload.arrival_s, workload.prompt_tokens, workload.output_tokens)
    ok = admissible(table, scenario, dep)
    if not ok.any():
        raise SpecsimError(f"no request can be served: {table.reject_reason[0]}",
                           field="workload", fix="use a model with a longer context, more "
                           "memory or tensor parallelism, or shorter requests")
    return table, ok


def pool_scenarios(scenario: Scenario) -> tuple[Scenario, Scenario]:
    """The prefill pool's and the decode pool's scenarios (aggregated ones)."""
    d = scenario.disaggregation
    return tuple(dataclasses.replace(scenario, parallelism=p.parallelism, replicas=p.replicas,
                                     disaggregation=None) for p in (d.prefill, d.decode))


def prepare_pool(pool: Scenario, side: str, **kwargs):
    """``prepare`` of one pool; a deployment that does not fit is reported at the
    pool's parallelism (``disaggregation.prefill.parallelism``...)."""
    try:
        return prepare(pool, **kwargs)
    except SpecsimError as exc:
        if exc.field is None or not exc.field.startswith("parallelism"):
            raise
        raise exc.relocated(prefix=f"disaggregation.{side}.") from None


def check_runnable(scenario: Scenario, *, workload=None, where: str | None = None,
                   infeasible_ok: bool = False):
    """Every check ``simulate(scenario)`` makes before its first engine step (names, the
    deployment and its memory plan, the policy against the models, the trace, a request it
    can serve), without running the engine; returns the trace (``workload=`` passes it to
    the next scenario of the same seed and workload).  ``where`` (a candidate, a --compare
    entry) goes before the error's field.  With ``infeasible_ok`` (a plan, whose table
    reports it) a deployment that does not fit passes and servability is not checked."""
    scenario = engine_batching(scenario)[0]  # what simulate() runs (engine_overrides.py)
    try:
        pools = {None: scenario}
        if scenario.disaggregation is not None:  # each pool's deployment and plan
            pools = dict(zip(("prefill", "decode"), pool_scenarios(scenario)))
        for side, pool in pools.items():
            run = prepare(pool, workload=workload) if side is None else \
                prepare_pool(pool, side, workload=workload)
            workload = run.workload
            if not infeasible_ok:
                servable(pool, run)
    except SpecsimError as exc:
        if infeasible_ok and exc.field == "parallelism":  # "does not fit": a result
            return workload
        if where is None:
            raise
        raise exc.relocated(prefix=f"{where}: ") from None
    return run.workload


def prefix_cache_stats(scenario: Scenario, workload, replicas: list[Replica]) -> dict:
    """Whether prefix caching ran, on which block names, and its totals over the replicas
    (tokens looked up and found at admissions, cached blocks evicted)."""
    keys = "token ids" if workload.prompt_ids is not None else \
        "hash_ids" if workload.prefix_hashes is not None else \
        "shared prefix" if workload.prefix_group is not None else \
        "own blocks" if any(r.own is not None and r.own.ran(r) for r in replicas) else None
    totals = [] if keys is None else [
        r.own.totals(r) if r.own is not None else (r.cache.queries, r.cache.hits,
                                                   r.cache.evictions)
        for r in replicas if r.own is not None or r.cache is not None]
    return {"enabled": bool(scenario.batching.enable_prefix_caching), "keys": keys,
            "queries_tokens": sum(q for q, _, _ in totals),
            "hits_tokens": sum(h for _, h, _ in totals),
            "evictions": sum(e for _, _, e in totals)}


def engine_stats(scenario: Scenario, replicas: list[Replica]) -> dict:
    """How the engine ran (not what it predicts): iterations, how many were advanced in
    vectorised decode stretches, and SimPy timeouts yielded (one per iteration without
    fast-forward)."""
    out = {"fast_forward": bool(replicas) and replicas[0].fast_forward}  # off with events
    for key in ("iterations", "vectorised", "timeouts"):
        out[key] = sum(r.stats[key] for r in replicas)
    return out


def replica_streams(rng: np.random.Generator, replicas: int) -> list[np.random.Generator]:
    """Each replica's random stream: the engine stream itself for one replica, else its
    ``spawn``-ed children, one per replica, so that a replica's draws do not depend on when
    the other replicas draw (what lets a replica fast-forward with identical results)."""
    return [rng] if replicas == 1 else rng.spawn(replicas)


def finish_counter(progress: Callable[[int, int], None], total: int, settled: int):
    """``on_finish(n)`` for the replicas: progress is driven by the engine's events (requests
    finishing), never by stepping SimPy's clock, so the run ends exactly when SimPy's queue
    empties, on any SimPy 4.x.  Rejected requests count as settled from the start."""
    done = [settled]
    progress(settled, int(total))

    def on_finish(n: int) -> None:
        done[0] += n
        progress(done[0], int(total))
    return on_finish
