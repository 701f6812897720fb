"""Where a run's acceptance numbers come from, in one line (``Results.info["acceptance_source"]``).

A scenario's ``acceptance`` mapping may carry ``source:`` (a citation: paper, table, model,
dataset).  What a run actually used depends on its policy: model-free methods measure
acceptance by matching the workload's token ids and never read the mapping; a tree policy
may use its own ``acceptance`` or a built-in published default; the ``token_level`` model
makes acceptance emerge from toy language models, which no paper measured.  The line says
which, so a reader never takes an assumption for a measurement.
"""
from __future__ import annotations

from typing import Any, Mapping

from simulator.acceptance.fields import citation
from simulator.acceptance.medusa import MEDUSA_SOURCE

# policies whose acceptance comes from running their matching on the workload's token ids
MEASURED_FROM_TOKENS = ("prompt_lookup", "suffix", "jacobi", "lookahead")
NO_SPECULATION = "none"
SCENARIO_DEFAULT = {"model": "iid", "alpha": 0.8}         # Scenario.acceptance's default


def _summary(cfg: Mapping[str, Any]) -> str:
    """``{model: iid, alpha: 0.8}`` as a short text."""
    parts = [f"{k}: {v}" for k, v in cfg.items() if k not in ("model", "source")]
    text = ", ".join(parts)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{cfg.get('model', '?')}" + (f" ({text})" if text else "")


def describe_config(cfg: Mapping[str, Any] | None, *, default: bool = False) -> str:
    """The line for an acceptance mapping: its source, or an explicit 'no source'."""
    if not cfg:
        return "none given"
    text = citation(cfg, source="acceptance")
    if text:
        return text
    if cfg.get("model") == "medusa" and "top_k" not in cfg:
        return f"{MEDUSA_SOURCE} (Vicuna {cfg.get('size', '7b')})"
    if cfg.get("model") == "token_level":
        return ("no published measurement: acceptance emerges from running the verification "
                "algorithm on toy draft/target language models (token_level)")
    what = "the default" if default else "an assumption"
    return f"no source given: {_summary(cfg)} is {what}, not a measurement"


def describe_acceptance(scenario, policy) -> str:
    """One line: where the acceptance of ``policy`` (built for ``scenario``) comes from."""
    inner = getattr(policy, "base", None) or policy           # adaptive wraps a base policy
    name = getattr(inner, "name", None) or scenario.policy.name
    if name == NO_SPECULATION:
        return "none (no speculation)"
    if name in MEASURED_FROM_TOKENS:
        return (f"measured from the workload's token ids ({name} matches the real tokens; "
                "the scenario's acceptance block is unused)")
    held = getattr(inner, "acceptance", None)
    where = getattr(held, "source", "scenario")
    if not isinstance(where, str):                            # a model, not a PolicyAcceptance
        where = "scenario"
    if where == "policy.acceptance":
        params = scenario.policy.params
        params = params.get("base", {}).get("params", params) if "base" in params else params
        return describe_config(params.get("acceptance"))
    if where != "scenario":                                   # a policy's built-in default
        medusa = MEDUSA_SOURCE if "Medusa" in where else ""
        return f"{where} (the policy's built-in default){': ' + medusa if medusa else ''}"
    cfg = dict(scenario.acceptance)
    written = "acceptance" in (getattr(scenario, "raw", None) or {})
    return describe_config(cfg, default=not written and cfg == SCENARIO_DEFAULT)
