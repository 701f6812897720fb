"""A feature drafter's K iterations priced at once (``FeatureDraft.draft_rows``), each row
bitwise ``iteration_draft_s``'s float for that iteration.

A stretch's pass prices a few rows (8, 16, 32...) of a few requests (on the shipped
scenarios one to seven): numpy's per-call cost is most of the work there, so those rows are
priced on Python numbers, with the very operations of the scalar path: a row whose requests
all re-read the same whole count by the layer's closed form at the sum of its starts (what
``iteration_draft_s`` prices a few such requests by: ``uniform_pricer``, the float of
``uniform_step_time``), the other rows together by ``rows_step_times``; then each row's later
forwards by their scalar pricers at its context sum plus their offsets, its linears and the
host work, added in ``iteration_draft_s``'s order.  Only sums of whole numbers are taken on
Python numbers (exact in any order); numpy's sums of other floats are its own (its SIMD
reductions do not add a short row left to right), so those stay numpy's.

``few_price`` is ``iteration_draft_s`` of one iteration of a few requests given as lists
(``FeatureDraft.few_draft_s``: a tree walk's list pass, chain_short.py), the same pricers
and additions, one request's first forward by its closed form looked up once per count.
"""
from __future__ import annotations

import numpy as np

from simulator.cost.closed_forms import ClosedForms

_SUM = np.add.reduce
# below this many requests a row of different counts is priced on Python numbers
# (``few_mixed_time``: few_step's one-kernel loop where one kernel holds them all)
_FEW_REQUESTS = 8


def first_rows(forms, pricers: dict, context: np.ndarray, reread: np.ndarray,
               logits: np.ndarray) -> tuple[list, list, list]:
    """(each row's first forward seconds, its context sum, its re-read tokens in all) of the
    (K, n) ``context`` (ints) re-reading ``reread`` (at least one token each, as
    ``level_draft_time`` counts them) by the layer's closed forms ``forms``; ``pricers``: the
    memo of its uniform pricers by (n, tokens a request, LM-head tokens)."""
    n, head = context.shape[1], float(_SUM(logits))
    # the rows' max(re-read, 1) (np.maximum's floats are max's) and context sums (whole
    # numbers: exact in any order) in one call each, not one a row
    sums, firsts, tokens, mixed = _SUM(context, axis=1).tolist(), [], [], []
    for j, (ctx, first) in enumerate(zip(context.tolist(), np.maximum(reread, 1.0).tolist())):
        t, price = first[0], None
        if t.is_integer() and (n == 1 or first.count(t) == n):
            key = (n, t, head)
            price = pricers.get(key, pricers)
            if price is pricers:
                if len(pricers) >= 4096:
                    pricers.clear()
                price = pricers[key] = forms.uniform_pricer(n, int(t), head)
        if price is None:  # whole counts of a few: few_mixed_time on Python numbers (the
            # starts np.maximum's floats, the counts' sum exact), or on arrays below
            got = forms.few_mixed_time(first, [max(c - (x - 1.0), 0.0) for c, x in zip(
                ctx, first)], head) if n < _FEW_REQUESTS and all(
                    map(float.is_integer, first)) else None
            if got is None:
                mixed.append(j)
            firsts.append(0.0 if got is None else got)
            tokens.append(0.0 if got is None else float(sum(first)))
            continue
        t1 = t - 1.0
        firsts.append(price(float(sum([max(x - t1, 0.0) for x in ctx]))))
        tokens.append(n * t)  # n equal counts
    # the others (more requests): their attention and token sums on arrays, the rows together
    # (fewer instructions than ``few_step_time`` row by row: eagle.yaml's passes, measured)
    if mixed:
        if len(mixed) < len(firsts):  # (all of them: no gather)
            reread, context = reread[mixed], context[mixed]
        first = np.maximum(reread, 1.0)
        start = np.maximum(context.astype(np.float64) - (first - 1.0), 0.0)
        for j, x, t in zip(mixed, forms.rows_step_times(first, start, logits).tolist(),
                           _SUM(first, axis=1).tolist()):
            firsts[j], tokens[j] = x, t
    return firsts, sums, tokens


def later_rows(firsts: list, sums: list, tokens: list, later: list, linears, n: int,
               host: float) -> list[float]:
    """Each row's seconds: its first forward (``firsts``), then its later forwards by their
    scalar pricers (``later``: ``_later_pricers``') at its context sum (``sums``, whole
    numbers) + offset, its linears (``linears(tokens re-read, n)``) and ``host``, added in
    ``iteration_draft_s``'s order (its floats)."""
    out = []
    for total, s, t in zip(firsts, sums, tokens):
        total = 0.0 + total
        s = float(s)
        for offset, price, _, _ in later:
            total += price(s + offset)
        out.append(total + linears(t, n) + host)
    return out


def later_times(forms, n: int, sums: np.ndarray, later: list) -> list[np.ndarray]:
    """Each later forward's seconds at every row's context sum ``sums`` (K,), in order:
    ``forms.uniform_step_times`` at sums + the forward's offset (a chain's forwards, all
    one form, in one call on the flattened (K, forwards) grid: elementwise the same)."""
    if len(later) > 1 and all(f[2:] == later[0][2:] for f in later):
        offsets = np.array([f[0] for f in later])
        grid = (sums[:, None] + offsets[None, :]).ravel()
        got = forms.uniform_step_times(n, later[0][2], grid, later[0][3])
        if got is not None:
            got = np.asarray(got, np.float64).reshape(sums.size, len(later))
            return [got[:, j] for j in range(len(later))]
    return [forms.uniform_step_times(n, t, sums + offset, lg) for offset, _, t, lg in later]


def few_price(pricers: tuple, host: float, linears, first_few, n: int, forms, head: float):
    """``FeatureDraft.few_draft_s``' ``price(context, reread)`` of ``n`` requests on lists:
    ``first_few``'s first forward, the later forwards by their scalar pricers (``pricers``:
    ``_later_pricers``' list and the layer's closed forms, whose ``uniform_sum_pricer`` adds
    the same terms in one loop where it has one) at the context sum + offset, the linears
    and ``host``, in ``iteration_draft_s``'s order; one request by ``_one_price``."""
    later, cost_forms = pricers  # the later forwards' terms in one loop where they can be
    together = cost_forms.uniform_sum_pricer(n, [(o, t, lg) for o, _, t, lg in later]) \
        if isinstance(cost_forms, ClosedForms) else None
    if together is None:
        def together(total: float, s: float) -> float:
            for offset, later_s, _, _ in later:
                total += later_s(s + offset)
            return total

    def price(context: list, reread: list) -> float:
        first, tokens, s = first_few(reread, context)
        total = 0.0 + first
        for offset, later_s, _, _ in later:
            total += later_s(s + offset)
        return total + linears(tokens, n) + host
    if n == 1:
        return _one_price(together, host, linears, price, forms, head)
    return _many_price(together, host, linears, price, forms, n * head, n)


def _many_price(later, host: float, linears, price, forms, head: float, n: int):
    """``price`` of ``n`` > 1 requests over int contexts: ``_first_few``'s first forward by
    the pricer its re-read counts select (``_few_entry``: the closed form of alike whole
    counts at the starts' sum, else ``forms.few_mixed_pricer`` of the counts, the same memo
    entry ``few_mixed_time`` prices by) with its linears, looked up once per counts (a
    batch's re-read counts repeat); ``price`` where neither applies."""
    entries: dict = {}

    def many(context: list, reread: list) -> float:
        if type(context[0]) is not int:
            return price(context, reread)
        key = tuple(reread)  # max(r, 1.0) of ints or whole floats: equal keys, one entry
        got = entries.get(key)
        if got is None:
            if len(entries) >= 4096:
                entries.clear()
            got = entries[key] = _few_entry(reread, forms, head, linears, n)
        first, less, extra = got
        if first is None:
            return price(context, reread)
        s = sum(context)  # ints: exact
        if less.__class__ is float:  # alike: the closed form at the starts' sum (ints)
            # no start clipped at 0: their sum s - n less, whole numbers (exact), the float
            # the clipped starts add up to (0.0 + ... the same +0.0 where it is 0)
            total = 0.0 + first(float(s - n * less) if min(context) >= less else
                                float(sum([max(c - less, 0.0) for c in context])))
        else:
            total = 0.0 + first([max(c - x, 0.0) for c, x in zip(context, less)])
        # the later forwards at the contexts' sum (whole numbers: exact in any order)
        return later(total, float(s)) + extra + host
    return many


def _few_entry(reread: list, forms, head: float, linears, n: int) -> tuple:
    """(the first forward's pricer, what each count's start is less than its context (one
    float where they are alike: the closed form's), the linears' seconds) of re-read counts
    ``reread`` as ``_first_few`` prices them (new tokens max(r, 1.0), starts max(context -
    (new - 1), 0)); (None, None, None) where it takes another path."""
    first = [max(float(r), 1.0) for r in reread]
    t = first[0]
    if not all(map(float.is_integer, first)):
        return None, None, None
    tokens = np.float64(sum(first))  # _first_few's tokens: whole numbers, exact
    if first.count(t) == n:
        pricer = forms.few_uniform_pricer(n, t, head)
        if pricer is not None:
            return pricer, t - 1.0, linears(tokens, n)
    pricer = forms.few_mixed_pricer(first, head)
    return (None, None, None) if pricer is None else \
        (pricer, [x - 1.0 for x in first], linears(tokens, n))


def _one_price(later, host: float, linears, price, forms, head: float):
    """``price`` of one request: ``_first_few``'s closed form of a whole count over an int
    context (the sum of one start is that start, of one count that count), its pricer
    (``forms.few_uniform_pricer``) and linears looked up once per count; ``price`` where
    that form does not apply."""
    by_count: dict = {}

    def one(context: list, reread: list) -> float:
        t, c = float(reread[0]), context[0]
        t = 1.0 if 1.0 > t else t  # max(t, 1.0) without the call (the object max returns)
        got = by_count.get(t) if type(c) is int else None
        if got is None and t.is_integer() and type(c) is int:
            first = forms.few_uniform_pricer(1, t, head)
            got = by_count[t] = (first, None if first is None else linears(np.float64(t), 1))
        if got is None or got[0] is None:
            return price(context, reread)
        x = c - (t - 1.0)
        return later(0.0 + got[0](0.0 if 0.0 > x else x), float(c)) + got[1] + host
    return one


def one_chunk_s(forms, new_tokens: np.ndarray, context: np.ndarray) -> float | None:
    """``step_time`` of one prompt chunk of ``new_tokens[0]`` tokens over ``context[0]``
    with no logits, by the closed form at its whole context (``few_uniform_pricer``:
    bitwise that float, as ``draft_prefill_time`` prices a draft model's chunk); None where
    the counts are not whole or the layer has no such form."""
    c, x = float(new_tokens[0]), float(context[0])
    price = forms.few_uniform_pricer(1, c, 0.0) \
        if c >= 1.0 and c.is_integer() and x.is_integer() else None
    return None if price is None else price(x)
