"""Steps as SGLang builds them by default: a prefill batch or a decode batch, never both.

SGLang's scheduler (python/sglang/srt/managers/scheduler.py, ``get_next_batch_to_run``)
first tries to form a prefill batch (``get_new_batch_prefill``: the chunked request left
from the previous prefill batch, then waiting requests in order while the chunk budget
``chunked_prefill_size``, the running-request cap and the KV pool allow, schedule_policy.py
``PrefillAdder``); "if new_batch is not None: # Run prefill first if possible" it runs that
batch as its own forward, and only otherwise runs the running batch's decode step
(``update_running_batch``).  The decodes join a prefill batch only under
``--enable-mixed-chunk`` (``if self.is_mixed_chunk and not self.running_batch.is_empty():
... new_batch.mix_with_running(self.running_batch)``), whose default is off
(server_args.py ``enable_mixed_chunk: bool = False``).  So with ``mixed_chunk`` off a step
here is either the prefill chunks the budget, the sequence limit and the KV allow (the
running requests' unfinished prefills first, then admissions: ``Replica._plan_prefills``
on the whole budget) or, when no chunk can be scheduled, every running decode (planned,
preempted and reserved as in a mixed step); the decodes wait while a prefill step runs.

SGLang's ``PrefillAdder`` also holds back KV for the running requests' future tokens
(``new_token_ratio``), which admits fewer requests at once when the KV pool is nearly full:
where the engine names it (``EngineLimits.token_ratio``, engines.yaml's sglang entries) the
admission pass keeps that reservation (admission.py, reserve.py), a prefill step counts
toward the ratio's decay clock as no decode step, and a decode step that preempts (SGLang's
``retract_decode``) sets the ratio to the retraction's estimate.  With ``mixed_chunk`` on
(``--enable-mixed-chunk``) SGLang reserves too, the decodes' tokens included
(``mixed_with_decode_tokens``); not modelled there.  Not modelled either: SGLang's
``add_one_req_ignore_eos`` (taken only with the radix cache disabled and ``ignore_eos``
requests), the ``max_prefill_tokens`` input cap, and which requests a retraction picks
(SGLang the ones with the fewest output tokens, here the latest admitted).

Fast-forward keeps its all-decoding stretches in this mode (plain, chain and varied: a
stretch starts where the queue's head cannot be admitted on the whole budget before the
decodes reserve, fast_forward.py ``admission_blocked``, and that blocking only grows while
it runs; it is asked without SGLang's reservation, which a decay can lift: a head that only
the reservation holds back is retried step by step); the fused plain iteration, its lazy
form and a chain's fused admissions, which plan a step's decodes and chunks together, are
not taken (replica.py).
"""
from __future__ import annotations

import numpy as np

from simulator.engine.step import NO_IDS, Step


def separate_schedule(replica, now: float) -> Step | None:
    """The next step with prefill and decode apart, prefill first; None if nothing can run."""
    b = replica.b
    budget = replica.limits.max_num_batched_tokens
    mid = np.flatnonzero(b.in_prefill) if b.decoding < b.ids.size else NO_IDS
    pf, chunks, prefill_tokens = replica._plan_prefills(mid, budget, now)
    clock = replica.ratio_clock
    if pf.size:  # a prefill batch: the running decodes wait (pf and chunks empty after)
        if clock is not None:  # no decay for it
            clock.prefills += 1
        return replica._price(None, None, None, pf, chunks, now, 0, 0, prefill_tokens)
    _, plan, batch, pos, need, preempted = replica._plan_decodes(budget, now)
    if plan is None:
        return None
    if clock is not None and preempted:  # scheduler.py update_running_batch's retraction
        clock.retract(replica.stats["iterations"], batch.generated, batch.output_len)
    plan, batch, pos, decode_tokens = replica._reserve_decodes(plan, batch, pos, need,
                                                               budget, now)
    if plan is None:
        return None
    return replica._price(plan, batch, pos, pf, chunks, now, preempted, decode_tokens, 0)
