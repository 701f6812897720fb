"""Fast-forward of an ``AheadDraft`` (plan.py): K varied iterations planned, priced and
recorded at once.

A model-free proposer (``prompt_lookup``, ``lookahead``, ``suffix``) plans each request's
iterations from its own text alone: with no draws and nothing observed between them, the next
K iterations of a batch whose every request decodes are known before any is run
(``plan_rows``).  ``advance_rows``
takes them as varied_stretch.py takes them one by one, operation for operation, but on
(K, n) arrays: each request's contexts by the running sum of what it emits; the KV checks
(``_opens``: every request verifying its most tokens fits; with nobody waiting) and the
reservation and roll-back of each iteration; the target's verification of every row by
``rows_step_times`` (bitwise ``step_time`` on the arrays each iteration hands it); the clock
by the running sum of the iterations' durations; the emissions, the ITL gaps, the
acceptance counts and the steps' rows.  It keeps the iterations before the first that
finishes a request, crosses the next arrival or fails a check -- those, and any with a
queue, go through varied_stretch.py's one-by-one path, which completes or hands them back.

Exactness: the same integers (contexts, blocks, tokens) and the same floats from the same
operations (durations added one after another; row sums of whole numbers, exact in any
order); tests compare the results with ``fast_forward: false``.
"""
from __future__ import annotations

import numpy as np

from simulator.engine.plan import AheadDraft
from simulator.engine.step import STEP_FIELDS

FIRST_ROWS, MOST_ROWS = 8, 256  # rows planned in a pass: doubled after a pass kept them all
_SUM, _ANY, _ALL = np.add.reduce, np.logical_or.reduce, np.logical_and.reduce
_CUMSUM = np.add.accumulate


def next_rows(replica, planned: int, kept: int, took: float) -> int:
    """The rows to plan next after a pass that ``kept`` of ``planned`` rows in ``took``
    seconds: 0 where it stopped short (the next iteration goes one by one), else twice as
    many, at most those that the pass's pace fits before the next arrival and one more
    (rows planned past the pass's end are work thrown away)."""
    if kept < planned:
        return 0
    return _fitting(replica, min(2 * planned, MOST_ROWS), took / kept)


def restart_rows(replica, pace: float) -> int:
    """The rows to plan first, or after an iteration taken one by one, at ``pace`` seconds
    a row (an earlier pass's, or ``busiest_pace``; 0.0: none known): as many as that pace
    fits before the next arrival and one more, at least ``FIRST_ROWS``.  A pass ends at the
    first row that finishes a request without planning past it, so only the arrival bounds
    the rows thrown away."""
    if pace <= 0.0:
        return FIRST_ROWS
    return max(FIRST_ROWS, _fitting(replica, MOST_ROWS, pace))


def busiest_pace(replica, u_max: int) -> float:
    """The seconds of an iteration in which every running request verifies its most tokens
    (``u_max``) at its context now, priced by the replica's closed forms (pure functions;
    0.0 without them): a pace for a stretch's first pass that a busier iteration than any
    it runs makes slow, so that ``restart_rows`` plans fewer rows than fit before the next
    arrival, hardly ever more.  A uniform batch: its closed form on Python numbers
    (``uniform_step_time``, bitwise ``step_time`` as ``rows_step_times`` is; the contexts
    are whole numbers, so their sum is exact), else a row of ``rows_step_times``."""
    b, forms = replica.b, replica.forms
    n = int(b.ids.size)
    if forms is None or not n:
        return 0.0
    pace = forms.uniform_step_time(n, u_max, float(sum(b.computed.tolist())), n * u_max)
    if pace is not None:
        return pace
    most = np.full((1, n), float(u_max))
    return float(forms.rows_step_times(most, b.computed.astype(np.float64)[None, :])[0])


def _fitting(replica, most: int, pace: float) -> int:
    """``most`` rows, or fewer: those that ``pace`` fits before the next arrival, and one
    more."""
    left = replica.arrivals.horizon(replica.index) - replica.now
    fit = left / pace if pace > 0.0 else float("inf")
    return most if fit >= most else max(1, int(fit) + 1)


def advance_rows(replica, spec: AheadDraft, steps: int) -> int:
    """Complete up to ``steps`` of ``replica``'s next iterations at once (the first of them
    already past ``_opens``); returns how many (0: take the next one by one)."""
    b, lim = replica.b, replica.limits
    bs, c0 = lim.block_size, b.computed
    if replica.waiting or replica.forms is None or \
            not _ALL(b.blocks == (c0 + (bs - 1)) // bs):  # the roll-back's invariant
        return 0
    steps = min(steps, int((b.output_len - b.generated).min()))  # >= 1 token each
    rows = spec.plan_rows(b.ids, b.generated, b.output_len, steps, replica.rng)
    if rows is None:
        return 0
    k = _kept(replica, spec, rows)
    spec.keep_rows(k)
    return k


def _kept(replica, spec: AheadDraft, rows) -> int:
    """How many of ``rows`` run here (the iterations before the first that finishes a
    request, fails ``_opens``'s KV check or crosses the next arrival), all committed."""
    steps = int(rows.accepted.shape[0])
    b, lim = replica.b, replica.limits
    bs, c0 = lim.block_size, b.computed
    emit = rows.accepted + 1  # what each request emits in the rows before it finishes
    got = _CUMSUM(emit, axis=0)  # emitted by each iteration's end (uncapped)
    ctx = c0 + (got - emit)  # the contexts each iteration starts from
    left = b.output_len - b.generated
    finishing = _ANY(got >= left, axis=1)  # the first such row is done one by one
    u_max = spec.max_verify_tokens
    base = replica.used_blocks - int(_SUM(b.blocks))
    most = base + _SUM(-(-(ctx + u_max) // bs), axis=1)  # ``_opens``'s KV check, per row
    usable = _first(finishing | (most > lim.kv_blocks), steps)
    if not usable:
        return 0
    verify = rows.verify_tokens[:usable]
    fctx, fver = ctx[:usable].astype(np.float64), verify.astype(np.float64)
    verify_s = np.asarray(replica.forms.rows_step_times(fver, fctx), np.float64)
    durations = rows.seconds[:usable] + verify_s
    clock = _CUMSUM(np.concatenate(((replica.now,), durations)))
    k = min(usable, int(clock[1:].searchsorted(replica.arrivals.horizon(replica.index),
                                                 "left")))
    if k:
        _commit(replica, rows, k, emit[:k], ctx[:k], (fctx[:k], fver[:k]),
                (clock[:k + 1], durations[:k], verify_s[:k], base))
    return k


def _first(flags: np.ndarray, default: int) -> int:
    """The index of the first True in ``flags``, ``default`` if none."""
    return int(flags.argmax()) if _ANY(flags) else default


def _commit(replica, rows, k: int, emit: np.ndarray, ctx: np.ndarray, floats: tuple,
            timing: tuple) -> None:
    """Complete the first ``k`` rows (``emit``: tokens each request emits, ``ctx``: the
    contexts they start from, ``floats``: the contexts and verified tokens as the pricer
    read them; ``timing``: the clock, the durations, the verifications' seconds and the
    blocks held by no running request)."""
    (clock, durations, verify_s, base), (fctx, fver) = timing, floats
    b, lim, rec = replica.b, replica.limits, replica.rec
    bs, n = lim.block_size, int(b.ids.size)
    k_rows, acc = rows.num_draft[:k], rows.accepted[:k]
    verify = rows.verify_tokens[:k]
    # each request's blocks before each iteration and after the last (the roll-back's)
    held = -(-np.concatenate((ctx, ctx[-1:] + emit[-1:])) // bs)
    reserved = -(-(ctx + verify) // bs)
    need, kept = _SUM(reserved - held[:-1], axis=1), _SUM(held[1:], axis=1)
    if replica.cache is not None:  # its free queue moves as each iteration moves it
        replica.cache.cycle(need.tolist(), _SUM(reserved - held[1:], axis=1).tolist())
    replica.used_blocks = base + int(kept[-1])
    ends = clock[1:]
    rec.record_itl_shared(ends[0] - b.last_emit)
    if k > 1:  # every decode shares the gap between two iterations' ends
        rec.record_itl_repeated(ends[1:] - ends[:-1], n)
    drafted = _ANY(k_rows, axis=1)  # the iterations whose acceptances are counted
    if _ANY(drafted):
        rec.record_acceptance(k_rows[drafted].ravel(), acc[drafted].ravel())
    total = _SUM(emit, axis=0)
    b.generated += total
    b.computed += total
    b.blocks[:] = held[-1]
    b.last_emit.fill(float(ends[-1]))
    b.num_drafts += _SUM(k_rows > 0, axis=0)
    b.num_draft_tokens += _SUM(k_rows, axis=0)
    b.num_accepted += _SUM(acc, axis=0)
    replica.outstanding_tokens -= int(_SUM(total))
    replica.now = float(ends[-1])
    replica.stats["iterations"] += k
    replica.stats["vectorised"] += k
    used = (base + kept).astype(np.float64)
    cols = {"replica": replica.index, "start_s": clock[:-1], "duration_s": durations,
            "draft_s": rows.seconds[:k], "verify_s": verify_s, "batch_size": n,
            "num_prefill": 0, "num_decode": n, "prefill_tokens": 0,
            "decode_tokens": _SUM(verify, axis=1), "emitted_tokens": _SUM(emit, axis=1),
            "draft_tokens": _SUM(k_rows, axis=1), "accepted_tokens": _SUM(acc, axis=1),
            "kv_blocks_used": used, "kv_occupancy": used / lim.kv_blocks,
            "queue_len": 0, "kv_read_tokens": _SUM(fctx, axis=1) + _SUM(fver, axis=1),
            "attn_pairs": _SUM(fver * (fctx + 0.5 * (fver + 1.0)), axis=1),
            "preemptions": 0}
    table = np.empty((k, len(STEP_FIELDS)))
    for i, name in enumerate(STEP_FIELDS):
        table[:, i] = cols[name]
    rec.record_steps(table)
