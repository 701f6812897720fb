"""A uniform forward's closed form (``step_models.UniformStep``) as a function of the context
sum on Python numbers: ``scalar_time`` (``ClosedForms.uniform_pricer``), ``sum_pricer``
(several forwards added, ``uniform_sum_pricer``) and ``round_pricer`` (a draft chain and a
verification added, ``chain_round_pricer``: a staged draft's round).

Each is ``step_models.uniform_time(k, x, max)``'s operations in the same order, so the same
float, its numbers bound once.  ``max(a, b)`` is written ``b if b > a else a``: CPython's
``max`` keeps its first argument unless a later one compares greater (``min_max`` in
Python/bltinmodule.c, https://github.com/python/cpython/blob/3.11/Python/bltinmodule.c), so
both pick the same float, the conditional without a call.  The context sum may be an int
(a whole number below 2**53): ``slope * x`` and ``x + offset`` convert it exactly, as
``float(x)`` does, so the floats are those of ``float(x)``.
"""
from __future__ import annotations

from simulator.cost.step_models import UniformStep, uniform_time


def _usual(k: UniformStep) -> bool:
    """The usual graphs' form: full graph, no eager launches, no overlapped host time, no
    eager stream (``scalar_time``'s one-expression forms)."""
    return k.stream is None and k.launch_s is None and k.mode == "full" and not k.overlap


def scalar_time(k: UniformStep):
    """``uniform_time(k, x, max)`` as a function of the context sum ``x`` alone, ``k``'s
    numbers bound once: the same operations in the same order (the same float) at a third of
    the cost (the lazy form's short stretches price every iteration by it)."""
    slope, base, floor, layers, launch = k.slope_s, k.base_s, k.floor_s, k.layers, k.launch_s
    fixed, replay, replays, host, overlap = k.fixed_s, k.replay_s, k.replays_s, k.host_s, \
        k.overlap
    full, piecewise = k.mode == "full", k.mode == "piecewise"
    if k.stream is not None:  # an eager stream: uniform_time's own operations
        return lambda x: uniform_time(k, x, max)
    if _usual(k):  # the usual graphs, with a host or without
        if host is None:
            def bare(x: float) -> float:
                y = slope * x + base
                return fixed + (floor if floor > y else y) * layers + replay
            return bare

        def hosted(x: float) -> float:
            y = slope * x + base
            return fixed + (floor if floor > y else y) * layers + replay + host
        return hosted

    def price(x: float) -> float:
        y = slope * x + base
        attention = (floor if floor > y else y) * layers
        if launch is not None and launch > attention:
            attention = launch
        device = fixed + attention
        if full:
            device = device + replay
        elif piecewise:
            device = (replays if replays > device else device) + replay
        if host is None:
            return device
        if overlap:
            shown = host - device
            return device + (0.0 if 0.0 > shown else shown)
        return device + host
    return price


def bare_terms(k: UniformStep | None) -> tuple | None:
    """(fixed, slope, base, floor, layers, replay) of ``scalar_time``'s usual form without a
    host time, whose price at ``x`` is ``fixed + max(slope x + base, floor) layers +
    replay``, for a caller that adds such terms itself; None for another form (or none)."""
    if k is None or not _usual(k) or k.host_s is not None:
        return None
    return k.fixed_s, k.slope_s, k.base_s, k.floor_s, k.layers, k.replay_s


def sum_pricer(forms: list):
    """``total`` plus ``scalar_time(k)(x + offset)`` of each (offset, k) of ``forms``, added
    left to right, as a function of (total, x): each term the same operations as
    ``scalar_time``'s usual form (graphs, no launches, no overlap; a host time on all or
    none), the same float, without a call a term; None where a form is another."""
    ks = [k for _, k in forms]
    if not ks or not all(_usual(k) for k in ks):
        return None
    hosts = [k.host_s is None for k in ks]
    if hosts.count(hosts[0]) != len(hosts):
        return None
    terms = tuple((offset, k.fixed_s, k.slope_s, k.base_s, k.floor_s, k.layers, k.replay_s,
                   0.0 if k.host_s is None else k.host_s) for offset, k in forms)
    if hosts[0]:
        def bare(total: float, x: float) -> float:
            for offset, fixed, slope, base, floor, layers, replay, _ in terms:
                y = slope * (x + offset) + base
                total += fixed + (floor if floor > y else y) * layers + replay
            return total
        return bare

    def hosted(total: float, x: float) -> float:
        for offset, fixed, slope, base, floor, layers, replay, host in terms:
            y = slope * (x + offset) + base
            total += fixed + (floor if floor > y else y) * layers + replay + host
        return total
    return hosted


def round_pricer(chain: UniformStep, steps: int, n: int, verify: UniformStep):
    """``gpu + d(x) + v(x)`` as a function of (gpu, x): ``d`` a chain of ``steps`` (1 to 3)
    forwards of ``n`` one-token requests by ``chain``'s form at x, x + n, x + 2n, added left
    to right from the first (``drafting.chain_draft_pricer``'s unrolled sums), ``v`` the
    verification by ``verify``'s form at x; each term ``scalar_time``'s usual form without a
    host time (a side model's), the same floats, in one call.  None where a form is another
    or ``steps`` is not 1-3."""
    if not (_usual(chain) and _usual(verify)) or chain.host_s is not None \
            or verify.host_s is not None or not 1 <= steps <= 3:
        return None
    f, s, b, lo, lay, r = chain.fixed_s, chain.slope_s, chain.base_s, chain.floor_s, \
        chain.layers, chain.replay_s
    vf, vs, vb, vlo, vlay, vr = verify.fixed_s, verify.slope_s, verify.base_s, \
        verify.floor_s, verify.layers, verify.replay_s
    o1, o2 = float(n), float(2 * n)  # chain_draft_pricer's offsets n j
    if steps == 1:
        def one(gpu: float, x: float) -> float:
            y, z = s * x + b, vs * x + vb
            return gpu + (f + (lo if lo > y else y) * lay + r) + (
                vf + (vlo if vlo > z else z) * vlay + vr)
        return one
    if steps == 2:
        def two(gpu: float, x: float) -> float:
            y, y1, z = s * x + b, s * (x + o1) + b, vs * x + vb
            return gpu + ((f + (lo if lo > y else y) * lay + r) + (
                f + (lo if lo > y1 else y1) * lay + r)) + (
                vf + (vlo if vlo > z else z) * vlay + vr)
        return two

    def three(gpu: float, x: float) -> float:
        y, y1, y2, z = s * x + b, s * (x + o1) + b, s * (x + o2) + b, vs * x + vb
        return gpu + ((f + (lo if lo > y else y) * lay + r) + (
            f + (lo if lo > y1 else y1) * lay + r) + (
            f + (lo if lo > y2 else y2) * lay + r)) + (vf + (vlo if vlo > z else z) * vlay + vr)
    return three
