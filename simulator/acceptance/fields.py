"""Config parsing shared by the acceptance models (all through simulator.inputs.yaml_io)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number, check_keys, require_mapping

MAX_SOURCE_CHARS = 1000


def model_config(cfg: Any, *, allowed: tuple[str, ...], required: tuple[str, ...] = (),
                 source: str) -> Mapping[str, Any]:
    """Check an acceptance mapping: its keys are ``model``, the optional ``source`` (where
    the numbers come from), the optional ``measured_for`` (the target and draft they were
    measured with) and ``allowed``."""
    cfg = require_mapping(cfg, source=source)
    check_keys(cfg, allowed=("model", "source", "measured_for") + allowed, required=required,
               source=source)
    citation(cfg, source=source)
    measured_for(cfg, source=source)
    return cfg


MEASURED_FOR_FIX = ("write the models the numbers were measured with, e.g. measured_for: "
                    "{target: vicuna-7b, draft: eagle-vicuna-7b} (catalog names where the "
                    "catalog has the model, else the paper's names)")


def measured_for(cfg: Mapping[str, Any], *, source: str) -> tuple[str, str] | None:
    """The mapping's ``measured_for``: (target, draft) the numbers were measured with, or
    None where the mapping does not say."""
    value = cfg.get("measured_for")
    if value is None:
        return None
    value = require_mapping(value, source=source, field="measured_for")
    check_keys(value, allowed=("target", "draft"), required=("target", "draft"),
               source=source, prefix="measured_for.")
    names = []
    for key in ("target", "draft"):
        text = value[key]
        if not isinstance(text, str) or not text.strip() or len(text) > 200:
            raise SpecsimError(f"expected a model name (1 to 200 characters), got {text!r}",
                               source=source, field=f"measured_for.{key}",
                               fix=MEASURED_FOR_FIX)
        names.append(text.strip())
    return names[0], names[1]


def citation(cfg: Mapping[str, Any], *, source: str) -> str | None:
    """The mapping's ``source``: a one-line citation (paper, table, model, dataset), or None."""
    if "source" not in cfg or cfg["source"] is None:
        return None
    fix = ("write where the numbers come from as text, e.g. source: \"EAGLE (ICML 2024) "
           "Table 2, Vicuna-7B, MT-bench, T=0\"")
    value = cfg["source"]
    text = " ".join(value.split()) if isinstance(value, str) else None
    if text is None:
        raise SpecsimError(f"expected a text, got {type(value).__name__}", source=source,
                           field="source", fix=fix)
    if not text or len(text) > MAX_SOURCE_CHARS:
        raise SpecsimError(f"must be 1 to {MAX_SOURCE_CHARS} characters of text, got "
                           f"{len(text)}", source=source, field="source", fix=fix)
    return text


def probability(value: Any, *, source: str, field: str) -> float:
    """A number in [0, 1]."""
    return float(as_number(value, source=source, field=field, minimum=0.0, maximum=1.0))


def probability_list(value: Any, *, source: str, field: str,
                     non_decreasing: bool = False) -> np.ndarray:
    """A non-empty list of numbers in [0, 1]."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise SpecsimError(f"expected a list of probabilities, got {value!r}", source=source,
                           field=field, fix="write e.g. [0.8, 0.7, 0.6]")
    items = list(value)
    if not items:
        raise SpecsimError("is empty", source=source, field=field,
                           fix="write e.g. [0.8, 0.7, 0.6]")
    arr = np.array([probability(v, source=source, field=f"{field}[{i}]")
                    for i, v in enumerate(items)])
    if non_decreasing and np.any(np.diff(arr) < -1e-12):
        raise SpecsimError("must not decrease from one entry to the next", source=source,
                           field=field, fix="cumulative top-k coverage grows with k: list "
                           "P(true token in top-1), P(in top-2), ... in that order")
    return arr


def freeze_rates(model: Any) -> None:
    """Validate a frozen model's ``rates`` (non-empty, in [0, 1]); store them as tuple and array."""
    arr = np.asarray(model.rates, dtype=float)
    if arr.ndim != 1 or arr.size == 0 or np.any(~np.isfinite(arr)) \
            or np.any((arr < 0) | (arr > 1)):
        raise SpecsimError("must be a non-empty list of numbers in [0, 1]", field="rates")
    object.__setattr__(model, "rates", tuple(float(r) for r in arr))
    object.__setattr__(model, "_rates", arr)
