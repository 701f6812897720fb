"""``staged``'s draft time of a few requests on Python numbers (``StagedSpeculation``'s
``draft_time`` for up to 8 requests at whole-number contexts, issue 36).

A round is priced by a function of its contexts memoised by its requests' draft counts
(``FewRounds.state``): the counts alone decide which closed forms price it (a round whose
requests all draft the same count: the draft2 chain's and the draft's verification's forms
at the context sum; a varied one: draft2's forwards' forms at each forward's sum and the
draft's verification of those token counts, ``ClosedForms.few_pricer``), so that a round
pays the forms' arithmetic and not their look-ups.  The same forms, at the same numbers,
added in the same order as ``draft_time``'s arrays: bitwise its floats
(tests/simulator/policies/test_staged.py holds the two paths to the same bits).
"""
from __future__ import annotations

from bisect import bisect_right
from functools import partial
from itertools import compress
from operator import add as _ADD
from typing import Callable

import numpy as np

from simulator.cost.drafting import few_binder
from simulator.engine.plan import closed_forms

# add(gpu, context, produced): the running GPU seconds ``gpu`` plus draft2's chain's (a
# model's), then the draft's verification's, of a round of requests at contexts ``context``
# that have ``produced`` tokens each (their contexts: the sums, ints)
RoundAdd = Callable[[float, list, tuple], float]
_UNSET: list = []
_ONE = 1  # _varied_pricer's k + 1 (its __add__)
_NONE_YET = (0.0, 0.0, 0)  # rounds' running (GPU s, CPU s, rounds) at the start


class FewRounds:
    """The inner rounds of a few requests drawn and priced on Python numbers.

    ``gamma`` draft tokens per request, at most ``gamma2`` a round, an inner acceptance of
    ``min(bisect_right(cut, uniform), k)`` (``cut``: its geometric thresholds); draft2 a
    model (``staged2``) or an n-gram table of ``lookup_s`` CPU seconds a proposed token;
    ``draft_cost``: the draft's pricer.  The policy's own prices: ``uniform(n, k)``, its
    (draft2 chain, verification) forms of ``n`` requests each drafting ``k`` as functions of
    the context sum, each None where none applies, and both added to running seconds in one
    call, ``add(gpu, sum)`` (None: none such); ``arrays(ctx, k, same)``, its array price
    of a round (where a round has no form); ``decoder(n)``, draft2's forward of ``n``
    one-token requests as a function of their context sum, None where it has none."""

    def __init__(self, gamma: int, gamma2: int, cut: list, lookup_s: float, staged2: bool,
                 draft_cost, uniform, arrays, decoder) -> None:
        self.gamma, self.gamma2, self.cut, self.lookup = gamma, gamma2, cut, lookup_s
        self.staged2, self.draft_cost = staged2, draft_cost
        self._uniform, self._arrays, self._decoder = uniform, arrays, decoder
        self._forms = closed_forms(draft_cost)  # the draft's declared closed forms, if any
        self._one: list | None = _UNSET  # _one_states', once asked
        self._states: dict[tuple, tuple] = {}  # ``state``'s, by tokens produced
        self._by_counts: dict[tuple, RoundAdd] = {}  # the prices, by draft counts
        self._shapes: dict[tuple, tuple | None] = {}  # ``_shape``'s, by sorted draft counts
        self._binder = few_binder(draft_cost)  # the verification's, by its counts' multiset
        # a request's thresholds at p tokens, -1.0 first: bisect_right counts it for every
        # uniform (in [0, 1)), so that it gives the accepted count + 1, the tokens it adds
        self._cuts = [[-1.0, *cut[:min(gamma2, gamma - p - 1)]] for p in range(gamma)] \
            if cut is not None else None
        self._counts = [min(gamma2, (gamma - p) - 1) for p in range(gamma)]  # drafted at p

    def draft_time(self, context: list, rng: np.random.Generator) -> tuple[float, float, int]:
        """``StagedSpeculation.draft_time`` of a few requests at whole-number contexts: the
        same rounds, the same uniforms (one a drafting request, against the thresholds:
        bisect is searchsorted's "right"), the same prices, added in the same order."""
        return self.rounds(context, None, 0, rng)[:3]

    def rounds(self, context: list, draws: list | None, at: int,
               rng: np.random.Generator | None = None) -> tuple[float, float, int, int]:
        """(GPU s, CPU s, rounds, the next uniform's index) of ``draft_time``'s rounds, each
        round's uniforms ``rng.random``'s or, where ``rng`` is None, the next ones of
        ``draws`` from ``at`` (the same numbers where the generator would give them).  A
        request that has ``p`` tokens drafts ``min(gamma2, gamma - p - 1)`` and accepts the
        thresholds below its uniform among the first that many (``cuts[p]``: the count
        capped, as a slice, after a -1.0 below any uniform: the count + 1).  Each state's
        round (``state``) adds its seconds to the running sums as ``draft_time`` adds them:
        draft2's, then the verification's."""
        gamma, states, one = self.gamma, self._states, self._one
        gpu, cpu, rounds = 0.0, 0.0, 0
        if one is _UNSET:
            one = self._one_states()
        if rng is None and one is not None and len(context) <= 2:
            return self._one_rounds(context, draws, at) if len(context) == 1 else \
                self._two_rounds(context, draws, at)
        m = len(context)  # the requests still drafting
        produced = (0,) * m
        while True:
            rounds += 1
            got = states.get(produced)
            if got is None:
                got = self.state(produced)
            add, lookup, cut, ends = got
            gpu = add(gpu, context, produced)
            cpu += lookup  # 0.0 with a draft2 model (its forwards are GPU seconds)
            if rng is None:
                xs, at = draws[at:at + m], at + m
            else:
                xs = rng.random(m).tolist()
            produced = tuple(map(_ADD, produced, map(bisect_right, cut, xs)))
            if ends and max(produced) >= gamma:  # some have their gamma: they stop
                keep = list(compress(range(m), map(gamma.__gt__, produced)))  # p < gamma
                if not keep:
                    return gpu, cpu, rounds, at
                if rng is None and one is not None and len(keep) <= 2:
                    j = keep[-1]
                    return self._one_rounds(context, draws, at, j, produced[j],
                                            (gpu, cpu, rounds)) if len(keep) == 1 else \
                        self._two_rounds([context[keep[0]], context[j]], draws, at,
                                         produced[keep[0]], produced[j], (gpu, cpu, rounds))
                context = list(map(context.__getitem__, keep))
                produced, m = tuple(map(produced.__getitem__, keep)), len(keep)

    def walker(self, n: int):
        """``rounds(ctx, draws, at)`` of ``n`` requests as ``f(ctx, draws, at)``: for one or
        two where a round of one has its form, ``rounds``' own hand-off to ``_one_rounds``
        or ``_two_rounds`` itself (the same rounds, prices and sums, from nothing yet)."""
        one = self._one_states() if self._one is _UNSET else self._one
        if one is None or n > 2:
            return self.rounds
        return self._one_rounds if n == 1 else self._two_rounds

    def _one_rounds(self, context: list, draws: list, at: int, j: int = 0, p: int = 0,
                    sums: tuple = _NONE_YET) -> tuple[float, float, int, int]:
        """``rounds``' rounds of one request, ``context[j]``, that has ``p`` tokens, from
        the running sums ``sums`` (GPU s, CPU s, rounds) and the uniforms drawn ahead at
        ``at``: the same prices, thresholds and sums as ``state``'s of ``(p,)``, on
        numbers (no lists: most of a few requests' rounds are a single request's)."""
        gamma, one, c = self.gamma, self._one, context[j]
        gpu, cpu, rounds = sums
        while p < gamma:
            add, lookup, cut = one[p]
            gpu = add(gpu, c + p)
            cpu += lookup
            p += bisect_right(cut, draws[at])  # accepted + 1 (cuts' -1.0)
            at += 1
            rounds += 1
        return gpu, cpu, rounds, at

    def _two_rounds(self, context: list, draws: list, at: int, p0: int = 0, p1: int = 0,
                    sums: tuple = _NONE_YET) -> tuple[float, float, int, int]:
        """``rounds``' rounds of two requests (``context``) that have ``p0`` and ``p1``
        tokens, from the running sums ``sums`` and the uniforms drawn ahead at ``at``: the
        same states, prices, thresholds and sums, on numbers (no lists of counts); one left
        goes on alone (``_one_rounds``)."""
        gamma, states = self.gamma, self._states
        gpu, cpu, rounds = sums
        while True:
            rounds += 1
            produced = (p0, p1)
            got = states.get(produced)
            if got is None:
                got = self.state(produced)
            add, lookup, (cut0, cut1), ends = got
            gpu = add(gpu, context, produced)
            cpu += lookup
            p0 += bisect_right(cut0, draws[at])  # accepted + 1 each (cuts' -1.0)
            p1 += bisect_right(cut1, draws[at + 1])
            at += 2
            if ends and (p0 >= gamma or p1 >= gamma):  # one or both have their gamma
                if p0 < gamma:
                    return self._one_rounds(context, draws, at, 0, p0, (gpu, cpu, rounds))
                if p1 < gamma:
                    return self._one_rounds(context, draws, at, 1, p1, (gpu, cpu, rounds))
                return gpu, cpu, rounds, at

    def _one_states(self) -> list | None:
        """``_one_rounds``' (``add(gpu, context)``, lookups' CPU s, thresholds) of a request
        that has ``p`` tokens, by ``p``; None where a round of one has no closed form."""
        self._one, staged2 = None, self.staged2
        states = []
        for p in range(self.gamma if self._cuts is not None else 0):
            k = min(self.gamma2, (self.gamma - p) - 1)
            d2, v, joined = self._uniform(1, k)
            if v is None or (d2 is None and staged2):
                return None
            add = joined or _one_add(None if k == 0 else d2, v)
            states.append((add, 0.0 if staged2 else self.lookup * float(k), self._cuts[p]))
        self._one = states if states else None
        return self._one

    def state(self, produced: tuple) -> tuple:
        """(``add(gpu, context, produced)``: the running GPU seconds plus the round's, the
        n-gram lookups' CPU seconds, each request's capped thresholds, whether one may reach
        gamma this round) of a round of requests that have ``produced`` tokens each,
        memoised by it (its price a function of their draft counts)."""
        if len(self._states) >= 4096:
            self._states.clear()
            self._by_counts.clear()
            self._shapes.clear()
        k = tuple(map(self._counts.__getitem__, produced))
        add = self._by_counts.get(k)
        if add is None:  # states with the same counts share their price
            add = self._by_counts[k] = self._adder(k)
        # one may reach gamma where gamma2 >= gamma - p - 1 for some p (ints)
        ends = max(produced) >= (self.gamma - self.gamma2) - 1
        got = self._states[produced] = (add, self.lookup * float(sum(k)) if not self.staged2
                                        else 0.0, tuple(map(self._cuts.__getitem__, produced)),
                                        ends)
        return got

    def _adder(self, k: tuple) -> RoundAdd:
        """``add`` of a round whose requests draft ``k`` tokens each: the closed forms where
        they apply, else the policy's arrays."""
        same = k[0] if k.count(k[0]) == len(k) else None
        add = self._uniform_pricer(len(k), same) if same is not None else self._varied_pricer(k)
        if add is not None:
            return add
        arrays, ks, staged2 = self._arrays, np.array(k, np.int64), self.staged2

        def priced(gpu: float, context: list, produced: tuple) -> float:
            d2, v = arrays(np.array([c + p for c, p in zip(context, produced)], np.int64), ks,
                           same)
            return gpu + d2 + v if staged2 else gpu + v
        return priced

    def _uniform_pricer(self, n: int, same: int) -> RoundAdd | None:
        """Both forms at the context sum (draft2's none for an n-gram table, or where no
        request drafts: 0 s, which adds nothing to a sum of seconds)."""
        d2, v, joined = self._uniform(n, same)
        if v is None or (d2 is None and self.staged2):
            return None
        if d2 is None or same == 0:
            return lambda gpu, context, produced: gpu + v(float(sum(context) + sum(produced)))
        if joined is not None:  # both forms in one call, at the sum as an int (exact)
            return lambda gpu, context, produced: joined(gpu, sum(context) + sum(produced))

        def add(gpu: float, context: list, produced: tuple) -> float:
            s = float(sum(context) + sum(produced))  # the contexts' sum (ints: exact)
            return gpu + d2(s) + v(s)
        return add

    def _varied_pricer(self, k: tuple) -> RoundAdd | None:
        """draft2's forward j over the requests drafting more than j (a batch of ones, by its
        form at their sum + n j, added in order; none for an n-gram table), then the draft's
        verification of k + 1 tokens each (its few-request form, else ``step_time``), from
        the parts of ``k``'s counts in any order (``_shape``): which requests each forward
        holds, and the verification's factors, in ``k``'s order."""
        key = tuple(sorted(k))
        shape = self._shapes.get(key, _UNSET)
        if shape is _UNSET:
            shape = self._shapes[key] = self._shape(key)
        if shape is None:
            return None
        forwards, verify_of, rest = shape
        ons = [[] for _ in forwards]  # forward j's: the requests with kj > j, in order
        for i, kj in enumerate(k):
            for on in ons[:kj]:
                on.append(i)
        verify = verify_of(list(map(_ONE.__add__, k)))  # k + 1 each, in order
        if not forwards:  # an n-gram table: the verification alone
            return lambda gpu, context, produced: gpu + verify(
                list(map(_ADD, context, produced)))
        first = None if len(ons[0]) == len(k) else ons[0]  # None: every request
        if rest is not None:  # each forward's terms added here
            return partial(_terms_add, first, forwards[0][2], tuple(zip(ons[1:], rest)),
                           verify)
        decoder, rest = forwards[0][1], [(on, offset, forward) for on, (offset, forward, _)
                                         in zip(ons[1:], forwards[1:])]

        def add(gpu: float, context: list, produced: tuple) -> float:
            ctx = list(map(_ADD, context, produced))
            # draft2's forwards summed apart (from 0.0: the first one's float), then added;
            # each forward's contexts summed as ints (exact in any order)
            total = decoder(float(sum(ctx) if first is None else sum(map(ctx.__getitem__,
                                                                         first))))
            for on, offset, forward in rest:
                total += forward(float(sum(map(ctx.__getitem__, on)) + offset))
            return gpu + total + verify(ctx)
        return add

    def _shape(self, key: tuple) -> tuple | None:
        """What a varied round of requests drafting the sorted counts ``key`` costs apart
        from their order: draft2's forward j as (n_j j, its form, its terms) where ``n_j``
        of them draft more than j (``_decoder(n_j)``), the verification's pricer of the
        k + 1 counts in a given order (``drafting.few_binder``'s ``bind``, else
        ``few_pricer`` or ``step_time`` on those counts), and the forwards after the first
        as (n_j j, *terms) where every forward has its terms (else None); None where a
        forward has no form."""
        forwards = []
        for j in range(key[-1] if self.staged2 else 0):
            m = sum(map(j.__lt__, key))  # the requests drafting more than j
            decoder, terms = self._decoder(m)
            if decoder is None:
                return None
            forwards.append((m * j, decoder, terms))
        rest = None if any(t is None for _, _, t in forwards) else \
            tuple((offset, *terms) for offset, _, terms in forwards[1:])
        forms = self._forms
        if forms is None:
            step_time = self.draft_cost.step_time

            def verify_of(u: list):
                v = np.array(u, np.float64)
                return lambda ctx: step_time(v, np.array(ctx, np.int64), v)
            return forwards, verify_of, rest
        bind = None if self._binder is None else self._binder(list(map(_ONE.__add__, key)))
        return forwards, forms.few_pricer if bind is None else bind, rest


def _terms_add(first: list | None, head: tuple, rest: tuple, verify, gpu: float,
               context: list, produced: tuple) -> float:
    """``_varied_pricer``'s ``add`` where each draft2 forward's form is the usual one
    (``scalar_forms.bare_terms``; ``head``: the first's, ``rest``: (requests, n j, *terms)
    of the others), bound by a partial: the forwards' terms at their contexts' int sums
    (+ n j), as each forward's ``uniform_pricer`` computes them (``max(a, b)`` as ``b if
    b > a else a``, the same float: scalar_forms.py), added in the same order, then the
    verification."""
    f0, s0, b0, lo0, lay0, r0 = head
    ctx = list(map(_ADD, context, produced))
    y = s0 * (sum(ctx) if first is None else sum(map(ctx.__getitem__, first))) + b0
    total = f0 + (lo0 if lo0 > y else y) * lay0 + r0
    for on, (offset, f, s, b, lo, lay, r) in rest:
        y = s * (sum(map(ctx.__getitem__, on)) + offset) + b
        total += f + (lo if lo > y else y) * lay + r
    return gpu + total + verify(ctx)


def _one_add(d2, v):
    """A round of one request's ``add(gpu, context)``: ``gpu`` plus draft2's chain (None:
    none, or nothing drafted: 0 s adds nothing), then the verification, at its context."""
    if d2 is None:
        return lambda gpu, c: gpu + v(float(c))

    def add(gpu: float, c: int) -> float:
        s = float(c)
        return gpu + d2(s) + v(s)
    return add
