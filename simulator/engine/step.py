"""One iteration, twice: ``Step`` as the scheduler planned and priced it, ``StepRow`` as the
recorder keeps it (its fields are the steps table's columns, in order)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, get_type_hints

import numpy as np

from simulator.engine.plan import BatchView, DraftPlan

NO_IDS = np.zeros(0, np.int64)  # no requests (shared, so read-only)
NO_IDS.flags.writeable = False
NO_FLAGS = np.zeros(0, bool)  # no prefill chunk completes (shared, so read-only)
NO_FLAGS.flags.writeable = False
NO_FLOATS = np.zeros(0, np.float64)  # no decodes' tokens or contexts (shared, so read-only)
NO_FLOATS.flags.writeable = False


@dataclass(frozen=True, slots=True)
class Step:
    """One scheduled iteration: its decodes and prefill chunks, and what it costs."""

    start_s: float
    draft_s: float              # proposer time (GPU and CPU), serial before verification
    verify_s: float             # the target's forward over every scheduled token
    plan: DraftPlan | None      # the decodes' speculative plan; None when nothing decodes
    batch: BatchView | None     # what the policy saw of the decodes (None with ``plan``)
    decode_ids: np.ndarray      # decoding requests, aligned with ``plan`` and ``batch``
    decode_pos: object          # their positions in the running batch (an array or a slice)
    prefill_ids: np.ndarray     # requests with a prefill chunk this step
    prefill_pos: np.ndarray     # their positions in the running batch
    chunks: np.ndarray          # their chunk lengths in tokens
    completes: np.ndarray       # whether the chunk ends the request's prefill
    decode_tokens: int          # target tokens of the decodes (1 + drafts each)
    prefill_tokens: int         # target tokens of the prefill chunks
    preempted: int              # requests preempted to make room for the decodes
    kv_read_tokens: float       # KV tokens read by the forward (context + new)
    attn_pairs: float           # causal (query, key) pairs of the forward's attention

    @property
    def duration_s(self) -> float:
        """Draft, then verify: how long the step holds the replica."""
        return self.draft_s + self.verify_s


class StepRow(NamedTuple):
    """One row of the steps table: each field is a column, in the table's order.

    A named tuple rather than a frozen dataclass: as immutable and as named, built in a
    sixth of the time on the engine's hot path, and already the tuple the buffer takes.
    """

    replica: int
    start_s: float
    duration_s: float
    draft_s: float
    verify_s: float
    batch_size: int
    num_prefill: int
    num_decode: int
    prefill_tokens: int
    decode_tokens: int          # target tokens of the decodes (1 + drafts each)
    emitted_tokens: int
    draft_tokens: int
    accepted_tokens: int
    kv_blocks_used: int
    kv_occupancy: float
    queue_len: int
    kv_read_tokens: float
    attn_pairs: float
    preemptions: int


STEP_FIELDS: tuple[str, ...] = StepRow._fields
FLOAT_FIELDS = frozenset(name for name, kind in get_type_hints(StepRow).items() if kind is float)
