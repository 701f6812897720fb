"""Where a run's acceptance numbers come from, in one line (``Results.info["acceptance_source"]``),
and a warning (``Results.info["acceptance_warning"]``) where they are not about this run.

A scenario's ``acceptance`` mapping may carry ``source:`` (a citation: paper, table, model,
dataset) and ``measured_for: {target, draft}`` (what the numbers were measured with).  What a
run actually used depends on its policy, as its class declares (``AcceptanceDeclared``):
model-free methods measure acceptance by matching the workload's token ids and never read the
mapping; a policy may carry its own ``acceptance``; a scenario that gives none gets its
drafter's published default (``drafter_defaults``) or, where none is published, the unsourced
i.i.d. 0.8; the ``token_level`` model makes acceptance emerge from toy language models, which
no paper measured.  The line says which, so a reader never takes an assumption for a
measurement; the warning says when the numbers are an unsourced default, or were measured
for another target or drafter than the one simulated.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from simulator.acceptance.drafter_defaults import drafter_default
from simulator.acceptance.fields import citation, measured_for
from simulator.acceptance.medusa import MEDUSA_SOURCE
from simulator.inputs.errors import SpecsimError

if TYPE_CHECKING:
    import pandas as pd

    from simulator.policies.base import AcceptanceDeclared

NO_SPECULATION = "none (no speculation)"
SCENARIO_DEFAULT = {"model": "iid", "alpha": 0.8}         # Scenario.acceptance's default


@dataclass(frozen=True)
class Provenance:
    """The acceptance source line of one run, and its warning ("" where none is due)."""

    line: str
    warning: str = ""


def _summary(cfg: Mapping[str, Any]) -> str:
    """``{model: iid, alpha: 0.8}`` as a short text."""
    parts = [f"{k}: {v}" for k, v in cfg.items() if k not in ("model", "source", "measured_for")]
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


def written(scenario) -> bool:
    """Whether the scenario gives its acceptance (written, or set other than the default)."""
    return "acceptance" in scenario.raw or dict(scenario.acceptance) != SCENARIO_DEFAULT


def drafting_policy(scenario) -> tuple[type[AcceptanceDeclared] | None, Mapping[str, Any]]:
    """(the class that drafts, its parameters), or (None, {}) for an unknown policy name."""
    from simulator.policies.registry import POLICIES
    cls = POLICIES.get(scenario.policy.name)
    return (None, {}) if cls is None else cls.drafting(scenario.policy.params)


def simulated_pair(scenario, cls: type[AcceptanceDeclared],
                   params: Mapping[str, Any]) -> tuple[str, str | None]:
    """(the target's name, the drafter's: the first model the policy holds beside it)."""
    from simulator.models.spec import load_model
    try:
        target = load_model(scenario.target)
        draft = load_model(scenario.draft) if scenario.draft else None
        held, _ = cls.memory_models(dict(params), draft, target)
    except SpecsimError:  # the run itself reports why
        return str(scenario.target), None
    return target.name, (held[0].name if held else None)


def effective_acceptance(scenario) -> dict[str, Any]:
    """The acceptance mapping a run of ``scenario`` reads: its own, else its drafter's
    published default, else the unsourced default."""
    if written(scenario):
        return dict(scenario.acceptance)
    cls, params = drafting_policy(scenario)
    if cls is None or cls.acceptance_from_tokens:
        return dict(scenario.acceptance)
    found = drafter_default(simulated_pair(scenario, cls, params)[1])
    return found if found is not None else dict(scenario.acceptance)


def mismatch(cfg: Mapping[str, Any], target: str, drafter: str | None) -> str:
    """Why ``cfg``'s measurement is not about (target, drafter), or ""."""
    pair = measured_for(cfg, source="acceptance")
    if pair is None:
        return ""
    same = [pair[0].lower() == target.lower(),
            drafter is None or pair[1].lower() == drafter.lower()]
    if all(same):
        return ""
    return (f"the acceptance was measured for {pair[0]} + {pair[1]}, not the simulated "
            f"{target} + {drafter or 'its drafter'}: a stand-in, not a measurement of this pair")


def acceptance_provenance(scenario) -> Provenance:
    """Where the acceptance of ``scenario``'s policy comes from, and what to warn about."""
    cls, params = drafting_policy(scenario)
    if cls is None or cls.name == "none":
        return Provenance(NO_SPECULATION)
    if cls.acceptance_from_tokens:
        return Provenance(f"measured from the workload's token ids ({cls.name} matches the "
                          "real tokens; the scenario's acceptance block is unused)")
    target, drafter = simulated_pair(scenario, cls, params)
    cfg, line = _used(scenario, cls, params, drafter)
    if cfg is None:
        return Provenance(line, f"the acceptance is an unsourced default "
                                f"({_summary(SCENARIO_DEFAULT)}), not a measurement: give an "
                                "acceptance block with its source")
    return Provenance(line, mismatch(cfg, target, drafter))


def _used(scenario, cls: type[AcceptanceDeclared], params: Mapping[str, Any],
          drafter: str | None) -> tuple[dict | None, str]:
    """(the acceptance mapping the policy reads, or None for the unsourced default; its
    line)."""
    if params.get("acceptance") is not None:
        return dict(params["acceptance"]), describe_config(params["acceptance"])
    if written(scenario):
        cfg = dict(scenario.acceptance)
        if cls.name == "medusa" and cfg.get("model") != "medusa":  # medusa reads its own
            found = drafter_default(drafter)
            if found is not None:
                return found, (f"{found['source']} (the policy's built-in default: the "
                               f"scenario's {cfg.get('model')} acceptance cannot score heads)")
        return cfg, describe_config(cfg)
    found = drafter_default(drafter)
    if found is not None:
        return found, (f"{found['source']} (the published default for {drafter}: the "
                       "scenario gives no acceptance)")
    return None, (f"no source for {drafter or cls.name}: {_summary(SCENARIO_DEFAULT)} is the "
                  "default, not a measurement")


# what an acceptance block was written for: the models of its scenario file
_PAIR_KEYS = ("target", "draft", "speculative_config")


def without_borrowed_acceptance(before: Mapping[str, Any],
                                after: Mapping[str, Any]) -> dict[str, Any]:
    """``after`` (a raw scenario with --vllm-args and --set written over ``before``) without
    ``before``'s acceptance block where they changed the target or the drafter but not the
    block: the file's numbers were written for its own models, so the run falls back to its
    drafter's published default or says it has no source."""
    out = dict(after)
    moved = any(before.get(k) != after.get(k) for k in _PAIR_KEYS)
    if moved and "acceptance" in out and out["acceptance"] == before.get("acceptance"):
        del out["acceptance"]
    return out


def acceptance_columns(where: Provenance) -> dict[str, str]:
    """The acceptance_source and acceptance_warning columns of a result row."""
    return {"acceptance_source": where.line, "acceptance_warning": where.warning}


def point_provenance(point: Mapping[str, Any]) -> Provenance:
    """The provenance of an analytic point (``planning.analytic`` fields): its acceptance
    mapping's, else its ``alpha``, which no source backs."""
    if point["policy"] == "none":
        return Provenance(NO_SPECULATION)
    cfg = point.get("acceptance")
    if cfg:
        drafter = point.get("draft") if point["policy"] in ("chain", "tree") else None
        return Provenance(describe_config(cfg), mismatch(cfg, str(point["target"]), drafter))
    alpha = {"model": "iid", "alpha": point["alpha"]}
    return Provenance(describe_config(alpha), f"alpha {point['alpha']:g} has no source: an "
                      "assumption, not a measurement (give an acceptance mapping with its "
                      "source)")


def frame_notes(frame: pd.DataFrame, label: str) -> tuple[list[str], list[str]]:
    """(source lines, warnings) of a result frame's acceptance columns: one line per
    distinct source, naming the rows (by ``label``) where they differ; each warning once."""
    if "acceptance_source" not in frame.columns:
        return [], []
    groups: dict[str, list[str]] = {}
    for name, text in zip(frame[label], frame["acceptance_source"]):
        if isinstance(text, str) and text:
            groups.setdefault(text, []).append(str(name))
    if len(groups) == 1:
        lines = [f"acceptance: {next(iter(groups))}"]
    else:
        lines = [f"acceptance ({', '.join(dict.fromkeys(v))}): {k}" for k, v in groups.items()]
    warned: dict[str, list[str]] = {}
    for name, text in zip(frame[label], frame.get("acceptance_warning", ())):
        if isinstance(text, str) and text:
            warned.setdefault(text, []).append(str(name))
    return lines, [f"{', '.join(dict.fromkeys(v))}: {k}" for k, v in warned.items()]
