"""The analytic model of one speculative iteration: cost model + closed forms, no event loop.

A point is (hardware, target, draft, tensor_parallel, batch, context, policy, gamma, alpha):
the cost model prices the draft forwards, the verification forward and a plain decode step
of ``batch`` requests at equal ``context``; the closed forms give the expected tokens per
iteration E; speedup = E * decode_s / (draft_s + verify_s).  Policies: ``none``; ``chain``
(gamma draft forwards, gamma + 1 tokens verified); ``tree``, SpecInfer's expansion
<tree_width, 1, ..., 1> of depth gamma: tree_width chains branching at the root, one draft
forward per level over that level's nodes, every node verified in one forward, E from the
acceptance model's tree semantics (``sequoia``, ``tree_topk``...).  Giving ``c`` (or
lecture 003's ``c_target_over_draft``) instead of models evaluates the closed form alone,
E / (gamma * c + 1).  ``estimate_table`` is the same model over a range of gamma (``specsim
estimate``).  Draft forwards are priced by ``simulator.cost.drafting``, exactly as the
engine's policies are charged.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Mapping

import numpy as np
import pandas as pd

from simulator.cost.cost_model import CostModel
from simulator.cost.drafting import chain_draft_time
from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param, parse_params
from simulator.speculation.closed_forms import expected_tokens


def estimate_table(target: CostModel, draft: CostModel | None, *, batch: int, context: float,
                   gammas: list[int], alpha: float) -> pd.DataFrame:
    """Per gamma: draft, verify and plain-decode step times, c, E, speedup; best row marked."""
    if batch < 1:
        raise SpecsimError("must be >= 1", field="--batch")
    if context < 0:
        raise SpecsimError("must be >= 0", field="--context")
    decode = target.decode_time(batch, context)
    one_draft = draft.decode_time(batch, context) if draft is not None else 0.0
    rows = []
    for g in gammas:
        draft_s = chain_draft_time(draft, np.full(batch, float(context)), np.full(batch, g)) \
            if (draft is not None and g) else 0.0
        verify_s = target.verify_time(batch, context, g + 1)
        e = expected_tokens(alpha, g)
        rows.append({"gamma": g, "draft_s": draft_s, "verify_s": verify_s, "decode_s": decode,
                     "c": one_draft / decode, "expected_tokens": e,
                     "speedup": e * decode / (draft_s + verify_s)})
    df = pd.DataFrame(rows)
    best = int(df.loc[df["speedup"].idxmax(), "gamma"])
    df["best_gamma"] = best
    df["is_best"] = df["gamma"] == best
    return df


POLICIES = ("none", "chain", "tree")

FIELDS: dict[str, Param] = {
    "hardware": Param("str", default="a100-40gb"),
    "hardware_dir": Param("any", default=None),
    "target": Param("str", default="opt-13b"),
    "draft": Param("any", default="opt-125m"),
    "tensor_parallel": Param("int", default=1, minimum=1, maximum=1024,
                             aliases=("parallelism.tensor_parallel",)),
    "batch": Param("int", default=1, minimum=1, maximum=1_000_000),
    "context": Param("float", default=512.0, minimum=0.0, maximum=1e7),  # = cli.args.MAX_CONTEXT_TOKENS
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
    closed = p["c"] is not None or p["c_target_over_draft"] is not None
    if p["policy"] != "none" and p["draft"] is None and not closed:
        raise SpecsimError(f"policy {p['policy']!r} needs a draft model (or c)", source=source,
                           field="draft", fix="set draft: opt-125m, or give c")
    if names and not closed:
        try:
            check_names(p["hardware"], p["hardware_dir"], p["target"],
                        p["draft"] if p["policy"] != "none" else None)
        except SpecsimError as exc:
            raise exc.relocated(source=source) from None
    return p


@lru_cache(maxsize=64)
def _cost_models(hardware: str, hardware_dir, target: str, draft, tp: int, overheads: bool):
    from hardware.profile import load_profile
    from simulator.cost.cost_model import CostModel
    from simulator.cost.memory_plan import plan_memory
    from simulator.cost.parallelism import Parallelism
    from simulator.models.spec import load_model
    hw = load_profile(hardware, hardware_dir)
    tmodel = load_model(target)
    tcm = CostModel(hw, tmodel, Parallelism(tensor_parallel=tp), overheads=overheads)
    dmodel = load_model(draft) if draft else None
    if dmodel is not None and dmodel.kind != "decoder":
        raise SpecsimError(f"{dmodel.name} is a {dmodel.kind} model, not a draft decoder",
                           field="draft", fix="name a small decoder such as opt-125m")
    dcm = CostModel(hw, dmodel, overheads=overheads) if dmodel is not None else None
    try:
        extra = [dmodel] if dmodel is not None else []
        kv_tokens = plan_memory(hw, tmodel, Parallelism(tensor_parallel=tp), extra_models=extra,
                                kv_models=extra).kv_tokens
    except SpecsimError:
        kv_tokens = 0  # the weights alone do not fit: every point reports kv_fits False
    return tcm, dcm, kv_tokens


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
        if not hasattr(acc, "expected_tree_accepted"):
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
    """Evaluate one analytic point: draft/verify/decode times, c, E, speedup, tokens/s."""
    p = check_point(params)
    config = tree_config(p["policy"], p["gamma"], p["tree_width"])
    e = _expected(p, config)
    levels = np.concatenate(([1], np.cumprod(config))).astype(int) if config else np.ones(1, int)
    nodes = int(levels[1:].sum())
    nan = float("nan")
    out = {"draft_tokens": nodes, "draft_s": nan, "verify_s": nan, "decode_s": nan,
           "iteration_s": nan, "c": nan, "expected_tokens": e, "speedup": nan,
           "tokens_per_s": nan, "baseline_tokens_per_s": nan, "kv_tokens": -1, "kv_fits": True}
    c_closed = p["c"] if p["c"] is not None else (
        1.0 / p["c_target_over_draft"] if p["c_target_over_draft"] is not None else None)
    if c_closed is not None:
        out.update(c=float(c_closed), speedup=e / (len(config) * c_closed + 1.0))
        return out
    tcm, dcm, kv_tokens = _cost_models(p["hardware"], p["hardware_dir"], p["target"],
                                       p["draft"] if p["policy"] != "none" else None,
                                       p["tensor_parallel"], p["overheads"])
    b, ctx = p["batch"], float(p["context"])
    decode_s = tcm.decode_time(b, ctx)
    verify_s = tcm.verify_time(b, ctx, nodes + 1)
    draft_s = 0.0
    if config:
        if p["policy"] == "chain":  # exactly what the engine's chain policy charges
            draft_s = chain_draft_time(dcm, np.full(b, ctx), np.full(b, len(config)))
        else:  # one draft forward per level, as the engine's specinfer policy charges
            from simulator.cost.drafting import level_draft_time
            draft_s = level_draft_time(dcm, np.full(b, ctx), levels[:-1].tolist())
    iteration_s = draft_s + verify_s
    out.update(draft_s=draft_s, verify_s=verify_s, decode_s=decode_s, iteration_s=iteration_s,
               c=dcm.decode_time(b, ctx) / decode_s if dcm is not None else nan,
               speedup=e * decode_s / iteration_s, tokens_per_s=b * e / iteration_s,
               baseline_tokens_per_s=b / decode_s, kv_tokens=int(kv_tokens),
               kv_fits=bool(b * (ctx + nodes + 1) <= kv_tokens))
    return out
