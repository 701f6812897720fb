"""Automatic prefix caching, as vLLM V1's KV cache manager does it (``PrefixCache``).

vLLM identifies a full KV block by a hash of its tokens and of everything before it
(vLLM docs/design/prefix_caching.md); a new request reuses the longest run of its leading blocks
that are cached, at most ``num_tokens - 1`` tokens, so that the last prompt token is computed
for its logits (vllm/v1/core/kv_cache_manager.py, ``get_computed_blocks``).  A cached block
stays in the KV cache after its requests finish, in the *free block queue*: allocation takes
blocks from the queue's head and evicts the cached ones it takes; a request's blocks go back to
the tail in reverse order, so its last blocks are evicted first (vllm/v1/core/block_pool.py,
``FreeKVCacheBlockQueue``).  A cached block in use by several requests is held once
(reference counts): the KV budget counts physical blocks.

This module keeps exactly that state per replica, with block *keys* instead of hashes:

- the free queue is a deque of runs (``[n]``: n blocks that hold nothing cached) and of cached
  keys; a key's entry is live while ``free[key]`` is its sequence number (a hit takes the key
  out of the queue by forgetting the number: the entry is skipped when reached);
- ``ref[key]``: the requests holding a resident key (0: in the free queue, evictable);
- ``held[rid]``: the keys a running request holds, in block order.

Blocks freed when drafts are rejected go back to the queue's head (vLLM keeps them with the
request; here they are freed and re-taken by the same request's next step, so they must not
push cached blocks out).  A request that computes a block another request already cached
keeps its copy private (vLLM keeps both copies under one hash; lookups find the first).
Keys (block_keys.py): a request's shared prefix (Mooncake ``hash_ids``, its prompt token
ids, or a declared shared prefix), then keys of its own, so that a preempted request finds
the blocks it computed (prompt and output) where they were not evicted, as in vLLM V1.  A run
whose workload names no shared prefix runs its cache only while a preempted request waits
(own_cache.py), keeping the engine's fast paths the rest of the time.
"""
from __future__ import annotations

from collections import deque
from typing import Sequence

import numpy as np

class PrefixCache:
    """One replica's cached blocks and free block queue (see the module docstring)."""

    def __init__(self, kv_blocks: int, block_size: int, keys: Sequence[np.ndarray]) -> None:
        self.block_size = int(block_size)
        self.keys = keys
        self.queue: deque = deque([[int(kv_blocks)]])
        self.free: dict[int, int] = {}   # key -> sequence number of its live queue entry
        self.ref: dict[int, int] = {}    # resident key -> requests holding it
        self.held: dict[int, list[int]] = {}
        self.registered: dict[int, int] = {}  # rid -> prompt blocks considered so far
        self.seq = 0
        self.queries = self.hits = 0     # tokens looked up / found at admissions (vLLM's)
        self.evictions = 0

    # ------------------------------------------------------------------ lookups
    def lookup(self, rid: int, tokens: int, gone=()) -> tuple[int, int]:
        """Blocks of ``rid``'s prompt cached now (at most ``tokens - 1`` tokens' worth;
        ignoring ``gone``, keys about to be evicted) and how many of them are in the free
        queue (taking them uses up free blocks)."""
        keys = self.keys[rid]
        cap = min(keys.size, (int(tokens) - 1) // self.block_size)
        hit = free = 0
        ref = self.ref
        for k in keys[:cap].tolist():
            r = ref.get(k)
            if r is None or k in gone:
                break
            hit += 1
            free += r == 0
        return hit, free

    def evicted_by(self, n: int) -> set[int]:
        """The keys that allocating ``n`` blocks now would evict (nothing changes)."""
        out: set[int] = set()
        for entry in self.queue:
            if n <= 0:
                break
            if isinstance(entry, list):
                n -= entry[0]
            elif self.free.get(entry[0]) == entry[1]:
                out.add(entry[0])
                n -= 1
        return out

    # ------------------------------------------------------------------ changes
    def acquire(self, rid: int, hit: int, tokens: int) -> None:
        """Admit ``rid`` with its first ``hit`` blocks from the cache (``tokens``: its
        prefill, for the hit rate)."""
        keys = self.keys[rid][:hit].tolist()
        for k in keys:
            if self.ref[k] == 0:
                del self.free[k]  # its queue entry is now stale
            self.ref[k] += 1
        self.held[rid] = keys
        self.registered[rid] = hit
        self.queries += int(tokens)
        self.hits += hit * self.block_size

    def register(self, rid: int, computed: int) -> None:
        """``rid`` holds ``computed`` tokens: its full prompt blocks become cached."""
        keys = self.keys[rid]
        start, stop = self.registered.get(rid, 0), min(keys.size, computed // self.block_size)
        if stop <= start:
            return
        held = self.held.setdefault(rid, [])
        for k in keys[start:stop].tolist():
            if k not in self.ref:
                self.ref[k] = 1
                held.append(k)
        self.registered[rid] = stop

    def release(self, rid: int, blocks: int) -> int:
        """``rid`` leaves holding ``blocks`` blocks; returns the physical blocks freed (its
        shared blocks other requests still hold stay in use)."""
        held = self.held.pop(rid, [])
        self.registered.pop(rid, None)
        private = int(blocks) - len(held)
        if private > 0:
            self.queue.append([private])
        freed = private
        for k in reversed(held):
            self.ref[k] -= 1
            if self.ref[k] == 0:
                self.seq += 1
                self.free[k] = self.seq
                self.queue.append((k, self.seq))
                freed += 1
        return freed

    def allocate(self, n: int) -> None:
        """Take ``n`` free blocks from the queue's head, evicting the cached ones taken."""
        q = self.queue
        while n > 0:
            entry = q[0]
            if isinstance(entry, list):
                take = min(entry[0], n)
                n -= take
                if take == entry[0]:
                    q.popleft()
                else:
                    entry[0] -= take
                continue
            q.popleft()
            k, seq = entry
            if self.free.get(k) == seq:  # live: evict it
                del self.free[k]
                del self.ref[k]
                self.evictions += 1
                n -= 1

    def give_back(self, n: int) -> None:
        """Blocks that held rejected drafts go back to the queue's head."""
        if n > 0:
            self.queue.appendleft([int(n)])

    def cycle(self, takes: list[int], backs: list[int]) -> None:
        """``allocate(take)`` then ``give_back(back)`` for each pair in turn (iterations
        that reserve blocks and roll some back), the runs given back counted while the next
        takes fit in them: adjacent runs at the queue's head are taken as one run, so
        merging them changes nothing that the queue does."""
        head = 0  # blocks of runs given back here, at the queue's head, not yet in it
        for take, back in zip(takes, backs):
            if take > head:
                take -= head
                head = 0
                self.allocate(take)
            else:
                head -= take
            head += back
        if head > 0:
            self.queue.appendleft([int(head)])

    def resident(self) -> int:
        """Cached blocks in the KV cache now (in use or evictable)."""
        return len(self.ref)

