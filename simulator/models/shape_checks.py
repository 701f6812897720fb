"""Consistency checks of a model file's mixture-of-experts, latent-attention and EAGLE-3
fields (simulator/models/spec.py parses them)."""
from __future__ import annotations

from simulator.inputs.errors import SpecsimError


def check_moe_mla(spec, source: str) -> None:
    """The MoE and MLA fields hang together: all or none, top-k within the experts."""
    moe = (spec.num_experts, spec.experts_per_token, spec.expert_ffn_size)
    if any(moe) and not all(moe):
        raise SpecsimError("a mixture-of-experts model needs num_experts, experts_per_token "
                           "and expert_ffn_size (all > 0)", source=source, field="num_experts")
    if spec.experts_per_token > spec.num_experts:
        raise SpecsimError(f"experts_per_token ({spec.experts_per_token}) exceeds num_experts "
                           f"({spec.num_experts})", source=source, field="experts_per_token")
    if (spec.shared_experts or spec.dense_layers) and not spec.is_moe:
        raise SpecsimError("shared_experts and dense_layers describe a mixture-of-experts "
                           "model", source=source, field="num_experts",
                           fix="set num_experts, experts_per_token and expert_ffn_size")
    if spec.dense_layers >= spec.num_layers and spec.is_moe:
        raise SpecsimError(f"dense_layers ({spec.dense_layers}) leaves no MoE layer of "
                           f"{spec.num_layers}", source=source, field="dense_layers")
    if (spec.q_lora_rank or spec.qk_rope_head_dim) and not spec.is_mla:
        raise SpecsimError("q_lora_rank and qk_rope_head_dim describe latent attention",
                           source=source, field="kv_lora_rank", fix="set kv_lora_rank (MLA)")
    if spec.is_mla and spec.num_kv_heads != spec.num_heads:
        raise SpecsimError("MLA expands the latent to every head: num_kv_heads must equal "
                           "num_heads", source=source, field="num_kv_heads")
    if (spec.kind == "eagle3") != bool(spec.feature_layers):
        raise SpecsimError("feature_layers (the target layers EAGLE-3 fuses) belongs to, and "
                           "is needed by, an eagle3 model", source=source,
                           field="feature_layers")
