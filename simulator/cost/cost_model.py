"""Per-operator roofline cost model: the time of one forward step of a batch.

Every operator's GPU time is ``max(FLOPs / (peak * eta_c), HBM bytes / (bandwidth * eta_m),
host bytes / host bandwidth)`` (hardware/roofline.py's formula, the host link a third roof).
The step is the *sum* over operators, never one max over the whole step: at large batch the
linear layers turn compute-bound while attention stays memory-bound (DESIGN.md section 4);
``step_model: single_roofline`` is the lecture's one max, kept as an option.  How the
forward is launched and what the host adds (eager launches, CUDA-graph replay and padding,
CPU time per engine step, overlapped or not) is ``simulator/cost/execution.py``'s model,
each part counted once: ``breakdown`` says which is which.

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
from simulator.cost.execution import Execution, resolve_execution
from simulator.cost.op_cost import OpCost, StepCost, as_token_counts
from simulator.cost.parallelism import Parallelism
from simulator.cost.step_models import pipelined_step, single_roofline
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import ModelSpec

# Kernels launched per transformer layer: 2 norms, QKV, attention, O, MLP up(+gate), act,
# down, 2 residual adds.  Plus 2 all-reduces under tensor parallelism.
KERNELS_PER_LAYER = 10
# Per forward outside the layers: embedding gather, final norm, LM head, sampling.
KERNELS_PER_STEP = 4
# Equal query lengths up to this count are a "uniform decode" batch (vLLM's full-graph
# case: 1 + num_speculative_tokens per request); longer ones are prefill chunks.
UNIFORM_MAX_QUERY = 128



class CostModel:
    """Prices forward steps of one model on one deployment (hardware x parallelism).

    ``execution`` (default: the profile's costs with vLLM's defaults) decides launches, graph
    replay and host time; ``host=False`` prices forwards that run inside another model's
    engine step (a draft model, an EAGLE layer, Medusa heads): no CPU step time of their own.
    """

    def __init__(self, hardware: HardwareProfile, model: ModelSpec,
                 parallel: Parallelism = Parallelism(), *, overheads: bool = True,
                 execution: Execution | None = None, host: bool = True) -> None:
        if model.num_heads % parallel.tensor_parallel:
            raise SpecsimError(f"{model.name} has {model.num_heads} heads, not divisible by "
                               f"tensor_parallel={parallel.tensor_parallel}",
                               field="tensor_parallel")
        if parallel.pipeline_parallel > model.num_layers:
            raise SpecsimError(f"{model.name} has only {model.num_layers} layers",
                               field="pipeline_parallel")
        self.hardware = hardware.with_overheads(overheads)
        if not overheads:
            execution = Execution.free()
        self.execution = execution if execution is not None \
            else resolve_execution(self.hardware)
        self.host = host
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
        self._shapes = self._roof.kernels is not None  # kernel shapes: tiles, latency
        self._f, self._gated, self._tp = f, m.gated_mlp, tp
        self._rope = not m.learned_position_embeddings
        self._qkv_dev = (q + kv) / tp
        self._lm_head_weight = v * h / tp
        self._vocab_per_device = v / tp
        self._offload = parallel.offload_fraction
        self._launch_s = self.execution.kernel_launch_s
        self._kernels = m.num_layers * (KERNELS_PER_LAYER + (2 if tp > 1 else 0)) \
            + KERNELS_PER_STEP
        self._collectives = hw.collectives
        self._custom_ar = self.execution.custom_all_reduce
        self._inv_crate = self._roof.inverse_compute_rate
        self._inv_mrate = self._roof.inverse_memory_rate
        self._token_cache: dict[tuple, tuple[float, float, bool]] = {}

    # ---------------------------------------------------------------- pricing
    def _linear(self, tokens: float, weight: float, out_per_tok: float, in_per_tok: float,
                layers: int) -> tuple[float, ...]:
        """A GEMM ``[tokens x in] @ [in x out]`` over ``layers``: (flops, hbm bytes, host
        bytes, compute s, memory s, host s, GPU s).  With the profile's kernel shapes the
        GPU time is ``Roofline.gemm_time`` (tile and wave quantisation, latency, floor),
        else the flat roofline."""
        flops = 2.0 * tokens * weight
        wbytes = weight * self._b
        hbm = wbytes + tokens * (in_per_tok + out_per_tok) * self._b
        host = wbytes * self._offload
        compute_s = self._roof.compute_time(flops, hbm)
        memory_s = self._roof.memory_time(hbm)
        host_s = host / self._host_bw if host else 0.0
        if self._shapes:
            gpu = float(self._roof.gemm_time(tokens, out_per_tok, in_per_tok))
        else:
            gpu = max(compute_s, memory_s)
        return (flops * layers, hbm * layers, host * layers, compute_s * layers,
                memory_s * layers, host_s * layers, max(gpu, host_s) * layers)

    def _elementwise(self, tokens: float, layers: int) -> tuple:
        """Norms, residual adds, the activation (and rope) of ``layers`` layers:
        (flops, bytes, GPU s, kernels).  With kernel shapes, one ``transfer_time`` per kernel
        with the bytes each kernel's loads and stores request (hardware/kernels.py's kinds,
        as ``specsim validate --measurements`` checks them against Vidur's A100 kernels)."""
        flops = 10.0 * tokens * self._h * layers
        if not self._shapes:
            e_bytes = tokens * self._elementwise_bytes_per_token
            return flops, e_bytes * layers, (self._roof.memory_time(e_bytes)
                                             if e_bytes else 0.0) * layers, 5
        r, b, h, T = self._roof, self._b, self._h, tokens
        f_dev = self._f / self._tp
        kernels = [((3 * T * h + h) * b, "norm", T)] * 2 + [(3 * T * h * b, "elementwise",
                                                             None)] * 2
        kernels.append((3 * T * f_dev * b, "activation", T) if self._gated
                       else (2 * T * f_dev * b, "elementwise", None))
        if self._rope:
            kernels.append((3 * T * self._qkv_dev * b, "rope", T))
        gpu = sum(float(r.transfer_time(nb, kind, rows=rows)) for nb, kind, rows in kernels)
        return flops, sum(k[0] for k in kernels) * layers, gpu * layers, len(kernels)

    def _mode(self, new: np.ndarray, tokens: float) -> tuple[str, float]:
        """The forward's runtime mode (full graph, piecewise graphs, eager) and the tokens
        its captured part computes (padded to the capture size)."""
        active = new[new > 0]
        uniform = bool(active.size) and float(active.min()) == float(active.max()) \
            and float(active.max()) <= UNIFORM_MAX_QUERY
        return self.execution.graph_tokens(tokens, uniform)

    def _token_terms(self, tokens: float, logits_tokens: float, layers: int,
                     with_head: bool, mode: str = "eager") -> list[tuple]:
        """Operators whose cost depends on the batch's token totals only (not attention).

        Each is ``(name, flops, hbm_bytes, host_bytes, compute_s, memory_s, host_s,
        launch_s, gpu_s)`` summed over ``layers``: ``launch_s`` is the host time of the
        operator's eager launches (0 inside a CUDA graph), ``gpu_s`` its kernels' time, the
        operator's time ``max(gpu_s, launch_s)``.  Plain floats: the hot path stays cheap.
        """
        k = 0.0 if mode != "eager" else self._launch_s
        terms = []
        for name, weight, out_t, in_t in self._linears:
            lin = self._linear(tokens, weight, out_t, in_t, layers)
            terms.append((name,) + lin[:6] + (k * layers,) + lin[6:])
        e_flops, e_bytes, e_s, e_kernels = self._elementwise(tokens, layers)
        terms.append(("elementwise", e_flops, e_bytes, 0.0, 0.0, e_s, 0.0,
                      e_kernels * k * layers, e_s))
        if self._tp > 1:  # after attention and after the MLP, on the hidden states
            ar_s = 2 * layers * float(self._collectives.all_reduce_s(
                tokens * self._h * self._b, self._tp, custom=self._custom_ar))
            terms.append(("all_reduce", 0.0, 0.0, 0.0, 0.0, ar_s, 0.0, 2 * k * layers, ar_s))
        if with_head:
            g_bytes = tokens * self._h * self._b
            if self._shapes:  # a gather: an int64 index per element as well
                g_s = float(self._roof.transfer_time(tokens * self._h * (2 * self._b + 8),
                                                     "embedding"))
            else:
                g_s = self._roof.memory_time(g_bytes) if g_bytes else 0.0
            terms.append(("embedding", 0.0, g_bytes, 0.0, 0.0, g_s, 0.0, k, g_s))
        return terms

    def _head_terms(self, logits_tokens: float) -> list[tuple]:
        """Final norm, LM head and sampling: outside the captured graph, always launched;
        under tensor parallelism the vocabulary-parallel logits are gathered (vLLM's
        LogitsProcessor gathers them across the TP ranks)."""
        head = self._linear(logits_tokens, self._lm_head_weight, self._vocab_per_device,
                            self._h, 1)
        terms = [("lm_head",) + head[:6] + (3 * self._launch_s,) + head[6:]]
        if self._tp > 1 and logits_tokens:
            g_s = float(self._collectives.all_gather_s(
                logits_tokens * self._vocab_per_device * self._tp * self._b, self._tp))
            terms.append(("logits_gather", 0.0, 0.0, 0.0, 0.0, g_s, 0.0, self._launch_s, g_s))
        return terms

    def _with_replays(self, mode: str, device_s: float) -> float:
        """Device time with the forward's graph replays: the first replay delays the start
        (the host must issue it), later ones (piecewise: one per stretch between
        attentions) are issued while the GPU runs, so they show only if they outlast it."""
        g = self.execution.graph_launch_s
        if mode == "full":
            return device_s + g
        if mode == "piecewise":
            return max(device_s, self._layers * g) + g
        return device_s

    def _attention(self, new: np.ndarray, ctx: np.ndarray):
        """Per request: KV read once (prefix shared by all query tokens), causal half of the
        new tokens on average.  Returns (flops, bytes, active, one layer's GPU s).  With
        kernel shapes the time is ``Roofline.attention_time`` (a decode and a multi-query
        kernel), whose work grows as new x (context + new) as the measured kernels do."""
        a_flops = self._attn_flops_per_pair * new * (ctx + 0.5 * (new + 1.0))
        a_bytes = (ctx + new) * self._kv_bytes_per_token + new * self._q_io_bytes_per_token
        active = new > 0
        if self._shapes:
            kernel_flops = self._attn_flops_per_pair * new * (ctx + new)
            return a_flops, a_bytes, active, self._roof.attention_time(kernel_flops, a_bytes,
                                                                       new)
        return a_flops, a_bytes, active, float(self._roof.time(a_flops, a_bytes)[active].sum())

    def _layer_ops(self, new: np.ndarray, ctx: np.ndarray, logits_tokens: float,
                   layers: int, with_head: bool) -> tuple[list[OpCost], str]:
        tokens = float(new.sum())
        mode, padded = self._mode(new, tokens)
        terms = self._token_terms(padded, logits_tokens, layers, with_head, mode)
        ops = [_op(term) for term in terms[:len(self._linears)]]
        a_flops, a_bytes, active, a_layer = self._attention(new, ctx)
        a_c = np.where(active, self._roof.compute_time(a_flops, a_bytes), 0.0)
        a_m = np.where(active, self._roof.memory_time(a_bytes), 0.0)
        a_time = a_layer * layers
        a_launch = 0.0 if mode == "full" else self._launch_s * layers
        ops.append(OpCost("attention", float(a_flops.sum()) * layers,
                          float(a_bytes[active].sum()) * layers, 0.0,
                          float(a_c.sum()) * layers, float(a_m.sum()) * layers, 0.0,
                          max(a_launch - a_time, 0.0), roofline_s=a_time))
        ops.extend(_op(term) for term in terms[len(self._linears):])
        if with_head:
            ops.extend(_op(term) for term in self._head_terms(logits_tokens))
        return ops, mode

    def _check(self, new_tokens, context, logits_tokens):
        new = as_token_counts(new_tokens, "new_tokens")
        ctx = as_token_counts(context, "context")
        if ctx.size == 1 and new.size > 1:
            ctx = np.full_like(new, ctx[0])
        if new.shape != ctx.shape:
            raise SpecsimError(f"new_tokens has {new.size} entries, context {ctx.size}",
                               field="context")
        if logits_tokens is None:
            logits = float(new.sum())
        else:
            logits = float(as_token_counts(logits_tokens, "logits_tokens").sum())
        return new, ctx, logits

    def _host_time(self, sequences: int, device_s: float) -> float:
        if not self.host:
            return 0.0
        return self.execution.visible_host_s(self.execution.host_s(sequences), device_s)

    def breakdown(self, new_tokens, context, logits_tokens=None) -> StepCost:
        """Price one forward with its per-operator breakdown: GPU time per operator, eager
        launch time beyond it, graph replays, and the host CPU time the step shows."""
        new, ctx, logits = self._check(new_tokens, context, logits_tokens)
        pp, mb = self.parallel.pipeline_parallel, self.parallel.micro_batches
        if pp > 1 and mb > 1 and new.size >= 2:
            return pipelined_step(self, new, ctx, logits)
        ops, mode = self._layer_ops(new, ctx, logits, self._layers, True)
        pipe = self._pipeline_transfer(float(new.sum()), pp)
        if self.execution.step_model == "single_roofline":
            ops = single_roofline(self, ops, mode)
        busy = sum(op.time_s for op in ops) + pipe
        device = self._with_replays(mode, busy)
        replay = device - busy
        cpu = self._host_time(int(np.count_nonzero(new)), device)
        return StepCost(tuple(ops), cpu, pipe, device + cpu, launch_s=replay, mode=mode)

    def _pipeline_transfer(self, tokens: float, pp: int) -> float:
        """Hidden states sent from each stage to the next."""
        if pp == 1:
            return 0.0
        return (pp - 1) * float(self._collectives.send_recv_s(tokens * self._h * self._b))

    def step_time(self, new_tokens, context, logits_tokens=None) -> float:
        """Seconds for one forward over the batch (the engine's hot path).

        Equal to ``breakdown(...).time_s``; the parts that depend only on the batch's token
        totals and runtime mode (linear layers, LM head, all-reduces, graph replays) are
        cached, attention is vectorised.
        """
        if (self.parallel.pipeline_parallel > 1 and self.parallel.micro_batches > 1) or \
                self.execution.step_model != "sum_of_operators":
            return self.breakdown(new_tokens, context, logits_tokens).time_s
        new = np.asarray(new_tokens, dtype=np.float64)
        ctx = np.asarray(context, dtype=np.float64)
        if new.ndim != 1 or ctx.shape != new.shape:
            return self.breakdown(new_tokens, context, logits_tokens).time_s
        tokens = float(new.sum())
        logits = tokens if logits_tokens is None else float(np.sum(logits_tokens))
        mode, padded = self._mode(new, tokens)
        fixed = self._fixed(tokens, logits, mode, padded)
        a_time = self._attention(new, ctx)[3] * self._layers
        if mode != "full":
            a_time = max(a_time, self._launch_s * self._layers)
        device = self._with_replays(mode, fixed + a_time)
        return device + self._host_time(int(np.count_nonzero(new)), device)

    def _fixed(self, tokens: float, logits: float, mode: str, padded: float) -> float:
        """Everything but attention and host time: it depends on the token totals and the
        runtime mode alone (cached)."""
        key = (tokens, logits, mode)
        fixed = self._token_cache.get(key)
        if fixed is None:
            terms = self._token_terms(padded, logits, self._layers, True, mode)
            terms.extend(self._head_terms(logits))
            fixed = sum(max(t[7], t[8]) for t in terms) \
                + self._pipeline_transfer(tokens, self.parallel.pipeline_parallel)
            if len(self._token_cache) > 4096:
                self._token_cache.clear()
            self._token_cache[key] = fixed
        return fixed

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
                self._roof.curved or self._shapes or \
                self.execution.step_model != "sum_of_operators" or \
                (self.host and self.execution.async_scheduling):
            ones = np.ones(n)
            return sum(self.step_time(ones, ctx + j) for j in range(steps))
        mode, padded = self._mode(np.ones(n), float(n))
        fixed = self._fixed(float(n), float(n), mode, padded)
        # per request and step j: flops ~ (ctx + j + 1), bytes ~ (ctx + j + 1) kv + q io
        grid = ctx[None, :] + np.arange(1.0, steps + 1.0)[:, None]
        a_time = np.maximum(grid * (self._attn_flops_per_pair * self._inv_crate),
                            grid * (self._kv_bytes_per_token * self._inv_mrate)
                            + self._q_io_bytes_per_token * self._inv_mrate)
        per_step = a_time.sum(axis=1) * self._layers
        if mode != "full":
            per_step = np.maximum(per_step, self._launch_s * self._layers)
        host = self._host_time(n, 0.0) if self.host else 0.0
        replay = self._with_replays(mode, 0.0)  # a uniform forward: full graph or eager
        return steps * (fixed + host + replay) + float(per_step.sum())

    # ---------------------------------------------------------------- conveniences
    def decode_time(self, batch: int, context: float) -> float:
        """One incremental decode step of ``batch`` requests at equal context."""
        return self.step_time(np.ones(batch), np.full(batch, float(context)))

    def verify_time(self, batch: int, context: float, tokens: int) -> float:
        """One verification forward of ``tokens`` candidate tokens per request."""
        return self.step_time(np.full(batch, float(tokens)), np.full(batch, float(context)))

    def forward_overhead_s(self, tokens: int) -> float:
        """Host time one extra forward of ``tokens`` uniform tokens adds beyond its
        operators: a graph replay, or nothing when eager (its launches are in the operators'
        times), and its own host step where it has one.  What a draft forward priced
        operator by operator (Medusa heads) pays."""
        mode, _ = self.execution.graph_tokens(float(tokens), True)
        return self._with_replays(mode, 0.0) + self._host_time(int(tokens), 0.0)

    @property
    def weight_bytes_read_per_step(self) -> float:
        """Bytes of weights a forward reads on one device (layers + LM head; not the gather)."""
        per_layer = sum(w for _, w, _, _ in self._linears) * self._b
        return per_layer * self._layers + self._lm_head_weight * self._b


def _op(term: tuple) -> OpCost:
    """An OpCost from a ``_token_terms`` tuple: the launch time beyond the roofline is the
    operator's overhead (its time is ``max(roofline, launch)``)."""
    name, flops, hbm, host_b, c, m, h, launch, gpu = term
    return OpCost(name, flops, hbm, host_b, c, m, h, max(launch - gpu, 0.0), roofline_s=gpu)


def draft_cost_ratio(target: CostModel, draft: CostModel, batch: int, context: float) -> float:
    """Leviathan's c: one draft decode step over one target decode step, from the cost model."""
    return draft.decode_time(batch, context) / target.decode_time(batch, context)
