"""A model file (simulator/models/*.yaml) from a Hugging Face ``config.json``.

``specsim models from-hf config.json --out my-model.yaml`` writes one; ``target: my-model.yaml``
then simulates it.  Only dense decoders whose layer is Llama's are read (``model_type``
llama, mistral, qwen2, qwen3: one attention with grouped KV heads, one gated SiLU MLP, two
RMSNorms; transformers' ``modeling_llama.py``, ``modeling_qwen2.py``, ...); anything else
(experts, MLA, another layer) is an error that says to write the file by hand.  The
config's names map to the file's as transformers defines them (``LlamaConfig``):
``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads`` (default: the
attention heads), ``head_dim`` (default: hidden / heads), ``intermediate_size``,
``tie_word_embeddings`` (default false in these configs), ``torch_dtype`` (``dtype`` in
newer files), ``max_position_embeddings``.  What the file does not model is written in its
``source``: Qwen2's q/k/v biases (the file's ``bias`` is every linear's) and Qwen3's q/k
norms (each under 0.01% of the weights), a sliding window.  ``published_params`` is the
count of those shapes, said so in its source: replace it with the model card's.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import short

DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
MOE_OR_MLA = ("num_local_experts", "num_experts", "n_routed_experts", "kv_lora_rank")
_INTS = {"num_layers": "num_hidden_layers", "hidden_size": "hidden_size",
         "num_heads": "num_attention_heads", "ffn_size": "intermediate_size",
         "vocab_size": "vocab_size", "max_context": "max_position_embeddings"}
BY_HAND = "write the model file by hand (specsim models show llama-3.1-8b for the keys)"


def read_config(path: str | Path) -> dict[str, Any]:
    """The config.json at ``path`` as a mapping (one error line for a bad file)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecsimError("file not found", source=str(path), fix="check the path") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SpecsimError(f"not a JSON file: {short(str(exc))}", source=str(path),
                           fix="give a Hugging Face config.json") from None
    if not isinstance(data, dict):
        raise SpecsimError("not a JSON object", source=str(path),
                           fix="give a Hugging Face config.json")
    return data


def _int(config: dict, key: str, source: str) -> int:
    value = config.get(key)
    if type(value) is not int or value < 1:
        why = "is missing" if key not in config else f"is {short(value)}, not a whole number >= 1"
        raise SpecsimError(f"{key} {why}", source=source, field=key, fix=BY_HAND)
    return value


def _check_dense(config: dict, source: str) -> str:
    kind = config.get("model_type")
    if kind not in DENSE_TYPES:
        raise SpecsimError(f"model_type {short(kind)} is not a dense Llama-layer decoder "
                           f"({', '.join(DENSE_TYPES)})", source=source, field="model_type",
                           fix=BY_HAND)
    extra = [k for k in MOE_OR_MLA if config.get(k)]
    if extra:
        raise SpecsimError(f"{extra[0]} is set: experts or MLA are not read from a config",
                           source=source, field=extra[0],
                           fix=BY_HAND.replace("llama-3.1-8b", "qwen3-30b-a3b"))
    return kind


def _unmodelled(config: dict, kind: str, shape: dict) -> list[str]:
    """What the Llama layer of the file leaves out, for its source."""
    out = []
    if kind == "qwen2" or config.get("attention_bias"):
        per_layer = (shape["num_heads"] + 2 * shape["num_kv_heads"]) * shape["head_dim"]
        out.append(f"the q, k, v biases ({shape['num_layers'] * per_layer:,} weights)")
    if kind == "qwen3":
        out.append(f"the per-head q/k RMSNorms (2 x {shape['head_dim']} weights a layer)")
    if config.get("use_sliding_window") or kind == "mistral" and config.get("sliding_window"):
        out.append(f"the sliding window of {config.get('sliding_window')} tokens")
    return out


def _named(source: str) -> str:
    """``Qwen2.5-14B/config.json`` for a config in its model's folder, else the file name."""
    path = Path(source)
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def model_from_hf_config(config: dict[str, Any], *, name: str, source: str) -> dict[str, Any]:
    """The model file's mapping of a dense decoder's ``config`` (module docstring);
    ``source`` names the config in errors and in the file's ``source``."""
    kind = _check_dense(config, source)
    shape = {key: _int(config, hf, source) for key, hf in _INTS.items()}
    heads = shape["num_heads"]
    shape["num_kv_heads"] = _int(config, "num_key_value_heads", source) \
        if config.get("num_key_value_heads") is not None else heads
    if config.get("head_dim") is not None:
        shape["head_dim"] = _int(config, "head_dim", source)
    elif shape["hidden_size"] % heads:
        raise SpecsimError(f"hidden_size {shape['hidden_size']} is not a multiple of "
                           f"num_attention_heads {heads} and head_dim is not given",
                           source=source, field="head_dim", fix=BY_HAND)
    else:
        shape["head_dim"] = shape["hidden_size"] // heads
    dtype_name = config.get("torch_dtype", config.get("dtype", "bfloat16"))
    if dtype_name not in DTYPES:
        raise SpecsimError(f"torch_dtype {short(dtype_name)} is not one of "
                           + ", ".join(DTYPES), source=source, field="torch_dtype",
                           fix="set it to bfloat16, float16 or float32")
    tied = config.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise SpecsimError(f"tie_word_embeddings is {short(tied)}, not true or false",
                           source=source, field="tie_word_embeddings", fix=BY_HAND)
    arch = ", ".join(map(str, config.get("architectures") or [])) or kind
    left = _unmodelled(config, kind, shape)
    data = {"name": name, "family": kind,
            "source": f"Hugging Face {_named(source)} ({arch}), read by "
                      "specsim models from-hf (simulator/models/hf_config.py)"
                      + ("" if "torch_dtype" in config or "dtype" in config
                         else "; no torch_dtype given: bfloat16 assumed")
                      + (". Not modelled: " + "; ".join(left) if left else ""),
            "published_params": {"value": 1.0, "source": "counted below"},
            **shape, "gated_mlp": True, "tied_embeddings": tied, "norm": "rmsnorm",
            "bias": False, "dtype": DTYPES[dtype_name]}
    count = _loaded(data, source).param_count()
    data["published_params"] = {
        "value": count, "source": "not published: the count of these shapes (specsim models "
                                  "from-hf); replace it with the model card's"}
    _loaded(data, source)  # the file it writes loads
    return data


_HF_KEYS = {**_INTS, "num_kv_heads": "num_key_value_heads", "dtype": "torch_dtype",
            "tied_embeddings": "tie_word_embeddings"}


def _loaded(data: dict[str, Any], source: str):
    """``data`` as a ModelSpec; an error names the config's key, not the model file's."""
    from simulator.models.spec import model_from_dict
    try:
        return model_from_dict(data, source=source)
    except SpecsimError as exc:
        key = _HF_KEYS.get(exc.field or "", exc.field)
        raise SpecsimError(exc.message, source=source, field=key,
                           fix=exc.fix or f"check the config's {key}, or {BY_HAND}") from None
