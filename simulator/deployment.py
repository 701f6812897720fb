"""A scenario's names resolved into a deployment: hardware, models, cost models, the policy
built on them, the memory plan of one replica for that policy's verification width, and
which requests the replica can ever serve (the others are rejected with a reason)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from hardware.profile import HardwareProfile
from simulator.cost.cost_model import CostModel
from simulator.cost.dp_attention import cost_model
from simulator.cost.execution import resolve_execution
from simulator.cost.memory_plan import MemoryPlan, plan_memory, sglang_mem_fraction_static
from simulator.cost.parallelism import Parallelism
from simulator.cost.precision import with_precision
from simulator.engine.requests import REJECTED, RequestTable
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import ModelSpec, check_shared_vocabulary, load_model
from simulator.policies.base import PolicyBase, PolicyContext
from simulator.policies.registry import POLICIES
from simulator.scenario import Scenario, resolve_hardware

# policies whose drafts DP attention prices on each rank (none, or built from the target)
DP_ATTENTION_POLICIES = ("none", "mtp")


@dataclass(frozen=True)
class Resolved:
    """A scenario's hardware and models, resolved by name, with their roofline cost models."""

    hardware: HardwareProfile
    target: ModelSpec
    draft: ModelSpec | None
    target_cost: CostModel
    draft_cost: CostModel | None
    extra_models: tuple[ModelSpec, ...]  # held beside the target (the policy's memory_models)
    kv_models: tuple[ModelSpec, ...]     # ... of which these keep a KV cache


@dataclass(frozen=True)
class Deployment(Resolved):
    """The resolved scenario and one replica's memory plan for its built policy."""

    memory: MemoryPlan
    max_verify_tokens: int  # most tokens one request carries in a verification forward


def resolve_deployment(scenario: Scenario) -> Resolved:
    """Load the scenario's hardware and models (the policy's own among them) and build
    their cost models."""
    if scenario.policy.name not in POLICIES:  # a PolicyConfig built by hand
        raise SpecsimError(f"unknown policy {scenario.policy.name!r}", field="policy.name",
                           fix="valid names are: " + ", ".join(POLICIES))
    hw = resolve_hardware(scenario)
    target = load_model(scenario.target)
    if target.kind != "decoder":
        raise SpecsimError(f"{target.name} is a {target.kind} model", field="target",
                           fix="name a decoder model (see 'specsim models list')")
    target = target_precision(scenario, hw, target)
    draft = load_model(scenario.draft) if scenario.draft else None
    if POLICIES[scenario.policy.name].needs_draft_model and draft is None:
        from simulator.models.default_draft import default_draft
        smallest = default_draft(target)  # on the target's tokenizer, as estimate's default
        raise SpecsimError(f"policy {scenario.policy.name!r} needs a draft model",
                           field="draft", fix=f"set 'draft: {smallest.name}' (the catalog's "
                           f"smallest {target.family} model on {target.name}'s tokenizer)"
                           if smallest is not None else "set 'draft:' to a small model on "
                           f"{target.name}'s tokenizer (vocab_size {target.tokenizer_vocab}; "
                           "specsim models from-hf writes one's file), or a policy that "
                           "drafts without one (prompt_lookup, suffix)")
    extra, kv_models = POLICIES[scenario.policy.name].memory_models(
        scenario.policy.params, draft, target)
    # Before the trace is drawn and the policy built: a deployment that cannot fit at all
    # (even at the narrowest verification, one token per sequence) is reported first, then
    # a draft on another vocabulary.  The plan of record is made once, in plan_deployment.
    _plan(scenario, hw, target, extra, kv_models, max_verify_tokens=1)
    check_shared_vocabulary(draft, target)
    tcost, dcost = cost_models(scenario, hw, target, draft)
    return Resolved(hw, target, draft, tcost, dcost, tuple(extra), tuple(kv_models))


def target_precision(scenario: Scenario, hw: HardwareProfile, target: ModelSpec) -> ModelSpec:
    """The target served at the scenario's ``quantization`` (its weights) and
    ``kv_cache_dtype``, refused where ``hw`` cannot compute them (simulator/cost/precision)."""
    if scenario.quantization is None and scenario.kv_cache_dtype == "auto":
        return target
    return with_precision(target, hw, scenario.quantization, scenario.kv_cache_dtype)


def cost_models(scenario: Scenario, hw: HardwareProfile, target: ModelSpec,
                draft: ModelSpec | None, *,
                speculative_tokens: int | None = None) -> tuple[CostModel, CostModel | None]:
    """The target's cost model (it pays the engine step's host time) and the draft model's
    (its forwards run inside that step: a graph replay each, no host time of their own),
    both under the scenario's execution; the draft sharded over its tensor parallel degree.
    The CUDA-graph sizes follow the policy's ``num_speculative_tokens`` (vLLM's rule), or
    ``speculative_tokens`` where the caller knows the drafted tokens (an analytic point)."""
    execution = _execution(scenario, hw, speculative_tokens)
    skew = scenario.moe.routing_skew
    check_dp_attention_policy(scenario)
    tcost = cost_model(hw, target, scenario.parallelism, overheads=scenario.overheads,
                       execution=execution, routing_skew=skew)
    dcost = None
    parallel = draft_parallel(scenario)
    if draft is not None and draft.kind == "decoder":
        check_draft_split(draft, parallel)
        spec_hw, spec_execution = speculative_path(scenario, hw, speculative_tokens)
        dcost = CostModel(spec_hw, draft, parallel.draft(),
                          overheads=scenario.overheads, execution=spec_execution,
                          host=not execution.captured_draft_loop, routing_skew=skew)
    return tcost, dcost


def _execution(scenario: Scenario, hw: HardwareProfile, speculative_tokens: int | None):
    cls = POLICIES.get(scenario.policy.name)
    k = speculative_tokens if speculative_tokens is not None else \
        cls.speculative_tokens(scenario.policy.params) if cls is not None else 0
    return resolve_execution(
        hw, scenario.execution, max_num_seqs=scenario.batching.max_num_seqs,
        num_speculative_tokens=k,
        max_num_batched_tokens=scenario.batching.max_num_batched_tokens,
        overheads=scenario.overheads)


def speculative_path(scenario: Scenario, hw: HardwareProfile,
                     speculative_tokens: int | None = None):
    """(profile, execution) the speculative path is priced on -- the draft model's and the
    policy's own forwards, the engine's speculative host work: ``hw`` and the scenario's
    execution, or with ``spec_cost_factor`` both resolved on ``hw`` that much slower
    (hardware/scaled.py), so that only that path moves: the error of its cost relative to
    the target's, which a uniform cost factor cancels out of every speedup."""
    if scenario.spec_cost_factor != 1.0:
        from hardware.scaled import slower_by
        hw = slower_by(hw, scenario.spec_cost_factor)
    return hw, _execution(scenario, hw, speculative_tokens)


def check_dp_attention_policy(scenario: Scenario) -> None:
    """Data-parallel attention prices the target and drafts built from its layers (MTP) on
    each rank's share of the batch; a separate draft model or head is not split so.  An
    engine that has none (engines.yaml ``no_dp_attention``: vLLM V0) is refused with it."""
    dp = scenario.parallelism.data_parallel_attention
    if dp > 1 and scenario.policy.name not in DP_ATTENTION_POLICIES:
        raise SpecsimError(f"policy {scenario.policy.name!r} with data_parallel_attention "
                           f"{dp} is not modelled", field="policy.name",
                           fix="use " + " or ".join(DP_ATTENTION_POLICIES) + ", or drop "
                               "parallelism.data_parallel_attention")
    spec = scenario.execution.get("spec")
    if dp > 1 and spec is not None and spec.no_dp_attention:
        raise SpecsimError(f"engine {spec.name!r} has no data-parallel attention (vLLM V0; "
                           "engines.yaml no_dp_attention), so data_parallel_attention "
                           f"{dp} cannot run on it", field="parallelism.data_parallel_attention",
                           fix="drop parallelism.data_parallel_attention (tensor_parallel: N "
                               "as V0 ran), or name a V1 engine (execution.engine: vllm-v0.9 "
                               "or later)")


def rank_chunk_tokens(scenario: Scenario) -> int:
    """The longest prefill chunk of one request (0: no cap beyond the token budget): under
    DP attention with chunked prefill, one rank's share of the replica's budget, as SGLang
    gives each DP rank ``chunked_prefill_size // dp_size`` (server_args.py,
    ``_handle_data_parallelism``) and a vLLM DP rank has its own max_num_batched_tokens."""
    dp = scenario.parallelism.data_parallel_attention
    b = scenario.batching
    if dp == 1 or not b.enable_chunked_prefill:
        return 0
    return max(1, b.max_num_batched_tokens // dp)


def _plan(scenario: Scenario, hw: HardwareProfile, target: ModelSpec, extra, kv_models,
          max_verify_tokens: int) -> MemoryPlan:
    """One replica's memory, logits held for ``max_verify_tokens`` per sequence."""
    b = scenario.batching
    parallel = draft_parallel(scenario)
    for m in extra:
        check_draft_split(m, parallel)
    return plan_memory(hw, target, parallel, extra_models=extra,
                       kv_models=kv_models, gpu_memory_utilization=b.gpu_memory_utilization,
                       block_size=b.block_size, max_batched_tokens=b.max_num_batched_tokens,
                       logits_tokens=b.max_num_seqs * max_verify_tokens,
                       mem_fraction_static=kv_fraction(scenario, hw, extra))


def kv_fraction(scenario: Scenario, hw: HardwareProfile, extra) -> float | None:
    """SGLang's ``mem_fraction_static`` where the KV pool is sized its way: the scenario's
    ``batching.mem_fraction_static``, else the default SGLang 0.5 computes for this
    deployment where the named engine sizes it so (engines.yaml ``mem_fraction_static``);
    None: vLLM's rule.  SGLang's chunked_prefill_size is the token budget of a step; its
    tp_size the GPUs of a pipeline stage (DP attention ranks included)."""
    b, p = scenario.batching, scenario.parallelism
    if b.mem_fraction_static is not None:
        return b.mem_fraction_static
    spec = scenario.execution.get("spec")
    if spec is None or not spec.mem_fraction_static:
        return None
    kind = "none" if not extra else "standalone" if any(
        m.kind == "decoder" for m in extra) else "eagle"
    dp = p.data_parallel_attention
    return sglang_mem_fraction_static(
        hw.memory_bytes, chunked_prefill_size=b.max_num_batched_tokens,
        tp=p.tensor_parallel * dp, pp=p.pipeline_parallel, dp_attention=dp > 1, dp_size=dp,
        speculative=kind)


def draft_parallel(scenario: Scenario) -> Parallelism:
    """The scenario's parallelism with its drafts' placement: a policy whose drafts run data
    parallel (a whole copy per GPU) keeps them unsharded whatever the target's TP."""
    cls = POLICIES.get(scenario.policy.name)
    if cls is not None and cls.draft_parallelism == "data":
        return dataclasses.replace(scenario.parallelism, draft_tensor_parallel=1)
    return scenario.parallelism


def check_draft_split(model: ModelSpec, parallel: Parallelism) -> None:
    """A draft sharded over ``draft_tensor_parallel_size`` ranks must split its heads."""
    dtp = parallel.draft_tp
    if dtp > 1 and model.num_heads % dtp:
        raise SpecsimError(f"the draft {model.name} has {model.num_heads} attention heads, "
                           f"not divisible by its tensor parallel degree {dtp}",
                           field="parallelism.draft_tensor_parallel_size",
                           fix="set parallelism.draft_tensor_parallel_size: 1 (the draft "
                               "replicated on each rank; --draft-tensor-parallel 1 for "
                               "estimate and gamma-map)")


def build_policy(scenario: Scenario, res: Resolved, workload, acceptance, target_cost=None,
                 draft_cost=None) -> PolicyBase:
    """The scenario's policy (one per replica), on ``target_cost``/``draft_cost`` if given
    (test doubles), else on the roofline cost models."""
    spec = speculative_path(scenario, res.hardware) if scenario.spec_cost_factor != 1.0 \
        else (None, None)
    ctx = PolicyContext(target_cost=target_cost or res.target_cost,
                        draft_cost=draft_cost or res.draft_cost, acceptance=acceptance,
                        workload=workload, draft_model=res.draft, target_model=res.target,
                        hardware=res.hardware, spec_hardware=spec[0], spec_execution=spec[1])
    return POLICIES[scenario.policy.name](scenario.policy.params, ctx)


def plan_deployment(scenario: Scenario, res: Resolved, max_verify_tokens: int) -> Deployment:
    """The memory plan of one replica, logits held for ``max_verify_tokens`` per sequence
    (the built policy's verification width)."""
    memory = _plan(scenario, res.hardware, res.target, res.extra_models, res.kv_models,
                   max_verify_tokens)
    _check_max_model_len(scenario.batching.max_model_len, res.target, memory.kv_tokens)
    return Deployment(res.hardware, res.target, res.draft, res.target_cost, res.draft_cost,
                      res.extra_models, res.kv_models, memory, int(max_verify_tokens))


def _check_max_model_len(mml: int | None, target, kv_tokens: int) -> None:
    """vLLM's start-up checks of --max-model-len (vllm/config/model.py: above the model's
    max_position_embeddings is an error; vllm/v1/core/kv_cache_utils.py: a KV cache that
    cannot hold one request of max_model_len tokens is an error)."""
    if mml is None:
        return
    if mml > target.max_context:
        raise SpecsimError(f"{mml} is above {target.name}'s max_context {target.max_context}",
                           field="batching.max_model_len",
                           fix=f"use at most {target.max_context}")
    if mml > kv_tokens:
        raise SpecsimError(f"the KV cache holds {kv_tokens:,} tokens, fewer than one request "
                           f"of max_model_len {mml:,}", field="batching.max_model_len",
                           fix="lower max_model_len or raise gpu_memory_utilization")


def admissible(table: RequestTable, scenario: Scenario, dep: Deployment) -> np.ndarray:
    """Mark requests that can never be served, with their reason; return the others."""
    need = table.prompt_len + table.output_len
    ok = np.ones(need.size, bool)
    mml = scenario.batching.max_model_len
    limit, what = (dep.target.max_context, f"{dep.target.name}'s max_context") \
        if mml is None else (mml, "max_model_len")
    checks = [
        (need > limit, f"prompt + output tokens exceed {what} {limit}"),
        (need + dep.max_verify_tokens > dep.memory.kv_tokens,
         f"prompt + output tokens do not fit the KV cache of one replica "
         f"({dep.memory.kv_tokens} tokens)"),
    ]
    if not scenario.batching.enable_chunked_prefill:
        checks.append((need > scenario.batching.max_num_batched_tokens,
                       "prompt longer than max_num_batched_tokens with chunked prefill off "
                       "(a recompute after preemption needs prompt + output)"))
    for bad, reason in checks:
        new = bad & ok
        table.reject_reason[new] = reason
        ok &= ~bad
    table.status[~ok] = REJECTED
    return ok
