"""Frames priced by the cost model: the optimal-gamma grid and a step's roofline points."""
from __future__ import annotations

import dataclasses

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from hardware.profile import HardwareProfile
from simulator.cost.cost_model import CostModel
from simulator.models.spec import ModelSpec, load_model
from simulator.planning.analytic import estimate_table

DEFAULT_ALPHA = 0.8
DEFAULT_GAMMA = 4


@dataclass(frozen=True)
class Pricing:
    """The hardware, target and cost models of a scenario, as a report needs them."""

    hardware: HardwareProfile
    target: ModelSpec
    target_cost: CostModel
    draft_cost: CostModel | None


@dataclass(frozen=True)
class OperatingPoint:
    """A representative step of a run: decoding batch size, context and gamma."""

    batch: int
    context: int
    gamma: int


def scenario_pricing(scenario) -> Pricing:
    """Load the scenario's hardware and models and build their cost models."""
    from simulator.scenario import resolve_hardware
    hw = resolve_hardware(scenario)
    target = load_model(scenario.target)
    from simulator.deployment import cost_models
    draft = load_model(scenario.draft) if scenario.draft else None
    tcost, dcost = cost_models(scenario, hw, target, draft)
    return Pricing(hw, target, tcost, dcost)


def operating_point(results: Sequence, max_context: int) -> OperatingPoint:
    """Median decode batch of the first run, median mid-generation context, observed gamma."""
    first = results[0]
    steps = first.steps
    decoding = steps.loc[steps["num_decode"] > 0, "num_decode"] if len(steps) else []
    batch = int(max(1, round(float(np.median(decoding))))) if len(decoding) else 1
    req = first.requests
    ctx = (req["prompt_tokens"] + 0.5 * req["output_tokens"]).to_numpy(np.float64)
    context = int(np.median(ctx)) if ctx.size else 512
    gamma = DEFAULT_GAMMA
    for r in results:
        drafts = int(r.requests["num_drafts"].sum())
        if drafts:
            gamma = max(1, round(int(r.requests["num_draft_tokens"].sum()) / drafts))
            break
    return OperatingPoint(batch, int(min(max(context, 1), max_context - gamma - 1)), gamma)


def scenario_alpha(scenario, results: Sequence) -> tuple[float, str]:
    """The alpha the gamma grid uses, and where it came from."""
    acc = dict(getattr(scenario, "acceptance", {}) or {})
    if acc.get("model") == "iid" and isinstance(acc.get("alpha"), (int, float)):
        return float(acc["alpha"]), "the scenario's iid acceptance"
    for r in results:
        drafted = int(r.requests["num_draft_tokens"].sum())
        if drafted:
            rate = int(r.requests["num_accepted_tokens"].sum()) / drafted
            return rate, f"the measured acceptance rate of {r.label}"
    return DEFAULT_ALPHA, "the default"


def _doublings(lo: int, hi: int) -> list[int]:
    out = [lo]
    while out[-1] * 2 <= hi:
        out.append(out[-1] * 2)
    return out


def gamma_grid_frame(target: CostModel, draft: CostModel, *, alpha: float,
                     batches: Sequence[int], contexts: Sequence[int],
                     gammas: Sequence[int] = tuple(range(9))) -> pd.DataFrame:
    """Best gamma and its speedup per batch x context, from ``estimate_table`` per cell.

    speedup(gamma) = E(alpha, gamma) x t_decode / (t_draft(gamma) + t_verify(gamma + 1)) is
    exactly 1 at gamma = 0, so with 0 among the gammas the best speedup is never below 1.
    """
    rows = []
    for b in batches:
        for ctx in contexts:
            table = estimate_table(target, draft, batch=int(b), context=float(ctx),
                                   gammas=list(gammas), alpha=alpha)
            best = table.loc[table["is_best"]].iloc[0]
            rows.append({"batch": int(b), "context": int(ctx),
                         "best_gamma": int(best["gamma"]), "speedup": float(best["speedup"]),
                         "c": float(best["c"])})
    return pd.DataFrame(rows, columns=["batch", "context", "best_gamma", "speedup", "c"])


def default_grid_axes(max_num_seqs: int, max_context: int) -> tuple[list[int], list[int]]:
    """Batch sizes 1, 2, 4 ... up to the scheduler limit; contexts 128 ... under the model's."""
    batches = _doublings(1, max(1, min(int(max_num_seqs), 512)))
    contexts = _doublings(128, max(128, int(max_context) - 16))
    return batches, contexts


def roofline_frames(pricing: Pricing, point: OperatingPoint) -> tuple[pd.DataFrame,
                                                                       pd.DataFrame]:
    """Operators of a decode step and of a verification step, and the device's roofs.

    Points: step, op, arithmetic_intensity (FLOP/byte), flops_per_s (achieved: FLOPs over
    the operator's time, overheads included), time_s, bound.  Operators without FLOPs or
    bytes (gathers, all-reduces) have no place on the chart and are left out.
    Roofs: per device, min(peak FLOP/s, intensity x HBM bandwidth), sampled along the axis.
    """
    cm, b, ctx = pricing.target_cost, point.batch, point.context
    steps = {"decode": np.ones(b), f"verify (gamma={point.gamma})": np.full(b, point.gamma + 1.0)}
    parts = []
    for name, new in steps.items():
        recs = pd.DataFrame(cm.breakdown(new, np.full(b, float(ctx))).to_records())
        recs.insert(0, "step", name)
        parts.append(recs)
    ops = pd.concat(parts, ignore_index=True)
    ops = ops[(ops["flops"] > 0) & (ops["hbm_bytes"] > 0) & (ops["time_s"] > 0)].copy()
    ops["flops_per_s"] = ops["flops"] / ops["time_s"]
    ops = ops[["step", "op", "arithmetic_intensity", "flops_per_s", "time_s", "flops",
               "hbm_bytes", "bound"]].reset_index(drop=True)
    peak = pricing.hardware.peak_flops(pricing.target.dtype)
    bw = pricing.hardware.memory_bandwidth_bytes_per_s
    ridge = peak / bw
    lo = min(float(ops["arithmetic_intensity"].min()) if len(ops) else 1.0, ridge) / 4
    hi = max(float(ops["arithmetic_intensity"].max()) if len(ops) else 1.0, ridge) * 4
    ai = np.unique(np.concatenate([np.geomspace(lo, hi, 48), [ridge]]))
    roofs = pd.DataFrame({"arithmetic_intensity": ai, "flops_per_s": np.minimum(peak, ai * bw),
                          "roof": np.where(ai < ridge, "memory roof", "compute roof")})
    return ops, roofs


RATIO_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def dense_counterpart(model: ModelSpec) -> ModelSpec:
    """The dense model of a MoE model's active size: each MoE layer's experts replaced by
    one dense MLP of (experts_per_token + shared_experts) x expert_ffn_size, so every token
    computes the same FLOPs and the model has the same active parameters."""
    width = (model.experts_per_token + model.shared_experts) * model.expert_ffn_size
    return dataclasses.replace(model, name=f"dense counterpart of {model.name}",
                               num_experts=0, experts_per_token=0, shared_experts=0,
                               expert_ffn_size=0, dense_layers=0, ffn_size=width)


def verify_ratio_frame(pricing: Pricing, point: OperatingPoint,
                       batches: Sequence[int] = RATIO_BATCHES) -> pd.DataFrame:
    """What a verification of gamma + 1 tokens per request costs against a 1-token decode,
    per batch size (columns model, batch, ratio).  On a dense model the ratio stays near 1
    while decoding is memory-bound; on a MoE model the verification's extra tokens touch
    more distinct experts (more weight bytes), so the ratio is well above 1 at small batch
    and falls back once a decode step alone touches nearly every expert.  A MoE target is
    drawn beside its dense counterpart (``dense_counterpart``)."""
    models = [(pricing.target.name, pricing.target_cost)]
    if pricing.target.is_moe:
        cm = pricing.target_cost
        dense = dense_counterpart(pricing.target)
        # a dense model has no experts to spread (nor ranks that share them)
        parallel = dataclasses.replace(cm.parallel, expert_parallel=1,
                                       data_parallel_attention=1)
        models.append((dense.name, CostModel(cm.hardware, dense, parallel,
                                             execution=cm.execution, host=cm.host)))
    rows = []
    ctx = float(point.context)
    for name, cm in models:
        for b in batches:
            decode = cm.step_time(np.ones(b), np.full(b, ctx))
            verify = cm.step_time(np.full(b, point.gamma + 1.0), np.full(b, ctx))
            rows.append({"model": name, "batch": int(b), "ratio": verify / decode})
    return pd.DataFrame(rows, columns=["model", "batch", "ratio"])
