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
from simulator.cost.verify_rows import attention_layers, tail_of, whole_new_tokens

_MIN, _MAX, _SUM = np.minimum.reduce, np.maximum.reduce, np.add.reduce
# up to this many requests x rows, and fewer rows than _MANY_ROWS, the token counts are read
# as a list: a row there costs about 4k instructions (min, max, sum, the whole-number test),
# the arrays' reductions about 50k a call (cachegrind, lookahead.yaml's 237 calls of ~43 rows
# of ~3 requests: 40M fewer instructions by the arrays)
_FEW_CELLS, _MANY_ROWS = 256, 16


def rows_step_times(cm, tokens: np.ndarray, context: np.ndarray,
                    logits: np.ndarray | None = None, closed: bool = False) -> np.ndarray:
    """``cm.step_time`` of each row of ``tokens`` (K, n) over that row of ``context``; by
    the closed form (``CostModel.step_time``'s) only where ``closed`` says ``cm`` is that
    class, row by row through its own ``step_time`` otherwise."""
    tokens, ctx = np.asarray(tokens), np.asarray(context, np.float64)
    if tokens.ndim != 2 or ctx.shape != tokens.shape or not ctx.size \
            or not closed or cm._general_only:
        return _one_by_one(cm, tokens, ctx, logits)
    spans = _spans(tokens)
    if spans is None:
        return _one_by_one(cm, tokens, ctx, logits)
    n = ctx.shape[1]
    lo, hi, totals = spans
    heads = totals if logits is None else [float(_SUM(logits, axis=None))] * len(totals)
    out, uniform, attention, parts = [0.0] * len(totals), {}, None, {}
    uv = cm._uv_o is not None  # decode rows priced (vLLM 0.7's W_UV_O): else none read
    tail = tail_of(cm, n)  # ``cm._step_from(mode, fixed, a_layer, n)``, bound once
    for j, (low, high, total, head) in enumerate(zip(lo, hi, totals, heads)):
        # the row's parts apart from its contexts, memoised by the model (asked again and
        # again by a stretch's passes of a few rows each) and here for this call's rows; a
        # function of these four numbers and the row's decode rows where the engine prices
        # the absorbed W_UV_O by them (its row is otherwise read only where low is 0, never
        # here)
        now = (low, high, total, head, cm._decode_rows(tokens[j]) if uv else 0.0)
        part = parts.get(now)
        if part is None:
            part = parts[now] = cm.row_part(n, tokens[j], low, high, total, head)
        if type(part) is not tuple:  # step_time's closed form of a uniform batch: below
            uniform.setdefault((low, total, head), (part, []))[1].append(j)
            continue
        if attention is None:  # (every row's requests u new tokens each: u passed on)
            u = lo[0] if lo.count(lo[0]) == len(lo) == hi.count(lo[0]) else None
            attention = attention_layers(cm, np.asarray(tokens, np.float64), ctx, u)
        out[j] = tail(part[0], part[1], attention[j])
    if uniform:
        _uniform_rows(out, uniform, _SUM(ctx, axis=1))
    return np.array(out, np.float64)


def _spans(tokens: np.ndarray) -> tuple[list, list, list] | None:
    """Each row's (fewest, most, total) new tokens as floats, None where a request brings no
    new token or a count that is not a whole number (``whole_new_tokens``'s test): whole
    numbers, so the totals are exact in any order of summation (a few rows of a few
    requests on Python numbers, where numpy's per-call cost would be most of it)."""
    if tokens.size > _FEW_CELLS or tokens.shape[0] >= _MANY_ROWS:
        if not whole_new_tokens(tokens):
            return None
        return (_MIN(tokens, axis=1).astype(np.float64).tolist(),
                _MAX(tokens, axis=1).astype(np.float64).tolist(),
                _SUM(tokens, axis=1).astype(np.float64).tolist())
    lo, hi, totals = [], [], []
    whole = tokens.dtype.kind in "iu"  # else floats: each row's tested (float.is_integer)
    rows = tokens.tolist()
    if rows.count(rows[0]) == len(rows):  # every row the same (a chain's verification):
        rows = rows[:1]  # its spans once
    for row in rows:
        low = min(row)
        if low < 1 or not (whole or all(map(float.is_integer, row))):
            return None
        lo.append(float(low))
        hi.append(float(max(row)))
        totals.append(float(sum(row)))
    if len(rows) < tokens.shape[0]:
        k = tokens.shape[0]
        return lo * k, hi * k, totals * k
    return lo, hi, totals


def _uniform_rows(out: list, uniform: dict, sums: np.ndarray) -> None:
    """``out[j]`` of each uniform row ``j`` (``uniform``: (closed form, its rows) by key) by
    that form at the row's context sum (``sums``: whole numbers, exact however summed): on an
    array of sums where a form has many rows, on Python floats (``step_time``'s own call)
    where it has a few; the same operations either way."""
    listed = None
    for form, rows in uniform.values():
        if len(rows) <= 4:  # a few: numpy's per-call cost would be most of it
            if listed is None:
                listed = sums.tolist()
            for j in rows:
                out[j] = sm.uniform_time(form, listed[j], max)
            continue
        for j, x in zip(rows, sm.uniform_time(form, sums[rows], np.maximum).tolist()):
            out[j] = x


def _one_by_one(cm, tokens, ctx, logits) -> np.ndarray:
    """``step_time`` row by row."""
    rows = np.asarray(tokens, np.float64)
    return np.array([cm.step_time(row, c, rows[j] if logits is None else logits)
                     for j, (row, c) in enumerate(zip(rows, ctx))], np.float64)
