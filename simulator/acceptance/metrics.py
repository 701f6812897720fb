"""Speculation metrics as vLLM reports them (acceptance rate, mean acceptance length, per-
position rates) from a run's draft and accepted counts, and what an acceptance model expects
of them in closed form."""
from __future__ import annotations

import numpy as np

from simulator.acceptance.base import AcceptanceModel
from simulator.inputs.errors import SpecsimError


def summarise_acceptance(accepted, gammas) -> dict:
    """vLLM-style speculation metrics from per-draft accepted counts and draft lengths.

    ``num_drafts`` counts iterations with gamma > 0; ``acceptance_rate`` = accepted / draft
    tokens; ``mean_acceptance_length`` tau = 1 + accepted / drafts (bonus included);
    ``per_position_rates[i]`` = fraction of drafts with more than i draft tokens whose first
    i+1 were all accepted (vLLM's definition when gamma is fixed).  ``tested_alpha`` =
    accepted / (accepted + rejections) estimates alpha from the drafts that were actually
    tested -- what the i.i.d. formula's alpha means.
    """
    acc = np.asarray(accepted)
    gam = np.broadcast_to(np.asarray(gammas), acc.shape)
    if acc.ndim != 1:
        raise SpecsimError(f"must be 1-D, got shape {acc.shape}", field="accepted")
    if not (np.issubdtype(acc.dtype, np.integer) and np.issubdtype(gam.dtype, np.integer)):
        raise SpecsimError("accepted and gammas must be integer counts", field="accepted")
    if np.any(acc < 0) or np.any(acc > gam):
        raise SpecsimError("every accepted count must lie in [0, gamma]", field="accepted")
    drafted = gam > 0
    num_drafts = int(drafted.sum())
    draft_tokens = int(gam.sum())
    accepted_tokens = int(acc.sum())
    rejections = int(((acc < gam) & drafted).sum())
    top = int(gam.max(initial=0))
    positions = np.arange(top)
    eligible = (gam[:, None] > positions).sum(axis=0)
    passed = (acc[:, None] > positions).sum(axis=0)
    nan = float("nan")
    return {
        "num_drafts": num_drafts,
        "num_draft_tokens": draft_tokens,
        "num_accepted_tokens": accepted_tokens,
        "acceptance_rate": accepted_tokens / draft_tokens if draft_tokens else nan,
        "mean_acceptance_length": 1.0 + accepted_tokens / num_drafts if num_drafts else nan,
        "per_position_rates": np.where(eligible > 0, passed / np.maximum(eligible, 1), nan),
        "tested_alpha": accepted_tokens / (accepted_tokens + rejections)
        if accepted_tokens + rejections else nan,
    }

def expected_metrics(model: AcceptanceModel, gamma: int, context: int = 0) -> dict:
    """A model's own alpha, tau and per-position rates at a fixed gamma (vLLM definitions)."""
    rates = np.asarray(model.position_rates(gamma, context), dtype=float)
    accepted = float(rates.sum())
    closed = model.expected_accepted(gamma, context)
    return {
        "acceptance_rate": accepted / gamma if gamma else float("nan"),
        "mean_acceptance_length": 1.0 + accepted,
        "per_position_rates": rates,
        "expected_accepted": closed,
    }
