"""Multi-head latent attention (DeepSeek-V2/V3): its linears, KV bytes and attention work.

The cache holds, per token and layer, the compressed latent (``kv_lora_rank``) and the
decoupled rope key (``qk_rope_head_dim``), one copy for all heads, so every tensor-parallel
rank holds the whole of it (vLLM's MLA backends do not split the latent over TP ranks).

Linears per layer (vLLM's DeepseekV2MLAAttention): ``q_a_proj`` h -> q_lora and
``kv_a_proj_with_mqa`` h -> (kv_lora + rope) replicated on every rank, run as one GEMM
(``fused_qkv_a_proj``, a MergedColumnParallelLinear with disable_tp, when there is a q latent);
``q_b_proj`` q_lora -> heads x (nope + rope) (or ``q_proj`` h -> heads x (nope + rope) and
``kv_a_proj`` alone without a q latent),
``kv_b_proj`` kv_lora -> heads x (nope + v) and ``o_proj`` heads x v -> h sharded over the
heads.  Their weights plus the two latent norms (q_lora + kv_lora) sum to
``ModelSpec.attention_params_per_layer``.

Attention has two forms (DeepSeek-V2 paper, appendix on absorbed weights; vLLM
v1/attention/backends/mla/common.py).  Decode, absorbed: ``kv_b``'s K half is folded into the
query and its V half applied to the output (priced with the T-token ``kv_b_proj`` term), and
attention runs in latent space over the cached latent read once per request: per
query-key pair and head ``2 (kv_lora + rope)`` FLOPs for QK and ``2 kv_lora`` for PV (FlashMLA).
Prefill, expanded: ``kv_b`` up-projects every cached token's latent to per-head K and V
(``2 kv_lora heads (nope + v)`` FLOPs per context token, the new tokens' share being the
``kv_b_proj`` term), then ordinary attention with ``2 (nope + rope) + 2 v`` FLOPs per pair and
head, the expanded K and V written and read.  The switch is per request, as vLLM splits a
batch into decode and prefill requests: vLLM sends requests of up to ``1 +
num_speculative_tokens`` new tokens down the decode path on backends that take speculative
queries there (``_init_reorder_batch_threshold(..., supports_spec_as_decode)``; FlashMLA);
the cost model does not know the speculative width, so requests of up to
``DECODE_MAX_QUERY`` new tokens (every verification the project prices) are decode.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DECODE_MAX_QUERY = 16
_MAX = np.maximum.reduce  # ndarray.max without its method layer


def linears(m, tp: int) -> tuple[tuple, ...]:
    """(name, weight elements per device, output per token, input per token) of one layer."""
    h, heads, r, L = m.hidden_size, m.num_heads, m.q_lora_rank, m.kv_lora_rank
    qk, rope, v = m.head_dim + m.qk_rope_head_dim, m.qk_rope_head_dim, m.value_head_dim
    hd = heads / tp
    a = L + rope
    q = ((("fused_qkv_a_proj", h * (r + a), r + a, h),
          ("q_b_proj", r * heads * qk / tp, hd * qk, r)) if r
         else (("q_proj", h * heads * qk / tp, hd * qk, h), ("kv_a_proj", h * a, a, h)))
    return q + (("kv_b_proj", L * heads * (m.head_dim + v) / tp, hd * (m.head_dim + v), L),
                ("o_proj", heads * v * h / tp, h, hd * v))


def norm_params(m) -> int:
    """The latent norms' weights (q_a_layernorm, kv_a_layernorm)."""
    return m.q_lora_rank + m.kv_lora_rank


@dataclass(frozen=True)
class MlaShape:
    """Per device and layer: (FLOPs per query-key pair, KV bytes per cached token, query
    in/out bytes per new token, up-projection FLOPs per context token) of each form."""

    decode: tuple[float, float, float, float]
    prefill: tuple[float, float, float, float]

    @classmethod
    def of(cls, m, tp: int, act_bytes: float, kv_bytes: float) -> "MlaShape":
        hd, L, R = m.num_heads / tp, m.kv_lora_rank, m.qk_rope_head_dim
        P, V = m.head_dim, m.value_head_dim
        latent = (L + R) * kv_bytes
        decode = (hd * (2.0 * (L + R) + 2.0 * L), latent, hd * ((L + R) + L) * act_bytes, 0.0)
        prefill = (hd * (2.0 * (P + R) + 2.0 * V), latent + 2.0 * hd * (P + R + V) * act_bytes,
                   hd * ((P + R) + V) * act_bytes, 2.0 * L * hd * (P + V))
        return cls(decode, prefill)

    def coefficients(self, u: float) -> tuple[float, float, float, float]:
        """The form a request of ``u`` new tokens takes (module docstring)."""
        return self.decode if u <= DECODE_MAX_QUERY else self.prefill

    def arrays(self, new: np.ndarray, ctx: np.ndarray, causal: bool, overhead: float = 0.0):
        """Per request (FLOPs, bytes) of one layer's attention; ``causal``: the new tokens'
        causal half on average, else the kernel's new x (context + new) pairs; ``overhead``:
        keys' worth of work per query of the expanded (prefill) form, FlashAttention-3's,
        which runs that form on Hopper (vLLM's MLA prefill calls flash_attn_varlen_func);
        the same DECODE_MAX_QUERY bound as step_models.attention_work's."""
        if new.size and _MAX(new, axis=None) <= DECODE_MAX_QUERY:
            return self._decode_arrays(new, ctx, causal)
        dec = new <= DECODE_MAX_QUERY
        pair, kv, q_io, up = (np.where(dec, d, p) for d, p in zip(self.decode, self.prefill))
        width = 0.5 * (new + 1.0) if causal else new
        if overhead:
            width = width + np.where(dec, 0.0, overhead)
        return pair * new * (ctx + width) + up * ctx, (ctx + new) * kv + new * q_io

    def _decode_arrays(self, new: np.ndarray, ctx: np.ndarray, causal: bool):
        """``arrays`` where every request takes the decode (absorbed) form, as every
        verification and draft forward does: its coefficients as scalars, elementwise the
        same products as ``np.where``'s arrays of them give, no prefill overhead (``width +
        0.0``), and no up-projection (``+ 0.0 * ctx``: an identity on these positive sums)."""
        pair, kv, q_io, up = self.decode
        width = 0.5 * (new + 1.0) if causal else new
        flops = pair * new * (ctx + width)
        if up:
            flops = flops + up * ctx
        return flops, (ctx + new) * kv + new * q_io
