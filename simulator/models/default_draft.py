"""The draft ``estimate`` and ``gamma-map`` use when ``--draft`` is not given.

Their default was opt-125m whatever the target, so ``estimate --target llama-3.1-8b``
priced a draft on another vocabulary (or refused it).  The default is now the catalog's
smallest decoder of the target's family that shares its tokenizer and is smaller than it
(opt-13b: opt-125m, as before; llama-3.1-8b: llama-3.2-1b; llama-2-7b: llama-68m); a
target with no such draft (mixtral-8x7b) has none, and the command says so.
"""
from __future__ import annotations

from simulator.models.spec import ModelSpec, list_models, load_model


def default_draft(target: ModelSpec) -> ModelSpec | None:
    """The smallest catalogued decoder of ``target``'s family and tokenizer that is
    smaller than ``target`` (ties by name), or None."""
    found = []
    for name in list_models():
        model = load_model(name)
        if model.kind == "decoder" and model.family == target.family \
                and model.tokenizer_vocab == target.tokenizer_vocab \
                and model.published_params < target.published_params:
            found.append(model)
    return min(found, key=lambda m: (m.published_params, m.name), default=None)


def resolve_draft(given: str | None, target: ModelSpec, field: str = "--draft") -> str:
    """``--draft`` as given, else the target's default draft; an error when the catalog
    holds none for the target."""
    from simulator.inputs.errors import SpecsimError
    if given is not None:
        return given
    draft = default_draft(target)
    if draft is None:
        raise SpecsimError(f"the catalog holds no draft for {target.name} (no smaller "
                           f"{target.family} decoder on its tokenizer, vocab_size "
                           f"{target.tokenizer_vocab})", field=field,
                           fix="name a draft with --draft, or use --policy mtp or eagle3 "
                               "where the target has them")
    return draft.name


def default_head(kind: str, target: ModelSpec) -> ModelSpec | None:
    """The catalog's ``kind`` head (``eagle``, ``eagle3``, ``medusa``) for ``target``: the
    file named ``<kind>-<target>``, else the first (by name) trained on it (its
    ``base_model``); None when the catalog has none (the eagle3 policy's own lookup,
    simulator/policies/eagle3.py ``eagle3_model``, follows the same order)."""
    named = f"{kind}-{target.name}"
    names = list_models()
    if named in names and load_model(named).kind == kind:
        return load_model(named)
    for name in sorted(names):
        model = load_model(name)
        if model.kind == kind and model.base_model == target.name:
            return model
    return None


def follow_target(before: dict, after: dict, base_dir) -> dict:
    """``after`` (the built-in scenario with --set and --vllm-args written over ``before``)
    with its draft, written for its own target (opt-125m for opt-13b), replaced where they
    changed the target but not the draft: by the new target's ``default_draft``, or by none
    where the catalog holds none (a draft on another vocabulary failed every policy, even
    ``none``, until ``--set draft=null``)."""
    from pathlib import Path

    from simulator.inputs.errors import SpecsimError
    from simulator.vllm_config import catalog_name
    if after.get("target") == before.get("target") or "draft" not in after \
            or after["draft"] != before.get("draft") or "speculative_config" in after:
        return after
    name = str(after["target"])
    name = catalog_name(name) or name if "/" in name else name  # a Hugging Face id
    try:
        target = load_model(str(Path(base_dir) / name) if name.endswith((".yaml", ".yml"))
                            else name)
    except SpecsimError:  # reported where the scenario is read, naming the field
        return after
    out = dict(after)
    draft = default_draft(target)
    if draft is None:
        del out["draft"]
    else:
        out["draft"] = draft.name
    return out
