"""``simulate(scenario) -> Results``: resolve names, build the deployment, run the engine.

A pure function of the scenario and its seed.  Three independent random streams are split
from the seed (workload, per-request acceptance parameters, engine draws), so that every
policy compared on a scenario sees the same trace and the same per-request parameters.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np
import simpy

from hardware.profile import HardwareProfile
from simulator.cost.cost_model import CostModel, Parallelism
from simulator.engine.replica import REJECTED, EngineLimits, Replica, RequestTable, arrivals
from simulator.engine.recorder import Recorder
from simulator.inputs.errors import SpecsimError
from simulator.cost.memory_plan import MemoryPlan, plan_memory
from simulator.models.spec import ModelSpec, check_shared_vocabulary, load_model
from simulator.policies import POLICIES
from simulator.policies.base import PolicyContext
from simulator.results import Results
from simulator.scenario import Scenario, resolve_hardware


@dataclass(frozen=True)
class Deployment:
    """The resolved hardware, models, cost models and memory plan of a scenario."""

    hardware: HardwareProfile
    target: ModelSpec
    draft: ModelSpec | None
    target_cost: CostModel
    draft_cost: CostModel | None
    memory: MemoryPlan
    policy_params: dict
    verify_width: int  # most tokens one request carries in a verification forward


def build_deployment(scenario: Scenario) -> Deployment:
    """Load the scenario's hardware and models and plan one replica's memory."""
    hw = resolve_hardware(scenario)
    target = load_model(scenario.target)
    if target.kind != "decoder":
        raise SpecsimError(f"{target.name} is a {target.kind} model", field="target",
                           fix="name a decoder model (see 'specsim models list')")
    cls = POLICIES[scenario.policy.name]
    params = cls.parse_params(scenario.policy.params, source="policy")
    draft = load_model(scenario.draft) if scenario.draft else None
    if getattr(cls, "needs_draft_model", False) and draft is None:
        raise SpecsimError(f"policy {scenario.policy.name!r} needs a draft model",
                           field="draft", fix="set 'draft: opt-125m' or another small model")
    # a first estimate of the verification width (chain policies: exact); simulate() re-plans
    # with the width the built policy reports (trees, lookahead branches)
    width = 1 + int(params.get("num_speculative_tokens") or 0)
    memory = plan_deployment_memory(scenario, hw, target, draft, cls, params, width)
    check_shared_vocabulary(draft, target)  # after the memory plan: that error comes first
    tcost = CostModel(hw, target, scenario.parallelism, overheads=scenario.overheads)
    dcost = CostModel(hw, draft, Parallelism(), overheads=scenario.overheads) \
        if draft is not None and draft.kind == "decoder" else None
    return Deployment(hw, target, draft, tcost, dcost, memory, params, width)


def plan_deployment_memory(scenario: Scenario, hw: HardwareProfile, target: ModelSpec,
                           draft: ModelSpec | None, cls, params: dict,
                           verify_width: int) -> MemoryPlan:
    """One replica's memory plan, with logits held for ``verify_width`` tokens per sequence."""
    extra, kv_models = memory_models(cls, params, draft, target)
    b = scenario.batching
    return plan_memory(hw, target, scenario.parallelism, extra_models=extra,
                       kv_models=kv_models, gpu_memory_utilization=b.gpu_memory_utilization,
                       block_size=b.block_size, max_batched_tokens=b.max_num_batched_tokens,
                       logits_tokens=b.max_num_seqs * verify_width)


def memory_models(cls, params: dict, draft: ModelSpec | None, target: ModelSpec):
    """Models a policy keeps beside the target: (weights held, models that keep a KV cache)."""
    hook = getattr(cls, "memory_models", None)
    if hook is not None:
        return hook(params, draft, target)
    if getattr(cls, "needs_draft_model", False) and draft is not None:
        return [draft], ([draft] if draft.kind == "decoder" else [])
    return [], []


def _admissible(table: RequestTable, scenario: Scenario, dep: Deployment,
                max_verify: int) -> np.ndarray:
    """Mark requests that can never be served, with their reason; return the others."""
    need = table.prompt_len + table.output_len
    ok = np.ones(need.size, bool)
    checks = [
        (need > dep.target.max_context,
         f"prompt + output tokens exceed {dep.target.name}'s max_context "
         f"{dep.target.max_context}"),
        (need + max_verify > dep.memory.kv_tokens,
         f"prompt + output tokens do not fit the KV cache of one replica "
         f"({dep.memory.kv_tokens} tokens)"),
    ]
    if not scenario.batching.enable_chunked_prefill:
        checks.append((table.prompt_len + table.output_len > scenario.batching.max_num_batched_tokens,
                       "prompt longer than max_num_batched_tokens with chunked prefill off "
                       "(a recompute after preemption needs prompt + output)"))
    for bad, reason in checks:
        new = bad & ok
        table.reject_reason[new] = reason
        ok &= ~bad
    table.status[~ok] = REJECTED
    return ok


def simulate(scenario: Scenario, *, workload=None, target_cost=None, draft_cost=None,
             progress: Callable[[int, int], None] | None = None,
             record_events: bool = False) -> Results:
    """Run one scenario and return its Results (requests, steps, summary).

    ``target_cost``/``draft_cost`` replace the roofline cost models (tests use constant-time
    ones); ``progress(done, total)`` is called as requests finish.
    """
    from simulator.acceptance import acceptance_from_config
    from workloads.workload import workload_from_config
    from pathlib import Path

    dep = build_deployment(scenario)
    wl_seed, acc_seed, eng_seed = np.random.SeedSequence(scenario.seed).spawn(3)
    if workload is None:
        workload = workload_from_config(scenario.workload, rng=np.random.default_rng(wl_seed),
                                        base_dir=Path(scenario.base_dir), source=scenario.name)
    acceptance = acceptance_from_config(scenario.acceptance, source="acceptance",
                                        base_dir=Path(scenario.base_dir)).bind(
        len(workload), np.random.default_rng(acc_seed), tasks=workload.task)
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
    rng = np.random.default_rng(eng_seed)
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
