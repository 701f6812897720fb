"""SGLang's admission-time KV reservation for the running requests' future tokens.

SGLang's ``PrefillAdder`` (python/sglang/srt/managers/schedule_policy.py, read at v0.5.3; the
same logic at v0.4.1 and v0.4.5) does not admit a request while its KV is merely free: it
holds back, for every request of the running (decoding) batch, an estimate of the tokens it
will still write, ``min(max_new_tokens - len(output_ids), CLIP_MAX_NEW_TOKENS) *
new_token_ratio`` (``_get_running_request_total_token_offset``, lines 365-372), and
``rem_total_tokens`` is the free and evictable KV less that offset (lines 375-393).  The
chunked request left from the last prefill batch gets ``min(chunk budget,
int(rem_total_tokens))`` tokens (``add_chunked_req``, line 438); a waiting request is refused,
and the admission pass ends, where ``extend_input_len + min(max_new_tokens, CLIP) >=
rem_total_tokens`` (``add_one_req``, lines 559-569: the whole remaining prompt, even when only
a chunk of it is then scheduled); every request taken adds its chunk, plus its clipped
``max_new_tokens`` where the chunk ends its prefill, to the offset (``_update_prefill_budget``,
line 428).

``new_token_ratio`` moves (managers/scheduler.py at v0.5.3): it starts at ``init =
min(SGLANG_INIT_NEW_TOKEN_RATIO * schedule_conservativeness, 1)`` with a floor ``min(init *
SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, 1)`` and a step ``(init - floor) /
SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` (lines 568-581); every decode batch lowers it by one
step to the floor (``update_running_batch``, lines 2024-2028), unless its KV does not fit:
then requests are retracted and the ratio becomes ``min(1, (sum len(output_ids) +
retract_decode_steps * n) / sum max_new_tokens)`` over the n requests left
(schedule_batch.py ``retract_decode``, lines 1560-1566); an idle scheduler resets it to
``init`` (scheduler.py ``self_check_during_idle``, lines 1605-1608).  The numbers are the
engine's (engines.yaml, the sglang entries); the simulator's output length stands for
``max_new_tokens`` (benchmark clients send ``max_tokens`` = the output length).

The ratio is kept as the value it took at its last reset or retraction and the decode steps
since then, so the engine's fast-forward passes, which complete many decode steps at once,
need not touch it: the decode steps are the replica's iterations less its prefill steps
(with prefill and decode steps apart every prefill step is planned by prefill_first.py).
``at`` is the decay in closed form, ``max(r - m * step, floor)``: SGLang's repeated
subtraction up to float rounding.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_SUM = np.add.reduce


@dataclass(frozen=True)
class TokenRatio:
    """An engine's ``new_token_ratio`` constants (engines.yaml)."""

    init: float          # the ratio after a reset
    floor: float         # the lowest the decay takes it
    step: float          # its decrease per decode step
    clip: int            # CLIP_MAX_NEW_TOKENS: the most tokens a request is reserved
    retract_steps: int   # global_config.retract_decode_steps: the retraction's headroom

    @classmethod
    def of(cls, init_ratio: float, conservativeness: float, min_factor: float,
           decay_steps: float, clip: int, retract_steps: int) -> TokenRatio:
        """The constants as scheduler.py derives them from the engine's defaults."""
        init = min(init_ratio * conservativeness, 1.0)
        floor = min(init * min_factor, 1.0)
        return cls(init, floor, (init - floor) / decay_steps, int(clip), int(retract_steps))

    def at(self, ratio: float, decodes: int) -> float:
        """The ratio ``decodes`` decode steps after it was ``ratio``."""
        return max(ratio - decodes * self.step, self.floor) if decodes else ratio

    def retracted(self, generated: np.ndarray, output_len: np.ndarray) -> float:
        """The ratio after a retraction, over the requests left (their emitted tokens and
        output lengths)."""
        total = int(_SUM(output_len))
        if total <= 0:
            return 1.0
        return min(1.0, (int(_SUM(generated)) + self.retract_steps * generated.size) / total)


class RatioClock:
    """A replica's ``new_token_ratio``: its value at the last reset or retraction, the
    iteration count then, and the prefill steps since (see the module docstring)."""

    __slots__ = ("const", "base", "since", "prefills")

    def __init__(self, const: TokenRatio) -> None:
        self.const = const
        self.base, self.since, self.prefills = const.init, 0, 0

    def ratio(self, iterations: int) -> float:
        """The ratio once ``iterations`` steps have completed."""
        return self.const.at(self.base, iterations - self.since - self.prefills)

    def reset(self, iterations: int) -> None:
        """The scheduler went idle: back to ``init``."""
        self.base, self.since, self.prefills = self.const.init, iterations, 0

    def retract(self, iterations: int, generated: np.ndarray, output_len: np.ndarray) -> None:
        """A decode step (the ``iterations``-th from 0) retracted requests: the estimate
        replaces that step's decay."""
        self.base = self.const.retracted(generated, output_len)
        self.since, self.prefills = iterations + 1, 0


def reserved_tokens(replica, ratio: float) -> float:
    """The offset the running (decoding) requests hold back at ``ratio``: their clipped
    remaining output tokens times the ratio (SGLang sums the products; the integer sum
    times the ratio is the same up to float rounding)."""
    b = replica.b
    if not b.decoding:
        return 0.0
    dec = ~b.in_prefill
    left = np.minimum(b.output_len[dec] - b.generated[dec], replica.limits.token_ratio.clip)
    return int(_SUM(left)) * ratio


def start_room(replica) -> float:
    """``rem_total_tokens`` at the start of an admission pass: the free KV tokens (a prefix
    cache's free cached blocks included, as SGLang counts the evictable ones) less the
    running requests' reservation."""
    lim = replica.limits
    free = (lim.kv_blocks - replica.used_blocks) * lim.block_size
    return free - reserved_tokens(replica, replica.ratio_clock.ratio(
        replica.stats["iterations"]))
