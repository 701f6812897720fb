"""Model specifications: transformer shapes as YAML data, one file per model.

The cost model needs only shapes, so a model is its shapes plus a published parameter
count (with its source) that the tests check the shapes against.  Draft *heads* (Medusa)
and feature-level draft layers (EAGLE) are models too, of kind ``medusa`` or ``eagle``,
attached to a ``base_model`` whose embedding and LM head they may reuse.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hardware.profile import DTYPE_BYTES
from simulator.inputs.catalog import Catalog
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import (
    as_bool,
    as_number,
    as_str,
    check_keys,
    load_yaml_file,
    require_mapping,
)
from simulator.models.shape_checks import check_moe_mla

MODEL_DIR = Path(__file__).resolve().parent
MODELS = Catalog("model", MODEL_DIR, "model_dir")  # load_model's argument (no command takes one)
KINDS = ("decoder", "medusa", "eagle", "eagle3")
NORMS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a decoder-only transformer (or of draft heads attached to one)."""

    name: str
    family: str
    kind: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_size: int
    gated_mlp: bool
    vocab_size: int
    tied_embeddings: bool
    dtype: str
    max_context: int
    norm: str = "rmsnorm"
    bias: bool = False
    learned_position_embeddings: int = 0
    published_params: float = 0.0
    published_params_source: str = ""
    published_active_params: float = 0.0  # MoE: parameters active per token, as published
    published_active_params_source: str = ""
    source: str = ""
    base_model: str = ""
    medusa_num_heads: int = 0
    medusa_num_layers: int = 0
    # the tokenizer's vocabulary, when vocab_size is an effective width for the cost model
    # (opt-350m); 0: the same as vocab_size.  Drafts are matched on this (``tokenizer_vocab``)
    tokenizer_vocab_size: int = 0
    # ---- mixture of experts (num_experts 0: a dense MLP of ffn_size in every layer) ----
    num_experts: int = 0        # routed experts per MoE layer (n_routed_experts)
    experts_per_token: int = 0  # top-k routing (num_experts_per_tok)
    shared_experts: int = 0     # experts every token goes through, each of expert_ffn_size
    expert_ffn_size: int = 0    # one expert's intermediate size (moe_intermediate_size)
    dense_layers: int = 0       # leading dense-MLP layers of ffn_size (first_k_dense_replace)
    # ---- multi-head latent attention (kv_lora_rank 0: multi-head / grouped-query) ----
    kv_lora_rank: int = 0       # the cached latent per token per layer
    q_lora_rank: int = 0        # 0: queries projected straight from the hidden state
    qk_rope_head_dim: int = 0   # the decoupled rope key, cached beside the latent
    v_head_dim: int = 0         # 0: head_dim (MLA: head_dim is qk_nope_head_dim)
    # ---- drafting built into or attached to the model ----
    mtp_modules: int = 0        # multi-token-prediction modules shipped (num_nextn_predict_layers)
    draft_vocab_size: int = 0   # eagle3: its own LM head's vocabulary (0: vocab_size)
    feature_layers: int = 0     # eagle3: target layers whose hidden states the fc fuses
    # the KV cache's dtype: a deployment's choice (vLLM's kv_cache_dtype, set by
    # ``with_precision``), not the file's; "": 16-bit, or the weights' dtype if wider
    kv_cache_dtype: str = ""
    path: str = ""

    @property
    def tokenizer_vocab(self) -> int:
        """The vocabulary a draft must share: the tokenizer's, which vocab_size is unless
        the file says otherwise."""
        return self.tokenizer_vocab_size or self.vocab_size

    # ---- derived sizes (elements unless the name says bytes) ----
    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return self.num_layers - self.dense_layers if self.is_moe else 0

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def activation_bytes(self) -> float:
        """Bytes of an activation element: 8- and 4-bit checkpoints compute with 16-bit
        activations between their GEMMs (vLLM's fp8 and fp4 linear methods)."""
        return float(max(self.dtype_bytes, 2))

    @property
    def kv_elements_per_token_layer(self) -> int:
        """Cached elements per token per layer: K and V of every KV head, or MLA's latent
        plus its rope key (one copy for all heads)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_size

    def attention_params_per_layer(self) -> int:
        h = self.hidden_size
        if self.is_mla:  # DeepSeek-V2/V3: q (optionally low-rank), kv_a to the latent, kv_b up
            heads, qk, v = self.num_heads, self.head_dim + self.qk_rope_head_dim, \
                self.value_head_dim
            r = self.q_lora_rank
            q = (h * r + r + r * heads * qk) if r else h * heads * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank \
                + self.kv_lora_rank * heads * (self.head_dim + v)
            return q + kv + heads * v * h
        n = h * self.q_size + 2 * h * self.kv_size + self.q_size * h
        if self.bias:
            n += self.q_size + 2 * self.kv_size + h
        return n

    def mlp_params_per_layer(self) -> int:
        h, f = self.hidden_size, self.ffn_size
        n = (3 if self.gated_mlp else 2) * h * f
        if self.bias:
            n += (2 if self.gated_mlp else 1) * f + h
        return n

    def expert_params(self) -> int:
        """One routed (or shared) expert: an MLP of expert_ffn_size."""
        return (3 if self.gated_mlp else 2) * self.hidden_size * self.expert_ffn_size

    def moe_params_per_layer(self, active: bool = False) -> int:
        """A MoE layer's experts and router; ``active``: what one token uses (top-k)."""
        routed = self.experts_per_token if active else self.num_experts
        return (routed + self.shared_experts) * self.expert_params() \
            + self.hidden_size * self.num_experts

    def norm_params(self) -> int:
        return (2 if self.norm == "layernorm" else 1) * self.hidden_size

    def layer_params(self, moe: bool = False, active: bool = False) -> int:
        """One decoder layer (``moe``: with the mixture-of-experts MLP)."""
        mlp = self.moe_params_per_layer(active) if moe else self.mlp_params_per_layer()
        return self.attention_params_per_layer() + mlp + 2 * self.norm_params()

    def embedding_params(self) -> int:
        return (self.vocab_size + self.learned_position_embeddings) * self.hidden_size

    def lm_head_params(self) -> int:
        return (self.draft_vocab_size or self.vocab_size) * self.hidden_size

    def _layers_params(self, active: bool) -> int:
        dense = self.num_layers - self.moe_layers
        return dense * self.layer_params() + self.moe_layers * self.layer_params(True, active)

    def param_count(self, active: bool = False) -> int:
        """Parameters this file adds (heads and EAGLE layers exclude what they reuse);
        ``active``: those one token computes with (top-k experts, not all).  A model's MTP
        modules are not counted (``mtp_module_params``): engines load them only to draft."""
        h = self.hidden_size
        if self.kind == "medusa":
            per_head = self.medusa_num_layers * (h * h + h) + self.lm_head_params()
            return self.medusa_num_heads * per_head
        if self.kind == "eagle":
            # One decoder layer plus the fc that fuses [feature, embedding] (2h -> h, with
            # bias); the embedding and the LM head are the target's.
            return self.num_layers * self.layer_params() + 2 * h * h + h
        if self.kind == "eagle3":
            # EAGLE-3's layer reads [embedding, fused feature] (2h into q, k, v) and has a
            # norm for the feature; the fc fuses feature_layers target layers (no bias); its
            # LM head is over the draft vocabulary; the embedding is the target's.
            layer = self.layer_params() + h * (self.q_size + 2 * self.kv_size) + h
            return self.num_layers * layer + self.feature_layers * h * h \
                + self.lm_head_params() + h
        n = self._layers_params(active) + self.embedding_params() + self.norm_params()
        if not self.tied_embeddings:
            n += self.lm_head_params()
        return n

    def active_param_count(self) -> int:
        """Parameters one token computes with (equal to param_count for a dense model)."""
        return self.param_count(active=True)

    def mtp_module_params(self) -> int:
        """One multi-token-prediction module (DeepSeek-V3 section 2.2): a decoder layer of
        the model's last kind (MoE where the model has experts), the projection of
        [norm(hidden), norm(embedding)] (2h -> h) and three norms; the embedding and the
        output head are shared with the model."""
        return self.layer_params(moe=self.is_moe) + 2 * self.hidden_size ** 2 \
            + 3 * self.norm_params()

    def weight_bytes(self) -> float:
        """Bytes of weights held in memory."""
        return float(self.param_count() * self.dtype_bytes)

    @property
    def kv_dtype_bytes(self) -> float:
        """Bytes of a cached K/V (or latent) element."""
        if self.kv_cache_dtype:
            return float(DTYPE_BYTES[self.kv_cache_dtype])
        return self.activation_bytes

    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per token of context (K and V, or MLA's latent, every layer)."""
        if self.kind == "medusa":  # heads are MLPs on the last hidden state: no attention
            return 0.0
        return float(self.num_layers * self.kv_elements_per_token_layer * self.kv_dtype_bytes)


_INT_FIELDS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_size",
               "vocab_size", "max_context")
# optional whole numbers >= 0 (MoE, MLA, drafting), 0 when absent
_OPTIONAL_INTS = ("num_experts", "experts_per_token", "shared_experts", "expert_ffn_size",
                  "dense_layers", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
                  "v_head_dim", "mtp_modules", "draft_vocab_size", "feature_layers")
_KEYS = set(_INT_FIELDS) | set(_OPTIONAL_INTS) | {
    "name", "family", "kind", "gated_mlp", "tied_embeddings", "dtype", "norm", "bias",
    "learned_position_embeddings", "published_params", "published_active_params", "source",
    "base_model", "medusa_num_heads", "medusa_num_layers", "tokenizer_vocab_size"}
_REQUIRED = ("name", "family", "source", "published_params", *_INT_FIELDS, "gated_mlp",
             "tied_embeddings", "dtype")


def _published_active(data: dict, source: str) -> dict:
    """``published_active_params: {value, source}`` as ModelSpec fields (absent: none)."""
    if "published_active_params" not in data:
        return {}
    act = require_mapping(data["published_active_params"], source=source,
                          field="published_active_params")
    check_keys(act, allowed=("value", "source"), required=("value", "source"),
               source=source, prefix="published_active_params.")
    return {"published_active_params": float(as_number(
                act["value"], source=source, field="published_active_params.value",
                strictly_positive=True)),
            "published_active_params_source": as_str(
                act["source"], source=source, field="published_active_params.source")}


def model_from_dict(data: Any, *, source: str) -> ModelSpec:
    """Validate a parsed model file."""
    data = require_mapping(data, source=source)
    check_keys(data, allowed=_KEYS, required=_REQUIRED, source=source)
    ints = {k: as_number(data[k], source=source, field=k, integer=True, strictly_positive=True,
                         maximum=10_000_000) for k in _INT_FIELDS}
    pub = require_mapping(data["published_params"], source=source, field="published_params")
    check_keys(pub, allowed=("value", "source"), required=("value", "source"), source=source,
               prefix="published_params.")
    kind = as_str(data.get("kind", "decoder"), source=source, field="kind", choices=KINDS)
    ints.update({k: as_number(data.get(k, 0), source=source, field=k, integer=True, minimum=0,
                              maximum=10_000_000) for k in _OPTIONAL_INTS})
    active = _published_active(data, source)
    spec = ModelSpec(
        name=as_str(data["name"], source=source, field="name"),
        family=as_str(data["family"], source=source, field="family"),
        kind=kind,
        gated_mlp=as_bool(data["gated_mlp"], source=source, field="gated_mlp"),
        tied_embeddings=as_bool(data["tied_embeddings"], source=source, field="tied_embeddings"),
        dtype=as_str(data["dtype"], source=source, field="dtype", choices=DTYPE_BYTES),
        norm=as_str(data.get("norm", "rmsnorm"), source=source, field="norm", choices=NORMS),
        bias=as_bool(data.get("bias", False), source=source, field="bias"),
        learned_position_embeddings=as_number(data.get("learned_position_embeddings", 0),
                                              source=source, integer=True, minimum=0,
                                              field="learned_position_embeddings"),
        published_params=float(as_number(pub["value"], source=source,
                                         field="published_params.value",
                                         strictly_positive=True)),
        published_params_source=as_str(pub["source"], source=source,
                                       field="published_params.source"),
        source=as_str(data["source"], source=source, field="source"),
        base_model=as_str(data["base_model"], source=source, field="base_model")
        if "base_model" in data else "",
        medusa_num_heads=as_number(data.get("medusa_num_heads", 0), source=source,
                                   field="medusa_num_heads", integer=True, minimum=0,
                                   maximum=64),
        medusa_num_layers=as_number(data.get("medusa_num_layers", 0), source=source,
                                    field="medusa_num_layers", integer=True, minimum=0,
                                    maximum=64),
        tokenizer_vocab_size=as_number(data.get("tokenizer_vocab_size", 0), source=source,
                                       field="tokenizer_vocab_size", integer=True, minimum=0,
                                       maximum=10_000_000),
        path=source,
        **ints,
        **active,
    )
    if spec.num_heads % spec.num_kv_heads:
        raise SpecsimError(f"num_heads ({spec.num_heads}) is not a multiple of num_kv_heads "
                           f"({spec.num_kv_heads})", source=source, field="num_kv_heads")
    if kind != "decoder" and not spec.base_model:
        raise SpecsimError(f"a {kind} model needs the model it attaches to", source=source,
                           field="base_model", fix="add 'base_model: NAME'")
    check_moe_mla(spec, source)
    if kind == "medusa" and (spec.medusa_num_heads < 1 or spec.medusa_num_layers < 1):
        raise SpecsimError("a medusa model needs medusa_num_heads and medusa_num_layers >= 1",
                           source=source, field="medusa_num_heads")
    return spec


def load_model_file(path: str | Path) -> ModelSpec:
    """Load one model YAML file."""
    return model_from_dict(load_yaml_file(path), source=str(path))


def list_models(model_dir: str | Path | None = None) -> list[str]:
    """Names of the catalogued models."""
    return MODELS.names(model_dir)


def load_model(name: str, model_dir: str | Path | None = None) -> ModelSpec:
    """Load a model by catalog name, or by path if ``name`` ends in .yaml."""
    return MODELS.load(name, model_dir, load_model_file)


def check_shared_vocabulary(draft: ModelSpec | None, target: ModelSpec, *,
                            field: str = "draft") -> ModelSpec | None:
    """Return ``draft`` if it shares ``target``'s vocabulary (or is None), else raise.

    Speculative sampling compares p(x) and q(x) token by token and splices draft tokens
    into the target's sequence, so both must be over one vocabulary (seed 003 section 3;
    vLLM asserts the same in its spec-decode worker).  The tokenizer's vocabulary is
    compared (``tokenizer_vocab_size`` where a file gives one because its ``vocab_size`` is
    an effective width, as opt-350m's; else ``vocab_size`` as written, so a padded embedding
    such as OPT's 50272 must be padded alike).  Medusa heads and EAGLE layers reuse their
    base's LM head, so theirs match by construction.
    """
    if draft is not None and draft.tokenizer_vocab != target.tokenizer_vocab:
        raise SpecsimError(
            f"draft {draft.name} has vocab_size {draft.tokenizer_vocab} but target "
            f"{target.name} has vocab_size {target.tokenizer_vocab}; speculative decoding "
            f"needs one shared vocabulary (p(x)/q(x) is undefined otherwise)", field=field,
            fix=f"use a draft with the target's tokenizer (vocab_size {target.tokenizer_vocab})"
                + (", or remove 'draft:' if the policy needs none" if field == "draft" else ""))
    return draft


def _catalog_model_for(kind: str, target: ModelSpec, field: str) -> ModelSpec:
    """``<kind>-<target>`` from the catalog, else the one ``kind`` model whose base_model is
    the target (eagle3-llama-3.1-8b-instruct for llama-3.1-8b)."""
    known = [m for m in list_models() if m.startswith(kind + "-")]
    if f"{kind}-{target.name}" in known:
        return load_model(f"{kind}-{target.name}")
    trained = [m for m in known if load_model(m).base_model == target.name]
    if len(trained) == 1:
        return load_model(trained[0])
    raise SpecsimError(f"{len(trained) or 'no'} {kind} models in the catalog for target "
                       f"{target.name}", field=field,
                       fix=f"name one ({', '.join(trained or known)})"
                           + ("" if trained else " or use the target it was trained for"))


def attached_model(kind: str, name: str | None, draft: ModelSpec | None, target: ModelSpec,
                   *, field: str) -> ModelSpec:
    """Heads or an EAGLE layer for ``target``: ``name``, else the scenario's draft if it is
    one, else ``<kind>-<target>`` or the one catalog model trained on ``target``.
    An EAGLE-3 head's LM head is over its own draft vocabulary, but its tokens map into the
    target's (d2t), so its ``vocab_size`` is the target's and matches like the others'."""
    if name:
        spec = load_model(name)
    elif draft is not None and draft.kind == kind:
        spec = draft
    else:
        spec = _catalog_model_for(kind, target, field)
    if spec.kind != kind:
        raise SpecsimError(f"{spec.name} is a {spec.kind} model, not {kind}", field=field,
                           fix=f"name a {kind}-* model")
    if spec.base_model != target.name:
        raise SpecsimError(f"{spec.name} was trained on {spec.base_model}, not on the target "
                           f"{target.name}", field=field,
                           fix=f"use target: {spec.base_model}, or a {kind} model for "
                               f"{target.name}")
    return spec
