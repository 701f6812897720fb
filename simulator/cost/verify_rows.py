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
# per cost model, its _Memo: pure functions of their keys, read ~16 times an iteration by
# the search
_MISSING = object()
_PRICERS = 4096  # uniform pricers kept per cost model before they are dropped
_MEMOS: "weakref.WeakKeyDictionary[object, _Memo]" = weakref.WeakKeyDictionary()


def verify_step_times(cm, tokens: np.ndarray, context: np.ndarray,
                      closed: bool = False) -> np.ndarray:
    """``cm.step_time(row, context, row)`` for each row of ``tokens`` (C, n), bitwise.
    The closed form is ``CostModel.step_time``'s, taken only where ``closed`` says ``cm`` is
    that class: a subclass that prices its steps otherwise (DP attention's ranks) gets its
    own ``step_time`` row by row."""
    tokens, ctx = np.asarray(tokens), np.asarray(context, np.float64)
    shaped = tokens.ndim == 2 and ctx.ndim == 1 and tokens.shape[1] == ctx.size \
        and ctx.size > 0 and tokens.shape[0] > 0 and closed and not cm._general_only
    # each row's fewest: ``whole_new_tokens``' test from them (their least is the array's;
    # a NaN fails its whole-number test), one reduction fewer
    fewest = _MIN(tokens, axis=1).tolist() if shaped else None
    if not shaped or not min(fewest) >= 1 or not (
            tokens.dtype.kind in "iu" or bool((tokens == np.floor(tokens)).all())):
        return np.array([cm.step_time(row, ctx, row)
                         for row in tokens.astype(np.float64)], np.float64)
    n = ctx.size
    # whole numbers (integers, or floats that are): the same sums in any order, as floats
    # (each exact: below 2**53)
    lo, hi = list(map(float, fewest)), list(map(float, _MAX(tokens, axis=1).tolist()))
    totals = list(map(float, _SUM(tokens, axis=1).tolist()))
    out, rest, ctx_sum, pricers = [0.0] * len(totals), [], None, _memo(cm).pricers
    for c, (low, high, total) in enumerate(zip(lo, hi, totals)):
        if low == high:  # step_time's closed form of a uniform batch, where one applies
            price = pricers.get((n, low, total), _MISSING)
            if price is _MISSING:
                if len(pricers) >= _PRICERS:
                    pricers.clear()
                price = pricers[(n, low, total)] = cm.uniform_pricer(n, low, total)
            if price is not None:
                if ctx_sum is None:
                    ctx_sum = float(_SUM(ctx))
                out[c] = price(ctx_sum)
                continue
        rest.append(c)
    if rest:  # the others' attention (each row's alone: the same whichever rows are with it)
        first, last = rest[0], rest[-1] + 1  # the rows in one run (the search's last ones):
        some = tokens[first:last] if last - first == len(rest) else tokens[rest]  # a view
        _price_rows(cm, some, ctx, rest, (lo, hi, totals), out)
    return np.array(out, np.float64)


def _price_rows(cm, tokens: np.ndarray, ctx: np.ndarray, rows: list[int], counts: tuple,
                out: list[float]) -> None:
    """``out[rows[i]]``: ``step_time`` of ``tokens[i]`` by its parts (runtime mode, fixed
    seconds, each row's attention), ``counts``: every row's (fewest, most, total) tokens."""
    lo, hi, totals = counts
    n, most = ctx.size, sm.UNIFORM_MAX_QUERY
    attention = attention_layers(cm, tokens.astype(np.float64), ctx)
    memo, tail = _memo(cm).fixed, tail_of(cm, n)
    uv = cm._uv_o is not None  # the absorbed W_UV_O's decode rows priced (vLLM 0.7)
    for i, c in enumerate(rows):
        total, low, high = totals[c], lo[c], hi[c]
        uv_rows = cm._decode_rows(tokens[i]) if uv else 0.0
        key = (total, low == high and high <= most, uv_rows)  # what _mode and _fixed read
        got = memo.get(key)
        if got is None:
            mode, padded = cm._mode(tokens[i].astype(np.float64), total, low, high)
            got = memo[key] = (mode, cm._fixed(total, total, mode, padded, uv_rows))
        out[c] = tail(got[0], got[1], attention[i])


def tail_of(cm, n: int):
    """``step_tail(cm, n)``, memoised while ``cm`` lives."""
    tails = _memo(cm).tails
    tail = tails.get(n)
    if tail is None:
        tail = tails[n] = step_tail(cm, n)
    return tail


def step_tail(cm, n: int):
    """``cm._step_from(mode, fixed, a_layer, n)`` as a function of its first three, the
    model's numbers bound once: the same operations in the same order (the same float)
    without its three method calls a row; an eager stream's is ``_step_from`` itself."""
    if cm._stream is not None:
        return lambda mode, fixed, a_layer: cm._step_from(mode, fixed, a_layer, n)
    layers, launch = cm._layers, cm._launch_s * cm._layers
    g = cm.execution.graph_launch_s
    replays = cm._layers * g
    host = cm.execution.host_s(n) if cm.host else None
    overlap = cm.execution.async_scheduling

    def tail(mode: str, fixed: float, a_layer: float) -> float:
        a_time = a_layer * layers
        if mode != "full":
            a_time = max(a_time, launch)
        device = fixed + a_time
        if mode == "full":
            device = device + g
        elif mode == "piecewise":
            device = max(device, replays) + g
        if host is None:  # _host_time's 0.0: adding it to a positive time changes nothing
            return device + 0.0
        return device + (max(host - device, 0.0) if overlap else host)

    return tail


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
    flat rates' per-request sum without).

    With shapes both kernels at once on a (2, C, n) stack: each request's roof in each
    kind (the same quotients and maximum), each row's masked sum over its members (its
    decodes, its others: a mask of every request sums as no mask does, and a masked row of
    a stack as the 1-D row alone), one latency and the floor a kernel, 0.0 where a kernel
    has no member; their sum is ``attention_time``'s 0.0 + decode + multi-query kernel.
    ``u``: every request's new tokens where all are that one count > 1 (a chain's
    verification): the work takes it as a number (the same elementwise products, on the
    contexts alone) and the multi-query kernel, the one kernel of every row, runs alone."""
    if not cm._shapes:
        a_flops, a_bytes = cm._attention_work(tokens, ctx, True)
        return _SUM(cm._roof.time(a_flops, a_bytes), axis=1).tolist()
    if u is not None and u > 1.0:  # no decodes: the stack's multi-query kernel alone
        roof, kind = cm._roof, cm._prefill_kind
        flops, nbytes = cm._attention_work(np.float64(u), ctx, cm._prefill_causal,
                                           cm._prefill_overhead)
        return roof.attention_kernel_s(kind, _SUM(roof.attention_roofs(kind, flops, nbytes),
                                                  axis=1), np.maximum).tolist()
    flops, nbytes = cm._attention_work(tokens, ctx, cm._prefill_causal, cm._prefill_overhead)
    crate, mrate, latency, floor = _memo(cm).rates
    members = (tokens == 1.0) != _KERNELS  # [decodes, the others]: whole numbers >= 1
    sums = _SUM(np.maximum(flops / crate, nbytes / mrate), axis=2, where=members)
    seconds = np.where(_ANY(members, axis=2), np.maximum(sums + latency, floor), 0.0)
    return (seconds[0] + seconds[1]).tolist()


_KERNELS = np.array([False, True])[:, None, None]  # decode kernel, multi-query kernel


class _Memo:
    """One cost model's parts of a row that depend on it alone or on a few numbers: (token
    total, uniform?) -> (runtime mode, fixed seconds) (graph_tokens' bisect, the token
    tables), requests -> ``step_tail``, a uniform batch's closed form, and both attention
    kernels' (compute rate, memory rate, latency, floor) as (2, 1, 1) and (2, 1) arrays
    (decode, multi-query)."""

    def __init__(self, cm) -> None:
        self.fixed: dict[tuple[float, bool], tuple[str, float]] = {}
        self.tails: dict[int, object] = {}
        # (requests, tokens each, in all) -> cm.uniform_pricer's (None: no closed form)
        self.pricers: dict[tuple[int, float, float], object] = {}
        rates = np.array([cm._roof.kind_rates(ATTENTION_DECODE),
                          cm._roof.kind_rates(cm._prefill_kind)]) if cm._shapes else None
        self.rates = None if rates is None else (
            rates[:, 0, None, None], rates[:, 1, None, None], rates[:, 2, None],
            rates[:, 3, None])


def _memo(cm) -> _Memo:
    """``cm``'s ``_Memo``, made on first use (kept while ``cm`` lives)."""
    memo = _MEMOS.get(cm)
    if memo is None:
        memo = _MEMOS[cm] = _Memo(cm)
    return memo
