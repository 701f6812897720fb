"""Kit: the handles through which the ``adaptive`` wrapper sets a base policy's draft lengths.

A base policy hands one over from ``PolicyBase.draft_control``; each has ``max_draft`` (the
cap a controller starts from), ``per_request`` (whether caps may differ per request),
``propose(batch, rng, caps)`` and ``observe(plan, batch, emitted, done)``; the per-request
ones also ``draft_predictor(batch)`` (caps -> predicted draft seconds, for ``goodput``).

- ``GateControl`` (the default): the base's drafts all or none per request;
- ``LimitedControl``: per-request caps for a base with ``propose_limited`` (the model-free
  proposers);
- ``ChainControl``: per-request gammas for a draft model's chain; a draft model that skipped
  iterations catches up on the missed tokens in its first forward.
"""
from __future__ import annotations

import numpy as np

from simulator.cost.drafting import chain_draft_pricer, chain_draft_time
from simulator.cost.spec_host import SpecCharge
from simulator.cost.spec_work import SpecWork
from abc import abstractmethod

from simulator.engine.plan import BatchView, DraftPlan, VariedDraft, VariedPlan
from simulator.policies.goodput_parts import ReadOnlyMemo


_ALL, _ANY, _COUNT = np.logical_and.reduce, np.logical_or.reduce, np.count_nonzero
_MIN, _MAX, _SUM = np.minimum.reduce, np.maximum.reduce, np.add.reduce
_MISSING = object()


class _Forwards:
    """The draft model's memoised decode forwards (``memo``: (requests, rounded context) ->
    seconds, the dict ``predictor`` reads) for a (C, J) matrix of keys at once, gathered
    from a dense table of them: NaN where not yet priced, 0.0 for no request (a row's ended
    forward: added to its positive total, no change).  Keys past ``LIMIT`` entries are
    looked up one by one."""

    LIMIT = 1 << 20

    def __init__(self, memo: dict, cost) -> None:
        # the draft cost itself, its ``decode_time`` read when a key is first priced (as
        # the search read it before): a cost passed in need not have one until it is used
        self.memo, self.cost = memo, cost
        self.table = np.zeros((1, 1))

    def times(self, counts: np.ndarray, rounded: np.ndarray) -> np.ndarray:
        """Each key's seconds (``decode_time`` of its requests at the rounded context)."""
        table = self.table
        rows, cols = int(_MAX(counts, axis=None)) + 1, int(_MAX(rounded, axis=None)) + 1
        if rows > table.shape[0] or cols > table.shape[1]:
            if rows * cols > self.LIMIT:
                return np.array([self._price(key) for key in zip(
                    counts.ravel().tolist(), rounded.ravel().tolist())]).reshape(counts.shape)
            table = self.table = _grown(table, rows, cols)
        got = table[counts, rounded]
        missing = got != got  # NaN: not priced yet
        if _COUNT(missing):  # (a count: cheaper than a reduction)
            for key in set(zip(counts[missing].tolist(), rounded[missing].tolist())):
                table[key] = self._price(key)
            got = table[counts, rounded]
        return got

    def _price(self, key: tuple[int, int]) -> float:
        """A key's seconds from the memo, priced there first where it is not."""
        if not key[0]:
            return 0.0
        t = self.memo.get(key)
        if t is None:
            t = self.memo[key] = self.cost.decode_time(key[0], (key[1] << 7) + 64)
        return t


_STEPS = ReadOnlyMemo(np.arange)  # _STEPS[forwards]: np.arange(forwards), shared


def _grown(table: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``table`` in a larger one (at least double each way that grows), NaN elsewhere but
    row 0 (no request: 0.0)."""
    r, c = table.shape
    out = np.full((max(rows, 2 * r if rows > r else r), max(cols, 2 * c if cols > c else c)),
                  np.nan)
    out[0] = 0.0
    out[:r, :c] = table
    return out


class GateControl:
    """On/off for any base: a zero cap drops that request's drafts."""

    per_request = False

    def __init__(self, base, params: dict) -> None:
        self.base = base
        # on or off is all a gate sets: the cap is the base's gamma knob, where it has one
        self.max_draft = int(params.get("num_speculative_tokens") or 1)

    def propose(self, batch: BatchView, rng, k: np.ndarray) -> DraftPlan:
        if not k.any():
            n = len(batch)
            return DraftPlan(num_draft=np.zeros(n, np.int64), verify_tokens=np.ones(n, np.int64))
        plan = self.base.propose(batch, rng)
        plan.trim(k > 0)
        return plan

    def observe(self, *args) -> None:
        return None


class LimitedDraft(VariedDraft):
    """A base whose proposals take per-request caps and which is a ``VariedDraft`` itself
    (``prompt_lookup``, ``suffix``), declared by subclassing: the adaptive wrapper's
    stretches plan it under their caps through ``plan_limited``; alone, it plans under
    its own ``k``."""

    k: int  # its draft length, the cap of an iteration no controller limits

    def plan_counts(self, request_ids: np.ndarray, context: np.ndarray,
                    generated: np.ndarray, output_len: np.ndarray, prompt_len: np.ndarray,
                    batch_size: int, rng: np.random.Generator) -> VariedPlan:
        return self.plan_limited(request_ids, generated,
                                 np.full(request_ids.size, self.k, np.int64))

    @abstractmethod
    def plan_limited(self, request_ids: np.ndarray, generated: np.ndarray,
                     max_draft: np.ndarray) -> VariedPlan:
        """``propose_limited``'s plan, on arrays."""


class LimitedControl:
    """Per-request caps for a base with ``propose_limited(batch, rng, caps)``."""

    per_request = True

    def __init__(self, base, max_draft: int) -> None:
        self.base = base
        self.max_draft = int(max_draft)

    def propose(self, batch: BatchView, rng, k: np.ndarray) -> DraftPlan:
        return self.base.propose_limited(batch, rng, k)

    def draft_predictor(self, batch: BatchView):
        return self.predictor(batch.request_ids, batch.context)

    def predictor(self, request_ids: np.ndarray, context: np.ndarray):
        """``draft_predictor``, on arrays."""
        return lambda k: 0.0  # CPU microseconds, negligible against a forward

    def rows_predictor(self, request_ids: np.ndarray, context: np.ndarray):
        """``predictor`` of every row of a (C, n) matrix of caps at once."""
        return lambda ks: np.zeros(ks.shape[0])

    def observe(self, *args) -> None:
        return None


class ChainControl:
    """Per-request gammas for a draft model's chain, with the draft model's catch-up."""

    per_request = True

    def __init__(self, draft_cost, gamma: int, execution=None, chain=None) -> None:
        self.max_draft = int(gamma)
        # the chain policy whose drafts these are (its ``speculable_of`` and ``draw_chain``:
        # the adaptive wrapper's stretches call them), None where none is given
        self.chain = chain
        self.draft_cost = draft_cost
        self.execution = execution  # the engine's speculative host work (spec_host.py)
        self._lags: dict[int, int] = {}
        # the last proposal's requests and which of them drafted (observe reads them)
        self._proposed, self._drafting = np.zeros(0, np.int64), np.zeros(0, bool)
        self._memo: dict[tuple[int, int], float] = {}
        self._forwards = _Forwards(self._memo, draft_cost)
        self._charges: dict[int, SpecCharge] = {}
        # (requests, uniform gamma) -> chain_draft_pricer's function (None: it has none)
        self._pricers: dict[tuple[int, int], object] = {}

    def _lag(self, request_ids: np.ndarray) -> np.ndarray:
        if not self._lags:  # nobody skipped an iteration (every chain drafted each time)
            return np.zeros(request_ids.size, np.int64)
        return np.fromiter((self._lags.get(r, 0) for r in request_ids.tolist()),
                           np.int64, request_ids.size)

    def _catch_up_s(self, ctx: np.ndarray, lag: np.ndarray) -> float:
        """Extra time of first forwards that also feed ``lag`` skipped tokens."""
        busy = lag > 0
        if not _ANY(busy):
            return 0.0
        c = ctx[busy].astype(float)
        return self.draft_cost.step_time((1 + lag[busy]).astype(float), c - lag[busy]) \
            - self.draft_cost.step_time(np.ones(c.size), c)

    def propose(self, batch: BatchView, rng, k: np.ndarray) -> DraftPlan:
        time_s, cpu_s = self.draft_seconds(batch.request_ids, batch.context, k)
        return DraftPlan(num_draft=k, verify_tokens=k + 1, draft_time_s=time_s,
                         cpu_time_s=cpu_s)

    def draft_seconds(self, request_ids: np.ndarray, context: np.ndarray,
                      k: np.ndarray) -> tuple[float, float]:
        """``propose``'s (draft_time_s, cpu_time_s) for requests ``request_ids`` at
        ``context`` drafting ``k`` each, on arrays (what a stretch calls)."""
        on = k > 0
        self._proposed, self._drafting = request_ids.copy(), on
        # the gammas' extremes and drafting count from one list (whole numbers)
        ks = k.tolist()
        top, low = (max(ks), min(ks)) if ks else (0, 0)
        time_s = self._chain_time(context, k, top, low)
        # the first forward also feeds the tokens the draft model skipped (while nobody
        # lags, _catch_up_s adds 0.0: no change)
        if self._lags and top > 0:
            time_s += self._catch_up_s(context[on], self._lag(request_ids)[on])
        # the longest chain sets the draft loop's forwards (a charge memoised per count)
        forwards = max(top, 0)  # k.max(initial=0)
        return time_s, self.charge(forwards)(len(ks) - ks.count(0) if low >= 0 else
                                             int(_SUM(on)))

    def charge(self, forwards: int) -> SpecCharge:
        """The host work of a draft loop of ``forwards`` forwards, memoised per count."""
        host = self._charges.get(forwards)
        if host is None:
            host = self._charges[forwards] = SpecCharge(
                self.execution, SpecWork(draft_forwards=forwards))
        return host

    def lagging(self, request_ids: np.ndarray) -> bool:
        """Whether any of these requests skipped iterations (its next draft catches up)."""
        lags = self._lags
        return bool(lags) and any([r in lags for r in request_ids.tolist()])

    def _chain_time(self, context: np.ndarray, k: np.ndarray, top: int, low: int) -> float:
        """``chain_draft_time(draft_cost, context, k)`` (``top``, ``low``: k's largest and
        smallest); where every request drafts the same 1-7 tokens, its closed form as a
        function of the context sum (``chain_draft_pricer``: bitwise the cost's
        ``chain_decode_time``, as a chain's stretches price it)."""
        n = k.size
        if n and context.dtype.kind in "iu":
            if 0 < top < 8 and low == top:
                price = self._pricers.get((n, top), _MISSING)
                if price is _MISSING:
                    price = self._pricers[(n, top)] = chain_draft_pricer(
                        self.draft_cost, n, top)
                if price is not None:
                    return price(float(_SUM(context)))
        return chain_draft_time(self.draft_cost, context, k)

    def draft_predictor(self, batch: BatchView):
        """k -> predicted draft time: memoised decode steps (contexts rounded to 128 tokens)."""
        return self.predictor(batch.request_ids, batch.context)

    def predictor(self, request_ids: np.ndarray, context: np.ndarray):
        """``draft_predictor`` of requests ``request_ids`` at ``context``, on arrays."""
        ctx, lag = context.astype(float), self._lag(request_ids)
        memo, decode_time, lagging = self._memo, self.draft_cost.decode_time, bool(lag.any())

        def predict(k: np.ndarray) -> float:
            k_max = int(k.max(initial=0))
            if k_max == 0:
                return 0.0
            # requests drafting more than j tokens, and their summed contexts, for every j
            n = np.cumsum(np.bincount(k, minlength=k_max + 1)[::-1])[::-1][1:]
            c = np.cumsum(np.bincount(k, weights=ctx, minlength=k_max + 1)[::-1])[::-1][1:]
            # the j-th forward's key: int(c[j] / n[j] + j) >> 7, the same operations at once
            rounded = ((c / n + np.arange(k_max)).astype(np.int64) >> 7).tolist()
            total = 0.0
            for key in zip(n.tolist(), rounded):
                t = memo.get(key)
                if t is None:
                    t = memo[key] = decode_time(key[0], (key[1] << 7) + 64)
                total += t
            if not lagging:  # nobody catches up: _catch_up_s would add 0.0
                return total + 0.0
            on = k > 0
            return total + self._catch_up_s(ctx[on], lag[on])

        return predict

    def rows_predictor(self, request_ids: np.ndarray, context: np.ndarray):
        """``predictor(request_ids, context)`` of every row of a (C, n) matrix of gammas at
        once, bitwise: each forward's key from the same integer counts and context sums
        (whole numbers: exact however summed) by the same division and rounding, a row's
        memoised times added forward after forward from 0.0 (fewer than 8 forwards: by one
        numpy sum of each row, which adds so few left to right; else as Python floats), the
        catch-up once per set of drafting requests."""
        # nobody lags while no lag is held (the usual case: no reduction to learn it)
        ctx, lag = context.astype(float), self._lag(request_ids) if self._lags else None
        lagging = lag is not None and bool(_ANY(lag))
        memo, decode_time = self._memo, self.draft_cost.decode_time

        def predict(ks: np.ndarray) -> np.ndarray:
            forwards = int(np.maximum.reduce(ks, axis=None)) if ks.size else 0
            if forwards == 0:
                return np.zeros(ks.shape[0])
            steps = _STEPS[forwards]
            over = ks[:, None, :] > steps[:, None]  # (C, J, n)
            n = np.add.reduce(over, axis=2)
            # the drafting requests' context sums by one product: whole numbers, exact
            # in any order of addition
            c = (over.reshape(-1, ks.shape[1]) @ ctx).reshape(n.shape)
            # n >= 1 wherever a key is read (a row's counts only fall: its first 0 ends it)
            rounded = (c / np.maximum(n, 1) + steps).astype(np.int64) >> 7
            if forwards < 8:  # each row's few forwards added left to right, as numpy adds them
                out = _SUM(self._forwards.times(n, rounded), axis=1)
            else:
                out = np.array([self._chain_total(row_n, row_r, memo, decode_time)
                                for row_n, row_r in zip(n.tolist(), rounded.tolist())])
            if not lagging:  # (``predictor``'s + 0.0: no change to a sum of times >= 0.0)
                return out
            return out + self._catch_ups(ks, ctx, lag)

        return predict

    @staticmethod
    def _chain_total(counts: list[int], rounded: list[int], memo: dict, decode_time) -> float:
        """One row's forwards, summed from 0.0 as ``predictor`` sums them."""
        total = 0.0
        for key in zip(counts, rounded):
            if not key[0]:
                break
            t = memo.get(key)
            if t is None:
                t = memo[key] = decode_time(key[0], (key[1] << 7) + 64)
            total += t
        return total

    def _catch_ups(self, ks: np.ndarray, ctx: np.ndarray, lag: np.ndarray) -> np.ndarray:
        """Per row, ``_catch_up_s`` of its drafting requests (0.0 for a row drafting none:
        ``predictor`` returns before it)."""
        out, seen = np.zeros(ks.shape[0]), {}
        for r, row in enumerate(ks):
            on = row > 0
            if not on.any():
                continue
            key = on.tobytes()
            if key not in seen:
                seen[key] = self._catch_up_s(ctx[on], lag[on])
            out[r] = seen[key]
        return out

    def observe(self, plan: DraftPlan, batch: BatchView, emitted: np.ndarray,
                done: np.ndarray) -> None:
        self.observe_arrays(batch.request_ids, emitted, done)

    def observe_arrays(self, request_ids: np.ndarray, emitted: np.ndarray,
                       done: np.ndarray) -> None:
        """``observe`` of requests ``request_ids``, on arrays."""
        # a request whose drafts the engine trimmed still ran the draft model: use the proposal
        proposed, drafting = self._proposed, self._drafting
        n = request_ids.size  # (counts: cheaper than the reductions)
        if not self._lags and n == proposed.size and _COUNT(drafting) == n \
                and _COUNT(request_ids == proposed) == n:
            return  # each one drafted: its lag (none is held) is dropped
        drafted = dict(zip(proposed.tolist(), drafting.tolist()))
        for rid, e, d in zip(request_ids.tolist(), emitted.tolist(), done.tolist()):
            if d or drafted.get(rid, False):
                self._lags.pop(rid, None)
            else:
                self._lags[rid] = self._lags.get(rid, 0) + e
