"""The experts behind DeepEP's normal dispatch at prefill sizes against SGLang's own kernels
timed on an H100 SXM.

Source: ai-dynamo/aiconfigurator, aic-core/src/aiconfigurator_core/systems/data/h100_sxm/moe/
sglang/0.5.10/wideep_context_moe_perf.parquet (and .../0.5.6.post2/, the same file name),
rows ``moe_context``, ``deepepmoe``, ``fp8_block``, DeepSeek-V3's shapes (hidden 7168,
expert intermediate 2048, 256 experts, top-8), ``moe_ep_size`` 32, ``distribution``
uniform: the mean of CUDA-event timings of SGLang's ``DeepEPMoE.run_moe_core`` on one GPU
holding 8 of the 256 experts (collector/wideep/sglang/collect_deepep_moe.py,
``benchmark_moe_layer_prefill``).  Its uniform case gives each local expert exactly
``tokens x 8 x 32 / 256`` rows, and feeds a fake dispatch output of ``tokens x 32`` received
rows (its ``hidden_states_per_token_iter``), each with at most one local pick.

``run_moe_core`` on that path (sglang/srt/layers/moe/ep_moe/layer.py
``forward_deepgemm_contiguous``): ``ep_scatter`` (the FP8 rows copied into each expert's
contiguous block), DeepGEMM's grouped w13 GEMM, ``silu_and_mul``, the FP8 quantisation of its
output, the grouped w2 GEMM, ``ep_gather`` (each received row's picks weighted and summed,
written for every received row).  The model prices the two GEMMs (moe_kernels.grouped_gemm_s
at the profile's DeepGEMM fit, moe.fp8_deepgemm_*, fitted on DeepGEMM's README alone, not on
this table); the four memory-bound kernels here are their bytes at the profile's memory roof,
the gather's output at the collector's ``tokens x 32`` rows.  From 2,048 tokens a rank the
sum is within 7% of the measured time (measured / priced 1.07, 1.03, 1.02, 1.01 at 2,048-
16,384 on SGLang 0.5.10; 1.05, 1.01, 0.99 at 4,096-16,384 on 0.5.6.post2): the expert compute
the large-EP prefill cases price at 16,384 tokens a rank (moe_cases.py) is the measured one.
Below (1.20 and 1.39 at 1,024 and 512 tokens a rank) the timings carry fixed costs (the
host-launched kernels' and their launches) this sum leaves out.
"""
from __future__ import annotations

import pytest

from hardware.profile import load_profile
from simulator.cost.dp_attention import cost_model
from simulator.cost.parallelism import Parallelism
from simulator.models.spec import load_model

EP, H, F, K = 32, 7168, 2048, 8
# ms per MoE layer at tokens a rank, EP32, uniform (module docstring)
MEASURED = {"0.5.10": {2048: 1.891456, 4096: 3.646926, 8192: 7.188311, 16384: 14.264644},
            "0.5.6.post2": {4096: 3.711488, 8192: 7.153221, 16384: 13.964539}}


def _memory_bound_bytes(tokens: float) -> float:
    """``run_moe_core``'s kernels beside the GEMMs at the collector's shapes: scatter (FP8
    rows in and out, scales aside), silu_and_mul (2F in, F out, 16-bit), the quantisation (F
    16-bit in, 8-bit out), gather (H 16-bit in per routed row, out per received row)."""
    rows = tokens * K
    return (rows * H * 2 + rows * 3 * F * 2 + rows * F * 3 + rows * H * 2
            + tokens * EP * H * 2)


@pytest.mark.parametrize("version,tokens", [(v, t) for v, row in MEASURED.items()
                                            for t in row])
def test_deepep_experts_at_prefill_sizes_match_sglangs_timing(version, tokens):
    hw, m = load_profile("h100-sxm"), load_model("deepseek-v3")
    cm = cost_model(hw, m, Parallelism(tensor_parallel=1, data_parallel_attention=EP,
                                       expert_parallel=EP, moe_dispatch="deepep_normal"))
    terms = {t[0]: t[1] / m.moe_layers for t in cm._moe_terms(float(tokens), False)}
    gemms = terms["experts_up"] + terms["experts_down"]
    priced = gemms + float(cm._roof.memory_time(_memory_bound_bytes(float(tokens))))
    assert priced * 1e3 == pytest.approx(MEASURED[version][tokens], rel=0.10)
