"""One layer's attention of a few requests with different token counts, on Python numbers:
``CostModel._attention_s`` bitwise, without its dozen array operations (for a batch of a few
requests their per-call cost is most of the price).  ``CostModel.few_step_time`` (the
public price of a forward of a few requests, closed_forms.py) adds it to the same memoised
parts ``step_time`` adds it to.

``FewAttention.attention_s(new, ctx)`` takes ``step_time``'s kernel-shape branch step for
step: each request's attention FLOPs and bytes by the same elementwise operations in the
same order (``step_models.attention_work``: IEEE arithmetic gives the same float on a Python
number as on an array element), its roof in each kernel the same maximum of the same
quotients, and each kernel's sum of roofs by the same numpy reduction of an array holding
the same values (masked as ``Roofline.attention_time`` masks it): summation order is
numpy's, so that is not rewritten here.  A model has one where its attention has kernel
shapes (``CostModel._few_attention``); MLA's holds its decode (absorbed) form's coefficients,
which ``mla.MlaShape.arrays`` gives every request of up to ``DECODE_MAX_QUERY`` new tokens
by the same operations (no up-projection, no query overhead: ``+ 0.0``, an identity), so it
prices only forwards whose requests all take that form (``max_query``).
``tests/simulator/cost/test_few_step.py`` holds every price to ``step_time``'s float.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from hardware.kernels import ATTENTION_DECODE
from hardware.roofline import Roofline
from simulator.cost.mla import DECODE_MAX_QUERY

_ADD = np.add.reduce
_ALL = [True] * 64  # every request a member (zip stops at the shortest)


@dataclass(frozen=True)
class FewAttention:
    """One layer's attention per device as ``CostModel`` prices it with kernel shapes:
    FLOPs per (query, key) pair, KV bytes per cached token, query bytes per new token, the
    multi-query kernel (its kind, causal or not, its per-query overhead), the roofline
    whose kernels price them and the most new tokens a request may bring (MLA's decode
    form: ``DECODE_MAX_QUERY``; its callers price wider requests otherwise)."""

    pair: float
    kv_bytes: float
    q_bytes: float
    prefill_kind: str
    causal: bool
    overhead: float
    roof: Roofline
    max_query: float = float("inf")
    # ``pricer``'s per-request factors by new-token count (``_Terms``), worked out once
    _terms: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_terms", _Terms(self.pair, self.q_bytes, self.overhead))

    def attention_s(self, new: list, ctx: list) -> float:
        """One layer's attention seconds of requests bringing ``new[i]`` (whole numbers, at
        least 1) tokens over ``ctx[i]`` cached ones: the decode kernel over the 1-token
        requests, the multi-query kernel over the others (``Roofline.attention_time``:
        unmasked where a kernel has every request)."""
        pair, kvb, qb = self.pair, self.kv_bytes, self.q_bytes
        if self.causal:  # step_models.attention_work's causal form, term by term
            over = self.overhead
            flops = [pair * u * (c + (0.5 * (u + 1.0) + (
                (over if u > DECODE_MAX_QUERY else 0.0) if over else 0.0)))
                for u, c in zip(new, ctx)]
            nbytes = [(c + u) * kvb + u * qb for u, c in zip(new, ctx)]
        else:
            kv = [c + u for u, c in zip(new, ctx)]
            flops = [pair * u * x for u, x in zip(new, kv)]
            nbytes = [x * kvb + u * qb for u, x in zip(new, kv)]
        n = len(new)
        decode = [u == 1.0 for u in new]
        n_decode = decode.count(True)
        total = 0.0
        if n_decode:
            total += _kernel(self.roof.kind_rates(ATTENTION_DECODE), flops, nbytes,
                             None if n_decode == n else decode, n_decode)
        if n_decode < n:  # whole numbers of at least one: the others have more than one
            total += _kernel(self.roof.kind_rates(self.prefill_kind), flops, nbytes,
                             None if not n_decode else [not d for d in decode], n - n_decode)
        return total

    def pricer(self, new: list, step: tuple | None = None):
        """``attention_s(new, ctx)`` as a function of ``ctx`` alone, bitwise: each request's
        factors that depend on ``new`` alone (pair x new, the causal term, the query bytes),
        its kernel and the kernels' rates worked out once (the same operations, grouped as
        ``attention_s`` groups them).  With ``step`` (``_with_step``'s): the forward's
        seconds instead, a full or piecewise graph's without host time by
        ``CostModel._step_from``'s operations, in the same call where one kernel holds
        every request.  ``ctx``: whole numbers, ints or floats (an int
        enters ``c + x`` as its float would: exactly, below 2**53)."""
        return self.binder(len(new), new.count(1.0), step)(new)

    def binder(self, n: int, n_decode: int, step: tuple | None = None):
        """``pricer(new, step)`` as ``bind(new)`` of any ``new`` of ``n`` counts, ``n_decode``
        of them 1: what depends on those two numbers alone (which kernels, their rates) worked
        out once, ``bind`` taking the requests' factors in ``new``'s order (the same pricer:
        the order of a kernel's sum is the requests', issue 36)."""
        kvb, causal, table = self.kv_bytes, self.causal, self._terms
        if n < 8 and (n_decode == n or not n_decode):  # one unmasked kernel of a few: one loop
            rates = self.roof.kind_rates(ATTENTION_DECODE if n_decode else self.prefill_kind)
            if step is None:
                return lambda new: _one_kernel(list(map(table.__getitem__, new)), causal, kvb,
                                               rates)
            return lambda new: _one_kernel_step(list(map(table.__getitem__, new)), causal, kvb,
                                                rates, step)
        drates = self.roof.kind_rates(ATTENTION_DECODE) if n_decode else None
        prates = self.roof.kind_rates(self.prefill_kind) if n_decode < n else None
        if n_decode and n_decode < n and n <= 8:  # both kernels, every run of one below 8
            return lambda new: _with_step(_two_kernels(
                list(map(table.__getitem__, new)), causal, kvb, [u == 1.0 for u in new],
                drates, prates), step)
        return lambda new: _with_step(_kernels(list(map(table.__getitem__, new)), causal, kvb,
                                               [u == 1.0 for u in new], drates, prates),
                                      step)


def _kernels(terms: list, causal: bool, kvb: float, decode: list, drates: tuple | None,
             prates: tuple | None):
    """``FewAttention.pricer``'s attention of requests ``terms`` (``decode``: which have one
    token) by the decode kernel (``drates``, None: none of them) then the multi-query one
    (``prates``, None: none), each ``_kernel``'s sum, masked where it holds some alone."""
    n, n_decode, kernels = len(decode), decode.count(True), []
    if drates is not None:
        kernels.append((drates, None if n_decode == n else decode, n_decode))
    if prates is not None:
        kernels.append((prates, None if not n_decode else [not d for d in decode],
                        n - n_decode))

    def attention(ctx: list) -> float:
        if causal:
            flops = [a * (c + b) for (a, b, _, _), c in zip(terms, ctx)]
            nbytes = [(c + u) * kvb + uq for (_, _, u, uq), c in zip(terms, ctx)]
        else:
            kv = [c + u for (_, _, u, _), c in zip(terms, ctx)]
            flops = [a * x for (a, _, _, _), x in zip(terms, kv)]
            nbytes = [x * kvb + uq for (_, _, _, uq), x in zip(terms, kv)]
        total = 0.0
        for rates, members, count in kernels:
            total += _kernel(rates, flops, nbytes, members, count)
        return total
    return attention


class _Terms(dict):
    """``FewAttention.pricer``'s factors of a request of ``u`` new tokens (pair x u, the
    causal term, u, the query bytes u x q), by ``u``, each worked out on its first use
    (a function of ``u`` and the attention's numbers alone; ``u`` as a float: an int count
    gives the same floats)."""

    def __init__(self, pair: float, q_bytes: float, overhead: float) -> None:
        super().__init__()
        self.pair, self.q_bytes, self.overhead = pair, q_bytes, overhead

    def __missing__(self, count: float) -> tuple:
        u, over = float(count), self.overhead
        got = self[count] = (self.pair * u, (0.5 * (u + 1.0) + (
            (over if u > DECODE_MAX_QUERY else 0.0) if over else 0.0)), u, u * self.q_bytes)
        return got


def _with_step(attention, step: tuple | None):
    """``attention`` itself (``step`` None), or the forward's seconds around it, ``step`` =
    (fixed s, layers, the launches' s over the layers and one replay a layer's, both None
    for a full graph, one replay's s): ``CostModel._step_from``'s operations of a full
    graph (``fixed + a x layers + replay``) or piecewise graphs (``max(fixed + max(a x
    layers, launches), replays) + replay``), no host time (``+ 0.0``)."""
    if step is None:
        return attention
    return lambda ctx: _tail(attention(ctx), step)


def _tail(a: float, step: tuple) -> float:
    """``_with_step``'s seconds of one layer's attention ``a``."""
    fixed, layers, launch, replays, replay = step
    t = a * layers
    if launch is None:
        return fixed + t + replay + 0.0
    d = fixed + (launch if launch > t else t)
    return (replays if replays > d else d) + replay + 0.0


def _one_kernel(terms: list, causal: bool, kvb: float, rates: tuple):
    """``FewAttention.pricer``'s attention where one kernel holds all of fewer than 8
    requests: each one's FLOPs, bytes and roof by the same operations as there and in
    ``_kernel``, the roofs added left to right as ``_kernel`` adds them (up to 7 requests),
    in one loop (no lists); ``_causal`` or ``_flat`` with its numbers bound (a partial: no
    closure to build, issue 36)."""
    return partial(_causal if causal else _flat, terms, kvb, rates)


# the running sum from 0.0: 0.0 plus the first (non-negative) roof is that roof's float;
# max(f, m) as ``m if m > f else f``: the float max picks (scalar_forms.py's docstring)
def _causal(terms: list, kvb: float, rates: tuple, ctx: list) -> float:
    """``_one_kernel``'s attention of causal requests at contexts ``ctx``."""
    crate, mrate, latency, floor = rates
    summed = 0.0
    for (a, b, u, uq), c in zip(terms, ctx):
        f, m = a * (c + b) / crate, ((c + u) * kvb + uq) / mrate
        summed += m if m > f else f
    t = summed + latency
    return 0.0 + (floor if floor > t else t)  # pricer's total: 0.0, then the kernel


def _flat(terms: list, kvb: float, rates: tuple, ctx: list) -> float:
    """``_one_kernel``'s attention of non-causal requests at contexts ``ctx``."""
    crate, mrate, latency, floor = rates
    summed = 0.0
    for (a, _, u, uq), c in zip(terms, ctx):
        x = c + u
        f, m = a * x / crate, (x * kvb + uq) / mrate
        summed += m if m > f else f
    t = summed + latency
    return 0.0 + (floor if floor > t else t)


def _one_kernel_step(terms: list, causal: bool, kvb: float, rates: tuple, step: tuple):
    """``_with_step(_one_kernel(terms, causal, kvb, rates), step)``, the step's arithmetic
    beside the flat kernel's call (``_flat_step``: no ``_with_step`` frame), the same
    operations in the same order."""
    kernel = _one_kernel(terms, causal, kvb, rates)
    if causal or step[2] is None:
        return _with_step(kernel, step)
    return partial(_flat_step, kernel, step)  # piecewise graphs (a varied round's usual)


def _flat_step(kernel, step: tuple, ctx: list) -> float:
    """``_one_kernel_step``'s piecewise forward: ``kernel``'s total (0.0 + the kernel) times
    the layers, then ``_tail``'s piecewise operations."""
    fixed, layers, launch, replays, replay = step
    t = kernel(ctx) * layers
    d = fixed + (launch if launch > t else t)
    return (replays if replays > d else d) + replay + 0.0


def _two_kernels(terms: list, causal: bool, kvb: float, decode: list, drates: tuple,
                 prates: tuple):
    """``FewAttention.pricer``'s attention where the decode kernel and the multi-query one
    share up to 8 requests: each one's FLOPs, bytes and roof by the same operations as
    ``_kernels`` and ``_kernel``, each kernel's masked sum as ``_masked_sum`` adds it (its
    runs of consecutive members, each under 8, summed, then added in order: the requests of
    one kernel's runs are the other's gaps), its latency and floor, the decode kernel's
    first (from 0.0), in one loop (no lists, no arrays)."""
    dc, dm, dl, df = drates
    pc, pm, pl, pf = prates

    def attention(ctx: list) -> float:
        d = p = 0.0  # each kernel's output, from add's identity
        run, run_one = None, None
        for (a, b, u, uq), c, one in zip(terms, ctx, decode):
            if causal:
                f, by = a * (c + b), (c + u) * kvb + uq
            else:
                x = c + u
                f, by = a * x, x * kvb + uq
            r = max(f / dc, by / dm) if one else max(f / pc, by / pm)
            if one is run_one:
                run += r  # the run goes on (0.0 + its first roof is that roof)
                continue
            if run is not None:  # the other kernel's run ends: added to its output
                if run_one:
                    d += run
                else:
                    p += run
            run, run_one = r, one
        if run_one:
            d += run
        else:
            p += run
        return 0.0 + max(d + dl, df) + max(p + pl, pf)
    return attention


def _kernel(rates: tuple, flops: list, nbytes: list, members: list | None, count: int) -> float:
    """``Roofline._attention_kernel`` of the ``count`` requests in ``members`` (None: all):
    each one's roof, their sum, one latency, at least the floor.  The sum of one or two
    roofs is the same float in any order of addition (adding 0.0 changes nothing: the roofs
    are positive), so those are added here, and up to 7 of all requests (numpy adds fewer
    than 8 numbers of an array left to right, as ``drafting.chain_draft_pricer`` relies on
    too: a loop, as Python's ``sum`` may compensate); masked among up to 8, run by run as
    numpy's masked reduction adds them (``_masked_sum``); more, by numpy's reduction of an
    array of them, masked as ``attention_time`` masks it (its order is numpy's)."""
    crate, mrate, latency, floor = rates
    if count <= 2:
        per = [max(f / crate, b / mrate) for f, b, m in zip(
            flops, nbytes, members or _ALL) if m]
        summed = per[0] + per[1] if count == 2 else per[0]
    elif members is None and count < 8:
        summed = max(flops[0] / crate, nbytes[0] / mrate)
        for f, b in zip(flops[1:], nbytes[1:]):
            summed += max(f / crate, b / mrate)
    elif members is not None and len(members) <= 8:  # masked: runs of fewer than 8
        summed = _masked_sum(crate, mrate, flops, nbytes, members)
    else:
        per = np.array([max(f / crate, b / mrate) for f, b in zip(flops, nbytes)])
        summed = float(_ADD(per) if members is None else _ADD(per, where=np.array(members)))
    return max(summed + latency, floor)


def _masked_sum(crate: float, mrate: float, flops: list, nbytes: list, members: list) -> float:
    """``np.add.reduce(per, where=members)`` of the members' roofs, where every run of
    consecutive members is shorter than 8: numpy's masked loop hands its unmasked inner loop
    each maximal run of set mask values in turn (``generic_masked_strided_loop``,
    numpy/_core/src/umath/array_method.c), the inner loop adds a run of fewer than 8 left
    to right from 0.0 (``pairwise_sum``, numpy/_core/src/umath/loops_utils.h.src) and adds
    that to the output, which starts at add's identity 0.0: so each run summed, the runs
    added in order (not the members left to right: the floats differ;
    tests/simulator/cost/test_few_step.py holds the two to the same bits)."""
    summed, run = 0.0, None
    for f, b, m in zip(flops, nbytes, members):
        if m:
            r = max(f / crate, b / mrate)
            run = r if run is None else run + r  # 0.0 + r is r (a roof is positive)
        elif run is not None:
            summed, run = summed + run, None
    return summed if run is None else summed + run
