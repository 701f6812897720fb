"""Fast-forward over a chain-speculation stretch: K iterations of ``chain`` in one pass.

Under ``chain`` (a draft model proposes gamma tokens per request, the target verifies gamma +
1, acceptance i.i.d. per request: ``iid`` or ``per_request``), a replica whose every running
request decodes repeats one kind of iteration until something changes the batch: a request
finishing, the next arrival, a request outgrowing the draft's context (it stops being
speculated), the KV cache running out (a preemption) or an admission.  Unlike a plain decode
stretch (fast_forward.py), the batch's contexts move by random amounts: each iteration draws
one uniform per request (the model's ``sample_chain``), and the accepted counts decide the next
iteration's contexts, hence its price.  ``advance_chain`` draws the uniforms of K iterations in
one ``rng.random((K, n))`` (the same numbers, in the same order, as K calls of
``rng.random(n)``), turns them into accepted counts element by element as ``sample_chain``
does for one iteration (``ChainStretch.accepted``), and from their running sums gets every
iteration's contexts, KV reservation, draft time (``chain_decode``'s closed form over the
gamma draft forwards) and verify time (the target's ``uniform_step_times`` at gamma + 1 tokens
a request), the clock, the emitted tokens, the ITL samples and the steps' rows.

Exactness: the stretch keeps the iterations the step-by-step engine would plan the same way:
every request speculable (prompt + generated + gamma < the draft's max context, vLLM's rule),
the reservation within the KV cache, ending before the next arrival, no admission possible
(checked before the first: the head's blocking only grows, as the reservation does), up to
and including the first iteration that finishes a request (emitted tokens capped at the
output length there, as ``emitted_tokens`` caps them).  The draws of the iterations not kept
are given back: the generator's state is restored and only the kept ones drawn again.  Same
floats in the same order throughout; tests compare the results with ``fast_forward: false``.

A stretch's first pass (up to 8 iterations: between two arrivals a stretch is a few) goes
iteration by iteration instead (chain_short.py, where ``advance_chain`` starts), priced by
``chain_prices``; a longer stretch continues here, in passes of 32, 128 and 256.
"""
from __future__ import annotations

import numpy as np

from simulator.engine.chain_few import FEW_REQUESTS, few_verify, opening_few
from simulator.engine.fast_forward import (
    ADVANCED,
    MAX_STRETCH_CELLS,
    NONE,
    RETIRED,
    admission_blocked,
)
from simulator.engine.plan import ChainStretch
from simulator.engine.step import STEP_FIELDS, StepRow

FIRST_PASS, MAX_CHAIN_ITERATIONS = 8, 256  # iterations per pass (more take more passes)
_COL = {name: i for i, name in enumerate(STEP_FIELDS)}
(_START, _DURATION, _DRAFT, _VERIFY, _EMITTED, _ACCEPTED, _KV_USED, _OCCUPANCY, _KV_READ,
 _PAIRS) = (_COL[name] for name in ("start_s", "duration_s", "draft_s", "verify_s",
                                    "emitted_tokens", "accepted_tokens", "kv_blocks_used",
                                    "kv_occupancy", "kv_read_tokens", "attn_pairs"))
_CONST = np.array([_COL[name] for name in ("replica", "batch_size", "num_decode",
                                             "decode_tokens", "draft_tokens", "queue_len")])
_ALL, _ANY, _MIN, _MAX, _SUM = (np.logical_and.reduce, np.logical_or.reduce,
                                np.minimum.reduce, np.maximum.reduce, np.add.reduce)
_FULL = 3  # a pass that kept all its iterations: the stretch may go on
NO_ROWS = 4  # a carried draft's pass had no rows to price (nothing done: go one by one)
_FEW_ROWS = 32  # up to this many rows a carried draft's verification is priced on floats


def chain_stretch_of(replica) -> ChainStretch | None:
    """The replica's policy's ``ChainStretch``, None where the policy has none, a prefix
    cache is on (its hooks) or the target's pricer declares no closed forms."""
    if replica.cache is not None or replica.forms is None:
        return None
    replica._chain_prices = {}  # chain_prices' memo, by batch size
    return replica.policy.chain_stretch()


def chain_prices(replica, spec: ChainStretch, n: int):
    """(draft, verify): the seconds of one chain iteration of ``n`` requests as functions of
    their context sum (Python floats), bitwise ``_times``'s; None where either has no such
    form (the draft's ``draft_pricer``, the target's ``uniform_pricer``); the draft's None
    where ``spec.carried`` prices it (from the contexts and acceptances).  Memoised."""
    memo = replica._chain_prices
    got = memo.get(n, memo)
    if got is memo:
        u, got = spec.gamma + 1, None
        draft = spec.draft_pricer(n) if spec.draft_pricer is not None else None
        verify = replica.forms.uniform_pricer(n, u, n * u) \
            if draft is not None or spec.carried is not None else None
        if verify is not None:
            got = (draft, verify)
        if len(memo) >= 1024:
            memo.clear()
        memo[n] = got
    return got


def _times(replica, spec: ChainStretch, n: int, sums: np.ndarray, ctx: np.ndarray,
           emit: np.ndarray, before: np.ndarray | None = None):
    """(draft, verify) seconds of chain iterations of ``n`` requests whose contexts sum to
    ``sums`` (``ctx``: each request's, (K, n); ``emit``: the accepted drafts + 1 drawn for
    them; ``before``: the emissions of the iteration before the first, None where that
    is the policy's last observed), bitwise what the step-by-step path prices; None where a
    closed form does not apply (the step-by-step path prices those).  A carried draft's
    rows come from its ``draft_rows``, each iteration re-reading what the one before
    accepted, and the target's verification, where it has no closed form (MLA's
    multi-token attention), from ``rows_step_times`` on the arrays the step-by-step path
    hands ``step_time``."""
    u = spec.gamma + 1
    if spec.carried is None:
        draft = spec.draft_times(n, sums)
    else:
        reread = np.empty(ctx.shape)
        reread[0] = spec.carried.reread_tokens(replica.b.ids) if before is None else before
        reread[1:] = emit[:-1]
        draft = spec.carried.draft_rows(replica.b.ids, ctx, reread)
    if draft is None:
        return None
    if spec.carried is not None and sums.size <= _FEW_ROWS:  # a few rows: the verify's
        prices = chain_prices(replica, spec, n)  # scalar pricer at each context sum (its
        if prices is not None:  # floats are the array form's, bitwise), not numpy's calls
            verify = prices[1]
            return draft, np.array([verify(s) for s in sums.tolist()], np.float64)
        if n < FEW_REQUESTS:  # no closed form (MLA's): each row on Python numbers
            verify = few_verify(replica.forms, n, float(u), ctx)
            if verify is not None:
                return draft, verify
    verify = replica.forms.uniform_step_times(n, u, sums.astype(np.float64), n * u)
    if verify is None and spec.carried is not None:
        verify = replica.forms.rows_step_times(np.full(ctx.shape, float(u)), ctx)
    return None if verify is None else (draft, np.asarray(verify, np.float64))


def _opening(replica, spec: ChainStretch) -> tuple[int, int] | None:
    """The stretch's first iteration's checks: None (no stretch) or (the KV blocks the
    running requests do not hold, ``base``; the longest context a draft reaches,
    max(prompt + generated) + gamma, 0 without a draft context limit).  Any failed check
    means no stretch, so their order is free: the admission attempt (the step-by-step path
    makes it in this very iteration, and the usual reason for no stretch right after an
    arrival) comes first, on numbers, then again at the exact reservation, before the
    batch's invariant and the draft's context are checked."""
    b, lim = replica.b, replica.limits
    n, g, bs = int(b.ids.size), spec.gamma, lim.block_size
    if not n or b.decoding != n or n * (g + 1) > lim.max_num_batched_tokens:
        return None
    # an admission first against a bound of the reservation, on numbers: each request holds
    # ceil(c / bs) blocks (the invariant tested below: where it fails there is no stretch
    # either) and needs at most ceil((g + 1) / bs) more; more blocks in use only make an
    # admission harder, so one that goes through at the bound goes through at the exact count
    if replica.waiting and not admission_blocked(
            replica, replica.used_blocks + n * ((g + bs) // bs), n * (g + 1)):
        return None
    if n < FEW_REQUESTS:  # a few: the same integers on lists
        return opening_few(replica, spec)
    c = b.computed  # ceil((c + g + 1) / bs) as (c + g + bs) // bs: integers, exact
    base = replica.used_blocks - int(_SUM(b.blocks))
    reserved = base + int(_SUM((c + (g + bs)) // bs))
    if reserved > lim.kv_blocks:
        return None
    if replica.waiting and not admission_blocked(replica, reserved, n * (g + 1)):
        return None
    if not _ALL(b.blocks == (c + (bs - 1)) // bs):  # the invariant every completion restores
        return None
    if spec.max_context is None:
        return base, 0
    seq_max = int(_MAX(b.prompt_len + b.generated)) + g  # every one < max_context: speculable
    return None if seq_max >= spec.max_context else (base, seq_max)


def _pass(replica, spec: ChainStretch, k_max: int,
          opened: tuple[int, int] | None = None) -> tuple[int, ChainCrossing | None]:
    """One pass of at most ``k_max`` iterations: (NONE, ADVANCED, RETIRED or _FULL, the
    crossing iteration or None); ``opened``: ``_opening``'s, where the caller has it."""
    if opened is None:
        opened = _opening(replica, spec)
    if opened is None:
        return NONE, None
    base, seq_max = opened
    b, lim = replica.b, replica.limits
    n, g, bs = int(b.ids.size), spec.gamma, lim.block_size
    k_max = min(k_max, int(_MIN(b.output_len - b.generated)), max(1, MAX_STRETCH_CELLS // n))
    rng = replica.rng
    counts = spec.accepted if spec.carried is None else spec.carried.chain_counts()
    if counts is None:  # a carried draft that draws iteration by iteration
        return NO_ROWS, None
    saved = rng.bit_generator.state
    emit = counts(rng.random((k_max, n)), b.ids)
    emit += 1  # the accepted drafts and the target's token (uncapped)
    got = np.add.accumulate(emit, axis=0)  # tokens emitted by each iteration's end
    ctx = b.computed + (got - emit)  # the contexts each iteration starts from
    sums = _SUM(ctx, axis=1)
    # (each test exact where its cheap bound does not clear every iteration: a request's
    # blocks are at most tokens / bs + 1; contexts and lengths only grow)
    blocked, free = k_max, lim.kv_blocks - base
    if (int(sums[-1]) + n * (g + 1)) // bs + n > free:
        blocked = _first(_SUM(-(-(ctx + (g + 1)) // bs), axis=1) > free, k_max)
    if spec.max_context is not None and seq_max + int(_MAX(got[-1])) >= spec.max_context:
        seq = b.prompt_len + b.generated + g
        blocked = _first(_ANY(ctx - b.computed + seq >= spec.max_context, axis=1), blocked)
    ends_at = _first(_ANY(got >= b.output_len - b.generated, axis=1), k_max) + 1
    horizon = replica.arrivals.horizon(replica.index)
    priced = _priced(replica, spec, n, sums, ctx, emit, min(blocked, ends_at), horizon)
    if priced is None:
        rng.bit_generator.state = saved
        return (NONE if spec.carried is None else NO_ROWS), None
    draft_s, verify_s, clock = priced
    # the iterations ending before the next arrival, and the first that cannot run here
    k_time = int(clock[1:].searchsorted(horizon, "left"))
    k = min(k_time, blocked, ends_at)
    cross = k == k_time < blocked and k < ends_at  # the next one crosses the arrival
    keep = k + cross
    if keep < k_max:  # give back the draws of the iterations not kept
        rng.bit_generator.state = saved
        if keep:
            rng.random((keep, n))
    if k:
        _commit(replica, spec, emit[:k], got[:k], sums[:k], clock[:k + 1], draft_s[:k],
                verify_s[:k], base, k == ends_at)
    if cross:
        return ADVANCED, _crossing(replica, spec, emit[k], float(sums[k]),
                                   float(draft_s[k]), float(verify_s[k]))
    if not k:
        return NONE, None
    return (RETIRED if k == ends_at else _FULL if k == k_max else ADVANCED), None


def _priced(replica, spec: ChainStretch, n: int, sums: np.ndarray, ctx: np.ndarray,
            emit: np.ndarray, rows: int, horizon: float):
    """(draft, verify, clock: the start and every end) of the pass's first iterations, at
    least up to the first that ends at or past ``horizon`` or all ``rows`` of them (the
    most it may keep: the rest are never priced); None where ``_times`` has no form.  A
    carried draft's rows (two forwards on arrays each) are priced 8, 32, 128... at a time
    until one ends past the horizon: each row's price is its own, however many are asked."""
    if spec.carried is None:
        times = _times(replica, spec, n, sums, ctx, emit)
        if times is None:
            return None
        durations = times[0] + times[1]
        return times[0], times[1], np.add.accumulate(np.concatenate(((replica.now,),
                                                                     durations)))
    drafts, verifies, clocks, done, size, last = [], [], [], 0, 8, replica.now
    while done < rows:
        end = min(done + size, rows)
        times = _times(replica, spec, n, sums[done:end], ctx[done:end], emit[done:end],
                       None if not done else emit[done - 1])
        if times is None:
            return None
        drafts.append(times[0])
        verifies.append(times[1])
        # the same running sum, continued from the last end (the first chunk's with the start)
        clock = np.add.accumulate(np.concatenate(((last,), times[0] + times[1])))
        clocks.append(clock[1:] if clocks else clock)
        done, size, last = end, 4 * size, clock[-1]
        if last >= horizon:
            break
    if not drafts:  # no iteration can run here (the KV cache): nothing to price
        return np.zeros(0), np.zeros(0), np.array([replica.now])
    if len(drafts) == 1:  # one chunk (most passes): its arrays as they are
        return drafts[0], verifies[0], clocks[0]
    return np.concatenate(drafts), np.concatenate(verifies), np.concatenate(clocks)


def _first(flags: np.ndarray, default: int) -> int:
    """The index of the first True in ``flags``, ``default`` if none (or if later)."""
    return min(int(flags.argmax()), default) if _ANY(flags) else default


class ChainCrossing:
    """The chain iteration that crosses the next arrival: planned (its KV reserved) and
    priced before it, with its accepted drafts already drawn (+1 each, uncapped); the
    replica yields to SimPy until it ends, then ``complete_crossing`` completes it."""

    __slots__ = ("start_s", "draft_s", "verify_s", "duration_s", "emit", "sums", "spec")

    def __init__(self, start_s, draft_s, verify_s, emit, sums, spec) -> None:
        self.spec = spec  # the ChainStretch whose iteration it is (complete_crossing's)
        self.start_s = start_s
        self.draft_s = draft_s
        self.verify_s = verify_s
        self.duration_s = draft_s + verify_s  # Step.duration_s: draft, then verify
        self.emit = emit
        self.sums = sums


def _crossing(replica, spec: ChainStretch, emit: np.ndarray, sums: float, draft_s: float,
              verify_s: float) -> ChainCrossing:
    """Reserve the crossing iteration's KV as ``_reserve_decodes`` does (checked to fit:
    every decode gets the blocks its context + gamma + 1 tokens need)."""
    b, bs = replica.b, replica.limits.block_size
    blocks = (b.computed + (spec.gamma + bs)) // bs  # ceil((computed + gamma + 1) / bs)
    replica.used_blocks += int(_SUM(blocks - b.blocks))
    b.blocks[:] = blocks
    return ChainCrossing(replica.now, draft_s, verify_s, emit, sums, spec)


def complete_crossing(replica, spec: ChainStretch, step: ChainCrossing, now: float) -> None:
    """Complete the crossing iteration at ``now`` as ``Completion._complete`` completes a
    chain step: emit (never past the output length), roll back the rejected drafts' KV,
    retire, record the row (the queue as it is after the arrivals it crossed)."""
    b, lim = replica.b, replica.limits
    n, g, bs = int(b.ids.size), spec.gamma, lim.block_size
    accepted = step.emit - 1
    emitted = np.minimum(step.emit, b.output_len - b.generated)
    replica.rec.record_itl_shared(now - b.last_emit)
    b.generated += emitted
    b.computed += emitted
    b.last_emit.fill(now)
    decoded = int(_SUM(emitted))
    replica.outstanding_tokens -= decoded
    b.num_drafts += 1
    b.num_draft_tokens += g
    b.num_accepted += accepted
    replica.rec.record_acceptance_of(g, accepted)
    if spec.carried is not None:  # what its observe would have seen
        spec.carried.observe_accepted(b.ids, accepted)
    keep = (b.computed + (bs - 1)) // bs
    replica.used_blocks -= int(_SUM(b.blocks - keep))
    b.blocks[:] = keep
    replica._retire(now)
    used, u = replica.used_blocks, g + 1
    replica.rec.record_step(StepRow(
        replica.index, step.start_s, step.duration_s, step.draft_s, step.verify_s, n, 0, n,
        0, n * u, decoded, n * g, int(_SUM(accepted)), used, used / lim.kv_blocks,
        len(replica.waiting), step.sums + n * u, u * step.sums + n * (u * (u + 1) // 2), 0))


def _commit(replica, spec: ChainStretch, emit: np.ndarray, got: np.ndarray,
            sums: np.ndarray, clock: np.ndarray, draft_s: np.ndarray, verify_s: np.ndarray,
            base: int, retired: bool) -> None:
    """Move the batch ``len(emit)`` iterations on (``emit``: accepted + 1 per request and
    iteration, ``got`` its running sums), record them, retire the last one's finishers."""
    b, lim = replica.b, replica.limits
    k, n, g, bs = emit.shape[0], int(b.ids.size), spec.gamma, lim.block_size
    accepted = emit - 1
    if retired:  # the last iteration's emissions, never past the output length
        last = got[-1] - emit[-1]
        emit[-1] = np.minimum(emit[-1], b.output_len - b.generated - last)
        got[-1] = last + emit[-1]
    ends = clock[1:]
    first = ends[0] - b.last_emit
    replica.rec.record_itl_shared(first)
    if k > 1:  # every decode shares the gap between two iterations' ends
        replica.rec.record_itl_repeated(ends[1:] - ends[:-1], n)
    replica.rec.record_acceptance_of(g, accepted.ravel())
    used = base + _SUM((got + (b.computed + (bs - 1))) // bs, axis=1)  # after each roll-back
    u = g + 1
    cols = np.zeros((len(STEP_FIELDS), k))
    cols[_CONST] = np.array((replica.index, n, n, n * u, n * g, len(replica.waiting)),
                            np.float64)[:, None]
    cols[_START] = clock[:-1]
    cols[_DURATION] = draft_s + verify_s
    cols[_DRAFT] = draft_s
    cols[_VERIFY] = verify_s
    cols[_EMITTED] = _SUM(emit, axis=1)
    cols[_ACCEPTED] = _SUM(accepted, axis=1)
    cols[_KV_USED] = used
    # u tokens each: u (x + (u + 1) / 2) pairs at context x, whole numbers
    cols[_KV_READ] = sums + n * u
    cols[_PAIRS] = u * sums + n * (u * (u + 1) // 2)
    if move_on(replica, spec, k, got[-1], _SUM(accepted, axis=0), accepted[-1],
               int(used[-1]), float(ends[-1]), retired):
        cols[_KV_USED, -1] = replica.used_blocks  # the last row reads the KV retirements freed
    np.divide(cols[_KV_USED], lim.kv_blocks, out=cols[_OCCUPANCY])
    replica.rec.record_steps(cols.T)


def move_on(replica, spec: ChainStretch, k: int, total: np.ndarray, accepted: np.ndarray,
            last: np.ndarray, used: int, end: float, retired: bool) -> bool:
    """Move the batch ``k`` chain iterations on, to ``end``: ``total`` tokens emitted and
    ``accepted`` drafts accepted per request (``last``: the last iteration's, uncapped),
    ``used`` KV blocks in use after the last roll-back; retire the last iteration's
    finishers (``retired``: some) as its completion does.  Returns ``retired``."""
    b, bs = replica.b, replica.limits.block_size
    if spec.carried is not None:  # what its observe would have seen, before retirements
        spec.carried.observe_accepted(b.ids, last)
    b.generated += total
    b.computed += total
    np.floor_divide(b.computed + (bs - 1), bs, out=b.blocks)
    b.last_emit.fill(end)
    b.num_drafts += k
    b.num_draft_tokens += k * spec.gamma
    b.num_accepted += accepted
    replica.used_blocks = used
    replica.outstanding_tokens -= int(sum(total.tolist()) if total.size < 64 else _SUM(total))
    replica.now = end
    replica.stats["iterations"] += k
    replica.stats["vectorised"] += k
    if retired:
        replica._retire(end)
    return retired
