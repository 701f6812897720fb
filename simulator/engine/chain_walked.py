"""``_short_lists``' iterations of a draft that walks its own draws and the acceptances in
one call (``DrawnDraft.walked``: a staged draft of a few requests, issue 36).

``chain_short._short`` hands such a pass here: the same checks, draws, prices and rows in
the same order as ``_short_lists`` takes them through ``_forms``' ``price`` and ``draw``
(``_walked_prices``' closures, before this module), with the layers between the pass and
the walk taken out: one ``DrawAhead.take_with`` an iteration gives the draft's seconds and
the requests' emissions (accepted + 1, as the walk returns them), the target's verification
by its closed form at the context sum (``chain_prices``) or ``step_time`` on the contexts.
"""
from __future__ import annotations

from operator import add as _ADD
from operator import floordiv as _FLOORDIV
from operator import ge as _GE
from operator import sub as _SUB

import numpy as np

from simulator.engine.chain_stretch import (
    _FULL,
    MAX_CHAIN_ITERATIONS,
    ChainCrossing,
    _crossing,
    chain_prices,
)
from simulator.engine.draw_ahead import DrawAhead
from simulator.engine.fast_forward import ADVANCED, NONE, RETIRED
from simulator.engine.plan import ChainStretch

_ANY = np.logical_or.reduce
_NEVER = float("inf")  # no draft context limit: a bound no context sum reaches


def walked_pass(replica, spec: ChainStretch, k_max: int, opened: tuple, chunks: int,
                commit) -> tuple[int, ChainCrossing | None] | None:
    """``_short``'s pass of ``spec.carried``'s walked draft (``_short_lists`` with
    ``_forms``' walked prices, its uniforms drawn ahead ``chunks`` iterations' most at a
    time), its iterations committed by ``commit`` (``_commit_rows``); None where the draft
    does not walk both draws in one call (``_forms`` then prices the pass)."""
    carried, n = spec.carried, int(replica.b.ids.size)
    batch = carried.batch_draws(n)
    if batch is None or batch.ahead is None:
        return None
    drawn = carried.drawn_draft_s(n)
    if drawn is None or drawn.walked is None:
        return None
    each = batch.most + drawn.most  # one take of both
    ahead = DrawAhead(replica.rng, each, each * min(k_max, chunks))
    prices = chain_prices(replica, spec, n)
    if prices is not None:
        verify = prices[1]
    else:
        tokens, step_time = np.full(n, float(spec.gamma + 1)), replica.target_cost.step_time
        verify = lambda ctx: step_time(  # noqa: E731
            tokens, np.array(ctx, np.float64), tokens)
    return _iterations(replica, spec, max(k_max, MAX_CHAIN_ITERATIONS), opened,
                       (drawn.walked, ahead, verify, prices is not None), commit)


def _iterations(replica, spec: ChainStretch, k_max: int, opened: tuple, walk: tuple,
                commit) -> tuple[int, ChainCrossing | None]:
    """``_short_lists``' loop over ``walk`` = (walked, its ``DrawAhead``, the verification's
    price, whether it is by the context sum): each iteration's emissions, running sums and
    contexts as lists of ints, the same checks in the same order."""
    (base, seq_max), b = opened, replica.b
    walked, ahead, verify, by_sum = walk
    g, bs, take = spec.gamma, replica.limits.block_size, ahead.take_with
    u, c0l = g + 1, b.computed.tolist()
    n, free = len(c0l), replica.limits.kv_blocks - base
    horizon, limit = replica.arrivals.horizon(replica.index), spec.max_context
    left = list(map(_SUB, b.output_len.tolist(), b.generated.tolist()))
    s, clock, got = sum(c0l), replica.now, [0] * n  # integers: exact, as numpy's sums
    # a request's blocks, ceil((c + u + got) / bs), as (c + u + bs - 1 + got) // bs (ints)
    cu, bss = list(map((u + bs - 1).__add__, c0l)), [bs] * n
    # the checks' bounds on the context sum s, ints (exact): (s + n u) // bs + n > free
    # from s >= (free - n + 1) bs - n u on; seq_max + min(k u, s - s0) >= limit where
    # both k u and s - s0 reach limit - seq_max; s - s0 >= the fewest any has left
    blocked, room = (free - n + 1) * bs - n * u, _NEVER if limit is None else limit - seq_max
    near, fewest = s + room, s + min(left)
    emits, gots, rows, cross, retired = [], [], [], False, False
    while len(emits) < k_max:  # the exact blocking on Python integers (exact, as numpy's)
        if s >= blocked and sum(map(_FLOORDIV, map(_ADD, cu, got), bss)) > free:
            break
        if s >= near and len(emits) * u >= room \
                and _ANY(b.prompt_len + b.generated + np.add(got, g) >= limit):
            break
        ctx = list(map(_ADD, c0l, got))
        d, emit = take(walked, ctx)  # the draft's draws, then the acceptances'
        v = verify(s) if by_sum else verify(ctx)
        end = clock + (d + v)
        if end >= horizon:
            cross = True
            break
        got = list(map(_ADD, got, emit))
        emitted = sum(emit)  # integers: exact
        emits.append(emit)
        gots.append(got)
        rows.append((clock, d, v, s, emitted))
        s, clock = s + emitted, end
        if s >= fewest and any(map(_GE, got, left)):
            retired = True
            break
    ahead.settle()  # the generator where this pass's iterations leave it
    if emits:
        commit(replica, spec, emits, gots, rows, clock, base, retired)
    if cross:
        return ADVANCED, _crossing(replica, spec, np.array(emit, np.int64), float(s), d, v)
    if not emits:
        return NONE, None
    return (RETIRED if retired else _FULL if len(emits) == k_max else ADVANCED), None
