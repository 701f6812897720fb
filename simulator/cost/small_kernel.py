"""One small kernel of a layer's kernel families (moe_kernels.py, engine_kernels.py).

A family is a list of these, priced one by one (``moe_kernels._priced``).  A kernel is its
bytes, loaded and stored, and the profile's kernel kind that prices them
(``Roofline.transfer_time``: the kind's latency, floor and memory rate; ``kind`` None: the
``other`` kind with no one-row bound).  Where a measurement gives a kernel's own time,
``measured_s`` carries it: the kernel then costs at least those seconds whatever its bytes
(a kernel whose time is set by its own serial loop, not its traffic: vLLM 0.7.x's one-block
expert align, engine_kernels.ONE_BLOCK_ALIGN_S), and, as every small kernel, nothing where
it moves no bytes (a step without tokens).  Its time is its family's GPU time as any of its
kernels' is, so in an eager forward it overlaps the family's launches (an operator costs the
larger of its GPU time and its launches: token_terms).
"""
from __future__ import annotations

from typing import NamedTuple


class SmallKernel(NamedTuple):
    """One kernel of a family (module docstring): ``nbytes`` a float or an array over the
    step's token counts, ``kind`` the profile's kernel kind, ``measured_s`` its measured
    GPU seconds where a measurement gives them (None: priced at its bytes alone)."""

    nbytes: object
    kind: str | None = None
    measured_s: float | None = None
