"""The dense GEMMs of a layer and the MoE layer's shape, as ``CostModel`` prices them.

``linear_ops`` lists every weight matrix a token multiplies outside the routed experts: the
attention's projections (simulator/cost/mla.py's for MLA), the dense MLP (only in the leading
dense layers of a MoE model), a MoE layer's shared experts and its router; ``moe_shape`` the
routed experts (simulator/cost/moe.py).
"""
from __future__ import annotations

from simulator.cost import mla, moe, moe_kernels
from simulator.cost.parallelism import Parallelism
from simulator.cost.spec_work import SpecHost
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import ModelSpec


def moe_shape(m: ModelSpec, parallel: Parallelism, skew: float,
              engine: SpecHost | None = None) -> moe.MoeShape | None:
    """The routed experts, with the shared experts among them where the ``engine`` fuses
    them (moe.py ``MoeShape.of``); None for a dense model."""
    ep = parallel.expert_parallel
    if not m.is_moe:
        if ep > 1:
            raise SpecsimError(f"{m.name} has no experts to spread", field="expert_parallel",
                               fix="drop parallelism.expert_parallel for a dense model")
        return None
    fuse = engine is not None and engine.shared_experts_fusion
    return moe.MoeShape.of(m, parallel.tensor_parallel, ep, skew, fuse)


def linear_ops(m: ModelSpec, tp: int, lin, roof16,
               shape: moe.MoeShape | None = None) -> tuple[tuple, ...]:
    """(name, weight elements per device, output and input elements per token, layers (None:
    every layer), roofline, weight bytes per element) of every dense GEMM of a layer: the
    attention's (mla.py's for MLA), the dense MLP (in the dense layers of a MoE model), and a
    MoE layer's shared experts (none where ``shape`` runs them among the routed experts) and
    router (replicated, 16-bit as vLLM keeps the gate)."""
    h, q, kv, f, wb = m.hidden_size, m.q_size, m.kv_size, m.ffn_size, m.dtype_bytes
    gates = 2 if m.gated_mlp else 1
    attn = mla.linears(m, tp) if m.is_mla else (
        ("qkv_proj", h * (q + 2 * kv) / tp, (q + 2 * kv) / tp, h),
        ("o_proj", q * h / tp, h, q / tp))
    ops = [op + (None, lin, wb) for op in attn]
    dense = m.num_layers - m.moe_layers
    if dense:
        n = dense if m.is_moe else None
        ops += [("mlp_up", gates * h * f / tp, gates * f / tp, h, n, lin, wb),
                ("mlp_down", f * h / tp, h, f / tp, n, lin, wb)]
    if m.is_moe:
        n, fs = m.moe_layers, m.shared_experts * m.expert_ffn_size
        if fs and not (shape is not None and shape.fused_shared):
            ops += [("shared_up", gates * h * fs / tp, gates * fs / tp, h, n, lin, wb),
                    ("shared_down", fs * h / tp, h, fs / tp, n, lin, wb)]
        ops.append(("router", h * m.num_experts, m.num_experts, h, n, roof16,
                    m.activation_bytes))
    return tuple(ops)


def mlp_width(m: ModelSpec) -> float:
    """The MLP activation's width per token, averaged over the layers: ffn_size, or in a MoE
    layer the k routed plus the shared experts' intermediate sizes."""
    if not m.is_moe:
        return m.ffn_size
    moe_f = (m.experts_per_token + m.shared_experts) * m.expert_ffn_size
    return ((m.num_layers - m.moe_layers) * m.ffn_size + m.moe_layers * moe_f) / m.num_layers


def extra_kernels(cm) -> int:
    """Launches per forward of a CostModel ``cm`` beyond KERNELS_PER_LAYER's dense layer: a
    MoE layer's router and grouped GEMMs and shared experts, MLA's extra projections, and the
    small kernels around them (moe_kernels.small_kernel_count)."""
    m = cm.model
    n = moe_kernels.small_kernel_count(cm)
    if m.is_moe:
        fused = cm._moe is not None and cm._moe.fused_shared
        shared = m.shared_experts and not fused  # the shared MLP's GEMMs and activation
        n += m.moe_layers * (1 + moe.LAUNCHES_UP + moe.LAUNCHES_DOWN - 2
                             + (3 if shared else 0))
    if m.is_mla:
        n += m.num_layers * (len(mla.linears(m, 1)) - 2)
    return n
