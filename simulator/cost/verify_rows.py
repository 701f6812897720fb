"""Many candidate verification forwards over one batch, priced at once: what a controller
searching per-request draft lengths asks (the ``adaptive`` policy's goodput search prices
about 16 candidate gamma vectors an iteration).

``verify_step_times(cm, tokens, context)`` is ``cm.step_time(tokens[c], context,
tokens[c])`` for every row ``c`` of the (C, n) ``tokens``, bitwise: the per-request
attention terms are the same elementwise operations on a (C, n) array instead of C arrays
of n; each row's kernel sums are the same reductions of a contiguous row of n (the tests
hold every row equal to ``step_time``'s float); a uniform row takes the closed form
``step_time`` takes; the parts that depend on token totals alone are the same scalar calls.
Rows it has no shortcut for (a pipelined or single-roofline model, a request with no new
token, token counts that are not whole numbers) are priced by ``step_time`` itself.
"""
from __future__ import annotations

import weakref

import numpy as np

from hardware.kernels import ATTENTION_DECODE
from simulator.cost import step_models as sm

_MIN, _MAX, _SUM = np.minimum.reduce, np.maximum.reduce, np.add.reduce
_ANY = np.logical_or.reduce
# per cost model, (token total, uniform?) -> (runtime mode, fixed seconds): pure functions of
# the key (graph_tokens' bisect, the token tables), read ~16 times an iteration by the search
_FIXED: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def verify_step_times(cm, tokens: np.ndarray, context: np.ndarray,
                      closed: bool = False) -> np.ndarray:
    """``cm.step_time(row, context, row)`` for each row of ``tokens`` (C, n), bitwise.
    The closed form is ``CostModel.step_time``'s, taken only where ``closed`` says ``cm`` is
    that class: a subclass that prices its steps otherwise (DP attention's ranks) gets its
    own ``step_time`` row by row."""
    tokens, ctx = np.asarray(tokens), np.asarray(context, np.float64)
    if tokens.ndim != 2 or ctx.ndim != 1 or tokens.shape[1] != ctx.size or not ctx.size \
            or not closed or cm._general_only or not whole_new_tokens(tokens):
        return np.array([cm.step_time(row, ctx, row)
                         for row in tokens.astype(np.float64)], np.float64)
    n = ctx.size
    # whole numbers (integers, or floats that are): the same sums in any order
    lo, hi = _MIN(tokens, axis=1).astype(np.float64), _MAX(tokens, axis=1).astype(np.float64)
    totals = _SUM(tokens, axis=1).astype(np.float64).tolist()
    lo, hi, tokens = lo.tolist(), hi.tolist(), tokens.astype(np.float64)
    attention = attention_layers(cm, tokens, ctx)
    ctx_sum = None
    out, memo, most = [], _FIXED.setdefault(cm, {}), sm.UNIFORM_MAX_QUERY
    for c, (low, high, total) in enumerate(zip(lo, hi, totals)):
        if low == high:  # step_time's closed form of a uniform batch, where one applies
            k = cm._uniform(n, low, total)
            if k is not None:
                if ctx_sum is None:
                    ctx_sum = float(_SUM(ctx))
                out.append(sm.uniform_time(k, ctx_sum, max))
                continue
        key = (total, low == high and high <= most)  # what _mode's runtime mode reads
        got = memo.get(key)
        if got is None:
            mode, padded = cm._mode(tokens[c], total, low, high)
            got = memo[key] = (mode, cm._fixed(total, total, mode, padded))
        out.append(cm._step_from(got[0], got[1], attention[c], n))
    return np.array(out, np.float64)


def whole_new_tokens(tokens: np.ndarray) -> bool:
    """Every request brings a whole number of new tokens, at least one (``step_time``'s
    masks of idle requests and its non-integer totals are left to it)."""
    if not tokens.size or _MIN(tokens, axis=None) < 1:
        return False
    return tokens.dtype.kind in "iu" or bool((tokens == np.floor(tokens)).all())


def attention_layers(cm, tokens: np.ndarray, ctx: np.ndarray,
                     u: float | None = None) -> list[float]:
    """Each row's one-layer attention seconds: ``CostModel._attention_s`` of that row with
    every request active (``Roofline.attention_time``'s two kernels with kernel shapes, the
    flat rates' per-request sum without).  ``u``: every request's new tokens where all
    are that one count > 1 (a chain's verification): the work takes it as a number (the
    same elementwise products, on the contexts alone) and the multi-query kernel, the one
    kernel of every row, runs alone."""
    if not cm._shapes:
        a_flops, a_bytes = cm._attention_work(tokens, ctx, True)
        return _SUM(cm._roof.time(a_flops, a_bytes), axis=1).tolist()
    roof, n = cm._roof, ctx.size
    if u is not None and u > 1.0:  # no decodes: the branch below's multi-query kernel
        kind = cm._prefill_kind
        flops, nbytes = cm._attention_work(np.float64(u), ctx, cm._prefill_causal,
                                           cm._prefill_overhead)
        return roof.attention_kernel_s(kind, _SUM(roof.attention_roofs(kind, flops, nbytes),
                                                  axis=1), np.maximum).tolist()
    flops, nbytes = cm._attention_work(tokens, ctx, cm._prefill_causal, cm._prefill_overhead)
    decode = tokens == 1.0
    n_decode = _SUM(decode, axis=1)  # the count of each row's decodes (np.count_nonzero's)
    counts = n_decode.tolist()
    if max(counts) == 0 or min(counts) == n:  # one kernel in every row: no masks, and the
        # total below is 0.0 + that kernel's seconds in every row, the seconds themselves
        kind = cm._prefill_kind if max(counts) == 0 else ATTENTION_DECODE
        return roof.attention_kernel_s(kind, _SUM(roof.attention_roofs(kind, flops, nbytes),
                                                  axis=1), np.maximum).tolist()
    # attention_time's total: 0.0, plus the decode kernel where it runs, plus the
    # multi-query one where it runs (adding 0.0 for a kernel that does not run: no change)
    total = np.zeros(tokens.shape[0])
    if max(counts):
        sums = _kernel_sums(roof.attention_roofs(ATTENTION_DECODE, flops, nbytes), decode,
                            n_decode == n, min(counts) == n)
        total = total + np.where(n_decode > 0, roof.attention_kernel_s(
            ATTENTION_DECODE, sums, np.maximum), 0.0)
    if min(counts) < n:
        kind = cm._prefill_kind
        prefill = ~decode  # whole numbers of at least one token: > 1 where not == 1
        sums = _kernel_sums(roof.attention_roofs(kind, flops, nbytes), prefill,
                            n_decode == 0, not max(counts))
        total = total + np.where(n_decode < n, roof.attention_kernel_s(
            kind, sums, np.maximum), 0.0)
    return total.tolist()


def _kernel_sums(per_request: np.ndarray, members: np.ndarray, full: np.ndarray,
                 every: bool) -> np.ndarray:
    """Each row's sum of ``per_request`` over its ``members``: unmasked where every request
    is one (``full``; ``every``: in every row; ``attention_time`` passes no mask then),
    masked elsewhere; a reduction along each contiguous row, as the 1-D one of that row."""
    if every:
        return _SUM(per_request, axis=1)
    masked = _SUM(per_request, axis=1, where=members)
    if not _ANY(full):
        return masked
    return np.where(full, _SUM(per_request, axis=1), masked)
