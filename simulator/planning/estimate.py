"""``estimate_table``: the analytic model (``simulator.planning.analytic``) of a chain over a
range of gamma, as ``specsim estimate`` prints it: a draft model's chain, or (``policy``
mtp or eagle3) a chain drafted by the target's MTP modules or an EAGLE-3 layer, priced as
an analytic point of that policy is (``simulator.planning.head_drafts``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simulator.cost.cost_model import CostModel
from simulator.cost.drafting import chain_draft_time
from simulator.inputs.errors import SpecsimError
from simulator.planning.head_drafts import HEAD_POLICIES, head_draft_time, head_pass_ratio
from simulator.speculation.closed_forms import expected_tokens

if TYPE_CHECKING:  # pandas loads where the frame is built: `estimate --help` is fast
    import pandas as pd


def estimate_table(target, draft: CostModel | None, *, batch: int, context: float,
                   gammas: list[int], alpha: float, policy: str = "chain") -> pd.DataFrame:
    """Per gamma: draft, verify and plain-decode step times, c, E, speedup; best row marked.

    ``target`` is the target's CostModel, or a function of gamma giving the (target, draft)
    cost models of a deployment with that many speculative tokens and, at gamma 0, the
    plain-decoding one (vLLM sizes its CUDA graphs by the speculative tokens):
    ``point_cost_models`` is that function for a sweep or gamma-map point.
    Gamma 0 is chain with nothing drafted (the module docstring): plain decoding's step
    time, speedup exactly 1; memory and context limits are not checked here.  ``mtp`` and
    ``eagle3`` have no gamma 0 (their engine policies draft at least one token)."""
    import pandas as pd
    if batch < 1:
        raise SpecsimError("must be >= 1", field="--batch")
    if context < 0:
        raise SpecsimError("must be >= 0", field="--context")
    head = policy in HEAD_POLICIES
    if head and 0 in gammas:
        raise SpecsimError(f"{policy} drafts at least one token: gamma 0 is no {policy} "
                           "deployment", field="--gamma", fix="give gammas >= 1, e.g. 1-4")
    models = target if callable(target) else (lambda g: (target, draft))
    base, base_draft = models(0)
    decode = base.decode_time(batch, context)
    c = head_pass_ratio(policy, base, batch, context) if head else \
        (base_draft.decode_time(batch, context) if base_draft is not None else 0.0) / decode
    rows = []
    for g in gammas:
        tcm, dcm = models(g)
        e = expected_tokens(alpha, g)
        if head:
            draft_s = head_draft_time(policy, tcm, batch, context, g, e)
        else:
            draft_s = chain_draft_time(dcm, np.full(batch, float(context)),
                                       np.full(batch, g)) if (dcm is not None and g) else 0.0
        verify_s = tcm.verify_time(batch, context, g + 1)
        rows.append({"gamma": g, "draft_s": draft_s, "verify_s": verify_s, "decode_s": decode,
                     "c": c, "expected_tokens": e,
                     "speedup": e * decode / (draft_s + verify_s)})
    df = pd.DataFrame(rows)
    best = int(df.loc[df["speedup"].idxmax(), "gamma"])
    df["best_gamma"] = best
    df["is_best"] = df["gamma"] == best
    return df
