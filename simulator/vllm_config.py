"""vLLM-shaped input: a scenario's ``speculative_config:`` and ``specsim run --vllm-args FILE``.

``speculative_config`` takes vLLM's keys and meanings (vllm/config/speculative.py,
``SpeculativeConfig``) and becomes the specsim policy that simulates the same thing:
``ngram`` -> ``prompt_lookup`` (vLLM's bounds: neither given, both 5; one given, the other
equal); ``draft_model`` -> ``chain`` with the ``model`` as the scenario's ``draft``;
``eagle``, ``eagle3`` -> those policies with the ``model`` as their head, vLLM's
``speculative_token_tree`` (paths of child ranks) -> eagle's ``choices``; ``medusa`` -> a
chain of the first k heads' argmax (vllm/v1/spec_decode/medusa.py; k sets the heads used:
MedusaConfig's num_lookahead_tokens setter); ``mtp`` (and vLLM's deprecated older names) ->
``mtp`` (k defaults to the target's module count, vLLM's ``n_predict``, and must be a
multiple of it when larger); ``suffix`` -> ``suffix`` (k defaults to
``suffix_decoding_max_tree_depth``).  Without ``method`` it is inferred from ``model`` as
vLLM does: ``ngram`` names itself, an EAGLE, EAGLE-3 or Medusa head its method, the target
itself MTP, any other decoder ``draft_model`` (vLLM reads the name and the checkpoint's
model_type; the catalog's ``kind`` carries that fact).  A ``model`` is a catalog name, a
model file (relative to the scenario) or the Hugging Face id a catalog file's ``source``
starts with.  ``num_speculative_tokens_per_batch_size`` and ``disable_by_batch_size`` (vLLM
<= 0.10's ``SpeculativeConfig.disable_by_batch_size``, a V0 feature) wrap it in ``adaptive``.
Keys that change nothing here or that specsim does not model are refused with the fix.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import functools
from pathlib import Path
from typing import Any, Mapping

from simulator.cost.parallelism import Parallelism
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import (
    as_number,
    as_str,
    check_keys,
    load_yaml_file,
    parse_yaml_text,
    require_mapping,
    short,
)
from simulator.vllm_synthetic import KEYS as SYNTHETIC_KEYS
from simulator.vllm_synthetic import synthetic_acceptance

METHODS = ("ngram", "draft_model", "eagle", "eagle3", "medusa", "mtp", "suffix")
# vLLM's MTP method names other than "mtp": accepted there with "method `...` is deprecated
# and replaced with mtp" (vllm/config/speculative.py, MTPModelTypes and __post_init__)
MTP_ALIASES = ("deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "ernie_mtp", "qwen3_next_mtp",
               "longcat_flash_mtp", "pangu_ultra_moe_mtp", "exaone_moe_mtp", "nemotron_h_mtp")
SUFFIX_KEYS = ("suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
               "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob")
SPEC_KEYS = ("method", "model", "num_speculative_tokens", "draft_tensor_parallel_size",
             "prompt_lookup_min", "prompt_lookup_max", "speculative_token_tree",
             "num_speculative_tokens_per_batch_size", "disable_by_batch_size") + SUFFIX_KEYS \
    + SYNTHETIC_KEYS
_NO_EFFECT = "remove it: it does not change the simulation"
_NOT_MODELLED = "remove it: specsim does not model it"
REFUSED_SPEC_KEYS = {
    "revision": _NO_EFFECT, "code_revision": _NO_EFFECT,  # the draft's Hugging Face revision
    "tensor_parallel_size": "write draft_tensor_parallel_size (vLLM refuses this key too)",
    "quantization": _NOT_MODELLED + " (the draft's weight format)",
    "kv_cache_dtype": _NOT_MODELLED + " (the draft's KV cache format)",
    "max_model_len": _NOT_MODELLED + " (a draft context shorter than the model file's)",
    "enforce_eager": "remove it and set the scenario's execution.enforce_eager",
    "draft_sample_method": _NOT_MODELLED + "; the acceptance block sets acceptance"}
_TREE_CHARS = 100_000  # longest speculative_token_tree string read


def spec_mapping(value: Any, source: str, field: str) -> Mapping[str, Any]:
    """A mapping, or vLLM's CLI form: the mapping as a JSON string."""
    if isinstance(value, str):
        value = parse_yaml_text(value, source=f"{source}: {field}")
    data = require_mapping(value, source=source, field=field)
    for key in data:
        if key in REFUSED_SPEC_KEYS:
            raise SpecsimError(f"{short(key)} is not used here", source=source,
                               field=f"{field}.{key}", fix=REFUSED_SPEC_KEYS[key])
    check_keys(data, allowed=SPEC_KEYS, source=source, prefix=field + ".")
    return data


HF_IDS = Path(__file__).parent / "models" / "ids" / "huggingface.yaml"


@functools.lru_cache(maxsize=1)
def _hf_ids() -> dict[str, tuple[str, str]]:
    """Lower-case Hugging Face id -> (catalog name, id), from the catalog's id table
    (simulator/models/ids/huggingface.yaml: each model's own id first, then checkpoints of
    the same shapes); ids are matched without case, as the Hub resolves them."""
    table = require_mapping(load_yaml_file(HF_IDS), source=str(HF_IDS))
    return {hf.lower(): (name, hf) for name, ids in table.items() for hf in reversed(ids)}


def hf_id(name: str) -> str | None:
    """The Hugging Face id a catalog model's shapes were read from (its first), or None."""
    return dict(_hf_ids().values()).get(name)  # reversed above: a name's first id wins


def catalog_name(hf: str) -> str | None:
    """The catalog model a Hugging Face id is of (any case), or None."""
    return _hf_ids().get(hf.lower(), (None,))[0]


def _kind_names(kind: str) -> str:
    from simulator.models.spec import list_models, load_model
    names = [n for n in list_models() if load_model(n).kind == kind]
    return ", ".join(f"{n} ({hf_id(n)})" if hf_id(n) else n for n in names) or "none"


def _guess_kind(model: str, method: str | None) -> str:
    """The kind of head ``model`` names: from the method, else vLLM's name test."""
    kinds = {"eagle": "eagle", "eagle3": "eagle3", "medusa": "medusa"}
    if method in kinds:
        return kinds[method]
    low = model.lower()
    if "eagle-" in low:
        return "eagle"
    if "eagle3" in low:
        return "eagle3"
    return "medusa" if "medusa" in low else "decoder"


def resolve_model(model: str, *, method: str | None, base_dir: str | Path, source: str,
                  field: str):
    """``model`` -> (the name the scenario uses, its ModelSpec)."""
    from simulator.models.spec import list_models, load_model
    if model.endswith((".yaml", ".yml")):
        path = str(Path(base_dir) / model)
        return path, load_model(path)
    if model in list_models():
        return model, load_model(model)
    if model.lower() in _hf_ids():
        name = _hf_ids()[model.lower()][0]
        return name, load_model(name)
    kind = _guess_kind(model, method)
    raise SpecsimError(f"{short(model)} is neither a catalog name nor the Hugging Face id of "
                       f"a catalogued {kind} model", source=source, field=field,
                       fix=f"use one of the catalog's {kind} models: {_kind_names(kind)}; "
                           "or give a model file (.yaml; of a dense model's config.json: "
                           "specsim models from-hf config.json --out my-model.yaml)")


def _method(data: Mapping[str, Any], spec, target, source: str, field: str) -> str:
    """vLLM's method: as written (older MTP names -> mtp), else inferred from ``model``."""
    method = data.get("method")
    if method is not None:
        method = as_str(method, source=source, field=field + ".method",
                        choices=METHODS + MTP_ALIASES)
        return "mtp" if method in MTP_ALIASES else method
    model = data.get("model")
    if model in ("ngram", "[ngram]"):
        return "ngram"
    if model is None:
        raise SpecsimError("give a method or a model", source=source, field=field + ".method",
                           fix="e.g. method: ngram, or model: eagle-vicuna-7b")
    inferred = {"eagle": "eagle", "eagle3": "eagle3", "medusa": "medusa"}.get(spec.kind)
    if inferred:
        return inferred
    if spec.name == target.name and target.mtp_modules > 0:
        return "mtp"
    return "draft_model"


def _check_model(method: str, spec, target, source: str, field: str) -> None:
    """The ``model`` must be what ``method`` drafts with."""
    want = {"eagle": "eagle", "eagle3": "eagle3", "medusa": "medusa",
            "draft_model": "decoder"}.get(method)
    if method == "mtp" and not target.mtp_modules:
        raise SpecsimError(f"the target {target.name} has no MTP modules", source=source,
                           field=field + ".method", fix="use a target with mtp_modules, such "
                                                        "as deepseek-v3, or another method")
    if method == "mtp" and spec is not None and spec.name != target.name:
        raise SpecsimError(f"mtp drafts with the target's own modules, not {spec.name}",
                           source=source, field=field + ".model",
                           fix=f"leave model out, or name the target ({target.name})")
    if want is not None and spec is None:
        raise SpecsimError(f"method {method} needs a model", source=source,
                           field=field + ".model",
                           fix=f"name one: {_kind_names(want)}")
    if want is not None and spec.kind != want:
        raise SpecsimError(f"{spec.name} is a {spec.kind} model; method {method} needs a "
                           f"{want} model", source=source, field=field + ".model",
                           fix=f"name one: {_kind_names(want)}")


def _tokens(data: Mapping[str, Any], method: str, target, source: str, field: str) -> int:
    """``num_speculative_tokens``, with vLLM's defaults (MTP: n_predict; suffix: depth)."""
    k = data.get("num_speculative_tokens")
    f = field + ".num_speculative_tokens"
    if k is not None:
        k = int(as_number(k, source=source, field=f, integer=True, minimum=1, maximum=256))
    n_predict = target.mtp_modules if method == "mtp" else 0
    if k is None and method == "eagle" and data.get("speculative_token_tree") is not None:
        return 0  # the tree's node count (checked against a k given with it)
    if k is None and n_predict:
        return n_predict
    if k is None and method == "suffix":
        return int(as_number(data.get("suffix_decoding_max_tree_depth", 24), source=source,
                             field=field + ".suffix_decoding_max_tree_depth", integer=True,
                             minimum=1, maximum=512))
    if k is None:
        raise SpecsimError(f"method {method} needs num_speculative_tokens", source=source,
                           field=f, fix="add num_speculative_tokens: 3 (vLLM requires it too)")
    if n_predict and k > n_predict and k % n_predict:
        raise SpecsimError(f"{k} is not a multiple of the target's {n_predict} MTP modules",
                           source=source, field=f,
                           fix=f"use a multiple of {n_predict} (vLLM requires it too)")
    return k


def _tree(value: Any, source: str, field: str) -> list[list[int]]:
    """vLLM's ``speculative_token_tree``: "[(0,), (1,), (0, 0)]" or a list of paths."""
    if isinstance(value, str):
        if len(value) > _TREE_CHARS:
            raise SpecsimError(f"{len(value)} characters; at most {_TREE_CHARS}",
                               source=source, field=field)
        try:
            value = ast.literal_eval(value)  # literals only, as vLLM reads it
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise SpecsimError(f"cannot read {short(value)}", source=source, field=field,
                               fix='write paths of child ranks, e.g. "[(0,), (1,), (0, 0)]"'
                               ) from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, (list, tuple))
                                                       for p in value):
        raise SpecsimError("expected a list of paths of child ranks", source=source,
                           field=field, fix='e.g. "[(0,), (1,), (0, 0)]"')
    # vLLM sorts the paths breadth-first (len, path) before use
    return [list(p) for p in sorted(value, key=lambda t: (len(t), tuple(t)))]


def _only_for(data: Mapping[str, Any], method: str, source: str, field: str) -> None:
    """Method-specific keys given to another method are an error, not silently dropped."""
    owners = {"prompt_lookup_min": "ngram", "prompt_lookup_max": "ngram",
              "speculative_token_tree": "eagle", **{k: "suffix" for k in SUFFIX_KEYS}}
    for key, owner in owners.items():
        if key in data and owner != method:
            raise SpecsimError(f"only used with method: {owner}, not {method}",
                               source=source, field=f"{field}.{key}", fix="remove it")


def _ngram_bounds(data: Mapping[str, Any]) -> dict[str, Any]:
    lo, hi = data.get("prompt_lookup_min"), data.get("prompt_lookup_max")
    if lo is None and hi is None:
        lo = hi = 5  # vLLM's defaults (vllm/config/speculative.py: "arbitrarily chosen")
    return {"prompt_lookup_min": hi if lo is None else lo,
            "prompt_lookup_max": lo if hi is None else hi}


def _native(method: str, k: int, model: str | None, data: Mapping[str, Any],
            source: str, field: str) -> dict[str, Any]:
    """The native policy block for ``method`` (its ``draft`` handled by the caller)."""
    if method == "ngram":
        return {"name": "prompt_lookup", "num_speculative_tokens": k, **_ngram_bounds(data)}
    if method == "draft_model":
        return {"name": "chain", "num_speculative_tokens": k}
    if method == "medusa":  # a chain: the argmax of each of the first k heads
        return {"name": "medusa", "model": model, "num_heads": k,
                "choices": [[0] * d for d in range(1, k + 1)]}
    if method == "eagle" and data.get("speculative_token_tree") is not None:
        choices = _tree(data["speculative_token_tree"], source,
                        field + ".speculative_token_tree")
        if "num_speculative_tokens" in data and k != len(choices):
            raise SpecsimError(f"the tree has {len(choices)} nodes, not {k}", source=source,
                               field=field + ".num_speculative_tokens",
                               fix=f"give {len(choices)} or leave it out")
        return {"name": "eagle", "model": model, "choices": choices}
    if method in ("eagle", "eagle3"):
        return {"name": method, "model": model, "num_speculative_tokens": k}
    if method == "mtp":
        return {"name": "mtp", "num_speculative_tokens": k}
    return {"name": "suffix", "num_speculative_tokens": k,
            **{key: data[key] for key in SUFFIX_KEYS if key in data}}


def _adaptive(native: dict[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """vLLM's batch-size knobs: the adaptive wrapper around the policy."""
    keys = {"num_speculative_tokens_per_batch_size": "num_speculative_tokens_per_batch_size",
            "disable_by_batch_size": "speculative_disable_by_batch_size"}
    extra = {ours: copy.deepcopy(data[theirs]) for theirs, ours in keys.items()
             if data.get(theirs) is not None}
    return {"name": "adaptive", "base": native, **extra} if extra else native


def speculative_policy(data: Mapping[str, Any], *, target: str, parallelism: Parallelism,
                       source: str, base_dir: str | Path, field: str = "speculative_config"
                       ) -> tuple[dict[str, Any], str | None, Parallelism, dict | None]:
    """``data[field]`` -> (the native policy block, the scenario's draft, its parallelism
    with vLLM's draft_tensor_parallel_size, the acceptance block of a synthetic rejection
    sampler or None: vllm_synthetic.py)."""
    from simulator.models.spec import load_model
    for other in ("policy", "draft"):
        if data.get(other) is not None:
            raise SpecsimError(f"{field} and {other} given together", source=source,
                               field=field, fix=f"remove {other}: {field} sets it")
    spec_data = spec_mapping(data[field], source, field)
    target_spec = load_model(target)
    model, spec = spec_data.get("model"), None
    if model is not None:
        model = as_str(model, source=source, field=field + ".model")
    if model not in (None, "ngram", "[ngram]", "suffix"):
        model, spec = resolve_model(model, method=spec_data.get("method"), base_dir=base_dir,
                                    source=source, field=field + ".model")
    method = _method(spec_data, spec, target_spec, source, field)
    if spec is None and model is not None and model.strip("[]") != method:
        raise SpecsimError(f"model {short(model)} does not go with method {method}",
                           source=source, field=field + ".model", fix="remove model")
    _check_model(method, spec, target_spec, source, field)
    _only_for(spec_data, method, source, field)
    k = _tokens(spec_data, method, target_spec, source, field)
    native = _native(method, k, model if spec is not None else None, spec_data, source, field)
    tp = spec_data.get("draft_tensor_parallel_size")
    if tp is not None:
        if parallelism.draft_tensor_parallel is not None:
            raise SpecsimError("draft_tensor_parallel_size given twice", source=source,
                               field=field + ".draft_tensor_parallel_size",
                               fix="remove parallelism.draft_tensor_parallel_size")
        parallelism = dataclasses.replace(parallelism, draft_tensor_parallel=int(as_number(
            tp, source=source, field=field + ".draft_tensor_parallel_size", integer=True,
            minimum=1, maximum=1024)))
    return (_adaptive(native, spec_data), model if method == "draft_model" else None,
            parallelism, synthetic_acceptance(spec_data, k, source, field))


def speculative_fields(data: Mapping[str, Any], kw: Mapping[str, Any], source: str,
                       base_dir: str | Path, default_target: str) -> dict[str, Any]:
    """A scenario's ``speculative_config`` -> its ``policy`` (the native block, for the
    scenario to parse), ``draft``, ``parallelism`` (the draft's TP) and, for vLLM's
    synthetic rejection sampler, its ``acceptance``."""
    out: dict[str, Any] = {}
    out["policy"], out["draft"], out["parallelism"], synthetic = speculative_policy(
        data, target=kw.get("target", default_target), source=source, base_dir=base_dir,
        parallelism=kw.get("parallelism", Parallelism()))
    if synthetic is not None:
        if "acceptance" in data:
            raise SpecsimError("acceptance given with a synthetic rejection sampler",
                               source=source, field="acceptance",
                               fix="remove one: both set the acceptance")
        out["acceptance"] = synthetic
    return out

