"""``simulate(scenario) -> Results``: resolve names, build the deployment, run the engine.

A pure function of the scenario and its seed.  Three independent random streams are split
from the seed (workload, per-request acceptance parameters, engine draws), so that every
policy compared on a scenario sees the same trace and the same per-request parameters.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import simpy

from simulator.acceptance.provenance import acceptance_provenance
from simulator.deployment import rank_chunk_tokens
from simulator.engine.closed_loop import ClosedLoopArrivals
from simulator.engine.prefix_cache import PrefixCache
from simulator.engine.recorder import Recorder
from simulator.engine.replica import Replica
from simulator.engine.requests import EngineLimits, RequestTable
from simulator.engine.reserve import TokenRatio
from simulator.engine.router import Arrivals
from simulator.engine_overrides import engine_batching
from simulator.results import Results
from simulator.run_setup import (  # noqa: F401 - the names callers import from here
    Prepared,
    acceptance_columns,
    build_deployment,
    cache_keys,
    check_runnable,
    engine_stats,
    finish_counter,
    prefix_cache_stats,
    prepare,
    replica_streams,
    scenario_inputs,
    scenario_workload,
    seed_streams,
    servable,
)
from simulator.scenario import Scenario


def simulate(scenario: Scenario, *, workload=None, target_cost=None, draft_cost=None,
             progress: Callable[[int, int], None] | None = None,
             record_events: bool = False) -> Results:
    """Run one scenario and return its Results (requests, steps, summary).

    ``target_cost``/``draft_cost`` replace the roofline cost models (tests use constant-time
    ones); ``progress(done, total)`` is called as requests finish.  A scenario with a
    ``disaggregation`` section runs its prefill and decode pools (simulate_disagg.py).
    """
    scenario, override = engine_batching(scenario)  # as the engine starts (vLLM 0.7.x's MLA)
    if scenario.disaggregation is not None:
        from simulator.simulate_disagg import simulate_disaggregated
        results = simulate_disaggregated(scenario, workload=workload, target_cost=target_cost,
                                         draft_cost=draft_cost, progress=progress,
                                         record_events=record_events)
        results.info["engine_override"] = override
        return results
    run = prepare(scenario, workload=workload, target_cost=target_cost, draft_cost=draft_cost)
    dep, policies, workload, rng, tcost = (run.deployment, run.policies, run.workload, run.rng,
                                           run.target_cost)
    b = scenario.batching
    table, ok = servable(scenario, run)
    limits = EngineLimits(max_num_seqs=b.max_num_seqs,
                          max_num_batched_tokens=b.max_num_batched_tokens,
                          enable_chunked_prefill=b.enable_chunked_prefill,
                          block_size=b.block_size, kv_blocks=dep.memory.kv_blocks,
                          max_chunk_tokens=rank_chunk_tokens(scenario),
                          mixed_chunk=mixed_chunk(scenario),
                          token_ratio=token_ratio(scenario),
                          async_scheduling=bool(scenario.execution.get("async_scheduling",
                                                                      False)))
    env = simpy.Environment()
    recorder = Recorder(record_events, steps_table=scenario.engine.steps_table,
                        num_requests=int(table.arrival_s.size), replicas=scenario.replicas)
    on_finish = None if progress is None else finish_counter(progress, table.arrival_s.size,
                                                               int(np.count_nonzero(~ok)))
    replicas: list[Replica] = []
    source, on_finish = _client(env, table, replicas, scenario, ok, workload, on_finish)
    streams = replica_streams(rng, len(policies))
    keys = cache_keys(workload, table, limits, dep.max_verify_tokens) \
        if b.enable_prefix_caching else None
    shared = keys is not None and keys.shared is not None
    replicas.extend(Replica(env, i, table, limits, tcost, pol, streams[i], recorder,
                            on_finish=on_finish, arrivals=source,
                            fast_forward=scenario.engine.fast_forward
                            and workload.max_concurrency is None,
                            prefix_cache=PrefixCache(limits.kv_blocks, b.block_size, keys)
                            if shared else None, own_keys=None if shared else keys)
                    for i, pol in enumerate(policies))
    env.run()  # no until: returns when no event is left (idle replicas wait on untriggered ones)
    results = Results.from_run(scenario, table, recorder, dep, workload)
    where = acceptance_provenance(scenario)
    results.info["acceptance_source"] = where.line
    results.info["acceptance_warning"] = where.warning
    results.info["engine"] = engine_stats(scenario, replicas)
    results.info["prefix_cache"] = prefix_cache_stats(scenario, workload, replicas)
    results.info["engine_override"] = override
    return results


def _client(env, table: RequestTable, replicas: list, scenario: Scenario, ok: np.ndarray,
            workload, on_finish):
    """The run's arrivals and the replicas' ``on_finish``: open loop, or closed loop under
    the workload's ``max_concurrency`` (finishes free its slots: closed_loop.py)."""
    cap = workload.max_concurrency
    if cap is None:
        return Arrivals(env, table, replicas, scenario.router, ok), on_finish
    client = ClosedLoopArrivals(env, table, replicas, scenario.router, ok, cap)
    if on_finish is None:
        return client, client.finished

    def both(n: int) -> None:
        client.finished(n)
        on_finish(n)
    return client, both


def mixed_chunk(scenario: Scenario) -> bool:
    """Whether a step may carry prefill chunks beside decodes: ``batching.mixed_chunk`` where
    written, else the named engine's (engines.yaml: SGLang's off), else on (vLLM V1)."""
    if scenario.batching.mixed_chunk is not None:
        return scenario.batching.mixed_chunk
    spec = scenario.execution.get("spec")
    return True if spec is None else spec.mixed_chunk


def token_ratio(scenario: Scenario) -> TokenRatio | None:
    """The named engine's admission-time KV reservation (SGLang's ``new_token_ratio``,
    engine/reserve.py) where prefill and decode steps are apart; None otherwise."""
    spec = scenario.execution.get("spec")
    if spec is None or not spec.init_new_token_ratio or mixed_chunk(scenario):
        return None
    return TokenRatio.of(spec.init_new_token_ratio, spec.schedule_conservativeness,
                         spec.min_new_token_ratio_factor, spec.new_token_ratio_decay_steps,
                         int(spec.clip_max_new_tokens), int(spec.retract_decode_steps))
