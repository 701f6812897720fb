"""Names of KV blocks for the prefix cache (prefix_cache.py), one array per request.

vLLM V1 names a full block by a hash of its tokens and of everything before it, for prompt
and generated tokens alike (vllm/v1/core/kv_cache_utils.py, ``hash_block_tokens``; the
blocks of output tokens are cached as they fill, vLLM docs/design/prefix_caching.md).  Here a
request's keys are its *shared* keys first -- the blocks other requests can name too --
then keys of its own, one per block it can ever hold:

- shared keys come from Mooncake ``hash_ids`` (the block ending at token ``e`` is named by
  the hash of the hash block holding token ``e - 1`` and ``e``'s offset in it), from the
  prompt's token ids (exact: a table of (parent key, block tokens)), or from a declared
  shared prefix (requests of one prefix group share the blocks that lie wholly inside their
  ``shared_prefix_tokens``);
- own keys (negative numbers, unique per request and block) name everything else: no other
  request can find them, but a preempted request re-admitted on its prompt and output finds
  its own blocks that were not evicted meanwhile, as vLLM's recompute preemption does.
"""
from __future__ import annotations

import numpy as np

_HASH_OFFSET_LIMIT = 1 << 22  # a hash block's tokens, within a key (hash id < 2**40)
_OWN = 1 << 32                # blocks of one request, within its own keys (rid < 2**26)
_GROUP = 1 << 32              # blocks of one prefix group, within its keys
_GROUP_BASE = -(1 << 61)      # group keys: below every own key, disjoint from hash/id keys
_EMPTY = np.zeros(0, np.int64)


def _from_ids(prompt_ids, bs: int) -> list[np.ndarray]:
    table: dict[tuple[int, bytes], int] = {}
    out = []
    for ids in prompt_ids:
        keys, parent = [], -1
        for j in range(ids.size // bs):
            parent = table.setdefault((parent, ids[j * bs:(j + 1) * bs].tobytes()), len(table))
            keys.append(parent)
        out.append(np.asarray(keys, np.int64))
    return out


def _from_hashes(prompt_len, prefix_hashes, bs: int, h: int) -> list[np.ndarray]:
    if h >= _HASH_OFFSET_LIMIT:
        raise ValueError(f"hash blocks of {h} tokens are over the limit {_HASH_OFFSET_LIMIT}")
    out = []
    for n, hashes in zip(np.asarray(prompt_len).tolist(), prefix_hashes):
        ends = bs * np.arange(1, n // bs + 1, dtype=np.int64)
        which = (ends - 1) // h
        ends, which = ends[which < hashes.size], which[which < hashes.size]
        out.append(hashes[which] * _HASH_OFFSET_LIMIT + (ends - which * h))
    return out


def _from_groups(groups: np.ndarray, shared_tokens: np.ndarray, bs: int) -> list[np.ndarray]:
    return [_GROUP_BASE + g * _GROUP + np.arange(s // bs, dtype=np.int64)
            for g, s in zip(groups.tolist(), shared_tokens.tolist())]


def block_keys(prompt_len: np.ndarray, block_size: int, *, prefix_hashes=None,
               hash_block_tokens: int = 512, prompt_ids=None, prefix_group=None,
               shared_prefix_tokens=None) -> list[np.ndarray] | None:
    """Each request's shared keys, one per full prompt block of ``block_size`` tokens that
    other requests may also hold (None: the workload names no shared block).  Prompt ids
    take precedence (they are the tokens themselves), then hash ids, then prefix groups."""
    bs = int(block_size)
    if prompt_ids is not None:
        return _from_ids(prompt_ids, bs)
    if prefix_hashes is not None:
        return _from_hashes(prompt_len, prefix_hashes, bs, int(hash_block_tokens))
    if prefix_group is not None:
        return _from_groups(np.asarray(prefix_group), np.asarray(shared_prefix_tokens), bs)
    return None


class BlockKeys:
    """Every request's keys: its shared keys, then its own up to ``blocks[rid]`` blocks (the
    most it can ever hold: prompt, output and one verification step)."""

    def __init__(self, shared: list[np.ndarray] | None, blocks: np.ndarray) -> None:
        if len(blocks) >= 1 << 26:
            raise ValueError("more requests than own keys can name")
        self.shared = shared
        self.blocks = np.asarray(blocks, np.int64)

    def __len__(self) -> int:
        return int(self.blocks.size)

    def __getitem__(self, rid: int) -> np.ndarray:
        base = _EMPTY if self.shared is None else self.shared[rid]
        n = int(self.blocks[rid])
        if base.size >= n:
            return base
        own = -1 - int(rid) * _OWN - np.arange(base.size, n, dtype=np.int64)
        return np.concatenate((base, own)) if base.size else own

