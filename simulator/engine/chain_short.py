"""A chain stretch's first pass, iteration by iteration (``advance_chain`` starts here).

Between two arrivals a chain stretch (chain_stretch.py) is a few iterations: on the Azure
conversation trace about three.  Its vectorised pass draws 8 iterations' uniforms at once,
gives back the ones it does not keep (the generator's state saved and restored) and builds
its rows as a column block, a fixed cost that dominates such short stretches.  ``_short``
takes the first (up to 8) iterations one at a time instead:

- each iteration's checks (the KV reservation, the draft's context: ``_pass``'s, exact where
  their cheap bounds do not clear them) come before its draws, so nothing is given back;
- its price comes from ``chain_prices`` (the draft's and the target's closed forms as
  functions of the context sum, bitwise ``_times``'s);
- its row is built from Python numbers and the iterations are committed by
  ``_commit_rows``, which moves the batch as ``_commit`` does, the same values in the same
  order (the ITL gaps every decode of an iteration shares recorded as runs: the samples are
  sorted or binned, their order does not show).

Where the prices have no scalar form it hands over to ``_pass``; a stretch that goes on past
8 iterations continues in vectorised passes of 32, 128 and 256.  Where a few requests walk a
tree from uniforms drawn ahead (``DrawAhead``), ``_short_lists`` takes those iterations with
each request's counts as lists of ints (the walk's own), the same values in the same order:
numpy's per-call cost is most of an operation on a few elements.

A draft priced from the previous iteration's acceptances too (``ChainStretch.carried``: the
feature-level drafters, whose first forward re-reads the tokens the target accepted) takes
every pass here, iteration by iteration: each iteration's draft price comes from its
contexts and the acceptances drawn the iteration before (``CarriedDraft.iteration_draft_s``,
bitwise ``propose``'s), the target's verification from its closed form or, where it has
none (MLA's multi-token attention), from ``step_time`` on the arrays the step-by-step path
hands it; its acceptances are the policy's own draws (``draw_accepted``: a chain's or a
tree's, from the replica's generator in the step-by-step order), and the policy is told the
last iteration's (``observe_accepted``), as its ``observe`` would have been.

Such a draft whose only draws are one uniform a request and iteration and whose prices come
as rows (``CarriedDraft.chain_counts`` and ``draft_rows``: a feature drafter's chain) takes
the vectorised ``_pass`` instead, from the first pass on: an iteration of it costs two
forwards priced on arrays (its first forward and the target's verification), which rows
price at a fraction of the cost; ``_pass`` prices its rows 8, 16, 32... at a time until one
ends past the next arrival, and gives back the draws of those it does not keep.
"""
from __future__ import annotations

from operator import add as _ADD, ge as _GE

import numpy as np

from simulator.engine.chain_few import FEW_REQUESTS
from simulator.engine.chain_lists import counts, list_prices, rows_lists, step_columns
from simulator.engine.chain_stretch import (
    _FULL,
    FIRST_PASS,
    MAX_CHAIN_ITERATIONS,
    NO_ROWS,
    ChainCrossing,
    _crossing,
    _opening,
    _pass,
    chain_prices,
    move_on,
)
from simulator.engine.chain_walked import walked_pass
from simulator.engine.draw_ahead import DrawAhead
from simulator.engine.fast_forward import ADVANCED, NONE, RETIRED
from simulator.engine.plan import ChainStretch, DrawnDraft
from simulator.engine.step import STEP_FIELDS

_ANY, _MIN, _SUM = np.logical_or.reduce, np.minimum.reduce, np.add.reduce
_EMITTED, _KV_USED = (STEP_FIELDS.index(f) for f in ("emitted_tokens", "kv_blocks_used"))
_FEW = 64
_AHEAD = 4  # iterations' most uniforms a chunk holds (a walk takes a few levels of its depth)
# where the draft draws too, its most is far above what it takes (staged.yaml: a pass took 51
# uniforms on average, of 115 drawn in chunks of 4 iterations' most): 2 iterations' most
_AHEAD_DRAWN = 2
# a row-priced carried draft's first pass: ``_pass`` prices its rows 8, 16... at a time up
# to the next arrival, so a short stretch prices no more rows in a longer pass (its draws
# and bounds are a few more numbers), while a long one (eagle3_moe.yaml's first passes of 8:
# 210 of 526 kept all 8) saves a pass: its opening, draws, commit and the KV and acceptance
# bookkeeping (instruction counts: about 8% of that scenario's simulate())
FIRST_ROWS = 32


def advance_chain(replica, spec: ChainStretch) -> tuple[int, ChainCrossing | None]:
    """Advance ``replica`` over the chain stretch ahead: NONE if there is none, RETIRED if
    its last iteration finished requests, ADVANCED otherwise, with the iteration that
    crosses the next arrival planned and priced (``ChainCrossing``) where it is a chain
    iteration too, else None (the next iteration goes through the step-by-step path).
    The first pass takes up to 8 iterations one by one (``_short``), the next ones four
    times as many each, vectorised (``_pass``); a row-priced carried draft's first pass is
    vectorised too, of up to ``FIRST_ROWS``."""
    done, k = NONE, FIRST_PASS
    step = _short if spec.carried is None else _rows_or_short
    if spec.carried is not None and spec.carried.chain_counts() is not None:
        k = FIRST_ROWS  # vectorised from the first pass: its rows priced 8, 16... at a time
    while (got := step(replica, spec, k))[0] == _FULL:
        done, k = ADVANCED, min(4 * k, MAX_CHAIN_ITERATIONS)
        if spec.carried is None:
            step = _pass
    return (done, None) if got[0] == NONE else got


def _rows_or_short(replica, spec: ChainStretch, k_max: int) -> tuple[int, ChainCrossing | None]:
    """A carried draft's pass: vectorised (``_pass``) where its draws and prices come as rows
    (``CarriedDraft.chain_counts`` and ``draft_rows``: a feature drafter's chain, each
    iteration costing two forwards priced on arrays), else ``_short``."""
    if spec.carried.chain_counts() is None:  # drawn iteration by iteration
        return _short(replica, spec, k_max)
    if k_max <= FIRST_ROWS and replica.b.ids.size < FEW_REQUESTS:  # a few: on lists
        got = _lists(replica, spec, k_max)
        if got is not None:
            return got
    got = _pass(replica, spec, k_max)
    return _short(replica, spec, k_max) if got[0] == NO_ROWS else got


def _lists(replica, spec: ChainStretch, k_max: int) -> tuple[int, ChainCrossing | None] | None:
    """``_pass`` of a few requests on lists (chain_lists.py), None where its prices have no
    such form (the caller takes ``_pass``)."""
    opened = _opening(replica, spec)
    if opened is None:
        return NONE, None
    prices = list_prices(replica, spec, int(replica.b.ids.size))
    if prices is None:
        return None
    k, retired, cross, full = rows_lists(replica, spec, k_max, opened, prices, _commit_rows)
    if cross is not None:
        emit, s, d, v = cross
        return ADVANCED, _crossing(replica, spec, np.array(emit, np.int64), float(s), d, v)
    if not k:
        return NONE, None
    return (RETIRED if retired else _FULL if full else ADVANCED), None


def _short(replica, spec: ChainStretch, k_max: int) -> tuple[int, ChainCrossing | None]:
    """``_pass`` iteration by iteration (see the module docstring)."""
    opened = _opening(replica, spec)
    if opened is None:
        return NONE, None
    base, seq_max = opened
    b = replica.b
    n, g, bs = int(b.ids.size), spec.gamma, replica.limits.block_size
    u, c0, ids, rng = g + 1, b.computed, b.ids, replica.rng
    if spec.carried is not None and (walked := walked_pass(  # a staged draft's walk
            replica, spec, k_max, opened, _AHEAD_DRAWN, _commit_rows)) is not None:
        return walked
    forms = _forms(replica, spec, n, k_max)
    if forms is None:
        return _pass(replica, spec, k_max, opened)
    draft, verify, price, draw, ahead, _ = forms
    if ahead is not None:  # a few requests walking uniforms drawn ahead: lists, in one pass
        return _short_lists(replica, spec, max(k_max, MAX_CHAIN_ITERATIONS), opened, forms)
    last = None if price is None else spec.carried.reread_tokens(ids)
    left, free = b.output_len - b.generated, replica.limits.kv_blocks - base
    horizon = replica.arrivals.horizon(replica.index)
    s, clock, got = int(_SUM(c0)), replica.now, 0
    # none has finished while all emitted, s - s0, is below the fewest any has left; a few
    s0, fewest, few = s, int(_MIN(left)), n <= _FEW  # integers sum faster as a list
    emits, gots, rows, cross, retired = [], [], [], False, False  # as _commit_rows takes them
    while len(emits) < k_max:
        # _pass's blocking, exact where the bound does not clear it (got <= u k each)
        if (s + n * u) // bs + n > free and int(_SUM(-(-(c0 + got + u) // bs))) > free:
            break
        # a request's tokens so far are at most u a pass and at most all of them, s - s0
        if spec.max_context is not None \
                and seq_max + min(len(emits) * u, s - s0) >= spec.max_context \
                and _ANY(b.prompt_len + b.generated + (g + got) >= spec.max_context):
            break
        # priced before the draws (propose, then accept); the contexts once, where needed
        ctx = None if draft is not None else c0 + got
        d, v = (draft(s), verify(s)) if ctx is None else price(s, ctx, last)
        emit = draw(rng, got, ctx)
        end = clock + (d + v)
        emit += 1
        last = emit
        if end >= horizon:  # the next arrival comes first: this one crosses it
            cross = True
            break
        got = got + emit
        emitted = int(sum(emit.tolist())) if few else int(_SUM(emit))  # integers: exact
        emits.append(emit)
        gots.append(got)
        rows.append((clock, d, v, s, emitted))
        s, clock = s + emitted, end
        if s - s0 >= fewest and _ANY(got >= left):
            retired = True
            break
    if emits:
        _commit_rows(replica, spec, emits, gots, rows, clock, base, retired)
    if cross:
        return ADVANCED, _crossing(replica, spec, emit, float(s), d, v)
    if not emits:
        return NONE, None
    return (RETIRED if retired else _FULL if len(emits) == k_max else ADVANCED), None


def _short_lists(replica, spec: ChainStretch, k_max: int, opened: tuple,
                 forms: tuple) -> tuple[int, ChainCrossing | None]:
    """``_short``'s iterations where a few requests walk a tree from uniforms drawn ahead
    (``forms``' ``DrawAhead``): the same checks, prices and draws in the same order, each
    iteration's counts, running sums and the contexts' re-read tokens kept as lists of ints
    (the walk's own; numpy's per-call cost is most of an array op of a few elements),
    committed as ``_short`` commits them."""
    (base, seq_max), b = opened, replica.b
    n, g, bs = int(b.ids.size), spec.gamma, replica.limits.block_size
    u, c0, (draft, verify, price, draw, ahead, listed) = g + 1, b.computed, forms
    take = ahead.take  # draw: the walk it takes the next uniforms by
    last = None if price is None else spec.carried.reread_tokens(b.ids).tolist()
    # listed: a drawn draft priced from its contexts as lists of ints (not few's form)
    few, c0l = None if listed else _few_prices(replica, spec, n, price), c0.tolist()
    few_draft, few_verify = (None, None) if few is None else few
    left, free = (b.output_len - b.generated).tolist(), replica.limits.kv_blocks - base
    horizon, limit = replica.arrivals.horizon(replica.index), spec.max_context
    s, clock, got, ones = sum(c0l), replica.now, [0] * n, [1] * n  # ints: exact, as numpy's
    s0, fewest, cu = s, min(left), [c + u for c in c0l]
    emits, gots, rows, cross, retired = [], [], [], False, False
    while len(emits) < k_max:  # the exact blocking on Python integers (exact, as numpy's)
        if (s + n * u) // bs + n > free and sum([-(-(c + a) // bs) for c, a in zip(
                cu, got)]) > free:
            break
        if limit is not None and seq_max + min(len(emits) * u, s - s0) >= limit \
                and _ANY(b.prompt_len + b.generated + np.add(got, g) >= limit):
            break
        if few is not None:  # the contexts as a list too
            ctx, v = None, few_verify(s)
            d = few_draft(list(map(_ADD, c0l, got)), last)
        else:
            ctx = None if draft is not None else c0 + got if not listed else \
                [c + a for c, a in zip(c0l, got)]
            d, v = (draft(s), verify(s)) if ctx is None else price(s, ctx, last)
        emit = list(map(_ADD, take(draw), ones))  # the walk's accepted + 1 each
        end = clock + (d + v)
        last = emit
        if end >= horizon:
            cross = True
            break
        got = list(map(_ADD, got, emit))
        emitted = sum(emit)  # integers: exact
        emits.append(emit)
        gots.append(got)
        rows.append((clock, d, v, s, emitted))
        s, clock = s + emitted, end
        if s - s0 >= fewest and any(map(_GE, got, left)):
            retired = True
            break
    ahead.settle()  # the generator where this pass's iterations leave it
    if emits:
        _commit_rows(replica, spec, emits, gots, rows, clock, base, retired)
    if cross:
        return ADVANCED, _crossing(replica, spec, np.array(emit, np.int64), float(s), d, v)
    if not emits:
        return NONE, None
    return (RETIRED if retired else _FULL if len(emits) == k_max else ADVANCED), None


def _forms(replica, spec: ChainStretch, n: int, k_max: int):
    """(draft, verify, price, draw, ahead, listed) of ``_short``'s iterations of ``n``
    requests: the draft's and the target's seconds as functions of the context sum where
    both have one (``chain_prices``; a carried draft's ``sum_draft_s``), else ``price(s,
    ctx, last)`` (``_carried_prices``; ``_drawn_prices`` where the draft draws from uniforms
    drawn ahead, ``listed``: its ``ctx`` a list of ints) with the other two None;
    ``draw(rng, got, ctx)`` an iteration's acceptances (a carried draft's ``BatchDraws``,
    through ``ahead``, a ``DrawAhead`` that ``_short_lists`` settles, where it takes
    uniforms drawn ahead: its counts a list; there ``draw`` is the walk itself, ``ahead.take``'s
    argument).  None where an uncarried chain has no scalar prices."""
    carried, ids, c0 = spec.carried, replica.b.ids, replica.b.computed
    if carried is None:
        prices = chain_prices(replica, spec, n)
        accepted = spec.accepted
        return None if prices is None else \
            (*prices, None, lambda rng, got, ctx: accepted(rng.random(n), ids), None, False)
    batch, by_sum, ahead, drawn = carried.batch_draws(n), carried.sum_draft_s(n), None, None
    if batch is None:
        draw = lambda rng, got, ctx: carried.draw_accepted(
            rng, ids, c0 + got if ctx is None else ctx)
    elif batch.ahead is None:
        draw = lambda rng, got, ctx: batch.draw(rng)
    else:  # a chunk of about _AHEAD iterations' most at a time (the draft's own draws too)
        drawn = carried.drawn_draft_s(n)  # (one that walks both: chain_walked.py's)
        most = batch.most if drawn is None else max(batch.most, drawn.most)
        each, chunks = (batch.most, _AHEAD) if drawn is None else \
            (batch.most + drawn.most, _AHEAD_DRAWN)
        ahead = DrawAhead(replica.rng, most, each * min(k_max, chunks))
        draw = batch.ahead  # _short_lists' walk: ahead.take(draw), no lambda an iteration
    if drawn is not None:  # priced from the contexts and the uniforms drawn ahead
        return None, None, _drawn_prices(replica, spec, n, drawn, ahead), draw, ahead, True
    prices = None if by_sum is None else chain_prices(replica, spec, n)
    if prices is not None:  # priced from the sum _short keeps, bitwise propose's
        return by_sum, prices[1], None, draw, ahead, False
    # priced from the contexts and the last acceptances
    return None, None, _carried_prices(replica, spec, n), draw, ahead, False


def _drawn_prices(replica, spec: ChainStretch, n: int, drawn: DrawnDraft, ahead: DrawAhead):
    """``_carried_prices``' ``price(s, ctx, last)`` of a draft that draws (``drawn``), its
    uniforms taken from ``ahead`` before the acceptances' (``propose``'s draws, then
    ``accept``'s), ``ctx`` a list of ints; the target's verification as there."""
    prices, price = chain_prices(replica, spec, n), drawn.price
    if prices is not None:
        verify = prices[1]
        return lambda s, ctx, last: (ahead.take(lambda d, at: price(ctx, d, at)), verify(s))
    tokens, step_time = np.full(n, float(spec.gamma + 1)), replica.target_cost.step_time
    return lambda s, ctx, last: (ahead.take(lambda d, at: price(ctx, d, at)),
                                 step_time(tokens, np.array(ctx, np.float64), tokens))


def _few_prices(replica, spec: ChainStretch, n: int, price):
    """(draft, verify) of ``_short_lists``' iterations where ``price`` prices them from
    the contexts and the carried draft prices ``n`` requests on lists
    (``CarriedDraft.few_draft_s``) and the target by its closed form (``chain_prices``):
    ``draft(context, last)`` on lists of ints, ``verify(s)``, bitwise ``price``'s two;
    None elsewhere."""
    draft = None if price is None else spec.carried.few_draft_s(n)
    prices = None if draft is None else chain_prices(replica, spec, n)
    return None if prices is None else (draft, prices[1])


def _carried_prices(replica, spec: ChainStretch, n: int):
    """``price(s, ctx, last)``: the (draft, verify) seconds of one iteration of ``n``
    requests at contexts ``ctx`` (summing to ``s``) that accepted ``last`` - 1 drafts last
    time, under a draft ``spec.carried`` prices: the target's verification by its closed
    form where it has one, else by ``step_time`` on the arrays ``Forward._forward`` hands it
    (a pure-decode step), bitwise what the step-by-step path prices."""
    draft, prices = spec.carried.iteration_draft_s, chain_prices(replica, spec, n)
    rng = replica.rng
    ids = replica.b.ids  # the batch's, unchanged while the stretch's iterations are priced
    if prices is not None:
        verify = prices[1]
        return lambda s, ctx, last: (draft(ids, ctx, last, rng), verify(s))
    tokens, step_time = np.full(n, float(spec.gamma + 1)), replica.target_cost.step_time
    return lambda s, ctx, last: (draft(ids, ctx, last, rng),
                                 step_time(tokens, ctx.astype(np.float64), tokens))


def _commit_rows(replica, spec: ChainStretch, emits: list, gots: list, rows: list,
                 end: float, base: int, retired: bool) -> None:
    """``_commit`` of ``_short``'s iterations: ``emits`` (accepted + 1 per request, uncapped)
    and ``gots`` (their running sums) per iteration, ``rows`` their (start, draft, verify,
    context sum, tokens emitted uncapped), ``end`` the last one's end."""
    b, lim, rec = replica.b, replica.limits, replica.rec
    k, n, g, bs = len(emits), int(b.ids.size), spec.gamma, lim.block_size
    emits, gots = counts(emits, k, n), counts(gots, k, n)  # (k, n)
    rec.record_acceptance_of(g, emits.ravel() - 1)  # the rows in order, concatenated
    num_accepted = gots[-1] - k  # the accepted drafts of each request, in all
    capped = rows[-1][4]  # the last iteration's tokens emitted
    if retired:  # its emissions, never past the output length
        last = gots[-1] - emits[-1]
        emit = np.minimum(emits[-1], b.output_len - b.generated - last)
        gots[-1] = last + emit
        capped = int(_SUM(emit))
    first_end = rows[1][0] if k > 1 else end
    rec.record_itl_shared(first_end - b.last_emit)
    if k > 1:  # every decode shares the gap between two iterations' ends (the samples are
        # sorted or binned: one call for all, the same differences)
        ends = np.array([row[0] for row in rows[1:]] + [end])
        rec.record_itl_repeated(ends[1:] - ends[:-1], n)
    # after the roll-backs: ceil((computed + got) / bs) blocks each (integers: exact)
    used = base + _SUM((gots + (b.computed + (bs - 1))) // bs, axis=1)
    cols = np.zeros((len(STEP_FIELDS), k))
    cols[_KV_USED] = used
    if move_on(replica, spec, k, gots[-1], num_accepted, emits[-1] - 1, int(used[-1]), end,
               retired):
        cols[_KV_USED, -1] = replica.used_blocks  # the last row reads the KV retirements freed
    step_columns(cols, replica, n, g, rows)
    cols[_EMITTED, -1] = capped
    rec.record_steps(cols.T)
