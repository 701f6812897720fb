"""The Workload: requests as parallel numpy arrays (arrival, prompt and output lengths).

A workload is the simulator's whole view of the traffic: when each request arrives, how
many prompt tokens it brings, how many tokens the target will emit for it, and optionally
a task label and the token ids themselves (for the model-free speculation methods, which
need real token sequences to look things up in).  Arrays are copied and made read-only
on construction, so a Workload is as immutable as its frozen dataclass suggests.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from simulator.inputs.errors import SpecsimError
from workloads.shared_prefix import check_prefix_arrays

if TYPE_CHECKING:  # pandas is imported where a frame is built (a trace read needs none)
    import pandas as pd

# Limits on a workload (docs/limits.md), checked before anything is allocated from them.
# Arrival times: at 1e9 s (31.7 years) float64 still resolves 1.2e-7 s, far below one
# engine step; much later (1e17 s) a step no longer moves the clock and every latency
# silently reads 0.
MAX_ARRIVAL_S = 1e9
# Requests a generator draws (synthetic and token workloads): the engine's benchmark runs
# 1,000,000 synthetic requests in about 4 minutes and 1.2 GiB.
MAX_REQUESTS = 1_000_000
# Tokens of one request's prompt or output (lengths, traces): ten million, far above any
# model's context.
MAX_TOKENS_PER_REQUEST = 10_000_000
# Token ids a token-level workload may hold in total (prompts and outputs): 400 MB as int64.
MAX_TOKEN_IDS = 50_000_000
# A prefix block id (Mooncake hash_ids): below 2**40, so that the prefix cache packs an id
# and a token offset within its block (22 bits) into one int64 key.
MAX_BLOCK_ID = 2**40 - 1


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _as_float_array(values: Any, *, field: str, source: str) -> np.ndarray:
    try:
        array = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise SpecsimError("expected numbers", field=field, source=source) from None
    if array.ndim != 1:
        raise SpecsimError(f"expected a 1-D array, got shape {array.shape}", field=field,
                           source=source)
    bad = ~np.isfinite(array)
    if bad.any():
        i = _first(bad)
        raise SpecsimError(f"request {i} is {array[i]!r}; values must be finite", field=field,
                           source=source)
    return array


def _as_count_array(values: Any, *, field: str, source: str) -> np.ndarray:
    """Return an int64 copy of ``values``; every entry must be a whole number >= 1."""
    raw = np.asarray(values)
    if raw.dtype == bool:
        raise SpecsimError("expected token counts, got booleans", field=field, source=source)
    if raw.dtype.kind in "iu":
        array = raw.astype(np.int64)
    else:
        floats = _as_float_array(raw, field=field, source=source)
        fractional = floats != np.round(floats)
        if fractional.any():
            i = _first(fractional)
            raise SpecsimError(f"request {i} is {floats[i]!r}; token counts are whole numbers",
                               field=field, source=source)
        array = floats.astype(np.int64)
    if array.ndim != 1:
        raise SpecsimError(f"expected a 1-D array, got shape {array.shape}", field=field,
                           source=source)
    small = array < 1
    if small.any():
        i = _first(small)
        raise SpecsimError(f"request {i} has {array[i]} tokens; every request needs at least 1",
                           field=field, source=source)
    big = array > MAX_TOKENS_PER_REQUEST
    if big.any():
        i = _first(big)
        raise SpecsimError(f"request {i} has {array[i]:,} tokens, above the limit of "
                           f"{MAX_TOKENS_PER_REQUEST:,}", field=field, source=source,
                           fix="check the units; no model has a context that long")
    return array.copy()


def _integer_rows(seqs: Sequence[Any], n: int, *, field: str, source: str, what: str):
    """Yield (i, 1-D integer array >= 0) for each of ``n`` requests' sequences."""
    if isinstance(seqs, (str, bytes)) or not hasattr(seqs, "__len__"):
        raise SpecsimError(f"expected one {what} sequence per request, got "
                           f"{type(seqs).__name__}", field=field, source=source)
    if len(seqs) != n:
        raise SpecsimError(f"has {len(seqs)} sequences for {n} requests", field=field,
                           source=source)
    for i, seq in enumerate(seqs):
        ids = np.asarray(seq)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise SpecsimError(f"request {i}: {what}s must be a 1-D integer array",
                               field=field, source=source)
        if ids.size and ids.min() < 0:
            raise SpecsimError(f"request {i} has a negative {what}", field=field,
                               source=source)
        yield i, ids


def _as_token_ids(seqs: Sequence[Any], counts: np.ndarray, *, field: str,
                  source: str) -> tuple[np.ndarray, ...]:
    out = []
    for i, ids in _integer_rows(seqs, len(counts), field=field, source=source,
                                what="token id"):
        if len(ids) != counts[i]:
            raise SpecsimError(f"request {i} has {len(ids)} token ids but its count is "
                               f"{counts[i]}", field=field, source=source,
                               fix="make the token counts equal the id sequence lengths")
        out.append(_frozen(ids.astype(np.int64)))
    return tuple(out)


def _as_prefix_hashes(seqs: Sequence[Any], counts: np.ndarray, block_tokens: Any, *,
                      source: str) -> tuple[np.ndarray, ...]:
    """Each request's prefix block ids: whole numbers in [0, MAX_BLOCK_ID], at most one per
    ``block_tokens`` tokens of its prompt (Mooncake: ceil(input_length / 512))."""
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, (int, np.integer)) \
            or not 1 <= block_tokens <= 1_000_000:
        raise SpecsimError(f"expected a whole number in [1, 1000000], got {block_tokens!r}",
                           field="hash_block_tokens", source=source)
    out = []
    for i, ids in _integer_rows(seqs, len(counts), field="hash_ids", source=source,
                                what="block id"):
        if ids.size and ids.max() > MAX_BLOCK_ID:
            raise SpecsimError(f"request {i} has a block id above {MAX_BLOCK_ID:,} (2**40 - 1)",
                               field="hash_ids", source=source,
                               fix=f"give block ids from 0 to {MAX_BLOCK_ID:,}")
        if ids.size > -(-int(counts[i]) // int(block_tokens)):
            raise SpecsimError(f"request {i} has {ids.size} block ids for {counts[i]} prompt "
                               f"tokens in blocks of {block_tokens}", field="hash_ids",
                               source=source, fix="one id per block of the prompt")
        out.append(_frozen(ids.astype(np.int64)))
    return tuple(out)


@dataclass(frozen=True)
class Workload:
    """Requests sorted by arrival: times in seconds, lengths in tokens, optional token ids."""

    name: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    task: np.ndarray | None = None
    prompt_ids: tuple[np.ndarray, ...] | None = None
    output_ids: tuple[np.ndarray, ...] | None = None
    # prefix-cache block ids of each prompt (Mooncake's ``hash_ids``): id i names the whole
    # prompt prefix up to the end of its block of ``hash_block_tokens`` tokens
    prefix_hashes: tuple[np.ndarray, ...] | None = None
    hash_block_tokens: int = 512
    # a declared shared prefix (workloads/shared_prefix.py): request i's first
    # shared_prefix_tokens[i] prompt tokens are those of every request of its prefix_group
    prefix_group: np.ndarray | None = None
    shared_prefix_tokens: np.ndarray | None = None
    # a closed-loop client (vllm bench serve --max-concurrency): at most this many requests
    # in flight, each sent at its arrival time or when a slot frees (None: open loop)
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SpecsimError(f"expected a non-empty string, got {self.name!r}", field="name",
                               source="workload")
        src = f"workload {self.name!r}"
        arrival = _as_float_array(self.arrival_s, field="arrival_s", source=src)
        if arrival.size == 0:
            raise SpecsimError("has no requests", field="arrival_s", source=src,
                               fix="give at least one request")
        negative = arrival < 0
        if negative.any():
            i = _first(negative)
            raise SpecsimError(f"request {i} arrives at {arrival[i]!r} s; times must be >= 0",
                               field="arrival_s", source=src)
        late = arrival > MAX_ARRIVAL_S
        if late.any():
            i = _first(late)
            raise SpecsimError(f"request {i} arrives at {arrival[i]:.6g} s, after the limit of "
                               f"{MAX_ARRIVAL_S:g} s (31.7 years): the float64 clock would "
                               "lose the engine's step times", field="arrival_s", source=src,
                               fix="give arrival times relative to the first request (in "
                                   "seconds), or raise the request rate")
        backwards = np.diff(arrival) < 0
        if backwards.any():
            i = _first(backwards) + 1
            raise SpecsimError(f"request {i} arrives at {arrival[i]!r} s, before request "
                               f"{i - 1} at {arrival[i - 1]!r} s", field="arrival_s",
                               source=src, fix="sort the requests by arrival time")
        prompt = _as_count_array(self.prompt_tokens, field="prompt_tokens", source=src)
        output = _as_count_array(self.output_tokens, field="output_tokens", source=src)
        for field, array in (("prompt_tokens", prompt), ("output_tokens", output)):
            if len(array) != len(arrival):
                raise SpecsimError(f"has {len(array)} entries for {len(arrival)} arrivals",
                                   field=field, source=src)
        object.__setattr__(self, "arrival_s", _frozen(arrival))
        object.__setattr__(self, "prompt_tokens", _frozen(prompt))
        object.__setattr__(self, "output_tokens", _frozen(output))
        if self.task is not None:
            task = np.array(list(self.task), dtype=object)
            if len(task) != len(arrival):
                raise SpecsimError(f"has {len(task)} labels for {len(arrival)} requests",
                                   field="task", source=src)
            for i, label in enumerate(task):
                if not isinstance(label, str) or not label:
                    raise SpecsimError(f"request {i} has label {label!r}; labels are "
                                       "non-empty strings", field="task", source=src)
            object.__setattr__(self, "task", _frozen(task))
        if self.prompt_ids is not None:
            object.__setattr__(self, "prompt_ids", _as_token_ids(
                self.prompt_ids, prompt, field="prompt_ids", source=src))
        if self.output_ids is not None:
            object.__setattr__(self, "output_ids", _as_token_ids(
                self.output_ids, output, field="output_ids", source=src))
        if self.prefix_hashes is not None:
            object.__setattr__(self, "prefix_hashes", _as_prefix_hashes(
                self.prefix_hashes, prompt, self.hash_block_tokens, source=src))
        self._check_client(prompt, src)

    def _check_client(self, prompt: np.ndarray, src: str) -> None:
        """The declared shared prefixes and the closed-loop cap."""
        if (self.prefix_group is None) != (self.shared_prefix_tokens is None):
            raise SpecsimError("give prefix_group and shared_prefix_tokens together",
                               field="shared_prefix_tokens", source=src)
        if self.prefix_group is not None:
            if self.prefix_hashes is not None or self.prompt_ids is not None:
                raise SpecsimError("the prompts' hash_ids or token ids already name their "
                                   "shared prefixes", field="shared_prefix", source=src,
                                   fix="drop shared_prefix")
            group, shared = check_prefix_arrays(self.prefix_group, self.shared_prefix_tokens,
                                                prompt, source=src)
            object.__setattr__(self, "prefix_group", group)
            object.__setattr__(self, "shared_prefix_tokens", shared)
        cap = self.max_concurrency
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, np.integer))
                                or not 1 <= cap <= MAX_REQUESTS):
            raise SpecsimError(f"expected a whole number from 1 to {MAX_REQUESTS:,}, got "
                               f"{cap!r}", field="max_concurrency", source=src)

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def mean_rate_per_s(self) -> float:
        """Return (n - 1) / (last - first arrival); infinite when all requests arrive at once."""
        span = float(self.arrival_s[-1] - self.arrival_s[0])
        if len(self) < 2 or span <= 0:
            return math.inf
        return (len(self) - 1) / span

    def to_frame(self) -> pd.DataFrame:
        """Return columns request_id, arrival_s, prompt_tokens, output_tokens[, task]."""
        import pandas as pd
        frame = pd.DataFrame({
            "request_id": np.arange(len(self), dtype=np.int64),
            "arrival_s": self.arrival_s,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
        })
        if self.task is not None:
            frame["task"] = pd.Series(self.task, dtype=object)
        return frame

    def _take(self, stop: int, arrival_s: np.ndarray | None = None) -> Workload:
        def cut(seqs):
            return None if seqs is None else seqs[:stop]

        return Workload(
            name=self.name,
            arrival_s=(self.arrival_s if arrival_s is None else arrival_s)[:stop],
            prompt_tokens=self.prompt_tokens[:stop], output_tokens=self.output_tokens[:stop],
            task=cut(self.task), prompt_ids=cut(self.prompt_ids),
            output_ids=cut(self.output_ids), prefix_hashes=cut(self.prefix_hashes),
            hash_block_tokens=self.hash_block_tokens, prefix_group=cut(self.prefix_group),
            shared_prefix_tokens=cut(self.shared_prefix_tokens),
            max_concurrency=self.max_concurrency)

    def truncate(self, max_requests: int | None = None,
                 max_duration_s: float | None = None) -> Workload:
        """Keep the first ``max_requests``, and those within ``max_duration_s`` of the first arrival.

        The duration window is half-open, ``[t0, t0 + max_duration_s)``, so consecutive
        windows partition a trace; the first request is always kept.
        """
        stop = len(self)
        if max_requests is not None:
            if isinstance(max_requests, bool) or not isinstance(max_requests, (int, np.integer)) \
                    or max_requests < 1:
                raise SpecsimError(f"expected a whole number >= 1, got {max_requests!r}",
                                   field="max_requests", source=f"workload {self.name!r}")
            stop = min(stop, int(max_requests))
        if max_duration_s is not None:
            if isinstance(max_duration_s, bool) or not isinstance(
                    max_duration_s, (int, float, np.floating, np.integer)) \
                    or not math.isfinite(max_duration_s) or max_duration_s <= 0:
                raise SpecsimError(f"expected a finite duration > 0, got {max_duration_s!r}",
                                   field="max_duration_s", source=f"workload {self.name!r}")
            cutoff = self.arrival_s[0] + float(max_duration_s)
            stop = min(stop, int(np.searchsorted(self.arrival_s, cutoff, side="left")))
        return self if stop == len(self) else self._take(stop)

    def rescale_rate(self, rate_per_s: float) -> Workload:
        """Scale all arrival times by one factor so that ``mean_rate_per_s`` becomes ``rate_per_s``.

        Gaps keep their shape (their CV, their burstiness); the offset of the first
        request from time zero scales with them.
        """
        src = f"workload {self.name!r}"
        if isinstance(rate_per_s, bool) or not isinstance(
                rate_per_s, (int, float, np.floating, np.integer)) \
                or not math.isfinite(rate_per_s) or rate_per_s <= 0:
            raise SpecsimError(f"expected a finite rate > 0, got {rate_per_s!r}",
                               field="rate_per_s", source=src)
        if math.isinf(self.mean_rate_per_s):
            raise SpecsimError("cannot rescale: the workload needs two or more distinct "
                               "arrival times", field="rate_per_s", source=src,
                               fix="give the requests their arrival times (seconds), or drop "
                                   "rate_per_s: they then all arrive at once, and "
                                   "max_concurrency: N sends them N at a time")
        factor = self.mean_rate_per_s / float(rate_per_s)
        return self._take(len(self), arrival_s=self.arrival_s * factor)

    def shift_to_zero(self) -> Workload:
        """Subtract the first arrival time so the first request arrives at 0."""
        if self.arrival_s[0] == 0:
            return self
        return self._take(len(self), arrival_s=self.arrival_s - self.arrival_s[0])


