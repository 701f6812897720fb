"""Analytic estimate of one speculative iteration per gamma: cost model + closed forms."""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.cost.cost_model import CostModel
from simulator.inputs.errors import SpecsimError
from simulator.speculation.closed_forms import expected_tokens


def draft_chain_time(draft: CostModel, batch: int, context: float, gamma: int) -> float:
    """Time of ``gamma`` sequential draft forwards; the draft's context grows by one each."""
    ones = np.ones(batch)
    return sum(draft.step_time(ones, np.full(batch, float(context + i))) for i in range(gamma))


def estimate_table(target: CostModel, draft: CostModel | None, *, batch: int, context: float,
                   gammas: list[int], alpha: float) -> pd.DataFrame:
    """Per gamma: draft, verify and plain-decode step times, c, E, speedup; best row marked."""
    if batch < 1:
        raise SpecsimError("must be >= 1", field="--batch")
    if context < 0:
        raise SpecsimError("must be >= 0", field="--context")
    decode = target.decode_time(batch, context)
    one_draft = draft.decode_time(batch, context) if draft is not None else 0.0
    rows = []
    for g in gammas:
        draft_s = draft_chain_time(draft, batch, context, g) if (draft is not None and g) else 0.0
        verify_s = target.verify_time(batch, context, g + 1)
        e = expected_tokens(alpha, g)
        rows.append({"gamma": g, "draft_s": draft_s, "verify_s": verify_s, "decode_s": decode,
                     "c": one_draft / decode, "expected_tokens": e,
                     "speedup": e * decode / (draft_s + verify_s)})
    df = pd.DataFrame(rows)
    best = int(df.loc[df["speedup"].idxmax(), "gamma"])
    df["best_gamma"] = best
    df["is_best"] = df["gamma"] == best
    return df
