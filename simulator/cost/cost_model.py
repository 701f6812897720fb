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

Models of 2025-26 (issue 15): a mixture-of-experts layer reads the experts its step's tokens
touch, ``D(T)`` of them (simulator/cost/moe.py), a function of the token total alone, so it
sits in the token tables beside the dense linears (simulator/cost/layer_ops.py) and the small
kernels around the grouped GEMMs (moe_kernels.py); expert parallelism keeps the all-reduce
(one data-parallel rank); MLA caches a latent every TP rank holds whole and attends in its
absorbed form for decode, expanded for prefill (mla.py); FP8/FP4 weights price the linears at
their bytes and their peak, everything else at 16 bits (precision.py).

Pure: no SimPy, no I/O.  ``step_time`` is the engine's hot path (attention vectorised, the
rest from per-token-count tables: token_terms.py); ``breakdown`` gives it per operator.
"""
from __future__ import annotations

import numpy as np

from hardware.kernels import ATTENTION_PREFILL_FA3
from hardware.profile import HardwareProfile
from simulator.cost import eager_stream as es
from simulator.cost import engine_kernels as ek
from simulator.cost import layer_ops as lo
from simulator.cost import mla
from simulator.cost import step_models as sm
from simulator.cost import token_terms as tt
from simulator.cost.closed_forms import ClosedForms
from simulator.cost.execution import Execution, resolve_execution
from simulator.cost.few_step import FewAttention
from simulator.cost.op_cost import OpCost, StepCost, check_step, op_from_term
from simulator.cost.parallelism import Parallelism
from simulator.cost.precision import check_kv_cache_dtype, compute_dtype, linear_roofline
from simulator.cost.stream import StreamParts
from simulator.models.spec import ModelSpec

# Kernels per layer: 2 norms, QKV, attention, O, MLP up(+gate), act, down, 2 residual adds
# (2 all-reduces more under tensor parallelism); per forward outside the layers: embedding
# gather, final norm, LM head, sampling.
KERNELS_PER_LAYER = 10
KERNELS_PER_STEP = 4
_MIN, _MAX, _SUM = np.minimum.reduce, np.maximum.reduce, np.add.reduce  # no method layer


class CostModel(ClosedForms):
    """Prices forward steps of one model on one deployment (hardware x parallelism).

    ``execution`` (default: the profile's costs with vLLM's defaults) decides launches, graph
    replay and host time; ``host=False`` prices forwards that run inside another model's
    engine step (a draft model, an EAGLE layer, Medusa heads): no CPU step time of their own.
    ``tables=False`` prices each new token total by the scalar path (the benchmark's before).
    ``routing_skew``: a MoE model's expert popularity (simulator/cost/moe.py; 0 uniform).
    Its closed forms and its price of a few requests on Python numbers (``few_step_time``)
    are closed_forms.py's.
    """

    def __init__(self, hardware: HardwareProfile, model: ModelSpec,
                 parallel: Parallelism = Parallelism(), *, overheads: bool = True,
                 execution: Execution | None = None, host: bool = True,
                 tables: bool = True, routing_skew: float = 0.0) -> None:
        parallel.check_splits(model)
        self.hardware = hardware.with_overheads(overheads)
        if not overheads:
            execution = Execution.free()
        self.execution = execution if execution is not None \
            else resolve_execution(self.hardware)
        self.host = host
        self.model = model
        self.parallel = parallel
        hw, m, tp = self.hardware, model, parallel.tensor_parallel
        b = m.activation_bytes  # activations, attention, collectives: 16-bit (precision.py)
        h, v = m.hidden_size, m.vocab_size
        roof = hw.roofline(compute_dtype(m.dtype))
        self._roof = roof.for_mla() if m.is_mla else roof  # MLA's decode kernels: kernels.py
        self._lin_roof = roof if compute_dtype(m.dtype) == m.dtype else linear_roofline(hw, m)
        check_kv_cache_dtype(hw, m)
        self._host_bw = hw.host_link.bandwidth_bytes_per_s
        self._b, self._wb = b, m.dtype_bytes
        self._h = h
        self._layers = m.num_layers
        self._moe = lo.moe_shape(m, parallel, routing_skew, self.execution.spec)
        self._linears = lo.linear_ops(m, tp, self._lin_roof, self._roof, self._moe)
        self._f = lo.mlp_width(m)  # the activation's width per token (per layer, on average)
        # elementwise bytes per token per layer: 2 norms (r+w), 2 residual adds (2r+w),
        # activation (gated: 2r+w of f, else r+w of f)
        self._elementwise_bytes_per_token = (4 * h + 6 * h + (3 if m.gated_mlp else 2)
                                             * self._f / tp) * b
        self._attention_shape(m, tp, b)
        self._shapes = self._roof.kernels is not None  # kernel shapes: tiles, latency
        # the engine's multi-query attention kernel on this GPU: FA3 priced on the causal
        # pairs plus its per-query overhead, the FA2-class kind on new x (ctx + new) pairs
        self._prefill_kind, self._prefill_overhead = self._roof.prefill_kind_for(
            self.execution.spec.prefill_attention)
        self._prefill_causal = not self._shapes or self._prefill_kind == ATTENTION_PREFILL_FA3
        self._gated, self._tp = m.gated_mlp, tp
        self._uv_o = ek.absorbed_uv_o(self)  # vLLM 0.7's absorbed W_UV_O: by decode rows
        self._rope = not m.learned_position_embeddings
        self._lm_head_weight = v * h / tp
        self._vocab_per_device = v / tp
        self._offload = parallel.offload_fraction
        self._launch_s = self.execution.kernel_launch_s
        self._kernels = m.num_layers * (KERNELS_PER_LAYER + (2 if tp > 1 else 0)) \
            + KERNELS_PER_STEP + lo.extra_kernels(self)
        self._collectives = hw.collectives
        self._custom_ar = self.execution.custom_all_reduce
        self._inv_crate = self._roof.inverse_compute_rate
        self._inv_mrate = self._roof.inverse_memory_rate
        self._tables = tt.TokenTables(self, tables=tables)
        self._general_only = (parallel.pipeline_parallel > 1 and parallel.micro_batches > 1) \
            or self.execution.step_model != "sum_of_operators"  # step_time: breakdown's
        self._init_forms()
        own = type(self) is CostModel  # a subclass prices otherwise (DP attention)
        self._stream = es.EagerStream(self) if es.applies(self, own) else None  # eager_stream
        self._closed = own and self._stream is None
        self._small = (self._closed or self._stream is not None) and not self._general_only
        self._few = self._few_attention()

    def _attention_shape(self, m: ModelSpec, tp: int, b: float) -> None:
        """One layer's attention per device: FLOPs per (query, key) pair, KV bytes per cached
        token, query bytes per new token, rope width; MLA's decode (absorbed) form here, its
        prefill chunks by request (mla.MlaShape.arrays)."""
        q, kv = m.q_size, m.kv_size
        self._mla = mla.MlaShape.of(m, tp, b, m.kv_dtype_bytes) if m.is_mla else None
        if self._mla is None:
            self._attn_flops_per_pair = 4.0 * q / tp          # QK^T and PV, per (query, key)
            self._kv_bytes_per_token = 2.0 * kv / tp * m.kv_dtype_bytes  # K and V, one layer
            self._q_io_bytes_per_token = 2.0 * q / tp * b     # read Q, write O
            self._qkv_dev = (q + kv) / tp
        else:
            self._attn_flops_per_pair, self._kv_bytes_per_token, \
                self._q_io_bytes_per_token, _ = self._mla.decode
            self._qkv_dev = (m.num_heads / tp + 1) * m.qk_rope_head_dim  # rope on q_pe, k_pe

    def _few_attention(self) -> FewAttention | None:
        """The attention ``few_step_time`` prices different counts by on Python numbers:
        with kernel shapes (MLA's: its decode form's, requests of up to DECODE_MAX_QUERY
        new tokens only), None otherwise."""
        if not self._shapes:
            return None
        return FewAttention(self._attn_flops_per_pair, self._kv_bytes_per_token,
                            self._q_io_bytes_per_token, self._prefill_kind,
                            self._prefill_causal, self._prefill_overhead, self._roof,
                            float("inf") if self._mla is None else float(mla.DECODE_MAX_QUERY))

    # ---------------------------------------------------------------- pricing
    def _mode(self, new: np.ndarray, tokens: float, lo: float = 0.0,
              hi: float = 0.0) -> tuple[str, float]:
        """The forward's runtime mode (full graph, piecewise graphs, eager) and the tokens
        its captured part computes (padded to the capture size); ``lo`` and ``hi``, when
        > 0, are the fewest and most new tokens of a request (all of them in the step)."""
        if lo <= 0:
            active = new[new > 0]
            lo, hi = (float(active.min()), float(active.max())) if active.size else (0.0, 0.0)
        return self.execution.graph_tokens(
            tokens, lo > 0 and lo == hi and hi <= sm.UNIFORM_MAX_QUERY)

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
        new tokens on average.  Returns (flops, bytes, active, one layer's GPU s)."""
        a_flops, a_bytes = self._attention_work(new, ctx, True)
        active = new > 0
        return a_flops, a_bytes, active, self._attention_s(new, ctx, bool(active.all()))

    _attention_work = sm.attention_work  # per request (FLOPs, bytes): step_models

    def _attention_coefficients(self, u: float) -> tuple[float, float, float, float]:
        """(FLOPs per query-key pair, KV bytes per cached token, query bytes per new token,
        up-projection FLOPs per context token) of a request of ``u`` new tokens."""
        if self._mla is not None:
            return self._mla.coefficients(u)
        return (self._attn_flops_per_pair, self._kv_bytes_per_token,
                self._q_io_bytes_per_token, 0.0)

    def _layer_ops(self, new: np.ndarray, ctx: np.ndarray, logits_tokens: float,
                   layers: int, with_head: bool) -> tuple[list[OpCost], str]:
        tokens = float(new.sum())
        mode, padded = self._mode(new, tokens)
        terms = tt.token_terms(self, padded, layers, with_head, mode)
        ops = [op_from_term(term) for term in terms[:len(self._linears)]]
        a_flops, a_bytes, active, a_layer = self._attention(new, ctx)
        a_c = np.where(active, self._roof.compute_time(a_flops, a_bytes), 0.0)
        a_m = np.where(active, self._roof.memory_time(a_bytes), 0.0)
        a_time = a_layer * layers
        a_launch = 0.0 if mode == "full" else self._launch_s * layers
        ops.append(OpCost("attention", float(a_flops.sum()) * layers,
                          float(a_bytes[active].sum()) * layers, 0.0,
                          float(a_c.sum()) * layers, float(a_m.sum()) * layers, 0.0,
                          max(a_launch - a_time, 0.0), roofline_s=a_time))
        ops.extend(op_from_term(term) for term in terms[len(self._linears):])
        if self._uv_o is not None:
            rows, share = self._decode_rows(new), layers / self._layers
            uv_s = self._uv_o.time_s(rows) * share
            ops.append(OpCost("engine_uv_o_proj", 0.0, self._uv_o.bytes_per_layer * layers
                              * (rows > 0), 0.0, 0.0, uv_s, 0.0, 0.0, roofline_s=uv_s))
        if with_head:
            ops.extend(op_from_term(term) for term in tt.head_terms(self, logits_tokens))
        return ops, mode

    def _host_time(self, sequences: int, device_s: float) -> float:
        if not self.host:
            return 0.0
        return self.execution.visible_host_s(self.execution.host_s(sequences), device_s)

    def breakdown(self, new_tokens, context, logits_tokens=None) -> StepCost:
        """Price one forward with its per-operator breakdown: GPU time per operator, eager
        launch time beyond it, graph replays, and the host CPU time the step shows."""
        new, ctx, logits = check_step(new_tokens, context, logits_tokens)
        pp, mb = self.parallel.pipeline_parallel, self.parallel.micro_batches
        if pp > 1 and mb > 1 and new.size >= 2:
            return sm.pipelined_step(self, new, ctx, logits)
        ops, mode = self._layer_ops(new, ctx, logits, self._layers, True)
        pipe = self._pipeline_transfer(float(new.sum()), pp)
        if self.execution.step_model == "single_roofline":
            ops = sm.single_roofline(self, ops, mode)
        elif self._stream is not None:
            ops = self._stream.ops(ops, new, ctx, logits)
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

        Equal to ``breakdown(...).time_s`` within rounding.  A uniform batch (every request
        the same whole number of new tokens) is priced by its closed form where one applies,
        bitwise as ``uniform_step_times`` prices it; otherwise the parts that depend only on
        the token totals and runtime mode are read from per-count tables and attention is
        vectorised.  The float depends on the batch alone, never on what was priced before.
        """
        if self._general_only:
            return self.breakdown(new_tokens, context, logits_tokens).time_s
        if self._stream is not None:
            return self._stream.step_time(new_tokens, context, logits_tokens)
        new = np.asarray(new_tokens, dtype=np.float64)
        ctx = np.asarray(context, dtype=np.float64)
        if new.ndim != 1 or ctx.shape != new.shape:
            return self.breakdown(new_tokens, context, logits_tokens).time_s
        n = new.size
        lo, hi = (float(_MIN(new)), float(_MAX(new))) if n else (0.0, 0.0)
        logits = None if logits_tokens is None else float(
            _SUM(logits_tokens, axis=None) if isinstance(logits_tokens, np.ndarray)
            else np.sum(logits_tokens))
        if lo == hi and lo >= 1.0 and lo.is_integer():
            k = self._uniform(n, lo, n * lo if logits is None else logits)
            if k is not None:
                return sm.uniform_time(k, float(_SUM(ctx)), max)
        tokens = float(_SUM(new))
        logits = tokens if logits is None else logits
        active = n if lo > 0 else int(np.count_nonzero(new))  # lo > 0: no masks
        mode, padded = self._mode(new, tokens, lo, hi)
        fixed = self._fixed(tokens, logits, mode, padded, self._decode_rows(new))
        return self._step_from(mode, fixed, self._attention_s(new, ctx, active == n), active)

    def _step_from(self, mode: str, fixed: float | StreamParts, a_layer: float,
                   active: int) -> float:
        """A step's time from its ``fixed`` part and one layer's attention seconds: attention
        over the layers (at least its eager launches), the graph replays, the host time of
        ``active`` requests (``step_time``'s and ``mixed_step_time``'s common tail); an
        eager stream's ``fixed`` is its parts (``_fixed``), its end the device time."""
        if self._stream is not None:
            device = fixed.device_s(a_layer)
            return device + self._host_time(active, device)
        a_time = a_layer * self._layers
        if mode != "full":
            a_time = max(a_time, self._launch_s * self._layers)
        device = self._with_replays(mode, fixed + a_time)
        return device + self._host_time(active, device)

    def _attention_s(self, new: np.ndarray, ctx: np.ndarray, all_active: bool) -> float:
        """One layer's attention GPU seconds (``all_active``: no request has 0 new tokens).
        With kernel shapes ``Roofline.attention_time`` (a decode and a multi-query kernel),
        whose work grows as new x (context + new) as the measured kernels do."""
        if self._shapes:
            return self._roof.attention_time(*self._attention_work(
                new, ctx, self._prefill_causal, self._prefill_overhead), new, self._prefill_kind)
        a_flops, a_bytes = self._attention_work(new, ctx, True)
        per_request = self._roof.time(a_flops, a_bytes)
        return float((per_request if all_active else per_request[new > 0]).sum())

    def _fixed(self, tokens: float, logits: float, mode: str, padded: float,
               decode_rows: float) -> float | StreamParts:
        """Everything but attention and host time: the layer terms at the ``padded`` tokens
        computed in ``mode``, the head terms at ``logits``, the pipeline sends of ``tokens``
        (each tabulated or memoised on its own: token_terms.TokenTables), and where the
        engine absorbs ``W_UV_O`` its extra K steps at the ``decode_rows`` of the step
        (``_decode_rows``: the tables know the total, not which rows are decodes)."""
        if self._stream is not None:  # every forward eager: the stream's parts
            return self._stream.parts(tokens, logits, decode_rows)
        fixed = self._tables.fixed(tokens, logits, mode, padded)
        return fixed if self._uv_o is None else fixed + self._uv_o.time_s(decode_rows)

    def _decode_rows(self, new) -> float:
        """The rows of a step (``new``: each request's new tokens) that take MLA's absorbed
        decode path, mla.py's per-request switch (up to ``DECODE_MAX_QUERY`` new tokens);
        0.0 where the engine prices nothing by them (``_fixed``)."""
        if self._uv_o is None:
            return 0.0
        a = np.asarray(new, dtype=np.float64)
        return float(a[(a > 0) & (a <= mla.DECODE_MAX_QUERY)].sum())

    def _uniform_decode_rows(self, n: float, u: float) -> float:
        """``_decode_rows`` of ``n`` requests of ``u`` new tokens each."""
        return float(n) * u if self._uv_o is not None and u <= mla.DECODE_MAX_QUERY else 0.0

    def chain_decode_time(self, context: np.ndarray, steps: int) -> float:
        """``steps`` sequential 1-token forwards over the batch, context growing by one each.

        Equal to summing ``step_time(ones, context + j)`` for j < steps (a draft model's
        chain) within rounding, in one vectorised pass where it can (step_models).
        """
        return sm.chain_decode(self, np.asarray(context, dtype=np.float64), steps)

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
        """Bytes of weights a forward reads on one device (layers + LM head; not the gather);
        a MoE model's when every expert is touched (``weight_bytes_read`` at T tokens)."""
        return self.weight_bytes_read(np.inf)

    def weight_bytes_read(self, tokens: float) -> float:
        """Bytes of weights a forward of ``tokens`` tokens reads on one device: a MoE layer
        reads the experts its tokens touch (simulator/cost/moe.py's D(T))."""
        dense = sum(w * wb * (self._layers if n is None else n)
                    for _, w, _, _, n, _, wb in self._linears)
        head = self._lm_head_weight * self._b
        if self._moe is None:
            return dense + head
        s = self._moe
        touched = s.num_experts if tokens == np.inf else s.distinct(float(tokens))
        return dense + head + s.layers * touched / s.ep * (s.up_weight + s.down_weight) \
            * self._wb


def draft_cost_ratio(target: CostModel, draft: CostModel, batch: int, context: float) -> float:
    """Leviathan's c: one draft decode step over one target decode step, from the cost model."""
    return draft.decode_time(batch, context) / target.decode_time(batch, context)
