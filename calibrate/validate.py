"""Validate predicted step times against real torch model steps.

Real transformers with random weights in catalogued shapes (scaled down in layers to what
the device holds) run prefill, decode, chain verification (gamma + 1 tokens per request) and
tree verification (a token tree under a tree-attention mask) steps at several batch sizes and
context lengths.  Each measured step is compared with the cost model's prediction under one
or more hardware profiles, typically the uncalibrated base profile ("before") and the
calibrated one ("after").  Calibration only ever saw micro-benchmarks, so the error here is
out of sample.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd
import torch

from calibrate.model_torch import TorchDecoder, footprint_bytes, greedy, scaled_spec, torch_dtype
from calibrate.spec_loop import SpecLoopConfig, predict_speedup, run_spec_loop
from calibrate.timing import ProgressFn, free_memory_bytes, measure, resolve_device, threads
from hardware.profile import DTYPE_BYTES, HardwareProfile
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import eager
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.speculation.token_tree import TokenTree

STEPS = ("prefill", "decode", "chain", "tree")


@dataclass(frozen=True)
class ValidationPlan:
    """Models (catalog name, layers or None for all) and the steps to time on each."""

    device: str
    dtype: str
    models: tuple[tuple[str, int | None], ...]
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    prefill_tokens: tuple[int, ...]
    gamma: int = 4
    tree: tuple[int, ...] = (2, 2, 1)     # expansion config <k1, k2, ...> (SpecInfer)
    warmup: int = 2
    reps: int = 5
    memory_limit_bytes: float | None = None


def make_validation_plan(device: str, *, quick: bool = False, dtype: str | None = None,
                         models: tuple[tuple[str, int | None], ...] | None = None,
                         reps: int | None = None,
                         memory_limit_bytes: float | None = None) -> ValidationPlan:
    """A default plan: on CPU, OPT-125M and a two-layer model with OPT-1.3B's widths."""
    resolve_device(device)
    gpu = device == "cuda"
    dtype = dtype or ("fp16" if gpu else "fp32")
    torch_dtype(dtype)
    if models is None:
        if gpu:
            models = (("opt-1.3b", None), ("llama-2-7b", None)) if quick else \
                (("opt-1.3b", None), ("llama-2-7b", None), ("llama-2-13b", None))
        else:
            models = (("opt-125m", 2),) if quick else (("opt-125m", None), ("opt-1.3b", 2))
    if gpu:
        return ValidationPlan(device, dtype, models, batches=(1, 16) if quick else (1, 8, 32),
                              contexts=(512, 2048) if quick else (256, 1024, 2048),
                              prefill_tokens=(512,) if quick else (256, 1024), warmup=3,
                              reps=reps or 10, memory_limit_bytes=memory_limit_bytes)
    return ValidationPlan(device, dtype, models, batches=(1, 4), contexts=(128, 512),
                          prefill_tokens=(64,) if quick else (64, 256), warmup=2,
                          reps=reps or (5 if quick else 7),
                          memory_limit_bytes=memory_limit_bytes)


def _step_shapes(plan: ValidationPlan) -> list[tuple[str, int, int, int]]:
    """(step, batch, context, new tokens per request) for every case of one model."""
    tree_nodes = TokenTree.from_config(plan.tree).num_nodes
    cases = [("prefill", 1, 0, p) for p in plan.prefill_tokens]
    for batch in plan.batches:
        for ctx in plan.contexts:
            cases += [("decode", batch, ctx, 1), ("chain", batch, ctx, plan.gamma + 1),
                      ("tree", batch, ctx, tree_nodes + 1)]
    return cases


def _fit_layers(spec, plan: ValidationPlan, layers: int | None, budget: float,
                max_len: int, batch: int, new: int) -> tuple[int, str]:
    """Layers to build: as asked, or fewer so that the model fits ``budget`` (with a note)."""
    b = DTYPE_BYTES[plan.dtype]
    want = layers or spec.num_layers
    for n in range(want, 0, -1):
        need = footprint_bytes(scaled_spec(spec, num_layers=n, dtype=plan.dtype), batch=batch,
                               max_len=max_len, new_tokens=new, dtype_bytes=b)
        if need <= budget:
            note = "" if n == want else f"scaled to {n} of {want} layers to fit memory"
            return n, note
    return 0, f"does not fit: even one layer needs {need / 2**30:.3g} GiB, " \
              f"{budget / 2**30:.3g} GiB available"


def run_validation(plan: ValidationPlan, *, rng: np.random.Generator,
                   progress: ProgressFn | None = None) -> pd.DataFrame:
    """Time every step of every model in ``plan``; one row per case."""
    dev = resolve_device(plan.device)
    dtype = torch_dtype(plan.dtype)
    tree = TokenTree.from_config(plan.tree)
    local = torch.zeros(tree.num_nodes + 1, tree.num_nodes + 1, dtype=torch.bool)
    local[:, 0] = True          # the root (last verified token) is every node's ancestor
    local[1:, 1:] = torch.from_numpy(tree.attention_mask())
    tree_mask = local.to(dev)
    tree_depth = torch.from_numpy(np.concatenate([[0], tree.depth])).to(dev)
    shapes = _step_shapes(plan)
    total = len(plan.models) * len(shapes)
    rows, done = [], 0
    for name, layers in plan.models:
        spec = load_model(name)
        max_len = max(max(plan.contexts) + max(n for _, _, _, n in shapes),
                      max(plan.prefill_tokens))
        batch_max = max(plan.batches)
        budget = plan.memory_limit_bytes if plan.memory_limit_bytes is not None \
            else 0.8 * free_memory_bytes(dev)
        n_layers, note = _fit_layers(spec, plan, layers, budget, max_len, batch_max,
                                     max(plan.prefill_tokens))
        base = dict(model=name, layers=n_layers, dtype=plan.dtype)
        if n_layers == 0:
            for step, batch, ctx, new in shapes:
                rows.append(dict(base, step=step, batch=batch, context=ctx, new_tokens=new,
                                 measured_s=np.nan, status="skipped", note=note))
                done += 1
                if progress is not None:
                    progress(done, total, f"{name} {step} (skipped)")
            continue
        model = TorchDecoder(scaled_spec(spec, num_layers=n_layers, dtype=plan.dtype),
                             device=dev, dtype=dtype, rng=rng)
        cache = model.new_cache(batch_max, max_len)
        for step, batch, ctx, new in shapes:
            tokens = torch.from_numpy(rng.integers(0, spec.vocab_size, (batch, new))).to(dev)
            sub = type(cache)([k[:batch] for k in cache.k], [v[:batch] for v in cache.v])
            extra = dict(tree_mask=tree_mask, tree_depth=tree_depth) if step == "tree" else {}
            if step == "prefill":
                extra = dict(last_only=True)
            fn = lambda _i, m=model, t=tokens, c=sub, x=ctx, e=extra: \
                greedy(m.forward(t, c, x, **e))
            t = measure(fn, dev, warmup=plan.warmup, reps=plan.reps)
            rows.append(dict(base, step=step, batch=batch, context=ctx, new_tokens=new,
                             measured_s=t.median_s, measured_min_s=t.min_s, status="ok",
                             note=note))
            done += 1
            if progress is not None:
                progress(done, total, f"{name} {step} b{batch} ctx{ctx}")
        del model, cache
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def predict_steps(measured: pd.DataFrame, profile: HardwareProfile) -> np.ndarray:
    """The cost model's seconds for every row of :func:`run_validation`'s table."""
    out = np.full(len(measured), np.nan)
    models: dict[tuple[str, int, str], CostModel] = {}
    for i, row in enumerate(measured.itertuples(index=False)):
        if row.status != "ok":
            continue
        key = (row.model, int(row.layers), row.dtype)
        if key not in models:
            spec = scaled_spec(load_model(row.model), num_layers=int(row.layers),
                               dtype=row.dtype)
            # torch runs these steps eagerly, kernel by kernel
            models[key] = CostModel(profile, spec, execution=eager(profile))
        new = np.full(int(row.batch), float(row.new_tokens))
        ctx = np.full(int(row.batch), float(row.context))
        logits = np.ones(int(row.batch)) if row.step == "prefill" else None
        out[i] = models[key].step_time(new, ctx, logits)
    return out


def compare(measured: pd.DataFrame, profiles: Mapping[str, HardwareProfile],
            statistic: str = "median") -> pd.DataFrame:
    """Measured against predicted per case: ``predicted_<label>_s`` and ``error_<label>``.

    The error is signed and relative, (predicted - measured) / measured.
    """
    if statistic not in ("median", "min"):
        raise SpecsimError(f"unknown statistic {statistic!r}", field="statistic",
                           fix="use median or min")
    col = "measured_s" if statistic == "median" else "measured_min_s"
    table = measured.copy()
    table["measured_s"] = measured[col]
    table = table.drop(columns=["measured_min_s"], errors="ignore")
    for label, profile in profiles.items():
        pred = predict_steps(table, profile)
        table[f"predicted_{label}_s"] = pred
        table[f"error_{label}"] = pred / table["measured_s"] - 1.0
    return table


def mape(table: pd.DataFrame, label: str) -> float:
    """Mean absolute percentage error (as a fraction) of ``label``'s predictions."""
    err = table[f"error_{label}"].to_numpy(dtype=float)
    err = err[np.isfinite(err)]
    if err.size == 0:
        raise SpecsimError("no validation case was measured", field="models",
                           fix="use smaller models or a device with more memory")
    return float(np.mean(np.abs(err)))


@dataclass(frozen=True)
class Validation:
    """What ``specsim validate`` reports: every step measured against every profile's
    prediction, each profile's MAPE, the speculative loop (or None) and torch's threads."""

    table: pd.DataFrame
    mape: dict[str, float]
    loop: pd.DataFrame | None
    threads: int


def evaluate(measured: pd.DataFrame, profiles: Mapping[str, HardwareProfile], *,
             statistic: str, loop: SpecLoopConfig | None, rng: np.random.Generator) -> Validation:
    """Score ``profiles`` on the measured steps; then run the speculative loop of ``loop``
    (unless None) and set its speedup predicted under each profile beside the measured one."""
    table = compare(measured, profiles, statistic=statistic)
    errors = {label: mape(table, label) for label in profiles}
    spec = None
    if loop is not None:
        spec = run_spec_loop(loop, rng=rng)
        for label, profile in profiles.items():
            spec[f"predicted_{label}"] = predict_speedup(loop, profile)
            spec[f"error_{label}"] = spec[f"predicted_{label}"] / spec["measured_speedup"] - 1
    return Validation(table, errors, spec, threads())
