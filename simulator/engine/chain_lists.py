"""A row-priced carried draft's first pass over a few requests, on Python lists.

A feature drafter's chain (``CarriedDraft.chain_counts`` and ``draft_rows``: MTP, EAGLE)
takes chain_stretch.py's vectorised ``_pass`` from its first pass on.  On the shipped
scenarios such a batch holds one to seven requests and a first pass keeps about six
iterations (mtp_moe.yaml), so most of that pass is numpy's per-call cost on arrays of a
few elements: its (K, n) running sums, contexts, bounds, row prices and column block.
``rows_lists`` takes the same pass iteration by iteration on lists of ints:

- the uniforms of all ``k_max`` iterations drawn in one call and turned into counts by the
  same ``chain_counts`` (row j is what ``draw_accepted`` returns from ``rng.random(n)``),
  those of the iterations not kept given back as ``_pass`` gives them back;
- each iteration's checks (the KV reservation, the draft's context) exact on integers, in
  ``_short_lists``' order, which keeps the iterations ``_pass`` keeps;
- its draft by ``CarriedDraft.few_draft_s`` (bitwise ``iteration_draft_s``, hence
  ``draft_rows``' row), re-reading what the iteration before accepted; its verification by
  the target's closed form at the context sum (``chain_prices``) or, where it has none
  (MLA's), by ``few_mixed_pricer`` on the contexts (``rows_step_times``' row, bitwise);
- the clock added up left to right, as ``np.add.accumulate`` adds it;
- committed by chain_short.py's ``_commit_rows``, the same values in the same order as
  ``_commit``.

None where a price has no such form: the caller takes ``_pass``.
"""
from __future__ import annotations

from itertools import chain

import numpy as np

from simulator.engine.chain_stretch import (
    _ACCEPTED,
    _CONST,
    _DRAFT,
    _DURATION,
    _EMITTED,
    _KV_READ,
    _KV_USED,
    _OCCUPANCY,
    _PAIRS,
    _START,
    _VERIFY,
    chain_prices,
)
from simulator.engine.fast_forward import MAX_STRETCH_CELLS
from simulator.engine.plan import ChainStretch

_ANY, _MIN = np.logical_or.reduce, np.minimum.reduce
_CHAIN = chain.from_iterable


def list_prices(replica, spec: ChainStretch, n: int):
    """(draft(context, reread), verify(s, context)) of one iteration of ``n`` requests on
    lists of ints, bitwise ``_times``' row; None where either has no such form."""
    draft = spec.carried.few_draft_s(n)
    if draft is None:
        return None
    prices = chain_prices(replica, spec, n)
    if prices is not None:
        by_sum = prices[1]
        return draft, lambda s, ctx: by_sum(s)
    u = float(spec.gamma + 1)
    few = replica.forms.few_mixed_pricer([u] * n, float(n) * u)
    return None if few is None else (draft, lambda s, ctx: few(ctx))


def rows_lists(replica, spec: ChainStretch, k_max: int, opened: tuple, prices: tuple,
               commit) -> tuple:
    """``_pass`` of a row-priced carried draft on lists (module docstring), its kept
    iterations committed by ``commit`` (``_commit_rows``): (iterations kept, whether the
    last retired requests, the crossing iteration's (emit, context sum, draft, verify) or
    None, whether all ``k_max`` were kept); ``prices``: ``list_prices``'."""
    (base, seq_max), b, (draft, verify) = opened, replica.b, prices
    n, g, bs, limit = int(b.ids.size), spec.gamma, replica.limits.block_size, spec.max_context
    u, rng = g + 1, replica.rng
    left = b.output_len - b.generated
    k_max = min(k_max, int(_MIN(left)), max(1, MAX_STRETCH_CELLS // n))
    saved = rng.bit_generator.state
    drawn = spec.carried.chain_counts()(rng.random((k_max, n)), b.ids)
    drawn += 1  # the accepted drafts and the target's token (uncapped)
    drawn = drawn.tolist()
    last = spec.carried.reread_tokens(b.ids).tolist()
    c0 = b.computed.tolist()
    free, horizon = replica.limits.kv_blocks - base, replica.arrivals.horizon(replica.index)
    s, clock, got, left = sum(c0), replica.now, [0] * n, left.tolist()
    s0, fewest, cu = s, min(left), [c + u for c in c0]
    emits, gots, rows, cross, retired = [], [], [], None, False
    for emit in drawn:  # _short_lists' checks, exact on integers
        if (s + n * u) // bs + n > free and sum([-(-(c + a) // bs) for c, a in zip(
                cu, got)]) > free:
            break
        if limit is not None and seq_max + min(len(emits) * u, s - s0) >= limit \
                and _ANY(b.prompt_len + b.generated + np.add(got, g) >= limit):
            break
        ctx = [c + a for c, a in zip(c0, got)]
        d, v = draft(ctx, last), verify(s, ctx)
        end = clock + (d + v)
        if end >= horizon:  # the next arrival comes first: this one crosses it
            cross = (emit, s, d, v)
            break
        last = emit
        got = [a + e for a, e in zip(got, emit)]
        emitted = sum(emit)  # integers: exact
        emits.append(emit)
        gots.append(got)
        rows.append((clock, d, v, s, emitted))
        s, clock = s + emitted, end
        if s - s0 >= fewest and any([a >= m for a, m in zip(got, left)]):
            retired = True
            break
    keep = len(emits) + (cross is not None)
    if keep < k_max:  # give back the draws of the iterations not kept
        rng.bit_generator.state = saved
        if keep:
            rng.random((keep, n))
    if emits:
        commit(replica, spec, emits, gots, rows, clock, base, retired)
    return len(emits), retired, cross, len(emits) == k_max


def counts(per_iteration: list, k: int, n: int) -> np.ndarray:
    """The (k, n) int64 array of ``k`` iterations' ``n`` counts each: lists of ints by one
    ``fromiter`` (numpy's nested-list conversion costs several times as much), arrays
    stacked."""
    if per_iteration[0].__class__ is list:
        return np.fromiter(_CHAIN(per_iteration), np.int64, k * n).reshape(k, n)
    return np.array(per_iteration)


def step_columns(cols: np.ndarray, replica, n: int, g: int, rows: list) -> None:
    """``_commit_rows``' step columns (``cols``: (fields, k), zeros, its KV blocks in use
    already there) of iterations ``rows`` = (start, draft, verify, context sum, tokens
    emitted uncapped) of ``n`` requests drafting ``g`` tokens each, as ``_commit`` builds
    them: each value the float of the row it stands for (whole numbers exact, draft +
    verify and blocks / kv_blocks the same IEEE operations on either), no tuple a row."""
    u, k = g + 1, len(rows)
    cols[_CONST] = np.array((replica.index, n, n, n * u, n * g, len(replica.waiting)),
                            np.float64)[:, None]
    start, draft, verify, sums, emitted = np.fromiter(
        _CHAIN(rows), np.float64, 5 * k).reshape(k, 5).T
    cols[_START], cols[_DRAFT], cols[_VERIFY], cols[_EMITTED] = start, draft, verify, emitted
    np.add(draft, verify, out=cols[_DURATION])
    np.subtract(emitted, n, out=cols[_ACCEPTED])  # accepted: the emissions less one each
    np.divide(cols[_KV_USED], replica.limits.kv_blocks, out=cols[_OCCUPANCY])
    # u tokens each: u (x + (u + 1) / 2) pairs at context x (whole numbers, exact)
    np.add(sums, n * u, out=cols[_KV_READ])
    np.add(u * sums, n * (u * (u + 1) // 2), out=cols[_PAIRS])
