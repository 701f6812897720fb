"""K forwards of one batch's requests, each with its own contexts, priced at once: the K
iterations of a stretch whose contexts move by the acceptances drawn (a feature drafter's
first forward re-reads what each request accepted, and an MLA target's verification has no
closed form: both are priced by ``step_time`` on every iteration's arrays).

``rows_step_times(cm, tokens, context, logits)`` is ``cm.step_time(tokens[j], context[j],
logits)`` for every row ``j`` of the (K, n) ``tokens`` and ``context`` (``logits``: the
requests' LM-head tokens, the same in every row; None: each row's own tokens), bitwise: the same
construction as ``verify_rows.verify_step_times`` (its per-request attention terms the same
elementwise operations on (K, n) arrays, each row's kernel sums the same reductions of a
contiguous row; a uniform row by the closed form ``step_time`` takes at the row's context
sum; the token totals' parts the same scalar calls), with the contexts per row.  Rows it has
no shortcut for (another class of pricer, a pipelined or single-roofline model, a request
with no new token, token counts that are not whole numbers) are priced by ``step_time``
itself.  ``tests/simulator/cost/test_step_rows.py`` holds every row to ``step_time``.
"""
from __future__ import annotations

import numpy as np

from simulator.cost import step_models as sm
from simulator.cost.verify_rows import attention_layers, whole_new_tokens

_MIN, _MAX, _SUM = np.minimum.reduce, np.maximum.reduce, np.add.reduce


def rows_step_times(cm, tokens: np.ndarray, context: np.ndarray,
                    logits: np.ndarray | None = None, closed: bool = False) -> np.ndarray:
    """``cm.step_time`` of each row of ``tokens`` (K, n) over that row of ``context``; by
    the closed form (``CostModel.step_time``'s) only where ``closed`` says ``cm`` is that
    class, row by row through its own ``step_time`` otherwise."""
    tokens, ctx = np.asarray(tokens), np.asarray(context, np.float64)
    if tokens.ndim != 2 or ctx.shape != tokens.shape or not ctx.size \
            or not closed or cm._general_only or not whole_new_tokens(tokens):
        return _one_by_one(cm, tokens, ctx, logits)
    n = ctx.shape[1]
    lo, hi = _MIN(tokens, axis=1).astype(np.float64), _MAX(tokens, axis=1).astype(np.float64)
    totals = _SUM(tokens, axis=1).astype(np.float64).tolist()
    heads = totals if logits is None else [float(_SUM(logits, axis=None))] * len(totals)
    lo, hi, tokens = lo.tolist(), hi.tolist(), tokens.astype(np.float64)
    out, parts, uniform = [0.0] * len(totals), {}, {}
    attention = None
    for j, (low, high, total, head) in enumerate(zip(lo, hi, totals, heads)):
        key = (low, high, total, head)
        part = parts.get(key)
        if part is None:
            k = cm._uniform(n, low, head) if low == high else None
            if k is None:  # no closed form: the mode, then the parts of the token totals
                mode = cm._mode(tokens[j], total, low, high)
                k = (mode[0], cm._fixed(total, head, *mode))
            part = parts[key] = k
        if type(part) is not tuple:  # step_time's closed form of a uniform batch: below
            uniform.setdefault(key, []).append(j)
            continue
        if attention is None:
            attention = attention_layers(cm, tokens, ctx)
        out[j] = cm._step_from(part[0], part[1], attention[j], n)
    if uniform:
        _uniform_rows(out, uniform, parts, _SUM(ctx, axis=1))
    return np.array(out, np.float64)


def _uniform_rows(out: list, uniform: dict, parts: dict, sums: np.ndarray) -> None:
    """``out[j]`` of each uniform row ``j`` (``uniform``: its rows by key) by the closed form
    ``parts[key]`` at the row's context sum (``sums``: whole numbers, exact however summed):
    on an array of sums where a key has many rows, on Python floats (``step_time``'s own
    call) where it has a few; the same operations either way."""
    listed = None
    for key, rows in uniform.items():
        if len(rows) <= 4:  # a few: numpy's per-call cost would be most of it
            if listed is None:
                listed = sums.tolist()
            for j in rows:
                out[j] = sm.uniform_time(parts[key], listed[j], max)
            continue
        for j, x in zip(rows, sm.uniform_time(parts[key], sums[rows], np.maximum).tolist()):
            out[j] = x


def _one_by_one(cm, tokens, ctx, logits) -> np.ndarray:
    """``step_time`` row by row."""
    rows = np.asarray(tokens, np.float64)
    return np.array([cm.step_time(row, c, rows[j] if logits is None else logits)
                     for j, (row, c) in enumerate(zip(rows, ctx))], np.float64)
