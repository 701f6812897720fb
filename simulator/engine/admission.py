"""A replica's prefill planning and admissions (the ``Admission`` half of ``Replica``).

``_plan_prefills`` gives the running requests' unfinished prefills their chunks first, then
admits waiting requests FIFO (``_admit``) while the token budget, the sequence limit and the
KV blocks allow; ``admission_chunk`` is the chunk the head of the queue would be admitted
with, which fast-forward asks too (fast_forward.py ``admission_blocked``).

Under an engine with SGLang's KV reservation (``EngineLimits.token_ratio``: engines.yaml,
prefill and decode steps apart) an admission pass also keeps SGLang's ``rem_total_tokens``
(``_room``, reserve.py): the free KV less the running requests' reserved future tokens and
what the pass has taken.  A chunk continuing a prefill is capped at ``int(_room)``
(schedule_policy.py ``add_chunked_req``); the head is refused where its whole remaining
prefill plus its clipped output length reaches ``_room`` (``add_one_req``), except into a
replica running nothing (which SGLang would never serve: its request would wait forever);
each request taken lowers ``_room`` by its chunk, and by its clipped output length where the
chunk ends its prefill (``_update_prefill_budget``).  Outside a pass ``_room`` is None, so
``admission_chunk`` answers without the reservation: a head blocked that way stays blocked
while a decode stretch runs (the KV only fills), which the reservation alone does not (the
ratio decays and the running requests' remaining outputs shrink), so fast-forward starts a
stretch only where the head is blocked without it.
"""
from __future__ import annotations

from math import isnan

import numpy as np

from simulator.engine.requests import PACKED_FIELDS, RUNNING
from simulator.engine.reserve import start_room


# the queue head's state ``_head_chunk`` reads: the first rows of the table's packed array
_HEAD = ("computed", "generated", "output_len", "prompt_len", "blocks", "prefill_target")
assert PACKED_FIELDS[:len(_HEAD)] == _HEAD, "_head_chunk reads these rows as one slice"


class Admission:
    """Prefill chunks and admissions of a replica (see the module docstring)."""

    _room: float | None = None  # SGLang's rem_total_tokens during an admission pass

    def _fit_chunk(self, computed: int, blocks: int, remaining: int, budget: int,
                   taken: int = 0) -> int:
        """Largest prefill chunk within the token budget, a request's cap and the free KV
        blocks, for a request with ``computed`` tokens in ``blocks`` blocks and ``remaining``
        to prefill (``taken``: free blocks its cached prefix will take from the free queue)."""
        lim = self.limits
        free_tokens = (lim.kv_blocks - self.used_blocks - taken + blocks) * lim.block_size \
            - computed
        return max(0, min(remaining, budget, lim.max_chunk_tokens or budget, free_tokens))

    def _blocks_for(self, computed: int, blocks: int, chunk: int) -> int:
        """Blocks to add so that ``computed + chunk`` tokens fit (checked by _fit_chunk)."""
        return max(-(-(computed + chunk) // self.limits.block_size) - blocks, 0)

    def _plan_prefills(self, mid_prefill: np.ndarray, budget: int,
                       now: float) -> tuple[np.ndarray, np.ndarray, int]:
        """Prefill chunks: running requests' unfinished prefills first, then admissions;
        returns (positions in the batch, chunk lengths, their total)."""
        b = self.b
        pos: list[int] = []
        chunks: list[int] = []
        if self.ratio_clock is not None:
            self._room = start_room(self)
        for p in mid_prefill.tolist():
            if budget <= 0:
                break
            computed, blocks = int(b.computed[p]), int(b.blocks[p])
            left = int(b.prefill_target[p]) - computed
            chunk = self._fit_chunk(computed, blocks, left, budget)
            if self._room is not None:
                chunk = max(0, min(chunk, int(self._room)))
                self._reserve(chunk, left, int(b.output_len[p]))
            if chunk > 0:
                add = self._blocks_for(computed, blocks, chunk)
                b.blocks[p] += add
                self._take_blocks(add)
                pos.append(p)
                chunks.append(chunk)
                budget -= chunk
        admitted, admitted_chunks = self._admit(budget, now)
        self._room = None
        chunks += admitted_chunks
        return np.asarray(pos + admitted, np.int64), np.asarray(chunks, np.int64), sum(chunks)

    def _head_chunk(self, budget: int, gone=()) -> int:
        """The prefill chunk the head of the queue would be admitted with (0: it cannot be),
        marking it as prefilling on its first admission attempt, as vLLM's scheduler does
        (``gone``: cached keys to treat as evicted already)."""
        t, lim = self.t, self.limits
        rid = self.waiting[0]
        # its packed state (``_HEAD``) as Python ints, read once
        computed, generated, output_len, prompt_len, blocks, target = \
            t.packed[:len(_HEAD), rid].tolist()
        prefilling = t.in_prefill[rid]
        remaining = target - computed if prefilling else prompt_len + generated
        hit = taken = 0
        if self.cache is not None and computed == 0:  # its cached prefix, if any
            hit, taken = self.cache.lookup(rid, remaining, gone)
            remaining -= hit * lim.block_size
        self._hit = (hit, taken)
        if not lim.enable_chunked_prefill and remaining > budget:
            return 0
        if not prefilling:  # first admission
            t.in_prefill[rid] = True
            t.prefill_target[rid] = target = prompt_len + generated
        computed += hit * lim.block_size
        chunk = self._fit_chunk(computed, blocks + hit, target - computed, budget, taken)
        if chunk <= 0 or (not lim.enable_chunked_prefill and chunk < remaining):
            return 0
        if self._room is not None and self.b.ids.size:  # SGLang's add_one_req refusal
            total = target - computed + min(output_len, self.limits.token_ratio.clip)
            if total >= self._room - taken * lim.block_size:
                return 0
        return chunk

    def admission_chunk(self, budget: int, gone=()) -> int:
        """The chunk ``_admit(budget)`` would admit the head of the queue with (0: none);
        ``gone``: the cached keys an allocation still to come will evict."""
        if not self.waiting or budget <= 0 or self.b.ids.size >= self.limits.max_num_seqs:
            return 0
        return self._head_chunk(budget, gone)

    def _admit(self, budget: int, now: float) -> tuple[list[int], list[int]]:
        """Admit waiting requests FIFO while the budget, the sequence limit and the KV allow;
        returns their positions in the batch and their chunks."""
        t, b = self.t, self.b
        pos: list[int] = []
        chunks: list[int] = []
        while (chunk := self.admission_chunk(budget)) > 0:
            rid = self.waiting.popleft()
            if self.cache is not None:
                self._use_cached_prefix(rid, now)
            p = b.add(t, rid)
            if self._room is not None:
                self._room -= self._hit[1] * self.limits.block_size
                self._reserve(chunk, int(b.prefill_target[p]) - int(b.computed[p]),
                              int(b.output_len[p]))
            add = self._blocks_for(int(b.computed[p]), int(b.blocks[p]), chunk)
            b.blocks[p] += add
            self._take_blocks(add)
            t.status[rid] = RUNNING
            if isnan(t.first_scheduled_s[rid]):
                t.first_scheduled_s[rid] = now
            pos.append(p)
            chunks.append(chunk)
            budget -= chunk
        return pos, chunks

    def _use_cached_prefix(self, rid: int, now: float) -> None:
        """Admit ``rid`` on its cached prefix (``_hit``, looked up by ``_head_chunk``): those
        blocks are held, their tokens are computed and never prefilled."""
        t, (hit, taken) = self.t, self._hit
        tokens = hit * self.limits.block_size
        self.cache.acquire(rid, hit, int(t.prefill_target[rid]))
        t.computed[rid] = tokens
        t.blocks[rid] = hit
        self.used_blocks += taken
        self.outstanding_tokens -= tokens
        if isnan(t.first_scheduled_s[rid]):  # vLLM's num_cached_tokens: first schedule
            t.cached_tokens[rid] = tokens
        if self.own is not None:
            self.own.admitted(self, rid)


    def _reserve(self, chunk: int, left: int, output_len: int) -> None:
        """``_room`` less a chunk of ``left`` prefill tokens, and the request's clipped
        output length where the chunk ends its prefill (SGLang's _update_prefill_budget)."""
        self._room -= chunk + (min(output_len, self.limits.token_ratio.clip)
                               if chunk == left else 0)
