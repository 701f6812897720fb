"""Kit: the gamma controllers behind the ``adaptive`` policy, small, pure, separately tested.

- ``BatchSizeSchedule``: gamma by batch size, written as vLLM's
  ``num_speculative_tokens_per_batch_size`` ([[min_batch, max_batch, gamma], ...]) or as
  TensorRT-LLM's ``draft_len_schedule`` ([[max_batch, gamma], ...] or {max_batch: gamma});
  batch sizes above the last range do not speculate (TensorRT-LLM's rule, PR #10860).
- ``AcceptanceEMA``: SGLang's adaptive ``speculative_num_steps`` (PR #21599): an EMA of the
  accepted drafts per request picks a step count among ``candidate_steps`` with hysteresis.
- ``KillSwitch``: TensorRT-LLM's ``acceptance_rate_window_size`` / ``_threshold``: speculation
  is disabled for good once the acceptance rate over the last N speculating iterations falls
  below the threshold.
- ``AcceptanceEstimate`` and ``goodput_gammas``: SmartSpec/TurboSpec goodput maximisation
  (Liu et al. 2024, arXiv:2406.14066): per request, the gamma maximising expected emitted
  tokens per second of predicted step time, from a running acceptance estimate.
"""
from __future__ import annotations

from collections import deque
from itertools import repeat
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number
from simulator.policies.goodput_parts import (
    cap_bounds,
    clipped_alpha,
    descending_distinct,
    FLAT_OFFSETS,
    ONES,
    SINGLE_CANDIDATES,
    SPREAD_INDEX,
    STEP_COLUMN,
    STEP_RANGE,
)


@dataclass(frozen=True)
class BatchSizeSchedule:
    """Contiguous batch-size ranges from 1, each with its gamma; beyond the last, gamma 0."""

    ranges: tuple[tuple[int, int, int], ...]

    def gamma(self, batch_size: int) -> int:
        """The gamma of the range holding ``batch_size`` (0 above every range)."""
        for lo, hi, g in self.ranges:
            if lo <= batch_size <= hi:
                return g
        return 0

    @classmethod
    def parse(cls, value: Any, *, source: str, field: str) -> "BatchSizeSchedule":
        """Read either schedule form; gaps, overlaps and bad numbers name ``field``."""
        if isinstance(value, Mapping):  # TensorRT-LLM's {max_batch: gamma}
            value = [[k, v] for k, v in value.items()]
        if not isinstance(value, (list, tuple)) or not value:
            raise SpecsimError("expected a non-empty list of [min_batch, max_batch, gamma] "
                               "(vLLM) or [max_batch, gamma] (TensorRT-LLM) entries",
                               source=source, field=field, fix="e.g. [[1, 8, 4], [9, 32, 2]]")
        widths = {len(e) if isinstance(e, (list, tuple)) else 0 for e in value}
        if widths not in ({2}, {3}):
            raise SpecsimError("entries must all be [min_batch, max_batch, gamma] or all "
                               "[max_batch, gamma]", source=source, field=field,
                               fix="e.g. [[1, 8, 4], [9, 32, 2]] or [[8, 4], [32, 2]]")
        rows = [[as_number(x, source=source, field=f"{field}[{i}]", integer=True, minimum=0,
                           maximum=10**9) for x in entry] for i, entry in enumerate(value)]
        if widths == {2}:
            bounds = [r[0] for r in rows]
            for i in range(1, len(rows)):
                if bounds[i] <= bounds[i - 1]:
                    raise SpecsimError(
                        f"entry {i} (max_batch {bounds[i]}) overlaps entry {i - 1} (max_batch "
                        f"{bounds[i - 1]}): max_batch must increase", source=source,
                        field=f"{field}[{i}]", fix="list the ranges in increasing max_batch")
            rows = [[(bounds[i - 1] + 1 if i else 1), r[0], r[1]] for i, r in enumerate(rows)]
        expected = 1
        for i, (lo, hi, g) in enumerate(rows):
            if lo > hi:
                raise SpecsimError(f"entry {i} has min_batch {lo} > max_batch {hi}",
                                   source=source, field=f"{field}[{i}]")
            if lo < 1:
                raise SpecsimError(f"entry {i} starts at batch size {lo}; sizes start at 1",
                                   source=source, field=f"{field}[{i}]")
            if lo > expected:
                raise SpecsimError(f"gap: batch sizes {expected}..{lo - 1} are in no range",
                                   source=source, field=f"{field}[{i}]",
                                   fix=f"start entry {i} at {expected}")
            if lo < expected:
                raise SpecsimError(f"overlap: entry {i} starts at {lo}, inside the previous "
                                   f"range (which ends at {expected - 1})", source=source,
                                   field=f"{field}[{i}]", fix=f"start entry {i} at {expected}")
            expected = hi + 1
        return cls(tuple((int(lo), int(hi), int(g)) for lo, hi, g in rows))


class AcceptanceEMA:
    """SGLang's EMA step controller: probe one step past the smoothed acceptance length."""

    def __init__(self, candidate_steps, initial: int, *, ema_alpha: float = 0.2,
                 update_interval: int = 5, warmup_batches: int = 10,
                 down_hysteresis: float = -0.25, up_hysteresis: float = 0.0) -> None:
        self.candidates = sorted(set(int(s) for s in candidate_steps))
        self.steps = initial if initial in self.candidates else \
            self.candidates[len(self.candidates) // 2]
        self.ema = float(self.steps - 1)
        self.alpha = ema_alpha
        self.interval = update_interval
        self.warmup = warmup_batches
        self.down = down_hysteresis
        self.up = up_hysteresis
        self._batches = 0

    def update(self, accepted: np.ndarray) -> None:
        """Feed one verification's accepted drafts per request."""
        if not accepted.size:
            return
        if self.steps > 0:
            self.ema = (1 - self.alpha) * self.ema + self.alpha * float(accepted.mean())
        self._batches += 1
        if self._batches <= self.warmup or (self._batches - self.warmup) % self.interval:
            return
        idx = self.candidates.index(self.steps)
        if self.steps == 0:  # after a no-speculation spell, probe the next step up
            idx = min(idx + 1, len(self.candidates) - 1)
            if self.candidates[idx] > 0 and self.ema < 0:
                self.ema = float(self.candidates[idx] - 1)
            self.steps = self.candidates[idx]
            return
        start = idx
        while idx > 0:
            lower = self.candidates[idx - 1]
            drop = (0.5 if lower == 0 else lower - 0.5) + self.down
            if self.ema > drop:
                break
            idx -= 1
        if idx == start:
            while idx < len(self.candidates) - 1 and \
                    self.ema > self.candidates[idx] - 0.5 + self.up:
                idx += 1
        self.steps = self.candidates[idx]


class KillSwitch:
    """Disable speculation for good when the windowed acceptance rate drops below a threshold."""

    def __init__(self, window: int, threshold: float) -> None:
        self.threshold = threshold
        self._window: deque[tuple[int, int]] = deque(maxlen=window)
        self._sums = [0, 0]  # the window's accepted and drafted tokens (integers: exact)
        self.tripped = False

    @property
    def never_trips(self) -> bool:
        """Whether no window can trip it: accepted counts are never negative, so a rate
        below a threshold of 0 is impossible (the switch is off, whatever it records)."""
        return self.threshold <= 0.0

    def update(self, accepted: int, drafted: int) -> None:
        """Record one iteration's accepted and drafted tokens (iterations without drafts skip)."""
        if self.tripped or drafted <= 0:
            return
        window, sums = self._window, self._sums
        if len(window) == window.maxlen:  # the oldest leaves the window
            old_accepted, old_drafted = window[0]
            sums[0] -= old_accepted
            sums[1] -= old_drafted
        window.append((accepted, drafted))
        sums[0] += accepted
        sums[1] += drafted
        if len(window) == window.maxlen:
            self.tripped = sums[0] < self.threshold * sums[1]


class AcceptanceEstimate:
    """Per-token acceptance per request, shrunk towards a decaying global estimate.

    A verified chain of k drafts with j accepted is j successes and, if j < k, one failure
    (the maximum-likelihood view of truncated geometric acceptance).  ``prior_weight`` 0
    (the pure MLE, allowed by the goodput controller's parameters) is taken at its limit
    w -> 0+: the global rate is ``prior_alpha`` until an iteration drafts, an unseen request
    gets the global rate, as with any weight.
    """

    def __init__(self, prior_alpha: float = 0.5, prior_weight: float = 4.0,
                 decay: float = 0.99) -> None:
        self.prior_alpha = prior_alpha
        self.prior_weight = prior_weight
        self.decay = decay
        self._succ = prior_alpha * prior_weight
        self._fail = (1.0 - prior_alpha) * prior_weight
        self._req: dict[int, list[float]] = {}

    @property
    def global_alpha(self) -> float:
        total = self._succ + self._fail  # 0 only with prior_weight 0 before any drafting
        return self._succ / total if total > 0.0 else self.prior_alpha

    def alpha(self, request_ids: np.ndarray) -> np.ndarray:
        """Current estimate for each request."""
        g, w = self.global_alpha, self.prior_weight
        wg, req, unseen = w * g, self._req, (0.0, 0.0)
        rows = map(req.get, request_ids.tolist(), repeat(unseen))  # no generator frame
        if w <= 0.0:  # s / (s + f), the limit w -> 0+; s + f is 0 only for an unseen request
            return np.array([s / (s + f) if s + f > 0.0 else g for s, f in rows], np.float64)
        # (s + w * g) / (s + f + w) per request: numpy's operations on its arrays, in the
        # same order, as Python floats (IEEE: the same results, without numpy's per-call cost)
        return np.array([(s + wg) / (s + f + w) for s, f in rows], np.float64)

    def update(self, request_ids: np.ndarray, drafted: np.ndarray,
               accepted: np.ndarray) -> None:
        """Fold in one iteration's outcomes."""
        succ = fail = 0  # whole numbers: exactly the sums of their floats
        req, drafting = self._req, False
        for rid, d, a in zip(request_ids.tolist(), drafted.tolist(), accepted.tolist()):
            if d > 0:
                f = 1 if a < d else 0
                succ, fail, drafting = succ + a, fail + f, True
                rec = req.setdefault(rid, [0.0, 0.0])
                rec[0] += a  # a float plus a whole number: its exact float added (IEEE)
                rec[1] += f
        if drafting:  # iterations without drafts leave the counts undecayed
            self._succ = self.decay * self._succ + succ
            self._fail = self.decay * self._fail + fail

    def forget(self, request_ids) -> None:
        req = self._req
        for rid in (request_ids.tolist() if isinstance(request_ids, np.ndarray)
                    else request_ids):
            req.pop(int(rid), None)


def expected_emitted(alpha: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """(1 - alpha^(gamma+1)) / (1 - alpha): expected tokens per chain iteration (Leviathan)."""
    a = np.clip(alpha, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (1.0 - a ** (gamma + 1)) / (1.0 - a)
    return np.where(a >= 1.0, gamma + 1.0, e)


def goodput_gammas(alpha: np.ndarray, cap: np.ndarray,
                   step_time: Callable[[np.ndarray], float] | None = None,
                   max_candidates: int = 12, *,
                   step_times: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Per-request gammas maximising sum of expected emitted tokens / predicted step time
    (``goodput_choice``'s chosen candidate)."""
    ks, best = goodput_choice(alpha, cap, step_time, max_candidates, step_times=step_times)
    return ks[best].copy()


def goodput_choice(alpha: np.ndarray, cap: np.ndarray,
                   step_time: Callable[[np.ndarray], float] | None = None,
                   max_candidates: int = 12, *,
                   step_times: Callable[[np.ndarray], np.ndarray] | None = None
                   ) -> tuple[np.ndarray, int]:
    """The goodput search's candidates (C, n) and the index of the one it chooses (a
    threshold's row may repeat a uniform one: see ``_candidates``).

    If step time grew with each request's own tokens only, every request would draft while
    its next token's acceptance probability alpha_i^(k+1) beats a common threshold, so the
    search runs over thresholds: k_i(theta) = #{1 <= j <= cap_i : alpha_i^j >= theta}.  A
    draft model's chain, though, costs max(k) sequential forwards whoever needs them, so the
    uniform choices k_i = min(cap_i, u) are candidates too; the best predicted one wins.
    ``step_time`` predicts one candidate's seconds; ``step_times``, where given, every
    candidate's at once (rows of a (C, n) matrix, the first all zeros), bitwise
    ``step_time`` of each row: the same choice, without a call per candidate.
    """
    cap, k_max, k_min = cap_bounds(cap)
    n = cap.size
    if k_max == 0:
        return np.zeros((1, n), np.int64), 0
    a, inside = clipped_alpha(alpha)
    # every candidate's expected emissions are entries of one table, e[i, g] =
    # expected_emitted(alpha_i, g): the same float operations as expected_emitted's, done
    # once (a candidate gathers its entries; their sum adds the same values in the same order)
    steps = STEP_RANGE[k_max]
    powers = a[:, None] ** steps
    if not inside and _MAX(a) >= 1.0:  # rows g + 1: divided by 1.0 rather than 0 (no warning)
        certain = a >= 1.0
        table = (1.0 - powers) / np.where(certain, 1.0, 1.0 - a)[:, None]
        table = np.where(certain[:, None], steps + 0.0, table)
    else:
        table = (1.0 - powers) / (1.0 - a)[:, None]
    ks = _candidates(powers, cap, k_max, k_min, max_candidates)
    seconds = step_times(ks).tolist() if step_times is not None \
        else [step_time(k) for k in ks]
    # each candidate's sum along its own row: the 1-D sum of that gather
    # (one request: its row's entries themselves, the sums of one)
    gains = table.ravel().tolist() if n == 1 else \
        _SUM(table.take(ks + FLAT_OFFSETS[(n, k_max + 1)]), axis=1).tolist()  # flat indices
    best_c, best = 0, float(cap.size) / seconds[0]
    for c in range(1, len(seconds)):
        value = gains[c] / seconds[c]
        if value > best * (1 + 1e-12):
            best_c, best = c, value
    return ks, best_c


def _candidates(powers: np.ndarray, cap: np.ndarray, k_max: int, k_min: int,
                max_candidates: int) -> np.ndarray:
    """``goodput_choice``'s candidate rows (C, n): none, the uniform choices min(cap, u),
    the thresholds' counts (``powers``: alpha_i^j, j = 1 .. k_max + 1).  Only a threshold's
    row can repeat an earlier one (none and the uniform rows differ where cap is k_max; two
    levels differ where the lower one's own power is), and always a uniform one: each row is
    priced alone, so a repeat gets its first's seconds and gain, and the strict comparison
    never takes it over that first (the same choice as the rows without repeats, which
    cost a pass over every row to find).  One request's rows are 0 .. k_max: each threshold
    is one of its own first k_max powers, so its count is a uniform choice already there."""
    n = cap.size
    if n == 1:
        return SINGLE_CANDIDATES[k_max]
    if k_min == k_max:  # every request may draft k_max (the usual case): no masks
        powers = powers[:, :k_max]
        levels = descending_distinct(powers)
    else:
        allowed = STEP_RANGE[k_max][:k_max] <= cap[:, None]
        # the powers past a request's cap at -1, below every level (levels are powers, >= 0)
        powers = np.where(allowed, powers[:, :k_max], -1.0)
        levels = descending_distinct(powers[allowed])
    if levels.size > max_candidates:
        levels = levels[SPREAD_INDEX[(levels.size, max_candidates)]]
    ks = np.zeros((1 + k_max + levels.size, n), np.int64)
    np.minimum(cap, STEP_COLUMN[k_max], out=ks[1:k_max + 1])
    # each threshold's counts: (levels, n, k_max) comparisons counted by one product with
    # ones (whole numbers, exact as floats; cheaper than a sum of booleans along the last axis)
    ge = powers >= levels[:, None, None]
    ks[k_max + 1:] = (ge.reshape(-1, k_max) @ ONES[k_max]).reshape(levels.size, n)
    return ks


_SUM, _MAX = np.add.reduce, np.maximum.reduce
