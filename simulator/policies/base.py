"""The policy interface: what the engine asks a speculative serving policy each iteration.

Per iteration the engine hands the policy the requests that are decoding (a ``BatchView``);
the policy returns a ``DraftPlan``: per request how many draft tokens it proposes and how many
tokens the verification forward carries for it, plus the proposer's time.  The engine prices
verification with the target cost model on exactly those token counts, advances time, then
asks the policy how many drafts each request accepted and emits accepted + 1 tokens.  A policy
may observe the outcome (adaptive controllers do).  Adding a policy touches its own file, the
``POLICIES`` dict in ``simulator/policies/__init__.py`` and its test — never the engine.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.cost.drafting import fits_draft_context
from simulator.engine.plan import BatchView, DraftPlan
from simulator.models.spec import ModelSpec


@dataclass
class PolicyContext:
    """What a policy may use to build itself: cost models, acceptance, the workload."""

    target_cost: Any                 # CostModel-like: step_time(new, ctx, logits=None)
    draft_cost: Any = None           # CostModel of the draft model, if the scenario has one
    acceptance: Any = None           # a bound AcceptanceModel
    workload: Any = None
    draft_model: Any = None          # ModelSpec of the draft, if any
    target_model: Any = None
    hardware: Any = None
    extra: dict = field(default_factory=dict)


def batch_fits_draft(batch: BatchView, num_draft: int, max_context: int | None) -> np.ndarray:
    """:func:`fits_draft_context` for the requests of ``batch``."""
    return fits_draft_context(batch.prompt_len + batch.generated, num_draft, max_context)


class NoDraftMixin:
    """Defaults for policies without a draft model of their own."""

    def prefill_time(self, new_tokens: np.ndarray, context: np.ndarray) -> float:
        return 0.0

    def observe(self, plan: DraftPlan, batch: BatchView, accepted: np.ndarray,
                step_time_s: float) -> None:
        return None


def policy_hardware(ctx):
    """The (overhead-adjusted) profile the scenario's cost models were built on."""
    for cost in (ctx.draft_cost, ctx.target_cost):
        if getattr(cost, "hardware", None) is not None:
            return cost.hardware
    return ctx.hardware


def memory_models(cls, params: dict, draft: ModelSpec | None, target: ModelSpec):
    """Models a policy keeps beside the target: (weights held, models that keep a KV cache)."""
    hook = getattr(cls, "memory_models", None)
    if hook is not None:
        return hook(params, draft, target)
    if getattr(cls, "needs_draft_model", False) and draft is not None:
        return [draft], ([draft] if draft.kind == "decoder" else [])
    return [], []
