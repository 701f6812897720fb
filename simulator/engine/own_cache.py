"""A prefix cache of a request's own blocks, run only while a preempted request waits.

A workload that names no shared prefix can only ever find again the blocks of a request that
was preempted (vLLM V1 frees a preempted request's blocks, which stay cached in the free
block queue until evicted; the request's re-admission finds those not evicted).  So a replica
runs its ``PrefixCache`` only from a preemption until every preempted request is back in the
batch, and its fast paths (the fused iteration, the lazy form, chain stretches) the rest of
the time.  This is exact: while no preempted request waits, every cached block belongs to a
running request (held) or to one that finished (never looked up again), so each free block is
as good as any other; the cache started at a preemption (``start``) holds the running
requests' full blocks and one run of free blocks, which is what a cache run from the start
would hold up to the order of blocks nobody can find (tests/simulator/sim2real/
test_block_keys.py checks identical DataFrames).  The lookups a vLLM-style hit rate counts are
every first admission's prompt and every re-admission's prompt and output.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from simulator.engine.chain_stretch import chain_stretch_of
from simulator.engine.prefix_cache import PrefixCache


class OwnCache:
    """A replica's own-blocks cache: started at a preemption, stopped when no preempted
    request waits; its totals over every time it ran."""

    def __init__(self, keys) -> None:
        self.keys = keys
        self.waiting = 0      # preempted requests not yet re-admitted
        self.readmitted = 0   # tokens the re-admissions looked up
        self.hits = self.evictions = 0  # of the caches that stopped

    def start(self, replica) -> None:
        """The cache a run from the start would hold now (module docstring); the replica
        takes its ordinary paths while it runs."""
        lim = replica.limits
        cache = PrefixCache(lim.kv_blocks, lim.block_size, self.keys)
        cache.queue = deque([[int(lim.kv_blocks - replica.used_blocks)]])
        b = replica.b
        for rid, computed in zip(b.ids.tolist(), b.computed.tolist()):
            cache.register(rid, computed)
        replica.cache, replica.plain, replica._chain = cache, False, None

    def preempted(self, replica) -> None:
        """A request is about to be preempted: start the cache if it is not running."""
        if replica.cache is None:
            self.start(replica)
        self.waiting += 1

    def admitted(self, replica, rid: int) -> None:
        """``rid`` was admitted on the running cache; a re-admission counts its lookup, and
        the last one stops the cache (the replica's fast paths again)."""
        t = replica.t
        if not t.preemptions[rid]:
            return
        self.readmitted += int(t.prefill_target[rid])
        self.waiting -= 1
        if self.waiting == 0:
            cache = replica.cache
            self.hits += cache.hits
            self.evictions += cache.evictions
            replica.cache, replica.plain = None, replica.plain_ok
            replica._chain = chain_stretch_of(replica) if replica.fast_forward else None

    def ran(self, replica) -> bool:
        """Whether the cache ran at all (a preemption started it)."""
        return self.readmitted > 0 or replica.cache is not None

    def totals(self, replica) -> tuple[int, int, int]:
        """(tokens looked up, found, cached blocks evicted) over the run so far."""
        t, cache = replica.t, replica.cache
        first = (t.replica == replica.index) & ~np.isnan(t.first_scheduled_s)
        queries = int(t.prompt_len[first].sum()) + self.readmitted
        running = (cache.hits, cache.evictions) if cache is not None else (0, 0)
        return queries, self.hits + running[0], self.evictions + running[1]
