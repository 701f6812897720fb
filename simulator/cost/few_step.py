"""One forward of a few requests with different token counts, priced on Python numbers:
``CostModel.step_time`` bitwise, without its dozen array operations (for a batch of a few
requests their per-call cost is most of the price).

``few_step_time(cm, new, ctx, logits)`` is ``cm.step_time(new, ctx, logits_tokens)`` for
lists ``new`` and ``ctx`` where ``logits`` is the sum of ``logits_tokens`` (None: the new
tokens' sum).  It takes ``step_time``'s general branch step for step: the token total and its
runtime mode and fixed part from the same memoised tables, each request's attention FLOPs and
bytes by the same elementwise operations in the same order (``step_models.attention_work``:
IEEE arithmetic gives the same float on a Python number as on an array element), its roof in
each kernel the same maximum of the same quotients, and each kernel's sum of roofs by the same
numpy reduction of an array holding the same values (masked as ``Roofline.attention_time``
masks it): summation order is numpy's, so that is not rewritten here.

Where it has no shortcut it returns None and the caller prices by ``step_time`` itself:
another class of pricer (DP attention's ranks), a pipelined or single-roofline model, MLA, a
device without kernel shapes, a request with no new token or a fraction of one, and a
uniform batch (``step_time``'s closed form: the callers have it already).
``tests/simulator/cost/test_few_step.py`` holds every price to ``step_time``'s float.
"""
from __future__ import annotations

import numpy as np

from hardware.kernels import ATTENTION_DECODE
from simulator.cost.cost_model import CostModel
from simulator.cost.mla import DECODE_MAX_QUERY

_ADD = np.add.reduce


def few_step_time(cm, new: list, ctx: list, logits: float | None = None) -> float | None:
    """``cm.step_time`` of requests bringing ``new[i]`` tokens over ``ctx[i]`` cached ones
    (``logits``: the LM head's tokens in all; None: the new tokens'), bitwise; None where
    ``step_time`` must price it (see the module docstring)."""
    if type(cm) is not CostModel or cm._general_only or cm._mla is not None \
            or not cm._shapes or not new or len(ctx) != len(new):
        return None
    new = [float(t) for t in new]
    lo, hi = min(new), max(new)
    if lo < 1.0 or lo == hi or not all(t.is_integer() for t in new):
        return None
    tokens = float(sum(new))  # whole numbers: exact in any order, as _SUM's
    mode, padded = cm._mode(new, tokens, lo, hi)  # lo > 0: the list is not read
    fixed = cm._fixed(tokens, tokens if logits is None else float(logits), mode, padded)
    return cm._step_from(mode, fixed, _attention_s(cm, new, [float(c) for c in ctx]), len(new))


def _attention_s(cm, new: list, ctx: list) -> float:
    """``CostModel._attention_s`` with kernel shapes, every request active: the decode
    kernel over the 1-token requests, the multi-query kernel over the others
    (``Roofline.attention_time``: unmasked where a kernel has every request)."""
    pair, kvb, qb = cm._attn_flops_per_pair, cm._kv_bytes_per_token, cm._q_io_bytes_per_token
    if cm._prefill_causal:  # step_models.attention_work's causal form, term by term
        over = cm._prefill_overhead
        flops = [pair * u * (c + (0.5 * (u + 1.0) + (
            (over if u > DECODE_MAX_QUERY else 0.0) if over else 0.0)))
            for u, c in zip(new, ctx)]
        nbytes = [(c + u) * kvb + u * qb for u, c in zip(new, ctx)]
    else:
        kv = [c + u for u, c in zip(new, ctx)]
        flops = [pair * u * x for u, x in zip(new, kv)]
        nbytes = [x * kvb + u * qb for u, x in zip(new, kv)]
    roof, n = cm._roof, len(new)
    decode = [u == 1.0 for u in new]
    n_decode = decode.count(True)
    total = 0.0
    if n_decode:
        total += _kernel(roof, ATTENTION_DECODE, flops, nbytes,
                         None if n_decode == n else decode)
    if n_decode < n:  # whole numbers of at least one: the others have more than one
        total += _kernel(roof, cm._prefill_kind, flops, nbytes,
                         None if not n_decode else [not d for d in decode])
    return total


def _kernel(roof, kind: str, flops: list, nbytes: list, members: list | None) -> float:
    """``Roofline._attention_kernel``: each request's roof, their sum over ``members``
    (None: all) by numpy's reduction, one latency, at least the floor."""
    crate, mrate, latency, floor = roof.kind_rates(kind)
    per = np.array([max(f / crate, b / mrate) for f, b in zip(flops, nbytes)])
    summed = float(_ADD(per) if members is None else _ADD(per, where=np.array(members)))
    return max(summed + latency, floor)
