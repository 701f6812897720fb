"""Declared shared prefixes: requests whose prompts begin with the same tokens.

Load generators prepend one fixed prefix to every prompt (guidellm's ``prefix_tokens``,
``vllm bench serve --dataset-name prefix_repetition``'s ``prefix-len``); chats repeat their
system prompt and earlier turns.  A plain length trace cannot say this, so a workload may
declare it: request ``i``'s first ``shared_prefix_tokens[i]`` prompt tokens are the same as
those of every other request of its ``prefix_group[i]`` (the shorter of two prefixes of one
group is a prefix of the longer).  The prefix cache (simulator/engine/block_keys.py) then
names those blocks alike.  In YAML::

    workload: {trace: t.csv, shared_prefix: {tokens: 1024}}             # one prefix for all
    workload: {synthetic: {...}, shared_prefix: {tokens: 512, groups: 8}}  # request i: i % 8
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number, check_keys, require_mapping

MAX_PREFIX_GROUPS = 1 << 26  # group ids the prefix cache can name (block_keys.py)
KEYS = ("tokens", "groups")


def check_prefix_arrays(group: Any, tokens: Any, prompt: np.ndarray, *,
                        source: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate per-request prefix groups and lengths against the prompt lengths."""
    out = []
    for field, values, top in (("prefix_group", group, MAX_PREFIX_GROUPS - 1),
                               ("shared_prefix_tokens", tokens, None)):
        raw = np.asarray(values)
        if raw.ndim != 1 or raw.size != prompt.size or (raw.size and raw.dtype.kind not in "iu"):
            raise SpecsimError(f"expected {prompt.size} whole numbers, one per request",
                               field=field, source=source)
        array = raw.astype(np.int64)
        bad = (array < 0) | (array > (top if top is not None else prompt))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            limit = f"{top:,}" if top is not None else f"its prompt's {prompt[i]} tokens"
            raise SpecsimError(f"request {i} has {array[i]}; expected 0 to {limit}",
                               field=field, source=source)
        array.flags.writeable = False
        out.append(array)
    return out[0], out[1]


def shared_prefix_arrays(cfg: Any, prompt: np.ndarray, *, source: str,
                         field: str = "workload.shared_prefix") -> tuple[np.ndarray, np.ndarray]:
    """``shared_prefix: {tokens: N, groups: G}`` as per-request arrays: request ``i`` in
    group ``i % G``, sharing ``min(N, its prompt)`` tokens (a prompt shorter than the prefix
    is all prefix)."""
    data: Mapping = require_mapping(cfg, source=source, field=field)
    check_keys(data, allowed=KEYS, required=("tokens",), source=source, prefix=field + ".")
    tokens = as_number(data["tokens"], source=source, field=field + ".tokens", minimum=0,
                       integer=True, maximum=10_000_000)
    groups = as_number(data.get("groups", 1), source=source, field=field + ".groups",
                       minimum=1, integer=True, maximum=MAX_PREFIX_GROUPS)
    group = np.arange(prompt.size, dtype=np.int64) % int(groups)
    return group, np.minimum(prompt, int(tokens)).astype(np.int64)
