"""A CostModel's eager forward in issue order, for the stream model (stream.py).

Where every forward runs eager (``enforce_eager``, or a GPU without graph replay) the
forward is priced as one CUDA stream: the layer's operators are laid out in the order a
decoder layer issues them, each operator's kernels alike (its GPU time split evenly over its
launches), and the stream's closed form gives the forward's end.  The order of a layer::

    input norm, [the engine's extra launches before attention], the attention's linears
    but its output projection, rope | attention | [the engine's extra launches after it],
    output projection, all-reduce, residual add, post-attention norm, the MLP's (or MoE
    layer's) linears with the activation after the first, the small-kernel families,
    all-reduce, residual add

with the embedding gather before the layers and the final norm, LM head and sampling after
(the logits all-gather under TP last).  A model whose layers differ (a MoE model's leading
dense layers) is priced at its average layer: each operator's GPU time and launches over
all the layers, divided by their number.

The engine's extra launches (the official EAGLE code's native Hugging Face Llama layer,
engines.yaml ``eagle-official``): ``SpecHost.norm_kernels`` launches an RMSNorm (the
generic norm's kernel and the rest), ``layer_kernels_before_attention`` and
``_after_attention`` more, all pointwise kernels over the step's hidden states, each extra
one priced as one residual add (the profile's ``elementwise`` kind at ``3 T h`` activation
bytes); ``layer_host_ops`` (ops on CPU tensors) take a dispatch and no GPU time.  An EAGLE
layer (model kind ``eagle``) has no input norm (SafeAILab/EAGLE eagle/model/cnets.py at
59148f5, lines 398-399 and 427-428: ``if self.index != 0``) and keeps its KV by
``torch.cat`` (lines 290-291: two launches, as the target's two ``copy_``, and no
CPU-tensor op), so it drops the input norm's launches and the host ops.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from simulator.cost import ar_fusion as arf
from simulator.cost import mla, stream
from simulator.cost import step_models as sm
from simulator.cost import token_terms as tt
from simulator.cost.op_cost import OpCost, check_step
from simulator.cost.stream import Segment, StreamParts

# the operators token_terms prices that this module lays out itself
_OWN = ("elementwise", "all_reduce", "embedding")


def _pointwise_s(cm, tokens: float) -> float:
    """One pointwise kernel over the step's hidden states (a residual add)."""
    nb = 3.0 * tokens * cm._h * cm._b
    if cm._shapes:
        return float(cm._roof.transfer_time(nb, "elementwise", rows=None))
    return cm._roof.memory_time(nb) if nb else 0.0


def _elementwise_s(cm, tokens: float) -> list[float]:
    """One layer's norm, norm, add, add, activation (and rope) kernels' GPU seconds."""
    if cm._shapes:
        return [float(cm._roof.transfer_time(nb, kind, rows=rows))
                for nb, kind, rows in tt._elementwise_kernels(cm, tokens)]
    _, _, e_s, n = tt.elementwise(cm, tokens, 1)
    return [e_s / n] * n


def layer_parts(cm, tokens: float) -> tuple[Segment, Segment, Segment]:
    """``(before, pre, post)`` of an eager forward computing ``tokens`` tokens: the
    embedding, one (average) layer's kernels before its attention and after it."""
    layers, L = cm._layers, cm._launch_s
    ops = {t[0]: t for t in tt.token_terms(cm, tokens, layers, True, "eager")}
    per = {name: stream.kernels(t[7] / (L * layers), t[8] / layers, L)
           for name, t in ops.items() if name not in _OWN}
    g = _elementwise_s(cm, tokens)
    e = [stream.kernels(1.0, x, L) for x in g]
    _, _, add1, add2, act = e[:5]
    rope = e[5:]
    extra_s = _pointwise_s(cm, tokens)
    n_norm, n_before, n_after, n_host, first_norm = engine_launches(cm)
    norm1, norm2 = (stream.kernels(n_norm, x + (n_norm - 1) * extra_s, L) for x in g[:2])
    if not first_norm:
        norm1 = stream.EMPTY
    if arf.fused_count(cm, tokens, layers):  # ar_fusion.py: the all-reduces take them in
        norm1 = norm2 = add1 = add2 = stream.EMPTY
    before_x = [stream.kernels(n_before, n_before * extra_s, L),
                stream.kernels(n_host, 0.0, L)]
    after_x = [stream.kernels(n_after, n_after * extra_s, L)]
    attn_names = [name for name, *_ in cm._linears][:_attention_linears(cm)]
    ar = [stream.kernels(1.0, ops["all_reduce"][8] / (2 * layers), L)] \
        if "all_reduce" in ops else []
    mlp = []
    for name in per:
        if name not in attn_names:
            mlp.append(per[name])
            if name == "mlp_up" or name == "experts_up" or name == "shared_up":
                mlp.append(act)
                act = stream.EMPTY
    mlp.append(act)
    pre = stream.chain([norm1] + before_x + [per[n] for n in attn_names[:-1]] + rope, L)
    post = stream.chain(after_x + [per[attn_names[-1]]] + ar + [add1, norm2] + mlp + ar
                        + [add2], L)
    emb = ops["embedding"]
    return stream.kernels(1.0, emb[8], L), pre, post


def engine_launches(cm) -> tuple[int, int, int, int, bool]:
    """(launches an RMSNorm, extra launches before and after the attention, host ops, and
    whether the layer has its input norm) of ``cm``'s layer on its engine (module
    docstring: an EAGLE layer has no input norm and no host ops)."""
    spec, eagle = cm.execution.spec, cm.model.kind == "eagle"
    return (max(spec.norm_kernels, 1), spec.layer_kernels_before_attention,
            spec.layer_kernels_after_attention, 0 if eagle else spec.layer_host_ops, not eagle)


def _attention_linears(cm) -> int:
    """How many of ``cm._linears`` are the attention's (listed first: layer_ops.linear_ops)."""
    return len(mla.linears(cm.model, cm._tp)) if cm.model.is_mla else 2


def head_part(cm, logits: float) -> Segment:
    """The final norm, the LM head and sampling (the norm and sampling as launches on the
    LM head's either side), the logits gather under TP."""
    L = cm._launch_s
    parts = []
    for t in tt.head_terms(cm, logits):
        n = t[7] / L
        if t[0] == "lm_head":
            parts += [stream.kernels(1.0, 0.0, L), stream.kernels(1.0, t[8], L),
                      stream.kernels(n - 2.0, 0.0, L)]
        else:
            parts.append(stream.kernels(n, t[8], L))
    return stream.chain(parts, L)


def applies(cm, own: bool) -> bool:
    """Whether ``cm`` prices its forwards as streams: every forward eager (no graph replay),
    launches that cost time, the sum-of-operators step model, no micro-batched pipeline, and
    ``own``: ``cm`` a CostModel itself (DP attention's ranks price their own way)."""
    ex, par = cm.execution, cm.parallel
    return own and (not ex.cuda_graphs or not ex.capture_sizes) and ex.kernel_launch_s > 0 \
        and ex.step_model == "sum_of_operators" \
        and not (par.pipeline_parallel > 1 and par.micro_batches > 1)


class EagerStream:
    """``step_time`` of a CostModel whose forwards all run eager: the layer parts by tokens
    and the head by logits tokens memoised (bounded: token_terms.remember), attention per
    layer from the model's own vectorised attention, a uniform batch by its closed form
    (step_models.uniform_step, whose ``stream`` these parts are)."""

    def __init__(self, cm) -> None:
        self._cm = cm
        self._layers: dict[float, tuple] = {}
        self._heads: dict[float, Segment] = {}

    def parts(self, tokens: float, logits: float, rows: float) -> StreamParts:
        """The forward of ``tokens`` tokens, ``logits`` through the LM head, ``rows`` the
        decode rows an absorbed W_UV_O prices."""
        cm = self._cm
        layer = self._layers.get(tokens)
        if layer is None:
            layer = layer_parts(cm, tokens)
            tt.remember(self._layers, tokens, layer)
        head = self._heads.get(logits)
        if head is None:
            head = head_part(cm, logits)
            tt.remember(self._heads, logits, head)
        tail = cm._pipeline_transfer(tokens, cm.parallel.pipeline_parallel)
        if cm._uv_o is not None:
            tail += cm._uv_o.time_s(rows)
        return StreamParts.of(layer[0], layer[1], layer[2], head, cm._layers, cm._launch_s,
                              tail)

    def step_time(self, new_tokens, context, logits_tokens=None) -> float:
        """``CostModel.step_time`` as a stream: the device's end plus the host time; a
        uniform batch by its closed form (the same float as ``uniform_step_times``)."""
        cm = self._cm
        new, ctx, logits = check_step(new_tokens, context, logits_tokens)
        n = new.size
        lo, hi = (float(new.min()), float(new.max())) if n else (0.0, 0.0)
        if lo == hi and lo >= 1.0 and lo.is_integer():
            k = cm._uniform(n, lo, logits)
            if k is not None:
                return sm.uniform_time(k, float(ctx.sum()), max)
        active = new > 0
        parts = self.parts(float(new.sum()), logits, cm._decode_rows(new))
        return cm._step_from("eager", parts, cm._attention_s(new, ctx, bool(active.all())),
                             int(np.count_nonzero(new)))

    def ops(self, ops: list[OpCost], new, ctx, logits: float) -> list[OpCost]:
        """``CostModel.breakdown``'s operators as a stream: each at its GPU time, the
        engine's extra layer kernels (their GPU time), and ``eager_launches``, the launch
        time the stream does not hide (what makes the ops sum to ``step_time``'s device)."""
        cm = self._cm
        out = [dataclasses.replace(op, overhead_s=0.0) for op in ops]
        tokens = float(new.sum())
        n_norm, n_before, n_after, _, first_norm = engine_launches(cm)
        n = n_before + n_after + (n_norm - 1) * (2 if first_norm else 1)
        if n:
            g = n * cm._layers * _pointwise_s(cm, tokens)
            nb = n * cm._layers * 3.0 * tokens * cm._h * cm._b
            out.append(OpCost("engine_layer_kernels", 0.0, nb, 0.0, 0.0, g, 0.0, 0.0,
                              roofline_s=g))
        a_layer = cm._attention_s(new, ctx, bool((new > 0).all()))
        device = self.parts(tokens, logits, cm._decode_rows(new)).device_s(a_layer)
        gpu = sum(op.time_s for op in out) \
            + cm._pipeline_transfer(tokens, cm.parallel.pipeline_parallel)
        out.append(OpCost("eager_launches", 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                          max(device - gpu, 0.0), roofline_s=0.0))
        return out
