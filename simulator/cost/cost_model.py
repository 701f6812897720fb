"""Per-operator roofline cost model: the time of one forward step of a batch.

Every operator costs ``max(FLOPs / (peak * eta_c), HBM bytes / (bandwidth * eta_m),
host bytes / host bandwidth)`` plus a per-kernel overhead (hardware/roofline.py's formula, the
host link a third roof), and a forward adds a fixed per-step overhead (launch, scheduling,
sampling).  The step is the *sum* over operators, never one max over the whole step: at large
batch the linear layers turn compute-bound while attention stays memory-bound (DESIGN.md
section 4).

A step is described by the tokens each request brings (``new_tokens``: a prefill chunk, 1 for
decode, gamma+1 for chain verification, n+1 for a tree of n nodes) and the tokens already in
its KV cache (``context``).  Attention reads each request's KV once per step however many
query tokens it has (a tree's nodes share the prefix read: tree attention with a topology
mask), which is why verification is nearly free while decoding is memory-bound.

This module is pure: no SimPy, no I/O.  ``step_time`` is the engine's hot path (vectorised
over requests, scalar maths for the linear layers); ``breakdown`` returns the same numbers per
operator for reports and tests.
"""
from __future__ import annotations

import numpy as np

from hardware.profile import HardwareProfile
from simulator.cost.op_cost import OpCost, StepCost
from simulator.cost.parallelism import Parallelism
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import ModelSpec

# Kernels launched per transformer layer: 2 norms, QKV, attention, O, MLP up(+gate), act,
# down, 2 residual adds.  Plus 2 all-reduces under tensor parallelism.
KERNELS_PER_LAYER = 10
# Per forward outside the layers: embedding gather, final norm, LM head, sampling.
KERNELS_PER_STEP = 4


def _as_tokens(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise SpecsimError("must be a 1-D sequence of per-request counts", field=name)
    if arr.size and (not np.all(np.isfinite(arr)) or arr.min() < 0):
        raise SpecsimError("counts must be finite and >= 0", field=name)
    return arr


class CostModel:
    """Prices forward steps of one model on one deployment (hardware x parallelism)."""

    def __init__(self, hardware: HardwareProfile, model: ModelSpec,
                 parallel: Parallelism = Parallelism(), *, overheads: bool = True) -> None:
        if model.num_heads % parallel.tensor_parallel:
            raise SpecsimError(f"{model.name} has {model.num_heads} heads, not divisible by "
                               f"tensor_parallel={parallel.tensor_parallel}",
                               field="tensor_parallel")
        if parallel.pipeline_parallel > model.num_layers:
            raise SpecsimError(f"{model.name} has only {model.num_layers} layers",
                               field="pipeline_parallel")
        self.hardware = hardware.with_overheads(overheads)
        self.model = model
        self.parallel = parallel
        hw, m, tp = self.hardware, model, parallel.tensor_parallel
        b = m.dtype_bytes
        h, q, kv, f, v = m.hidden_size, m.q_size, m.kv_size, m.ffn_size, m.vocab_size
        self._roof = hw.roofline(m.dtype)
        self._host_bw = hw.host_link.bandwidth_bytes_per_s
        self._b = b
        self._h = h
        self._layers = m.num_layers
        up = (2 if m.gated_mlp else 1) * h * f
        # (name, weight elements per device, output elements per token per device)
        self._linears = (
            ("qkv_proj", h * (q + 2 * kv) / tp, (q + 2 * kv) / tp, h),
            ("o_proj", q * h / tp, h, q / tp),
            ("mlp_up", up / tp, (2 if m.gated_mlp else 1) * f / tp, h),
            ("mlp_down", f * h / tp, h, f / tp),
        )
        # elementwise bytes per token per layer: 2 norms (r+w), 2 residual adds (2r+w),
        # activation (gated: 2r+w of f, else r+w of f)
        self._elementwise_bytes_per_token = (4 * h + 6 * h + (3 if m.gated_mlp else 2) * f / tp) * b
        self._attn_flops_per_pair = 4.0 * q / tp          # QK^T and PV, per (query, key)
        self._kv_bytes_per_token = 2.0 * kv / tp * b      # K and V of one layer
        self._q_io_bytes_per_token = 2.0 * q / tp * b     # read Q, write O
        self._lm_head_weight = v * h / tp
        self._vocab_per_device = v / tp
        self._offload = parallel.offload_fraction
        self._kernel_s = hw.kernel_overhead_s
        # kernel launches are charged per operator (OpCost.overhead_s); the step overhead is
        # the fixed rest (scheduling, sampling, Python)
        self._kernels = m.num_layers * (KERNELS_PER_LAYER + (2 if tp > 1 else 0)) \
            + KERNELS_PER_STEP
        self._step_overhead_s = hw.step_overhead_s
        link = hw.interconnect
        self._ar_latency = 2 * (tp - 1) * link.latency_s if tp > 1 else 0.0
        self._ar_factor = 2 * (tp - 1) / tp / link.bandwidth_bytes_per_s if tp > 1 else 0.0
        self._p2p = link
        self._inv_crate = self._roof.inverse_compute_rate
        self._inv_mrate = self._roof.inverse_memory_rate
        self._token_cache: dict[tuple[float, float], float] = {}

    # ---------------------------------------------------------------- pricing
    def _linear(self, tokens: float, weight: float, out_per_tok: float, in_per_tok: float,
                layers: int) -> tuple[float, float, float, float, float, float]:
        flops = 2.0 * tokens * weight
        wbytes = weight * self._b
        hbm = wbytes + tokens * (in_per_tok + out_per_tok) * self._b
        host = wbytes * self._offload
        compute_s = self._roof.compute_time(flops, hbm)
        memory_s = self._roof.memory_time(hbm)
        host_s = host / self._host_bw if host else 0.0
        return (flops * layers, hbm * layers, host * layers, compute_s * layers,
                memory_s * layers, host_s * layers)

    def _token_terms(self, tokens: float, logits_tokens: float, layers: int,
                     with_head: bool) -> list[tuple]:
        """Operators whose cost depends on the batch's token totals only (not attention).

        Each is ``(name, flops, hbm_bytes, host_bytes, compute_s, memory_s, host_s,
        overhead_s)`` summed over ``layers``; plain floats, so the hot path stays cheap.
        """
        k = self._kernel_s
        terms = [(name,) + self._linear(tokens, weight, out_t, in_t, layers) + (k * layers,)
                 for name, weight, out_t, in_t in self._linears]
        e_bytes = tokens * self._elementwise_bytes_per_token
        e_s = self._roof.memory_time(e_bytes) if e_bytes else 0.0
        terms.append(("elementwise", 10.0 * tokens * self._h * layers, e_bytes * layers, 0.0,
                      0.0, e_s * layers, 0.0, 5 * k * layers))
        if self._ar_factor:
            ar_s = 2 * layers * (self._ar_latency + tokens * self._h * self._b * self._ar_factor)
            terms.append(("all_reduce", 0.0, 0.0, 0.0, 0.0, ar_s, 0.0, 2 * k * layers))
        if with_head:
            terms.append(("lm_head",) + self._linear(logits_tokens, self._lm_head_weight,
                                                     self._vocab_per_device, self._h, 1)
                         + (3 * k,))  # final norm, LM head, sampling
            g_bytes = tokens * self._h * self._b
            terms.append(("embedding", 0.0, g_bytes, 0.0, 0.0,
                          self._roof.memory_time(g_bytes) if g_bytes else 0.0, 0.0, k))
        return terms

    def _layer_ops(self, new: np.ndarray, ctx: np.ndarray, logits_tokens: float,
                   layers: int, with_head: bool) -> list[OpCost]:
        tokens = float(new.sum())
        terms = self._token_terms(tokens, logits_tokens, layers, with_head)
        ops = [OpCost(*term) for term in terms[:len(self._linears)]]
        # attention: per request, KV read once (prefix shared by all query tokens), causal
        # half of the new tokens on average
        attended = ctx + 0.5 * (new + 1.0)
        a_flops = self._attn_flops_per_pair * new * attended
        a_bytes = (ctx + new) * self._kv_bytes_per_token + new * self._q_io_bytes_per_token
        active = new > 0
        a_c = np.where(active, self._roof.compute_time(a_flops, a_bytes), 0.0)
        a_m = np.where(active, self._roof.memory_time(a_bytes), 0.0)
        a_time = float(np.maximum(a_c, a_m).sum()) * layers
        ops.append(OpCost("attention", float(a_flops.sum()) * layers,
                          float(a_bytes[active].sum()) * layers, 0.0,
                          float(a_c.sum()) * layers, float(a_m.sum()) * layers, 0.0,
                          self._kernel_s * layers, roofline_s=a_time))
        ops.extend(OpCost(*term) for term in terms[len(self._linears):])
        return ops

    def _check(self, new_tokens, context, logits_tokens):
        new = _as_tokens(new_tokens, "new_tokens")
        ctx = _as_tokens(context, "context")
        if ctx.size == 1 and new.size > 1:
            ctx = np.full_like(new, ctx[0])
        if new.shape != ctx.shape:
            raise SpecsimError(f"new_tokens has {new.size} entries, context {ctx.size}",
                               field="context")
        if logits_tokens is None:
            logits = float(new.sum())
        else:
            logits = float(_as_tokens(logits_tokens, "logits_tokens").sum())
        return new, ctx, logits

    def breakdown(self, new_tokens, context, logits_tokens=None) -> StepCost:
        """Price one forward with its per-operator breakdown."""
        new, ctx, logits = self._check(new_tokens, context, logits_tokens)
        pp, mb = self.parallel.pipeline_parallel, self.parallel.micro_batches
        if pp == 1 or mb == 1 or new.size < 2:
            ops = self._layer_ops(new, ctx, logits, self._layers, True)
            pipe = self._pipeline_transfer(float(new.sum()), pp)
            total = sum(op.time_s for op in ops) + self._step_overhead_s + pipe
            return StepCost(tuple(ops), self._step_overhead_s, pipe, total)
        return self._pipelined(new, ctx, logits)

    def _pipeline_transfer(self, tokens: float, pp: int) -> float:
        if pp == 1:
            return 0.0
        return (pp - 1) * (self._p2p.latency_s + tokens * self._h * self._b
                           / self._p2p.bandwidth_bytes_per_s)

    def _pipelined(self, new, ctx, logits) -> StepCost:
        """Micro-batched pipeline: sum of stage times plus (pp - 1) fill/drain of the slowest."""
        pp, mb = self.parallel.pipeline_parallel, self.parallel.micro_batches
        per_stage_layers = self._layers / pp
        groups = [g for g in np.array_split(np.arange(new.size), min(mb, new.size)) if g.size]
        total_tokens = float(new.sum()) or 1.0
        stage_times, all_ops = [], []
        for g in groups:
            share = float(new[g].sum()) / total_tokens
            ops = self._layer_ops(new[g], ctx[g], logits * share, self._layers, True)
            all_ops.append(ops)
            stage_times.append(sum(op.time_s for op in ops) * per_stage_layers / self._layers)
        merged = [OpCost(name=ops0.name,
                         flops=sum(o[i].flops for o in all_ops),
                         hbm_bytes=sum(o[i].hbm_bytes for o in all_ops),
                         host_bytes=sum(o[i].host_bytes for o in all_ops),
                         compute_s=sum(o[i].compute_s for o in all_ops),
                         memory_s=sum(o[i].memory_s for o in all_ops),
                         host_s=sum(o[i].host_s for o in all_ops),
                         overhead_s=sum(o[i].overhead_s for o in all_ops),
                         roofline_s=None if ops0.roofline_s is None
                         else sum(o[i].roofline_s for o in all_ops))
                  for i, ops0 in enumerate(all_ops[0])]
        busy = sum(op.time_s for op in merged)
        # Work is spread over pp stages; the makespan is sum of one stage's work over the
        # micro-batches plus (pp - 1) times the slowest micro-batch's stage time.
        makespan = sum(stage_times) + (pp - 1) * max(stage_times)
        pipe = makespan - busy + self._pipeline_transfer(total_tokens / len(groups), pp) * len(groups)
        total = makespan + self._step_overhead_s + self._pipeline_transfer(
            total_tokens / len(groups), pp) * len(groups)
        return StepCost(tuple(merged), self._step_overhead_s, pipe, total)

    def step_time(self, new_tokens, context, logits_tokens=None) -> float:
        """Seconds for one forward over the batch (the engine's hot path).

        Equal to ``breakdown(...).time_s``; the parts that depend only on the batch's token
        totals (linear layers, LM head, all-reduces) are cached, attention is vectorised.
        """
        if self.parallel.pipeline_parallel > 1 and self.parallel.micro_batches > 1:
            return self.breakdown(new_tokens, context, logits_tokens).time_s
        new = np.asarray(new_tokens, dtype=np.float64)
        ctx = np.asarray(context, dtype=np.float64)
        if new.ndim != 1 or ctx.shape != new.shape:
            return self.breakdown(new_tokens, context, logits_tokens).time_s
        tokens = float(new.sum())
        logits = tokens if logits_tokens is None else float(np.sum(logits_tokens))
        key = (tokens, logits)
        fixed = self._token_cache.get(key)
        if fixed is None:
            # everything but attention depends on the token totals alone; attention's
            # kernel overhead is per layer, its roofline time per request (below)
            terms = self._token_terms(tokens, logits, self._layers, True)
            fixed = sum(max(t[4], t[5], t[6]) + t[7] for t in terms) \
                + self._pipeline_transfer(tokens, self.parallel.pipeline_parallel) \
                + self._step_overhead_s + self._kernel_s * self._layers
            if len(self._token_cache) > 4096:
                self._token_cache.clear()
            self._token_cache[key] = fixed
        active = new > 0
        a_flops = self._attn_flops_per_pair * new * (ctx + 0.5 * (new + 1.0))
        a_bytes = (ctx + new) * self._kv_bytes_per_token + new * self._q_io_bytes_per_token
        a_time = self._roof.time(a_flops, a_bytes)
        return fixed + float(a_time[active].sum()) * self._layers

    def chain_decode_time(self, context: np.ndarray, steps: int) -> float:
        """``steps`` sequential 1-token forwards over the batch, context growing by one each.

        Equal to summing ``step_time(ones, context + j)`` for j < steps (a draft model's
        chain), computed in one vectorised pass.
        """
        ctx = np.asarray(context, dtype=np.float64)
        n = ctx.size
        if steps <= 0 or n == 0:
            return 0.0
        if (self.parallel.pipeline_parallel > 1 and self.parallel.micro_batches > 1) or \
                self._roof.curved:
            ones = np.ones(n)
            return sum(self.step_time(ones, ctx + j) for j in range(steps))
        fixed = self._token_cache.get((float(n), float(n)))
        if fixed is None:
            self.step_time(np.ones(n), ctx)
            fixed = self._token_cache[(float(n), float(n))]
        # per request and step j: flops ~ (ctx + j + 1), bytes ~ (ctx + j + 1) kv + q io
        grid = ctx[None, :] + np.arange(1.0, steps + 1.0)[:, None]
        a_time = np.maximum(grid * (self._attn_flops_per_pair * self._inv_crate),
                            grid * (self._kv_bytes_per_token * self._inv_mrate)
                            + self._q_io_bytes_per_token * self._inv_mrate)
        return steps * fixed + float(a_time.sum()) * self._layers

    # ---------------------------------------------------------------- conveniences
    def decode_time(self, batch: int, context: float) -> float:
        """One incremental decode step of ``batch`` requests at equal context."""
        return self.step_time(np.ones(batch), np.full(batch, float(context)))

    def verify_time(self, batch: int, context: float, tokens: int) -> float:
        """One verification forward of ``tokens`` candidate tokens per request."""
        return self.step_time(np.full(batch, float(tokens)), np.full(batch, float(context)))

    @property
    def weight_bytes_read_per_step(self) -> float:
        """Bytes of weights a forward reads on one device (layers + LM head; not the gather)."""
        per_layer = sum(w for _, w, _, _ in self._linears) * self._b
        return per_layer * self._layers + self._lm_head_weight * self._b

    @property
    def kernels_per_step(self) -> int:
        return self._kernels

    @property
    def fixed_overhead_s(self) -> float:
        """Step overhead plus kernel launches of one forward."""
        return self._step_overhead_s + self._kernels * self._kernel_s


def draft_cost_ratio(target: CostModel, draft: CostModel, batch: int, context: float) -> float:
    """Leviathan's c: one draft decode step over one target decode step, from the cost model."""
    return draft.decode_time(batch, context) / target.decode_time(batch, context)
