"""Fast-forward of a policy whose per-request draft counts vary (``VariedDraft``, plan.py).

Under the ``adaptive`` wrapper every iteration's gammas come from a controller (the batch
size's schedule, the kill switch, the goodput search over per-request acceptance
estimates), so they differ per request and change from one iteration to the next: nothing
can be drawn or priced for several iterations at once.  What can be skipped is the general
path's machinery: while every running request decodes, ``advance_varied`` takes the
iterations one by one on the running batch's arrays, with no ``BatchView``, ``DraftPlan``
or ``Step``.  An iteration is the step-by-step one, operation for operation:

1. the checks that it is a pure-decode iteration with nothing trimmed, before the policy is
   asked (asking moves its state): every running request decodes; each verifying its most
   tokens (``max_verify_tokens``) fits the token budget and the free KV blocks (the general
   path would trim or preempt otherwise); the head of the queue is not admitted even with
   the least the decodes can take (one token each: a larger reservation only blocks it
   more), and with a prefix cache nobody waits (the head's cached prefix depends on what
   the reservation evicts); the cache's free queue moves as the general path moves it;
2. the counts and the proposer's seconds (``plan_counts``), the target's verification by
   ``step_time`` on the arrays ``Forward._forward`` hands it, the KV reserved as
   ``_reserve_decodes`` reserves it;
3. an iteration ending at or after the next arrival is handed back as the ``Step`` the
   general path would have planned (the replica yields to SimPy, then completes it);
4. otherwise completed here as ``Completion._complete`` completes a decode-only step: the
   draws (``draw_counts``), the emissions, the roll-back, the observation, the
   retirements, the row.

Where the proposer's iterations are, until the batch changes, a chain's own
(``VariedDraft.fixed_chain``: the ``adaptive`` wrapper's ``fixed`` controller at the chain's
gamma, nothing to catch up), the chain's stretch takes them (chain_short.py: closed-form
chunks), its crossing iteration completed by ``complete_crossing``; an iteration it does
not take (an admission, the KV cache, a request past the draft's context) comes here.
"""
from __future__ import annotations

import numpy as np

from simulator.engine.chain_few import FEW_REQUESTS
from simulator.engine.chain_short import advance_chain
from simulator.engine.fast_forward import ADVANCED, NONE, RETIRED, admission_blocked
from simulator.engine.plan import (
    AheadDraft,
    BatchView,
    ChainStretch,
    DraftPlan,
    VariedDraft,
    VariedPlan,
    emitted_tokens,
)
from simulator.engine.step import NO_FLAGS, NO_IDS, Step, StepRow
from simulator.engine.varied_rows import advance_rows, busiest_pace, next_rows, restart_rows

_SUM, _ANY = np.add.reduce, np.logical_or.reduce


def varied_draft_of(replica) -> VariedDraft | None:
    """The replica's policy's ``VariedDraft``; None where it has a chain stretch (those
    take theirs) or none."""
    if replica._chain is not None:
        return None
    return replica.policy.varied_draft()


def advance_varied(replica, spec: VariedDraft) -> tuple[int, Step | None]:
    """Advance ``replica`` iteration by iteration while they are pure-decode ones: NONE if
    it took none, RETIRED if the batch emptied, else ADVANCED, with the iteration that
    crosses the next arrival planned and priced where it is one of them (else None: the
    next iteration goes through the general path)."""
    done, u_max = NONE, spec.max_verify_tokens
    # an AheadDraft's iterations K at a time (varied_rows.py): as many as fit before the
    # next arrival at the pace of the busiest iteration, of the last pass later, K growing
    # while a pass keeps all its rows (``next_rows``); the iteration that stopped a pass one
    # by one
    ahead = spec if isinstance(spec, AheadDraft) else None
    pace = busiest_pace(replica, u_max) if ahead is not None else 0.0
    size = restart_rows(replica, pace) if ahead is not None else 0
    while True:
        b = replica.b
        n = int(b.ids.size)
        if not n:
            return (RETIRED if done else NONE), None
        chain = _fixed_chain(replica, spec, n)
        if chain is not None:  # a chain's own iterations: its stretch takes them
            got, crossing = advance_chain(replica, chain)
            if got == RETIRED or crossing is not None:
                return got, crossing
            if got == ADVANCED:
                done = ADVANCED
                continue
        if not _opens(replica, n, u_max):
            return done, None
        start = replica.now
        kept = advance_rows(replica, ahead, size) if size else 0
        if kept:
            pace = (replica.now - start) / kept
            done, size = ADVANCED, next_rows(replica, size, kept, replica.now - start)
            continue
        step = _iteration(replica, spec)
        if step is not None:
            return ADVANCED, step
        done, size = ADVANCED, restart_rows(replica, pace) if ahead is not None else 0


def _fixed_chain(replica, spec: VariedDraft, n: int) -> ChainStretch | None:
    """``spec.fixed_chain`` of the running batch where a chain stretch may run here (no
    prefix cache, the target's closed forms: ``chain_stretch_of``'s conditions)."""
    if replica.cache is not None or replica.forms is None:
        return None
    return spec.fixed_chain(replica.b.ids, n)


def _opens(replica, n: int, u_max: int) -> bool:
    """Whether the next iteration is a pure-decode one with nothing trimmed (step 1)."""
    b, lim = replica.b, replica.limits
    if b.decoding != n or n * u_max > lim.max_num_batched_tokens:
        return False
    bs = lim.block_size
    # the blocks each request lacks for its context plus u tokens (integers: one list)
    pairs = list(zip(b.computed.tolist(), b.blocks.tolist()))
    most = replica.used_blocks + sum([max(-(-(c + u_max) // bs) - h, 0) for c, h in pairs])
    if most > lim.kv_blocks:
        return False
    if not replica.waiting:
        return True
    if replica.cache is not None:  # what the head finds cached depends on the reservation
        return False
    least = replica.used_blocks + sum([max(-(-(c + 1) // bs) - h, 0) for c, h in pairs])
    return admission_blocked(replica, least, n)


def _iteration(replica, spec: VariedDraft) -> Step | None:
    """Plan, price and reserve one iteration (step 2); complete it here (step 4), or
    return it as a ``Step`` where it crosses the next arrival (step 3)."""
    b, now = replica.b, replica.now
    ids, ctx = b.ids, b.computed
    plan = spec.plan_counts(ids, ctx, b.generated, b.output_len, b.prompt_len,
                            int(ids.size), replica.rng)
    verify_tokens, draft_s = plan.verify_tokens, plan.seconds
    verify_s, forms = plan.verify_s, replica.forms
    if verify_s is None and forms is not None and ids.size < FEW_REQUESTS:
        # a few requests on Python numbers (bitwise step_time's, as ClosedFormPricer says)
        vs = verify_tokens.tolist()
        verify_s = forms.few_step_time(vs, ctx.tolist(), vs)
    if verify_s is None:
        verify = verify_tokens.astype(np.float64)
        verify_s = replica.target_cost.step_time(verify, ctx.astype(np.float64), verify)
    decode_tokens, kv_read, attn_pairs = _counts(verify_tokens, ctx)
    need = np.maximum(-(-(ctx + verify_tokens) // replica.limits.block_size) - b.blocks, 0)
    b.blocks += need
    replica._take_blocks(sum(need.tolist()))  # from the prefix cache's free queue, if any
    if now + (draft_s + verify_s) >= replica.arrivals.horizon(replica.index):
        n = int(ids.size)
        batch = BatchView(ids.copy(), ctx.copy(), b.generated.copy(), b.output_len.copy(),
                          b.prompt_len.copy(), n, now)
        general = DraftPlan(plan.num_draft, verify_tokens, draft_s, 0.0, plan.payload)
        return Step(now, draft_s, verify_s, general, batch, batch.request_ids, slice(0, n),
                    NO_IDS, NO_IDS, NO_IDS, NO_FLAGS, decode_tokens, 0, 0, kv_read,
                    attn_pairs)
    _complete(replica, spec, plan, (verify_s, decode_tokens, kv_read, attn_pairs))
    return None


def _counts(verify_tokens: np.ndarray, ctx: np.ndarray) -> tuple[int, float, float]:
    """The iteration's verified tokens, KV tokens read (contexts and verified tokens) and
    attention pairs (each request's v (c + (v + 1) / 2)): the batch's int64 counts, so the
    sums are whole numbers, which Python's integers give as the float sums of their
    arrays did, exactly (below 2**53), without a reduction each."""
    vs, cs = verify_tokens.tolist(), ctx.tolist()
    tokens = sum(vs)
    pairs = sum([v * c + (v * (v + 1) >> 1) for v, c in zip(vs, cs)])
    return tokens, float(sum(cs) + tokens), float(pairs)


def _complete(replica, spec: VariedDraft, plan: VariedPlan, priced: tuple) -> None:
    """Complete the iteration of ``plan``, priced (verify_s, decode tokens, KV tokens
    read, attention pairs) (step 4)."""
    (verify_s, decode_tokens, kv_read, attn_pairs), k = priced, plan.num_draft
    draft_s = plan.seconds
    b, lim, rec, rng = replica.b, replica.limits, replica.rec, replica.rng
    n, start, duration = int(b.ids.size), replica.now, draft_s + verify_s
    end = start + duration
    ids, generated = b.ids, b.generated.copy()
    accepted = np.asarray(spec.draw_counts(rng, ids, b.computed, generated, plan), np.int64)
    accepted = np.minimum(np.maximum(accepted, 0), k)
    emitted = emitted_tokens(accepted, generated, b.output_len)
    rec.record_itl_shared(end - b.last_emit)
    b.generated += emitted
    b.computed += emitted
    b.last_emit.fill(end)
    decoded = sum(emitted.tolist())  # integer sums: as the arrays' reductions, cheaper
    replica.outstanding_tokens -= decoded
    drafted = sum(k.tolist())
    if drafted:
        b.num_drafts += k > 0
        b.num_draft_tokens += k
        b.num_accepted += accepted
        rec.record_acceptance(k, accepted)
    keep = (b.computed + (lim.block_size - 1)) // lim.block_size  # the roll-back
    held = sum(b.blocks.tolist())
    np.minimum(b.blocks, keep, out=b.blocks)
    freed = held - sum(b.blocks.tolist())
    replica.used_blocks -= freed
    if replica.cache is not None:
        replica.cache.give_back(freed)
    spec.observe_counts(ids, generated, b.output_len, plan, accepted, duration)
    replica.now = end
    replica.stats["iterations"] += 1
    replica.stats["vectorised"] += 1
    replica._retire(end)
    used = replica.used_blocks
    rec.record_step(StepRow(
        replica.index, start, duration, draft_s, verify_s, n, 0, n, 0, decode_tokens,
        decoded, drafted, sum(accepted.tolist()), used, used / lim.kv_blocks,
        len(replica.waiting), kv_read, attn_pairs, 0))
