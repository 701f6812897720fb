"""How much longer DeepEP's normal (high-throughput) kernels run beside compute than alone:
the factor two-batch overlap (simulator/cost/tbo.py) prices on each dispatch and combine of
an overlapped step.

The claim: the SGLang large-EP blog (lmsys.org/blog/2025-05-05-large-scale-ep, "Detail
Breakdown", prefill): "Both DeepSeek and SGLang have a communication time slower than unit
test results, while the latter is achievable when disabling TBO".  The blog gives its times
in a figure only, so the factor is measured here from DeepSeek's own profiler trace of
normal kernels running beside compute, github.com/deepseek-ai/profile-data ``train.json``
(H800, EP64 over 8 nodes, the DeepSeek-V3 pretraining setting, DualPipe overlapping one
chunk's compute with another's all-to-all; 20 SMs communicating, its grouped GEMMs on 112 of
the 132).  Its prefill trace (``prefill.json``, SGLang's and this model's case) is not in
the mirror this was measured from: the training trace has the same internode kernels
(``dpsk::ep::internode::dispatch``/``combine``) in nearly the setting of DeepEP's unit test
below, which prefill does not.  Nearly: the trace records no input shapes, so its 4,096
tokens a rank reaching 4 nodes each are assumed from the pretraining setting, not read; its
kernels run on 20 SMs (every launch's grid) where the unit test gives them 24 and the best of
a sweep of chunk sizes (tests/legacy/test_internode.py ``test_loop``).  Both bound by the
RDMA link (the test's 51 GB/s is the CX7's 400 Gb/s line rate), four fewer SMs are taken to
cost the kernels nothing, an assumption: were their time proportional to the SMs, 1.53 and
1.06 of the factors below would be theirs and the rest the overlap's.

The forward pass's collectives, the ones prefill runs, are taken: the kernels launched under
the trace's ``dispatch(F)`` and ``combine(F)`` annotations, 4 of each (the dispatch kernel
proper, FP8, not its ``notify_dispatch``; the combine kernel, BF16, not its
``cached_notify``). Their durations, in microseconds:

- dispatch: 4,604, 4,154, 4,437, 4,188 (mean 4,346);
- combine: 6,002, 6,074, 5,847, 6,052 (mean 5,994).

Alone, DeepEP's unit test of the same setting (deepseek-ai/DeepEP docs/legacy.md, "Normal
kernels with NVLink and RDMA forwarding": H800, CX7 400 Gb/s, "4096 tokens per batch, 7168
hidden, top-4 groups, top-8 experts, FP8 dispatching and BF16 combining", EP64: 51 GB/s
dispatch, 50 GB/s combine, RDMA bottleneck bandwidth) moves, by its bandwidth's own count
(tests/legacy/test_internode.py: ``num_rdma_token_sent`` tokens times nodes reached, times
``hidden * 2`` bytes, times ``(1 + 4 / 128) / 2`` for FP8 with its scales), at most 4 nodes a
token (top-4 groups, a group a node at 256 experts over 8 nodes; 3.98 on average under the
test's random scores, so the times below are at most 0.4% long): 121.1 MB in 2,375 us and
234.9 MB in 4,697 us.  The unit test reports its bandwidth over the dispatch (combine)
kernel's own time (``bench_kineto``), as the trace durations above are: like for like.
Where the factors apply: only to these internode kernels, an EP group wider than one node
with the profile's ``ep_normal`` block (``overlap_factors``); within one node DeepEP's
intranode kernels move the data over NVLink, their slowdown beside compute not measured.

Not measured, so not priced: the compute's slowdown beyond the SMs DeepEP takes (the blog's
"potential noisy neighbor effects").  The trace records no input shapes, and its GEMMs are
persistent kernels of one grid (112 CTAs) whatever their shape, so no kernel can be paired
with the same shape with and without a collective in flight.
"""
from __future__ import annotations

TRACE_DISPATCH_US = (4604.0, 4154.0, 4437.0, 4188.0)   # train.json, dispatch(F)'s kernels
TRACE_COMBINE_US = (6002.0, 6074.0, 5847.0, 6052.0)    # train.json, combine(F)'s kernels
UNIT_TOKENS, UNIT_NODES, UNIT_HIDDEN = 4096, 4, 7168    # DeepEP's unit test setting
UNIT_DISPATCH_GBPS, UNIT_COMBINE_GBPS = 51.0, 50.0      # EP64, docs/legacy.md
FP8_BYTES = 2 * (1 + 4 / 128) / 2                       # test_internode.py's fp8_factor


def unit_seconds() -> tuple[float, float]:
    """DeepEP's unit-test dispatch and combine of its setting alone, in seconds."""
    copies = UNIT_TOKENS * UNIT_NODES * UNIT_HIDDEN
    return (copies * FP8_BYTES / (UNIT_DISPATCH_GBPS * 1e9),
            copies * 2 / (UNIT_COMBINE_GBPS * 1e9))


def _mean(values: tuple[float, ...]) -> float:
    return sum(values) / len(values)


def normal_overlap() -> tuple[float, float]:
    """``(dispatch, combine)``: how many times their standalone time DeepEP's normal kernels
    take beside compute (module docstring)."""
    dispatch_s, combine_s = unit_seconds()
    return (_mean(TRACE_DISPATCH_US) * 1e-6 / dispatch_s,
            _mean(TRACE_COMBINE_US) * 1e-6 / combine_s)


NORMAL_OVERLAP = normal_overlap()


def overlap_factors(normal: bool, collectives, ep_ranks: int) -> tuple[float, float]:
    """``(dispatch, combine)`` factors an overlapped step prices its collectives at:
    ``NORMAL_OVERLAP`` for DeepEP's normal kernels across nodes (``collectives``: the
    profile's hardware.collectives.Collectives, with an ``ep_normal`` block), else 1."""
    rdma = normal and bool(collectives.ep_normal) and ep_ranks > collectives.gpus_per_node
    return NORMAL_OVERLAP if rdma else (1.0, 1.0)
