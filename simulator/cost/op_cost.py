"""A priced step, operator by operator: what ``CostModel.breakdown`` returns."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from simulator.inputs.errors import SpecsimError


@dataclass(frozen=True)
class OpCost:
    """One operator of a step, summed over the layers it appears in."""

    name: str
    flops: float
    hbm_bytes: float
    host_bytes: float
    compute_s: float
    memory_s: float
    host_s: float
    overhead_s: float
    # attention is priced per request (sum of per-request maxima), not max of the sums
    roofline_s: float | None = None

    @property
    def time_s(self) -> float:
        if self.roofline_s is not None:
            return self.roofline_s + self.overhead_s
        return max(self.compute_s, self.memory_s, self.host_s) + self.overhead_s

    @property
    def bound(self) -> str:
        roofs = {"compute": self.compute_s, "memory": self.memory_s, "host": self.host_s}
        if self.compute_s == self.memory_s == self.host_s == 0.0:
            return "overhead"
        return max(roofs, key=roofs.get)

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.hbm_bytes if self.hbm_bytes else math.inf


@dataclass(frozen=True)
class StepCost:
    """A priced step: ``time_s = gpu_s + op_launch_s + launch_s + step_overhead_s +
    pipeline_s``.

    ``gpu_s`` is the operators' roofline time, ``op_launch_s`` the eager launch time beyond
    it (an operator of kernels shorter than their launches), ``launch_s`` the graph replays,
    ``step_overhead_s`` the host CPU time the step shows (all of it when synchronous).
    """

    ops: tuple[OpCost, ...]
    step_overhead_s: float
    pipeline_s: float = 0.0  # extra time of pipeline fill/drain and stage-to-stage transfers
    time_s: float = field(default=0.0)
    launch_s: float = 0.0    # host time of CUDA-graph replays
    mode: str = "eager"      # full, piecewise, eager (or pipelined)

    @property
    def gpu_s(self) -> float:
        """The operators' roofline time (what the GPU computes or moves)."""
        return sum(op.time_s - op.overhead_s for op in self.ops)

    @property
    def op_launch_s(self) -> float:
        """Eager launch time not hidden behind the operators' own GPU time."""
        return sum(op.overhead_s for op in self.ops)

    @property
    def flops(self) -> float:
        return sum(op.flops for op in self.ops)

    @property
    def hbm_bytes(self) -> float:
        return sum(op.hbm_bytes for op in self.ops)

    def to_records(self) -> list[dict]:
        """One dict per operator, ready for a DataFrame."""
        return [{"op": op.name, "flops": op.flops, "hbm_bytes": op.hbm_bytes,
                 "host_bytes": op.host_bytes, "compute_s": op.compute_s,
                 "memory_s": op.memory_s, "host_s": op.host_s, "overhead_s": op.overhead_s,
                 "time_s": op.time_s, "bound": op.bound,
                 "arithmetic_intensity": op.arithmetic_intensity} for op in self.ops]


def as_token_counts(values, name: str) -> np.ndarray:
    """Per-request token counts as a 1-D float array: finite and >= 0, else an error."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise SpecsimError("must be a 1-D sequence of per-request counts", field=name)
    if arr.size and (not np.all(np.isfinite(arr)) or arr.min() < 0):
        raise SpecsimError("counts must be finite and >= 0", field=name)
    return arr


def check_step(new_tokens, context, logits_tokens):
    """A step's per-request new tokens and contexts (a scalar context serves every request)
    and its LM-head token total, validated: ``(new, ctx, logits)``."""
    new = as_token_counts(new_tokens, "new_tokens")
    ctx = as_token_counts(context, "context")
    if ctx.size == 1 and new.size > 1:
        ctx = np.full_like(new, ctx[0])
    if new.shape != ctx.shape:
        raise SpecsimError(f"new_tokens has {new.size} entries, context {ctx.size}",
                           field="context")
    if logits_tokens is None:
        return new, ctx, float(new.sum())
    return new, ctx, float(as_token_counts(logits_tokens, "logits_tokens").sum())


def op_from_term(term: tuple) -> OpCost:
    """An OpCost from a ``token_terms.token_terms`` tuple: the launch time beyond the roofline
    is the operator's overhead (its time is ``max(roofline, launch)``)."""
    name, flops, hbm, host_b, c, m, h, launch, gpu = term
    return OpCost(name, flops, hbm, host_b, c, m, h, max(launch - gpu, 0.0), roofline_s=gpu)
