"""``simulate(scenario) -> Results``: resolve names, build the deployment, run the engine.

A pure function of the scenario and its seed.  Three independent random streams are split
from the seed (workload, per-request acceptance parameters, engine draws), so that every
policy compared on a scenario sees the same trace and the same per-request parameters.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import numpy as np
import simpy

from simulator.deployment import _admissible, build_deployment, plan_deployment_memory
from simulator.engine.recorder import Recorder
from simulator.engine.replica import Replica
from simulator.engine.requests import EngineLimits, RequestTable
from simulator.engine.router import arrivals
from simulator.inputs.errors import SpecsimError
from simulator.policies.base import PolicyContext
from simulator.policies.registry import POLICIES
from simulator.results import Results
from simulator.scenario import Scenario

SeedStreams = tuple  # (workload, acceptance, engine) numpy.random.Generator


def seed_streams(seed: int) -> SeedStreams:
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


def simulate(scenario: Scenario, *, workload=None, target_cost=None, draft_cost=None,
             progress: Callable[[int, int], None] | None = None,
             record_events: bool = False) -> Results:
    """Run one scenario and return its Results (requests, steps, summary).

    ``target_cost``/``draft_cost`` replace the roofline cost models (tests use constant-time
    ones); ``progress(done, total)`` is called as requests finish.
    """
    from simulator.acceptance import acceptance_from_config

    dep = build_deployment(scenario)
    wl_rng, acc_rng, rng = seed_streams(scenario.seed)
    if workload is None:
        workload = scenario_workload(scenario, wl_rng)
    acceptance = acceptance_from_config(scenario.acceptance, source="acceptance",
                                        base_dir=Path(scenario.base_dir)).bind(
        len(workload), acc_rng, tasks=workload.task)
    tcost = target_cost or dep.target_cost
    dcost = draft_cost or dep.draft_cost
    cls = POLICIES[scenario.policy.name]
    ctx = PolicyContext(target_cost=tcost, draft_cost=dcost, acceptance=acceptance,
                        workload=workload, draft_model=dep.draft, target_model=dep.target,
                        hardware=dep.hardware)
    policies = [cls(dep.policy_params, ctx) for _ in range(scenario.replicas)]
    policy = policies[0]
    b = scenario.batching
    max_verify = getattr(policy, "max_verify_tokens", None)
    if max_verify is None:
        max_verify = 1 + int(dep.policy_params.get("num_speculative_tokens") or 0)
    max_verify = int(max_verify)
    if max_verify != dep.verify_width:
        dep = dataclasses.replace(dep, verify_width=max_verify, memory=plan_deployment_memory(
            scenario, dep.hardware, dep.target, dep.draft, cls, dep.policy_params, max_verify))
    if b.max_num_batched_tokens < max_verify:
        raise SpecsimError(
            f"max_num_batched_tokens={b.max_num_batched_tokens} cannot hold one request's "
            f"verification step of {max_verify} tokens", field="batching.max_num_batched_tokens",
            fix=f"raise it to at least {max_verify} or lower num_speculative_tokens")
    table = RequestTable(workload.arrival_s, workload.prompt_tokens, workload.output_tokens)
    ok = _admissible(table, scenario, dep, max_verify)
    if not ok.any():
        raise SpecsimError(f"no request can be served: {table.reject_reason[0]}",
                           field="workload", fix="use a model with a longer context, more "
                           "memory or tensor parallelism, or shorter requests")
    limits = EngineLimits(max_num_seqs=b.max_num_seqs,
                          max_num_batched_tokens=b.max_num_batched_tokens,
                          enable_chunked_prefill=b.enable_chunked_prefill,
                          block_size=b.block_size, kv_blocks=dep.memory.kv_blocks)
    env = simpy.Environment()
    recorder = Recorder(record_events)
    on_finish = None if progress is None else _finish_counter(progress, table.arrival_s.size,
                                                               int(np.count_nonzero(~ok)))
    replicas = [Replica(env, i, table, limits, tcost, pol, rng, recorder, on_finish=on_finish)
                for i, pol in enumerate(policies)]
    env.process(arrivals(env, table, replicas, scenario.router, ok))
    env.run()  # no until: returns when no event is left (idle replicas wait on untriggered ones)
    return Results.from_run(scenario, table, recorder, dep, workload)


def _finish_counter(progress: Callable[[int, int], None], total: int, settled: int):
    """``on_finish(n)`` for the replicas: progress is driven by the engine's events (requests
    finishing), never by stepping SimPy's clock, so the run ends exactly when SimPy's queue
    empties, on any SimPy 4.x.  Rejected requests count as settled from the start."""
    done = [settled]
    progress(settled, int(total))

    def on_finish(n: int) -> None:
        done[0] += n
        progress(done[0], int(total))
    return on_finish
