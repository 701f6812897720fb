"""One chain-speculation iteration, fused: the iterations a chain stretch cannot take.

Under fast-forward, a ``chain`` replica advances its all-decoding stretches in one pass
(chain_stretch.py).  The iterations between them are mostly admissions: every running
request decodes (gamma drafts, gamma + 1 verified tokens each) and the newly arrived request
gets its first prefill chunk, about one such iteration every two requests on the Azure
conversation trace.  The ordinary path (``Replica._schedule`` / ``_complete``) builds a
``BatchView`` (five copies), asks the policy for its plan (every decode drafting gamma),
clamps the acceptances and builds a frozen ``Step``.  ``chain_schedule`` plans, reserves and
prices such an iteration directly, and ``chain_complete`` completes it, with the same
decisions, the same arrays handed to the cost model and the policy's prefill pricer
(``Forward._forward``), the same draws (``ChainStretch.accepted``: what ``accept`` gives for
its ``rng.random(n)``) and the same floating-point operations in the same order, so the
results are bit-for-bit the ordinary path's.

It returns None (the ordinary path runs the iteration) where that does not hold: nothing
decodes, a decode the draft cannot speculate (prompt + generated + gamma reaches its max
context), the decodes' tokens over the budget (the plan would be trimmed), their KV not
fitting (a preemption), or a draft time with no closed form.  Like the stretch, it relies on the
``ChainStretch`` contract: the policy's per-iteration work depends on the batch alone (its
``observe`` learns nothing).
"""
from __future__ import annotations

import numpy as np

from simulator.engine.chain_stretch import chain_prices
from simulator.engine.plain_step import PlainStep
from simulator.engine.plan import ChainStretch
from simulator.engine.step import StepRow

_ALL, _SUM = np.logical_and.reduce, np.add.reduce  # no method layer


class ChainStep(PlainStep):
    """A planned and priced fused chain iteration: ``num_decode`` decodes at ``decode_pos``
    verifying gamma + 1 tokens each, and prefill chunks (as ``PlainStep`` holds them)."""

    __slots__ = ()


def chain_schedule(replica, spec: ChainStretch, now: float) -> ChainStep | None:
    """Plan, reserve and price the replica's next iteration as the ordinary path would
    (``_plan_decodes``, ``_reserve_decodes``, ``_plan_prefills``, ``_price``); None where the
    fused form does not apply (see the module docstring), before anything is changed."""
    b, lim = replica.b, replica.limits
    nd, n, g = b.decoding, int(b.ids.size), spec.gamma
    u = g + 1
    budget = lim.max_num_batched_tokens
    if not nd or nd * u > budget:
        return None
    pos, mid = replica._decode_split(nd, n)
    if spec.max_context is not None and \
            not _ALL(b.prompt_len[pos] + b.generated[pos] + g < spec.max_context):
        return None  # the policy would not draft for some (chain.py's speculable)
    c = b.computed[pos]
    bs = lim.block_size
    need = np.maximum((c + (u + bs - 1)) // bs - b.blocks[pos], 0)  # Replica._blocks_needed
    taken = int(_SUM(need))
    if replica.used_blocks + taken > lim.kv_blocks:
        return None  # a preemption: the ordinary path makes it
    ctx = c.astype(np.float64)  # the plan's contexts, before admissions replace the arrays
    # chain_draft_time when every decode drafts g: the draft's chain_decode_time, bitwise
    # its closed form's row (ChainStretch.draft_times); the plan's CPU time is 0.0
    if spec.carried is not None:  # priced from the contexts and the last acceptances
        ids = b.ids[pos]
        draft = spec.carried.iteration_draft_s(ids, c, spec.carried.reread_tokens(ids),
                                               replica.rng)
    elif (prices := chain_prices(replica, spec, nd)) is not None:
        draft = prices[0](float(int(_SUM(c))))
    elif (draft := spec.draft_times(nd, np.array([float(int(_SUM(c)))]))) is None:
        return None
    else:
        draft = float(draft[0])
    b.blocks[pos] += need
    replica.used_blocks += taken
    pf, chunks, prefill_tokens = replica._plan_prefills(mid, budget - nd * u, now)
    draft_s, verify_s, completes, kv_read, attn_pairs = replica._forward(
        np.full(nd, float(u)), ctx, pf, chunks, draft + 0.0, u)
    return ChainStep(now, draft_s, verify_s, pos, nd, pf, chunks, completes, prefill_tokens,
                     kv_read, attn_pairs)


def chain_complete(replica, spec: ChainStretch, step: ChainStep, now: float) -> None:
    """Complete the iteration at ``now`` as ``Completion._complete`` completes a chain step:
    the prefill chunks, then the decodes' acceptances (one uniform each, drawn as ``accept``
    draws them) and emissions, the roll-back of the rejected drafts' KV, retirements, the
    row."""
    prefilled = replica._emit_prefills(step, now)
    dec, nd, g = step.decode_pos, step.num_decode, spec.gamma
    ids = replica.b.ids[dec]
    accepted = spec.accepted(replica.rng.random(nd), ids) if spec.carried is None else \
        spec.carried.draw_accepted(replica.rng, ids, replica.b.computed[dec])  # in [0, g]
    _, decoded = replica._emit_accepted(dec, accepted, g, now)  # g >= 1 drafts each
    replica._roll_back(dec)
    if spec.carried is not None:  # what its observe would have seen, before retirements
        spec.carried.observe_accepted(ids, accepted)
    replica._retire(now)
    n_pf, used = int(step.prefill_pos.size), replica.used_blocks
    replica.rec.record_step(StepRow(
        replica.index, step.start_s, step.duration_s, step.draft_s, step.verify_s, nd + n_pf,
        n_pf, nd, step.prefill_tokens, nd * (g + 1), int(prefilled.size) + decoded, nd * g,
        int(_SUM(accepted)), used, used / replica.limits.kv_blocks, len(replica.waiting),
        step.kv_read_tokens, step.attn_pairs, 0))
