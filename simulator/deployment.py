"""A scenario's names resolved into a deployment: hardware, models, cost models, the memory
plan of one replica, and which requests it can ever serve (the others are rejected with a
reason)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hardware.profile import HardwareProfile
from simulator.cost.cost_model import CostModel, Parallelism
from simulator.cost.memory_plan import MemoryPlan, plan_memory
from simulator.engine.requests import REJECTED, RequestTable
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import ModelSpec, check_shared_vocabulary, load_model
from simulator.policies.base import memory_models
from simulator.policies.registry import POLICIES
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
