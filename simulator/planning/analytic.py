"""The analytic model of one speculative iteration: cost model + closed forms, no event loop.

A point is (hardware, target, draft, tensor_parallel, batch, context, policy, gamma, alpha):
the cost model prices the draft forwards, the verification forward and a plain decode step
of ``batch`` requests at equal ``context`` (tokens already in the KV cache); the closed forms
give the expected tokens per iteration E; speedup = E * decode_s / (draft_s + verify_s).
Policies: ``none``; ``chain`` (gamma draft forwards, gamma + 1 tokens verified); ``tree``,
SpecInfer's expansion <tree_width, 1, ..., 1> of depth gamma: tree_width chains branching at
the root, one draft forward per level over that level's nodes, every node verified in one
forward, E from the acceptance model's tree semantics (``sequoia``, ``tree_topk``...).
``mtp`` and ``eagle3``: chains drafted by a module inside the target's step (the target's
MTP modules, an EAGLE-3 layer; no draft model: ``draft`` is ignored), priced by the engine
policy's own draft time (``simulator.planning.head_drafts``).
Giving ``c`` (or lecture 003's ``c_target_over_draft``) instead of models evaluates the
closed form alone, E / (gamma * c + 1).  ``estimate_table`` is the same model over a range
of gamma (``specsim estimate``).  Draft forwards are priced by ``simulator.cost.drafting``,
exactly as the engine's policies are charged.

Gamma 0 has one meaning, the engine's.  ``chain`` with gamma 0 is the engine's chain policy
with ``num_speculative_tokens: 0`` (``simulator/policies/chain.py`` accepts 0): the draft
model stays loaded (its weights and its KV cache count against memory: the policy's
``memory_models`` does not look at gamma; in a simulation it also prefills every prompt
chunk), it drafts nothing, and the target verifies one token per request: the step time of
plain decoding, so its speedup is exactly 1, with chain's smaller KV budget.  The
no-speculation baseline is ``policy: none`` (no draft loaded), never a gamma: every speedup
is over none's decode step.  ``tree`` has no gamma 0 (the engine's ``specinfer`` needs
num_speculative_tokens >= 1), so a tree point with gamma 0 is refused.  Why: a label must
price one thing in both modes, and the engine (which this package may not change) runs
chain-0 with its draft; calling chain-0 "no speculation" would hide the draft's memory.

Feasibility (``point_feasibility``): a point is marked infeasible, with its reason, when
the deployment's weights do not fit one replica; when context + 1 + gamma reaches the
target's ``max_context`` (vLLM's scheduler caps a step at ``max_model_len - 1 -
num_computed_tokens`` new tokens, vllm/v1/core/sched/scheduler.py); when the draft model
decides (vLLM skips the proposer when seq_len + k >= its max_model_len,
``simulator.cost.drafting.fits_draft_context``; seq_len = context + 1); or when
batch x ceil((context + drafted nodes + 1) / block_size) KV blocks exceed the replica's
memory plan (``simulator.cost.memory_plan.plan_memory`` with the engine policy's
``memory_models``, at ``gpu_memory_utilization`` and ``block_size``, logits held for batch x
(nodes + 1) tokens, as ``simulator.deployment`` plans a scenario of max_num_seqs = batch).
An infeasible point keeps its timings (a sweep row is raw data); the gamma map never ranks
it.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Mapping

import numpy as np

from simulator.acceptance.tree_kinds import NodeConditionals
from simulator.cost.drafting import chain_draft_time, draft_max_context, fits_draft_context
from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param, parse_params
from simulator.planning.estimate import estimate_table  # noqa: F401 (its home was here)
from simulator.planning.head_drafts import (
    HEAD_POLICIES,
    head_draft_time,
    head_pass_ratio,
    point_draft,
)
from simulator.scenario import Batching
from simulator.speculation.closed_forms import expected_tokens

POLICIES = ("none", "chain", "tree") + HEAD_POLICIES
# the engine's policy each analytic policy prices (its memory_models say what a draft adds)
ENGINE_POLICIES = {"none": "none", "chain": "chain", "tree": "specinfer",
                   **{h: h for h in HEAD_POLICIES}}
_BATCHING = Batching()  # the scenario defaults of the memory plan (vLLM's names)
VLLM_MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs: its CUDA graphs capture up to 512

FIELDS: dict[str, Param] = {
    "hardware": Param("str", default="a100-40gb"),
    "hardware_dir": Param("any", default=None),
    "target": Param("str", default="opt-13b"),
    "draft": Param("any", default="opt-125m"),
    "tensor_parallel": Param("int", default=1, minimum=1, maximum=1024,
                             aliases=("parallelism.tensor_parallel",)),
    # vLLM's draft_tensor_parallel_size: 1 or tensor_parallel; None: the target's TP
    "draft_tensor_parallel": Param("int", default=None, minimum=1, maximum=1024,
                                   aliases=("parallelism.draft_tensor_parallel_size",
                                            "draft_tensor_parallel_size")),
    "batch": Param("int", default=1, minimum=1, maximum=1_000_000),
    # maximum = cli.args.MAX_CONTEXT_TOKENS
    "context": Param("float", default=512.0, minimum=0.0, maximum=1e7),
    "policy": Param("str", default="chain", choices=POLICIES),
    "gamma": Param("int", default=4, minimum=0, maximum=64,
                   aliases=("num_speculative_tokens",)),
    "tree_width": Param("int", default=1, minimum=1, maximum=64),
    "alpha": Param("float", default=0.8, minimum=0.0, maximum=1.0,
                   aliases=("acceptance.alpha",)),
    "acceptance": Param("any", default=None),
    "c": Param("any", default=None),
    "c_target_over_draft": Param("any", default=None),
    "overheads": Param("bool", default=True),
    "gpu_memory_utilization": Param("float", default=_BATCHING.gpu_memory_utilization,
                                    minimum=0.0, maximum=1.0,
                                    aliases=("batching.gpu_memory_utilization",)),
    "block_size": Param("int", default=_BATCHING.block_size, minimum=1, maximum=10_000_000,
                        aliases=("batching.block_size",)),
    "max_num_batched_tokens": Param("int", default=_BATCHING.max_num_batched_tokens,
                                    minimum=1, maximum=10_000_000,
                                    aliases=("batching.max_num_batched_tokens",)),
}


@lru_cache(maxsize=128)
def check_names(hardware: str, hardware_dir, target: str, draft) -> None:
    """Raise unless the hardware profile (None: given inline) and the models exist."""
    from hardware.profile import load_profile
    from simulator.models.spec import check_shared_vocabulary, load_model
    if hardware is not None:
        load_profile(hardware, hardware_dir)
    tmodel = load_model(target)
    if draft:
        check_shared_vocabulary(load_model(draft), tmodel)


def check_point(params: Mapping[str, Any], *, source: str = "sweep",
                names: bool = False) -> dict[str, Any]:
    """Validate an analytic point (canonical names, defaults filled in); ``names``: they exist."""
    p = parse_params(params, FIELDS, source=source, prefix="")
    for name in ("draft", "hardware_dir"):
        if p[name] is not None and (not isinstance(p[name], str) or not p[name]):
            raise SpecsimError(f"expected a name or null, got {p[name]!r}", source=source,
                               field=name)
    for name in ("c", "c_target_over_draft"):
        v = p[name]
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not math.isfinite(v) or v < 0 or (v == 0 and name != "c")):
            raise SpecsimError(f"must be a finite number {'>= 0' if name == 'c' else '> 0'} "
                               f"or null, got {v!r}", source=source, field=name)
    if p["c"] is not None and p["c_target_over_draft"] is not None:
        raise SpecsimError("give c or c_target_over_draft, not both", source=source,
                           field="c_target_over_draft")
    if p["acceptance"] is not None:
        from simulator.acceptance import acceptance_from_config
        acceptance_from_config(p["acceptance"], source=f"{source}: acceptance")
    if p["policy"] == "tree" and p["acceptance"] is None:
        raise SpecsimError("a tree needs an acceptance model with tree semantics", source=source,
                           field="acceptance",
                           fix="e.g. acceptance: {model: sequoia, rates: [0.8, 0.3, 0.1]}")
    if p["policy"] != "tree" and p["tree_width"] != 1:
        raise SpecsimError(f"only the tree policy has a width, not {p['policy']!r}",
                           source=source, field="tree_width", fix="leave tree_width at 1")
    if p["policy"] in ("tree",) + HEAD_POLICIES and p["gamma"] == 0:  # as the engine's
        raise SpecsimError(f"{p['policy']} with gamma 0 drafts nothing, and the engine's "
                           f"{ENGINE_POLICIES[p['policy']]} policy needs "
                           "num_speculative_tokens >= 1", source=source,
                           field="gamma", fix="give gamma >= 1; without speculation use "
                           "policy: none (chain with gamma 0 keeps its draft loaded)")
    if p["gpu_memory_utilization"] <= 0.0:
        raise SpecsimError("must be in (0, 1]", source=source, field="gpu_memory_utilization",
                           fix="give the fraction of device memory vLLM may use, e.g. 0.9")
    closed = p["c"] is not None or p["c_target_over_draft"] is not None
    if point_draft({**p, "draft": ""}) is not None and p["draft"] is None and not closed:
        raise SpecsimError(f"policy {p['policy']!r} needs a draft model (or c)", source=source,
                           field="draft", fix="set draft: opt-125m, or give c")
    if names and not closed:
        try:
            check_names(p["hardware"], p["hardware_dir"], p["target"], point_draft(p))
        except SpecsimError as exc:
            raise exc.relocated(source=source) from None
    return p


@lru_cache(maxsize=1024)
def point_cost_models(hardware: str, hardware_dir, target: str, draft, tp: int, overheads: bool,
                      draft_tp: int | None = None, policy: str = "chain", gamma: int = 0):
    """The point's cost models (``gamma``: the tokens it drafts, which size vLLM's CUDA
    graphs) exactly as the engine builds them for a scenario
    (``simulator.deployment.cost_models``: vLLM's default execution for its default
    ``max_num_seqs`` of 256, the draft's forwards inside the target's step and sharded with
    the target's tensor parallelism)."""
    from hardware.profile import load_profile
    from simulator.cost.parallelism import Parallelism
    from simulator.deployment import cost_models
    from simulator.models.spec import load_model
    from simulator.scenario import PolicyConfig, Scenario
    hw = load_profile(hardware, hardware_dir)
    dmodel = load_model(draft) if draft else None
    if dmodel is not None and dmodel.kind != "decoder":
        raise SpecsimError(f"{dmodel.name} is a {dmodel.kind} model, not a draft decoder",
                           field="draft", fix="name a small decoder such as opt-125m")
    engine = ENGINE_POLICIES[policy]
    sc = Scenario(parallelism=Parallelism(tensor_parallel=tp, draft_tensor_parallel=draft_tp),
                  overheads=overheads,
                  policy=PolicyConfig(engine),
                  batching=Batching(max_num_seqs=VLLM_MAX_NUM_SEQS))
    return cost_models(sc, hw, load_model(target), dmodel, speculative_tokens=int(gamma))


@lru_cache(maxsize=64)
def _deployment(hardware: str, hardware_dir, target: str, draft, policy: str, tp: int,
                gmu: float, block: int, mbt: int, draft_tp: int | None = None):
    """The engine's deployment of the point's policy, resolved as ``simulator.deployment``
    resolves a scenario (the policy's ``memory_models``: the models beside the target and
    those that keep a KV cache): (hardware, target, draft, resolved or None, error text)."""
    from hardware.profile import load_profile
    from simulator.cost.parallelism import Parallelism
    from simulator.deployment import resolve_deployment
    from simulator.models.spec import load_model
    from simulator.scenario import PolicyConfig, Scenario
    sc = Scenario(hardware=hardware, hardware_dir=hardware_dir, target=target, draft=draft,
                  parallelism=Parallelism(tensor_parallel=tp, draft_tensor_parallel=draft_tp),
                  policy=PolicyConfig(ENGINE_POLICIES[policy]),
                  batching=Batching(max_num_seqs=1, max_num_batched_tokens=mbt,
                                    block_size=block, gpu_memory_utilization=gmu))
    dmodel = load_model(draft) if draft else None
    try:
        return load_profile(hardware, hardware_dir), load_model(target), dmodel, \
            resolve_deployment(sc), None
    except SpecsimError as exc:
        if exc.field != "parallelism":  # only "the weights do not fit" is a property
            raise
        return None, load_model(target), dmodel, None, exc.message


@lru_cache(maxsize=4096)
def _memory_plan(key: tuple, logits_tokens: int):
    """One replica's memory plan (``key``: ``_deployment``'s arguments) holding logits for
    ``logits_tokens`` tokens, as ``simulator.deployment`` plans a scenario (max_num_seqs x
    max_verify_tokens): (the plan or None, the error text)."""
    from simulator.cost.memory_plan import plan_memory
    from simulator.cost.parallelism import Parallelism
    from simulator.deployment import draft_parallel
    from simulator.scenario import PolicyConfig, Scenario
    hw, tmodel, _, res, _ = _deployment(*key)
    policy, tp, gmu, block, mbt, draft_tp = key[4:]
    parallel = draft_parallel(Scenario(
        parallelism=Parallelism(tensor_parallel=tp, draft_tensor_parallel=draft_tp),
        policy=PolicyConfig(ENGINE_POLICIES[policy])))
    try:
        return plan_memory(hw, tmodel, parallel,
                           extra_models=res.extra_models, kv_models=res.kv_models,
                           gpu_memory_utilization=gmu, block_size=block,
                           max_batched_tokens=mbt, logits_tokens=logits_tokens), None
    except SpecsimError as exc:
        if exc.field != "parallelism":
            raise
        return None, exc.message


def point_feasibility(params: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the point can exist (the module docstring): ``feasible``, the
    ``infeasible_reason`` (every limit it breaks), ``limit`` (the first: memory,
    max_context, draft_max_context or kv), and the KV tokens the plan holds and it needs."""
    p = check_point(params)
    return _feasibility(p, tree_config(p["policy"], p["gamma"], p["tree_width"]))


def _feasibility(p: dict, config: tuple[int, ...]) -> dict[str, Any]:
    out = {"feasible": True, "infeasible_reason": None, "limit": None, "kv_tokens": -1,
           "kv_needed_tokens": -1, "kv_fits": True}
    if p["c"] is not None or p["c_target_over_draft"] is not None:
        return out  # the closed form alone: no device, no memory
    draft = point_draft(p)
    key = (p["hardware"], p["hardware_dir"], p["target"], draft, p["policy"],
           p["tensor_parallel"], p["gpu_memory_utilization"], p["block_size"],
           p["max_num_batched_tokens"], p["draft_tensor_parallel"])
    _, tmodel, dmodel, res, error = _deployment(*key)
    b, ctx, depth = p["batch"], float(p["context"]), len(config)
    verify = int(np.cumprod(config).sum()) + 1 if config else 1  # drafted nodes + 1
    plan = None
    if res is not None:
        plan, error = _memory_plan(key, min(b * verify, p["max_num_batched_tokens"]))
    found = []  # (limit, reason), in the order the docstring gives
    if plan is None:
        found.append(("memory", f"the weights do not fit one replica: {error}"))
    if not ctx + 1 + depth < tmodel.max_context:  # vLLM: new <= max_model_len - 1 - computed
        found.append(("max_context", f"context {ctx:g} + 1 + {depth} drafts reaches "
                      f"{tmodel.name}'s max_context {tmodel.max_context}"))
    dmax = draft_max_context(dmodel) if dmodel is not None else None
    if depth and not fits_draft_context(np.array([ctx + 1.0]), depth, dmax)[0]:
        found.append(("draft_max_context", f"context {ctx:g} + 1 + {depth} drafts reaches "
                      f"the draft {dmodel.name}'s max_context {dmax} (vLLM skips the draft)"))
    if plan is not None:
        blocks = b * math.ceil((ctx + verify) / p["block_size"])
        out.update(kv_tokens=int(plan.kv_tokens), kv_needed_tokens=int(blocks * plan.block_size),
                   kv_fits=bool(blocks <= plan.kv_blocks))
        if blocks > plan.kv_blocks:
            per_block = plan.kv_bytes_per_token * plan.block_size
            found.append(("kv", f"batch {b} x (context {ctx:g} + {verify - 1} drafts + 1) "
                          f"needs {blocks:,} KV blocks ({blocks * per_block / 1e9:.1f} GB), "
                          f"the budget holds {plan.kv_blocks:,} "
                          f"({plan.kv_blocks * per_block / 1e9:.1f} GB)"))
    else:
        out["kv_fits"] = False
    if found:
        out.update(feasible=False, limit=found[0][0],
                   infeasible_reason="; ".join(r for _, r in found))
    return out


@lru_cache(maxsize=256)
def _acceptance(frozen: str):
    import json

    from simulator.acceptance import acceptance_from_config
    return acceptance_from_config(json.loads(frozen), source="acceptance")


def tree_config(policy: str, gamma: int, width: int) -> tuple[int, ...]:
    """Expansion config of the drafted tree: () for none, <w, 1, ..., 1> of depth gamma."""
    if policy == "none" or gamma == 0:
        return ()
    return (width if policy == "tree" else 1,) + (1,) * (gamma - 1)


def _expected(p: dict, config: tuple[int, ...]) -> float:
    if not config:
        return 1.0
    if p["acceptance"] is None:
        return expected_tokens(p["alpha"], len(config))
    import json
    acc = _acceptance(json.dumps(p["acceptance"], sort_keys=True))
    if p["policy"] == "tree":
        if not isinstance(acc, NodeConditionals):
            raise SpecsimError(f"acceptance model {acc.name!r} has no tree semantics",
                               field="acceptance.model",
                               fix="use sequoia or tree_topk for the tree policy")
        from simulator.speculation.token_tree import TokenTree
        return 1.0 + float(acc.expected_tree_accepted(TokenTree.from_config(config)))
    accepted = acc.expected_accepted(len(config))
    if accepted is None:
        raise SpecsimError(f"acceptance model {acc.name!r} has no closed-form expectation",
                           field="acceptance.model", fix="use iid, positional, curve or sequoia")
    return 1.0 + float(accepted)


def analytic_point(params: Mapping[str, Any]) -> dict[str, Any]:
    """Evaluate one analytic point: draft/verify/decode times, c, E, speedup, tokens/s, and
    whether it can exist (``point_feasibility``: an infeasible point keeps its numbers)."""
    p = check_point(params)
    config = tree_config(p["policy"], p["gamma"], p["tree_width"])
    e = _expected(p, config)
    levels = np.concatenate(([1], np.cumprod(config))).astype(int) if config else np.ones(1, int)
    nodes = int(levels[1:].sum())
    nan = float("nan")
    out = {"draft_tokens": nodes, "draft_s": nan, "verify_s": nan, "decode_s": nan,
           "iteration_s": nan, "c": nan, "expected_tokens": e, "speedup": nan,
           "tokens_per_s": nan, "baseline_tokens_per_s": nan, **_feasibility(p, config)}
    c_closed = p["c"] if p["c"] is not None else (
        1.0 / p["c_target_over_draft"] if p["c_target_over_draft"] is not None else None)
    if c_closed is not None:
        out.update(c=float(c_closed), speedup=e / (len(config) * c_closed + 1.0))
        return out
    draft = point_draft(p)
    tcm, dcm = point_cost_models(p["hardware"], p["hardware_dir"], p["target"], draft,
                                 p["tensor_parallel"], p["overheads"],
                                 p["draft_tensor_parallel"], p["policy"], nodes)
    b, ctx = p["batch"], float(p["context"])
    # the baseline: plain decoding on the same GPUs (its graphs sized without speculation)
    base, base_draft = point_cost_models(p["hardware"], p["hardware_dir"], p["target"], draft,
                                         p["tensor_parallel"], p["overheads"],
                                         p["draft_tensor_parallel"], p["policy"], 0)
    decode_s = base.decode_time(b, ctx)
    verify_s = tcm.verify_time(b, ctx, nodes + 1)
    draft_s = 0.0
    if config and p["policy"] in HEAD_POLICIES:  # the engine policy's own draft_time
        draft_s = head_draft_time(p["policy"], tcm, b, ctx, len(config), e)
    elif config:
        if p["policy"] == "chain":  # exactly what the engine's chain policy charges
            draft_s = chain_draft_time(dcm, np.full(b, ctx), np.full(b, len(config)))
        else:  # one draft forward per level, as the engine's specinfer policy charges
            from simulator.cost.drafting import level_draft_time
            draft_s = level_draft_time(dcm, np.full(b, ctx), levels[:-1].tolist())
    iteration_s = draft_s + verify_s
    out.update(draft_s=draft_s, verify_s=verify_s, decode_s=decode_s, iteration_s=iteration_s,
               c=base_draft.decode_time(b, ctx) / decode_s if base_draft is not None else
               head_pass_ratio(p["policy"], base, b, ctx)
               if p["policy"] in HEAD_POLICIES else nan,
               speedup=e * decode_s / iteration_s, tokens_per_s=b * e / iteration_s,
               baseline_tokens_per_s=b / decode_s)
    return out
