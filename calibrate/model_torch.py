"""A decoder-only transformer with random weights in a catalogued model's shapes.

The shapes come from :class:`~simulator.models.spec.ModelSpec` (optionally with fewer layers,
so that a model fits a small device), the weights are random, and the KV cache is static
(gpt-fast style: preallocated, written in place at each request's position).  A forward takes
the tokens each request brings (a prefill chunk, 1 for decode, gamma+1 for chain
verification, tree nodes with a tree-attention mask) and returns logits; it launches the
operators the cost model prices (fused QKV, attention, output projection, MLP, norms,
residual adds, LM head), so measured and predicted steps describe the same work.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from simulator.inputs.errors import SpecsimError
from simulator.models.spec import ModelSpec

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a profile dtype name (fp32, bf16, fp16)."""
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise SpecsimError(f"dtype {name!r} cannot be benchmarked with torch here",
                           field="--dtype", fix="use one of: " + ", ".join(TORCH_DTYPES)) from None


def scaled_spec(spec: ModelSpec, *, num_layers: int | None = None,
                dtype: str | None = None) -> ModelSpec:
    """``spec`` with fewer layers and/or another dtype: what the torch model really runs."""
    if spec.kind != "decoder":
        raise SpecsimError(f"{spec.name} is a {spec.kind} model; only decoders can be built",
                           field="model", fix="name a decoder model such as opt-125m")
    layers = spec.num_layers if num_layers is None else int(num_layers)
    if not 1 <= layers <= spec.num_layers:
        raise SpecsimError(f"{spec.name} has {spec.num_layers} layers, asked for {layers}",
                           field="layers", fix=f"use 1..{spec.num_layers}")
    return dataclasses.replace(spec, num_layers=layers, dtype=dtype or spec.dtype)


def footprint_bytes(spec: ModelSpec, *, batch: int, max_len: int, new_tokens: int,
                    dtype_bytes: int) -> float:
    """Bytes a forward needs: weights, the KV cache and the largest activations (logits)."""
    weights = spec.param_count() * dtype_bytes  # a tied LM head is the embedding, once
    kv = 2.0 * spec.num_layers * batch * max_len * spec.kv_size * dtype_bytes
    width = max(spec.vocab_size, 2 * spec.ffn_size, spec.q_size + 2 * spec.kv_size)
    activations = 4.0 * batch * new_tokens * width * dtype_bytes
    scores = 4.0 * batch * spec.num_heads * new_tokens * max_len * dtype_bytes
    return float(weights + kv + activations + scores)


def step_mask(n: int, start, tree_mask: torch.Tensor | None, device: torch.device):
    """Boolean attention mask over [prefix | new tokens]; None for a plain decode step.

    New tokens see the whole prefix and, among themselves, the causal triangle or the tree
    mask.  ``start`` is an int (shared context: mask [n, start + n]) or a LongTensor [batch]
    of per-request contexts (mask [batch, 1, n, max(start) + n]).
    """
    local = tree_mask if tree_mask is not None else \
        torch.ones(n, n, dtype=torch.bool, device=device).tril()
    if isinstance(start, int):
        if n == 1:
            return None
        prefix = torch.ones(n, start, dtype=torch.bool, device=device)
        return torch.cat([prefix, local], dim=1)
    # per-request contexts: key j of request b is visible if j < start_b, or it is a new
    # token the query may see
    length = int(start.max()) + n
    rel = torch.arange(length, device=device)[None, :] - start[:, None]   # [B, L]
    inside = (rel >= 0) & (rel < n)
    allowed = local[:, rel.clamp(0, n - 1)].permute(1, 0, 2)               # [B, n, L]
    mask = (rel < 0)[:, None, :] | (inside[:, None, :] & allowed)
    return mask[:, None]                                                   # [B, 1, n, L]


@dataclass
class KVCache:
    """Per-layer K and V tensors of shape [batch, kv_heads, max_len, head_dim]."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]

    @property
    def max_len(self) -> int:
        return self.k[0].shape[2]


class TorchDecoder:
    """Random-weight decoder in ``spec``'s shapes; ``forward`` is one model step."""

    def __init__(self, spec: ModelSpec, *, device: torch.device, dtype: torch.dtype,
                 rng: np.random.Generator) -> None:
        if spec.kind != "decoder":
            raise SpecsimError(f"{spec.name} is a {spec.kind} model", field="model",
                               fix="name a decoder model")
        self.spec, self.device, self.dtype = spec, device, dtype
        gen = torch.Generator(device=device)
        gen.manual_seed(int(rng.integers(0, 2**62)))
        h, q, kv, f = spec.hidden_size, spec.q_size, spec.kv_size, spec.ffn_size
        up = (2 if spec.gated_mlp else 1) * f

        def weight(rows: int, cols: int) -> torch.Tensor:
            # uniform(-1/sqrt(in), 1/sqrt(in)) keeps activations O(1) through random layers
            w = torch.empty(rows, cols, device=device, dtype=dtype)
            return w.uniform_(-cols ** -0.5, cols ** -0.5, generator=gen)

        def vector(n: int, fill: float | None = None) -> torch.Tensor | None:
            if fill is not None:
                return torch.full((n,), fill, device=device, dtype=dtype)
            if not spec.bias:
                return None
            return torch.empty(n, device=device, dtype=dtype).uniform_(-0.1, 0.1, generator=gen)

        self.layers = []
        for _ in range(spec.num_layers):
            self.layers.append({
                "norm1": (vector(h, 1.0), vector(h, 0.0) if spec.norm == "layernorm" else None),
                "qkv": (weight(q + 2 * kv, h), vector(q + 2 * kv)),
                "o": (weight(h, q), vector(h)),
                "norm2": (vector(h, 1.0), vector(h, 0.0) if spec.norm == "layernorm" else None),
                "up": (weight(up, h), vector(up)),
                "down": (weight(h, f), vector(h)),
            })
        self.embed = weight(spec.vocab_size, h)
        self.pos = weight(spec.learned_position_embeddings, h) \
            if spec.learned_position_embeddings else None
        self.norm_f = (vector(h, 1.0), vector(h, 0.0) if spec.norm == "layernorm" else None)
        self.lm_head = self.embed if spec.tied_embeddings else weight(spec.vocab_size, h)

    # ------------------------------------------------------------------ pieces
    def new_cache(self, batch: int, max_len: int) -> KVCache:
        """An empty static KV cache for ``batch`` requests of up to ``max_len`` tokens."""
        s = self.spec
        shape = (batch, s.num_kv_heads, max_len, s.head_dim)
        return KVCache([torch.zeros(shape, device=self.device, dtype=self.dtype)
                        for _ in range(s.num_layers)],
                       [torch.zeros(shape, device=self.device, dtype=self.dtype)
                        for _ in range(s.num_layers)])

    def _norm(self, x: torch.Tensor, params) -> torch.Tensor:
        w, b = params
        if self.spec.norm == "layernorm":
            return F.layer_norm(x, (x.shape[-1],), w, b)
        return F.rms_norm(x, (x.shape[-1],), w)

    def _mask(self, batch: int, n: int, start, tree_mask: torch.Tensor | None):
        return step_mask(n, start, tree_mask, self.device)

    # ------------------------------------------------------------------ forward
    def forward(self, tokens: torch.Tensor, cache: KVCache, start, *,
                tree_mask: torch.Tensor | None = None, tree_depth: torch.Tensor | None = None,
                last_only: bool = False) -> torch.Tensor:
        """Logits of one step: ``tokens`` [batch, n] enter at each request's ``start``.

        ``start`` is an int (every request at the same context) or a LongTensor [batch].
        A tree step passes ``tree_mask`` [n, n] (a node sees itself and its ancestors) and
        ``tree_depth`` [n] for the position ids.  ``last_only`` keeps only the last position's
        logits (a prefill).  New K/V are written into ``cache`` in place.
        """
        s = self.spec
        batch, n = tokens.shape
        uniform = isinstance(start, int)
        length = start + n if uniform else int(start.max()) + n
        if length > cache.max_len:
            raise SpecsimError(f"step needs {length} cache slots, the cache has "
                               f"{cache.max_len}", field="context")
        offsets = tree_depth if tree_depth is not None else torch.arange(n, device=self.device)
        x = F.embedding(tokens, self.embed)
        if self.pos is not None:
            base = start if uniform else start[:, None]
            positions = (base + offsets).clamp(max=self.pos.shape[0] - 1)
            x = x + F.embedding(positions.expand(batch, n), self.pos)
        mask = self._mask(batch, n, start, tree_mask)
        if not uniform:
            rows = torch.arange(batch, device=self.device)[:, None].expand(batch, n)
            slots = start[:, None] + torch.arange(n, device=self.device)
        q_size, kv_size, heads, kv_heads, d = s.q_size, s.kv_size, s.num_heads, \
            s.num_kv_heads, s.head_dim
        gqa = heads != kv_heads
        for layer, kc, vc in zip(self.layers, cache.k, cache.v):
            hid = self._norm(x, layer["norm1"])
            qkv = F.linear(hid, *layer["qkv"])
            q, k, v = qkv.split((q_size, kv_size, kv_size), dim=-1)
            q = q.view(batch, n, heads, d).transpose(1, 2)
            k = k.view(batch, n, kv_heads, d)
            v = v.view(batch, n, kv_heads, d)
            if uniform:
                kc[:, :, start:start + n] = k.transpose(1, 2)
                vc[:, :, start:start + n] = v.transpose(1, 2)
            else:
                kc[rows, :, slots] = k
                vc[rows, :, slots] = v
            extra = {"enable_gqa": True} if gqa else {}
            o = F.scaled_dot_product_attention(q, kc[:, :, :length], vc[:, :, :length],
                                               attn_mask=mask, **extra)
            x = x + F.linear(o.transpose(1, 2).reshape(batch, n, q_size), *layer["o"])
            hid = self._norm(x, layer["norm2"])
            up = F.linear(hid, *layer["up"])
            if s.gated_mlp:
                gate, lin = up.chunk(2, dim=-1)
                up = F.silu(gate) * lin
            else:
                up = F.relu(up)
            x = x + F.linear(up, *layer["down"])
        x = self._norm(x, self.norm_f)
        if last_only:
            x = x[:, -1:]
        return F.linear(x, self.lm_head)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Greedy sampling: the argmax token at every position."""
    return logits.argmax(dim=-1)
