"""Fast-forward over a pure-decode stretch: K engine iterations in one vectorised pass.

A replica whose every running request decodes, under a policy that proposes nothing and
draws nothing (``plain_decode``: ``none``), repeats the same iteration until something changes
the batch: a request finishing, the next arrival, a prefill being admitted, the KV cache
running out (a preemption).  ``advance_decodes`` computes, before the first of those, every
iteration's step time (the cost model's ``uniform_step_times``: one closed form over the
batch's context sum, the same floating-point operations ``step_time`` performs), the clock
(sequential sums, as SimPy adds each timeout), the KV blocks, the emitted tokens and the ITL
samples, records the K steps' rows in one block and moves the batch's state K iterations on.

Exactness: every iteration of a stretch is one the step-by-step engine plans the same way.
The stretch ends with the iteration in which a request finishes (it is retired as the
step-by-step completion retires it: the next iteration's batch differs), stops before the
first one that would not fit the KV cache and before any one that would end at or after the
next arrival (the router may look at this replica then), and is not started when an
admission is possible (its blocking can only grow during the stretch: the KV fills, the
budget and the sequence limit stay).  The caller runs the iteration after it through the
ordinary path, except the one that crosses the next arrival under the fused iteration
(``replica.plain``): that one is still a plain decode iteration, planned before the arrival,
so the pass hands it back planned and priced (``_crossing_step``) and the caller yields to
SimPy until it ends.

Where the fused iteration applies, fast-forward runs lazy_decode.py's loop instead, which
reuses ``admission_blocked`` and ``delay_to``; this pass serves a ``none`` run with a prefix
cache, and ``Replica.lazy_decodes = False`` (the engine benchmark's comparison).
"""
from __future__ import annotations

import numpy as np

from simulator.engine.plain_step import PlainStep
from simulator.engine.step import NO_IDS, STEP_FIELDS

MAX_STRETCH_CELLS = 1 << 18  # iterations x requests per pass (bounds the arrays)
_COL = {name: i for i, name in enumerate(STEP_FIELDS)}
_REPLICA, _QUEUE = _COL["replica"], _COL["queue_len"]
_SHARED_LIST = [_COL[name] for name in ("batch_size", "num_decode", "decode_tokens",
                                        "emitted_tokens")]  # n each
_START, _DURATION, _VERIFY = _COL["start_s"], _COL["duration_s"], _COL["verify_s"]
_KV_USED, _KV_OCCUPANCY = _COL["kv_blocks_used"], _COL["kv_occupancy"]
_KV_READ, _PAIRS = _COL["kv_read_tokens"], _COL["attn_pairs"]
_ALL, _MIN, _SUM = np.logical_and.reduce, np.minimum.reduce, np.add.reduce  # no method layer
_COUNT = np.count_nonzero


def _step_times(replica, c: np.ndarray, sums: np.ndarray, next_time: float) -> np.ndarray:
    """Step times of up to ``len(sums)`` plain decode iterations of contexts ``c`` (+k),
    whose sums are ``sums``."""
    n, k_max = c.size, sums.size
    if replica.forms is not None:
        times = replica.forms.uniform_step_times(n, 1, sums, n)
        if times is not None:
            return np.asarray(times, np.float64)
    # any other pricer: the same calls the step-by-step path makes, until the next arrival
    ones, now, out = np.ones(n), replica.now, []
    ctx = c.astype(np.float64)
    for k in range(k_max):
        v = replica.target_cost.step_time(ones, ctx + k, ones)
        out.append(v)
        now = now + v
        if now >= next_time:
            break
    return np.asarray(out, np.float64)


def _stretch_length(replica) -> tuple[int, int]:
    """Iterations a stretch may cover from the batch alone (0: no stretch now), and the
    fewest tokens a request has left (the iteration that emits them retires it)."""
    b, lim = replica.b, replica.limits
    n = int(b.ids.size)
    if not n or b.decoding != n or n > lim.max_num_batched_tokens \
            or not replica.policy.plain_decode:
        return 0, 0
    # blocks beyond the tokens held: the step-by-step path frees them first (never with the
    # fused iteration's invariant, plain_step.py)
    if not replica.plain and not _ALL(b.blocks == -(-b.computed // lim.block_size)):
        return 0, 0
    # the iteration that emits a request's last token retires it: the stretch's last
    left = int(_MIN(b.output_len - b.generated))
    return min(left, max(1, MAX_STRETCH_CELLS // n)), left


def _kv_fit(replica, c: np.ndarray, k: int) -> np.ndarray:
    """Blocks in use after each of ``k`` iterations' reservations.  A decode holding ``c``
    tokens takes a new block in iteration j when ``c + j`` is a multiple of the block size,
    so the blocks taken in iteration j are periodic in j: a histogram of ``-c mod bs``."""
    bs = replica.limits.block_size
    taken = np.cumsum(np.bincount((-c) % bs, minlength=bs))
    if k <= bs:  # integers: the same values as the cumulative sum of the repeated histogram
        return replica.used_blocks + taken[:k]
    j = np.arange(k)
    return replica.used_blocks + (j // bs) * taken[-1] + taken[j % bs]


NONE, ADVANCED, RETIRED = 0, 1, 2  # what advance_decodes did


def advance_decodes(replica) -> tuple[int, PlainStep | None]:
    """Advance ``replica`` over the pure-decode stretch ahead: NONE if there is none,
    RETIRED if its last iteration finished requests (another stretch may follow), ADVANCED
    otherwise (the next iteration is not a plain decode one, or it ends at or after the
    next arrival).  With the second, under the fused iteration (``replica.plain``), the
    iteration that crosses the arrival, planned and priced (``_crossing_step``), else None."""
    k, left = _stretch_length(replica)
    if k <= 0:
        return NONE, None
    b, lim = replica.b, replica.limits
    c = b.computed
    # the first iteration's reservation: a decode takes a block when it holds a multiple of
    # the block size (``_kv_fit``'s first value, without its histogram)
    first = replica.used_blocks + int(_COUNT(c % lim.block_size == 0))
    if first > lim.kv_blocks:
        return NONE, None
    if replica.waiting and not admission_blocked(replica, first, int(b.ids.size)):
        return NONE, None
    next_time = replica.arrivals.horizon(replica.index)
    sums = int(_SUM(c)) + c.size * np.arange(k, dtype=np.int64)  # contexts before each
    v = _step_times(replica, c, sums, next_time)
    clock = np.add.accumulate(np.concatenate(((replica.now,), v)))  # SimPy's now + delay
    k = int(np.searchsorted(clock[1:], next_time, side="left"))  # the ones ending before
    used = _kv_fit(replica, c, min(k + 1, v.size))  # theirs and the crossing one's
    if k and used[k - 1] > lim.kv_blocks:  # stop before the first that cannot fit
        k, cross = int(np.argmax(used > lim.kv_blocks)), False
    else:  # the next one crosses the arrival; it is a plain decode one if it fits
        cross = replica.plain and k < v.size and used[k] <= lim.kv_blocks
    done = _commit(replica, v[:k], clock[:k + 1], used[:k], sums[:k], k == left) \
        if k > 0 else NONE
    if not cross or done == RETIRED:
        return done, None
    return done, _crossing_step(replica, float(v[k]))


def _crossing_step(replica, verify_s: float) -> PlainStep:
    """The stretch's next iteration, which ends at or after the next arrival, as the fused
    path would plan it (plain_step.py): every request decodes one token (its reservation is
    ``_kv_fit``'s next value, checked to fit; no admission: the head stays blocked), priced
    at the stretch's next step time (bitwise ``step_time``'s); the caller yields to SimPy
    until it ends and completes it.  Its sums are whole numbers, exact as floats."""
    b, lim = replica.b, replica.limits
    n = int(b.ids.size)
    need = b.computed == b.blocks * lim.block_size
    b.blocks += need
    replica.used_blocks += int(_COUNT(need))
    sums = float(int(_SUM(b.computed)) + n)  # kv_read_tokens and attn_pairs: one token each
    return PlainStep(replica.now, 0.0, verify_s, slice(0, n), n, NO_IDS, NO_IDS, None, 0,
                     sums, sums)


def admission_blocked(replica, first: int, decode_tokens: int) -> bool:
    """Whether the head of the queue stays waiting after the first iteration's reservation
    (``first`` blocks in use, ``decode_tokens`` of the budget taken): its blocking can only
    grow during the stretch.  With prefill and decode steps apart (``mixed_chunk`` off:
    prefill_first.py) the head is tried before the decodes reserve anything, on the whole
    budget: ``first`` and ``decode_tokens`` do not apply.  SGLang's KV reservation
    (admission.py) is not asked here: it can shrink as its ratio decays, so a head it alone
    holds back is not blocked, and the stretch is not taken."""
    if not replica.limits.mixed_chunk:
        first, decode_tokens = replica.used_blocks, 0
    saved, replica.used_blocks = replica.used_blocks, first
    # the head looks up its cached prefix after the first iteration's allocation
    gone = replica.cache.evicted_by(first - saved) if replica.cache is not None else ()
    chunk = replica.admission_chunk(replica.limits.max_num_batched_tokens - decode_tokens,
                                    gone)
    replica.used_blocks = saved
    return chunk <= 0


def _commit(replica, v: np.ndarray, clock: np.ndarray, used: np.ndarray, sums: np.ndarray,
            retired: bool) -> int:
    """Move the batch's state ``len(v)`` iterations on, retire the requests the last one
    finished (``retired``: some did), and record the iterations (RETIRED if any finished,
    else ADVANCED); ``sums``: the contexts' sums before each iteration."""
    b, lim = replica.b, replica.limits
    k, n = v.size, int(b.ids.size)
    ends = clock[1:]
    rows = stretch_rows(replica, n, v, clock, used, sums, len(replica.waiting))
    first = ends[0] - b.last_emit
    replica.rec.record_itl(np.concatenate((first, np.repeat(ends[1:] - ends[:-1], n)))
                           if k > 1 else first)
    b.generated += k
    b.computed += k
    bs = lim.block_size  # ceil(computed / bs) blocks: computed >= 0
    np.floor_divide(b.computed + (bs - 1), bs, out=b.blocks)
    b.last_emit.fill(ends[-1])
    if replica.cache is not None:  # the stretch's blocks, from the free queue's head
        replica.cache.allocate(int(used[-1]) - replica.used_blocks)
    replica.used_blocks = int(used[-1])
    replica.outstanding_tokens -= n * k
    replica.now = float(ends[-1])
    replica.stats["iterations"] += k
    replica.stats["vectorised"] += k
    if retired:  # as the last iteration's completion does; its row reads the freed KV
        replica._retire(replica.now)
        reread_kv(rows, replica)
    replica.rec.record_steps(rows)
    return RETIRED if retired else ADVANCED


def stretch_rows(replica, n: int, v: np.ndarray, clock: np.ndarray, used: np.ndarray,
                 sums: np.ndarray, queue: int) -> np.ndarray:
    """The steps-table rows of ``len(v)`` pure-decode iterations of ``n`` requests, shape
    (K, len(STEP_FIELDS)): started at ``clock[:-1]``, lasting ``v`` (all verification),
    ``used`` KV blocks after each one's reservation, ``sums`` the contexts' sums before each,
    ``queue`` requests waiting."""
    # KV read and attention pairs: one token each (whole numbers)
    return decode_rows(replica.index, n, clock[:-1], v, used, sums + float(n), queue,
                       replica.limits.kv_blocks)


def decode_rows(index: int, n, starts, durations, used, read, queue,
                kv_blocks: int) -> np.ndarray:
    """Steps-table rows of pure-decode iterations of replica ``index`` (no draft, no
    prefill, one token per decode): ``n`` decodes, ``queue`` waiting (each a number or one
    per row), starting at ``starts``, lasting ``durations``, ``used`` KV blocks after the
    reservation, ``read`` KV tokens read (and as many attention pairs)."""
    rows = np.zeros((len(starts), len(STEP_FIELDS)))
    rows[:, _REPLICA] = index
    rows[:, _START] = starts
    rows[:, _DURATION] = durations
    rows[:, _VERIFY] = durations
    for c in _SHARED_LIST:
        rows[:, c] = n
    rows[:, _KV_USED] = used
    np.divide(used, float(kv_blocks), out=rows[:, _KV_OCCUPANCY])
    rows[:, _QUEUE] = queue
    rows[:, _KV_READ] = read
    rows[:, _PAIRS] = read
    return rows


def reread_kv(rows: np.ndarray, replica) -> None:
    """The last row reads the KV the iteration's retirements left (as its completion does)."""
    rows[-1, _KV_USED] = replica.used_blocks
    rows[-1, _KV_OCCUPANCY] = replica.used_blocks / replica.limits.kv_blocks


def delay_to(now: float, end: float) -> float:
    """The timeout delay after which SimPy's clock (``now + delay``) reads exactly ``end``."""
    delay = end - now
    for _ in range(8):
        got = now + delay
        if got == end:
            break
        delay = float(np.nextafter(delay, np.inf if got < end else -np.inf))
    return max(delay, 0.0)
