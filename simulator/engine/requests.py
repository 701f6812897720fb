"""Per-request state of a run (``RequestTable``), its status codes, and one replica's limits."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.engine.reserve import TokenRatio

# request status codes
PENDING, WAITING, RUNNING, FINISHED, REJECTED = 0, 1, 2, 3, 4

STATUS_NAMES = {PENDING: "pending", WAITING: "waiting", RUNNING: "running",
                FINISHED: "finished", REJECTED: "rejected"}


# the integer fields a running request keeps in its replica's batch (batch.py), in the order
# of ``RequestTable.packed``'s rows
PACKED_FIELDS = ("computed", "generated", "output_len", "prompt_len", "blocks",
                 "prefill_target", "num_drafts", "num_draft_tokens", "num_accepted")


class RequestTable:
    """Per-request state of a simulation as aligned numpy arrays, in the narrowest dtypes
    that hold them: token counts fit int32 (a request has at most
    ``workloads.workload.MAX_TOKENS_PER_REQUEST`` = 1e7 tokens, a drafted total at most 64
    times that), a replica index int16 (``replicas`` <= 4096); times stay float64.  The
    ``PACKED_FIELDS`` are the rows of one ``packed`` array (a request's column loads into
    and writes back from its replica's batch in one copy)."""

    def __init__(self, arrival_s: np.ndarray, prompt_len: np.ndarray,
                 output_len: np.ndarray) -> None:
        n = arrival_s.size
        self.arrival_s = arrival_s.astype(np.float64)
        # computed: tokens in the target's KV; generated: output tokens emitted
        self.packed = np.zeros((len(PACKED_FIELDS), n), np.int32)
        for name, row in zip(PACKED_FIELDS, self.packed):
            setattr(self, name, row)  # self.computed, self.generated, ...: views of a row
        self.prompt_len[:] = prompt_len
        self.output_len[:] = output_len
        self.in_prefill = np.zeros(n, bool)
        self.status = np.zeros(n, np.int8)
        self.replica = np.full(n, -1, np.int16)
        self.first_scheduled_s = np.full(n, np.nan)
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.last_emit_s = np.full(n, np.nan)
        self.preemptions = np.zeros(n, np.int32)
        self.cached_tokens = np.zeros(n, np.int32)  # prompt tokens found in the prefix cache
        self.reject_reason = np.full(n, "", dtype=object)


@dataclass
class EngineLimits:
    """The scheduler limits and the KV budget of one replica."""

    max_num_seqs: int
    max_num_batched_tokens: int
    enable_chunked_prefill: bool
    block_size: int
    kv_blocks: int
    # the longest prefill chunk of one request (0: the token budget alone); under DP
    # attention one rank's share of the budget (simulator/cost/dp_attention.py)
    max_chunk_tokens: int = 0
    # a step may carry prefill chunks and decodes together (vLLM V1; SGLang's
    # --enable-mixed-chunk); False: a step is a prefill batch or a decode batch, prefill
    # first (SGLang's default, prefill_first.py)
    mixed_chunk: bool = True
    # SGLang's admission-time KV reservation for the running requests' future tokens
    # (reserve.py; engines.yaml's sglang entries), with prefill and decode steps apart only;
    # None: a prefill is admitted while its chunk's blocks are free
    token_ratio: TokenRatio | None = None
    # vLLM's async scheduling (--async-scheduling, on by default since vLLM 0.14.0): the next
    # step is scheduled while one runs, so a request arriving during a step joins the one
    # after the next (replica.py, ``Replica._release``)
    async_scheduling: bool = False
