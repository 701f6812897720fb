"""A chain stretch's parts for a few requests on Python numbers (chain_stretch.py's
``_opening`` and ``_times`` take them below ``FEW_REQUESTS`` requests): numpy's per-call
cost is most of an array operation of a few elements, so the same integers and the same
floats are worked out on lists.
"""
from __future__ import annotations

import numpy as np

from simulator.engine.fast_forward import admission_blocked
from simulator.engine.plan import ChainStretch

# below this many requests: lists (a verification with no closed form by few_step's
# one-kernel loop: fewer than 8 roofs are added left to right, as numpy adds them)
FEW_REQUESTS = 8


def opening_few(replica, spec: ChainStretch) -> tuple[int, int] | None:
    """``_opening``'s checks after the admission bound, of a few requests: the same
    integers, in the same order, on lists (numpy's per-call cost is most of an array op
    of a few elements)."""
    b, lim = replica.b, replica.limits
    g, bs = spec.gamma, lim.block_size
    c, blocks = b.computed.tolist(), b.blocks.tolist()
    base = replica.used_blocks - sum(blocks)
    reserved = base + sum([(x + (g + bs)) // bs for x in c])
    if reserved > lim.kv_blocks:
        return None
    if replica.waiting and not admission_blocked(replica, reserved, len(c) * (g + 1)):
        return None
    if any([k != (x + (bs - 1)) // bs for k, x in zip(blocks, c)]):  # the invariant
        return None
    if spec.max_context is None:
        return base, 0
    seq_max = max([p + q for p, q in zip(b.prompt_len.tolist(), b.generated.tolist())]) + g
    return None if seq_max >= spec.max_context else (base, seq_max)


def few_verify(forms, n: int, u: float, ctx: np.ndarray) -> np.ndarray | None:
    """Each row's verification of ``n`` requests of ``u`` tokens each at its contexts
    ``ctx`` (K, n) by ``few_mixed_pricer`` (``rows_step_times``' floats: the same parts and
    attention on Python numbers), None where it has no such shortcut."""
    price = forms.few_mixed_pricer([u] * n, float(n) * u)
    return None if price is None else \
        np.array([price(row) for row in ctx.astype(np.float64).tolist()], np.float64)
