"""DeepSeek-V3's MLA attention module at prefill, priced for SGLang on one H100 of a DP
attention rank, against the module as SGLang runs it, timed on an H100.

The measurement: ai-dynamo/aiconfigurator (commit 095f58a),
aic-core/src/aiconfigurator_core/systems/data/h100_sxm/mla/sglang/0.5.6.post2/
wideep_context_mla_perf.parquet, rows ``kernel_source`` fa3, ``num_heads`` 128 (DeepSeek-V3's),
``mla_dtype`` fp8_block, ``latency`` in ms, on an "NVIDIA H100 80GB HBM3"; its collector
(collector/sglang/collect_wideep_attn.py at commit 6996779) times SGLang's
``DeepseekV2AttentionMLA.forward`` on CUDA events over ``batch_size`` prompts of ``isl``
tokens, with the attention's input latent (``fused_qkv_a_proj``'s output) drawn at random
in its place.  So the module timed is: the latent norms, ``q_b_proj`` and ``kv_b_proj``
(DeepGEMM block-FP8 with their inputs' quantisation), RoPE, the causal FA3 attention,
``o_proj`` (and its input's quantisation).  Priced: those operators of the rank's forward
(``q_b_proj``, ``kv_b_proj``, ``attention``, ``o_proj``, the MLA and engine MLA kernels, and
``fp8_quant``'s share of the inputs of ``q_b_proj`` and ``o_proj``), per layer; the norms and
RoPE are in ``elementwise`` with other layers' kernels and are left out, so the priced module
may read a little under the measured one.  Tolerance: 10%, a kernel-level timing.
"""
from __future__ import annotations

import numpy as np
import pytest

from simulator.cost.cost_model import CostModel
from tests.published import moe_cases

# prompt length -> ms of the module over 16,384 tokens (16,384 / length prompts)
MEASURED_MS = {1024: 7.094420, 2048: 7.951680, 4096: 9.874912}
MODULE = ("q_b_proj", "kv_b_proj", "attention", "o_proj", "mla_kernels", "engine_mla_kernels")


@pytest.mark.parametrize("prompt", sorted(MEASURED_MS))
def test_priced_mla_prefill_module_within_ten_percent_of_sglangs_on_h100(prompt):
    n = 16_384 // prompt
    dep = moe_cases.deployment(32, "deepep_normal", n, 16_384, "sglang-2025", moe_cases.EPLB)
    cm = dep.target_cost
    layers = cm.model.num_layers
    ops = {op.name: op.time_s for op in
           CostModel.breakdown(cm, np.full(n, float(prompt)), np.zeros(n), np.ones(n)).ops}
    m = cm.model
    widths = (m.hidden_size, m.q_lora_rank, m.num_heads * m.value_head_dim)  # fp8_quant's
    quant = ops["fp8_quant"] * (widths[1] + widths[2]) / sum(widths)
    priced_ms = (sum(ops[name] for name in MODULE) + quant) / layers * 1e3
    assert priced_ms == pytest.approx(MEASURED_MS[prompt], rel=0.10)
