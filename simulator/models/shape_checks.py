"""Consistency checks of a model file's mixture-of-experts, latent-attention and EAGLE-3
fields (simulator/models/spec.py parses them)."""
from __future__ import annotations

from simulator.inputs.errors import SpecsimError


def check_moe_mla(spec, source: str) -> None:
    """The MoE, MLA and drafting fields hang together (each check names the field to fix)."""
    _check_moe(spec, source)
    _check_mla(spec, source)
    _check_drafting(spec, source)


def _check_moe(spec, source: str) -> None:
    """All of num_experts, experts_per_token and expert_ffn_size or none; top-k within E."""
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


def _check_mla(spec, source: str) -> None:
    """MLA (kv_lora_rank > 0) caches a latent plus a rope key and expands it to every head."""
    if (spec.q_lora_rank or spec.qk_rope_head_dim) and not spec.is_mla:
        raise SpecsimError("q_lora_rank and qk_rope_head_dim describe latent attention",
                           source=source, field="kv_lora_rank", fix="set kv_lora_rank (MLA)")
    if spec.v_head_dim and not spec.is_mla and spec.v_head_dim != spec.head_dim:
        raise SpecsimError(f"v_head_dim ({spec.v_head_dim}) differs from head_dim "
                           f"({spec.head_dim}), which only latent attention models",
                           source=source, field="v_head_dim",
                           fix="remove v_head_dim, or set kv_lora_rank (MLA)")
    if not spec.is_mla:
        return
    if not spec.qk_rope_head_dim:
        raise SpecsimError("MLA caches a decoupled rope key beside the latent: "
                           "qk_rope_head_dim must be > 0 (DeepSeek-V2/V3: 64)", source=source,
                           field="qk_rope_head_dim")
    if spec.num_kv_heads != spec.num_heads:
        raise SpecsimError("MLA expands the latent to every head: num_kv_heads must equal "
                           "num_heads", source=source, field="num_kv_heads")
    if spec.kv_lora_rank >= spec.num_heads * (spec.head_dim + spec.value_head_dim):
        raise SpecsimError(f"kv_lora_rank ({spec.kv_lora_rank}) is no compression of the "
                           f"{spec.num_heads} heads' keys and values", source=source,
                           field="kv_lora_rank")


def _check_drafting(spec, source: str) -> None:
    """feature_layers and draft_vocab_size are EAGLE-3's; MTP modules are a decoder's."""
    if (spec.kind == "eagle3") != bool(spec.feature_layers):
        raise SpecsimError("feature_layers (the target layers EAGLE-3 fuses) belongs to, and "
                           "is needed by, an eagle3 model", source=source,
                           field="feature_layers")
    if spec.draft_vocab_size and spec.kind != "eagle3":
        raise SpecsimError("draft_vocab_size (an LM head over a draft vocabulary) belongs to "
                           "an eagle3 model", source=source, field="draft_vocab_size")
    if spec.draft_vocab_size > spec.vocab_size:
        raise SpecsimError(f"draft_vocab_size ({spec.draft_vocab_size}) exceeds vocab_size "
                           f"({spec.vocab_size}): the draft vocabulary is a subset of the "
                           f"target's", source=source, field="draft_vocab_size")
    if spec.kind == "eagle3" and (spec.is_moe or spec.is_mla):
        raise SpecsimError("an eagle3 head is modelled as one dense multi-head/grouped-query "
                           "layer; MoE or MLA heads are not", source=source,
                           field="num_experts" if spec.is_moe else "kv_lora_rank")
    if spec.mtp_modules and spec.kind != "decoder":
        raise SpecsimError(f"mtp_modules belong to a decoder model, not a {spec.kind} one",
                           source=source, field="mtp_modules")
