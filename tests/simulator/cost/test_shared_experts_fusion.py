"""Shared experts fused into the routed grouped GEMMs (engines.yaml ``shared_experts_fusion``,
SGLang's ``num_fused_shared_experts``): the experts touched in closed form, the GEMMs' bytes
by their definition, and the shared MLP's own launches gone (simulator/cost/moe.py)."""
import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import resolve_execution
from simulator.cost.moe import MoeShape, inclusion_probabilities
from simulator.cost.parallelism import Parallelism
from simulator.cost.spec_catalog import load_engine
from simulator.models.spec import load_model

DSV3 = load_model("deepseek-v3")
TOKENS = np.array([1.0, 2.0, 8.0, 16.0, 64.0, 4096.0])


def _cm(fused: bool, tp: int = 8, ep: int = 1) -> CostModel:
    hw = load_profile("h200")
    spec = dataclasses.replace(load_engine("sglang-v0.4.5"), shared_experts_fusion=fused)
    ex = resolve_execution(hw, {"spec": spec}, max_num_seqs=256)
    return CostModel(hw, DSV3, Parallelism(tensor_parallel=tp, expert_parallel=ep),
                     execution=ex)


def test_the_fused_shared_expert_is_touched_by_every_token():
    E, k = DSV3.num_experts, DSV3.experts_per_token
    assert (E, k, DSV3.shared_experts) == (256, 8, 1)  # DeepSeek-V3's config.json
    s = MoeShape.of(DSV3, 8, 1, 0.0, fuse_shared=True)
    assert (s.num_experts, s.k, s.fused_shared) == (257, 9, 1)
    # the shared expert always, the routed ones by the uniform closed form D(T)
    np.testing.assert_allclose(s.distinct(TOKENS), 1.0 + E * (1.0 - (1.0 - k / E) ** TOKENS),
                               rtol=1e-12)
    assert s.distinct(1.0) == pytest.approx(k + 1, rel=1e-12)
    assert s.distinct(1e6) == pytest.approx(E + 1, rel=1e-12)
    # each expert's per-device slice is the same whether it is shared or routed (TP 8)
    assert s.up_weight == MoeShape.of(DSV3, 8, 1, 0.0).up_weight == 2 * 7168 * 2048 / 8


def test_skewed_routing_keeps_the_shared_expert_at_probability_one():
    p = inclusion_probabilities(256, 8, 1.0)
    s = MoeShape.of(DSV3, 8, 1, 1.0, fuse_shared=True)
    assert s.probs.sum() == pytest.approx(9.0, rel=1e-12) and s.probs[-1] == 1.0
    np.testing.assert_allclose(s.distinct(TOKENS),
                               1.0 + (1.0 - (1.0 - p) ** TOKENS[:, None]).sum(axis=1),
                               rtol=1e-12)


def test_no_fusion_under_expert_parallelism_or_without_the_flag():
    # SGLang on NVIDIA turns the fusion off under EP (determine_num_fused_shared_experts)
    for s in (MoeShape.of(DSV3, 8, 8, 0.0, fuse_shared=True), MoeShape.of(DSV3, 8, 1, 0.0)):
        assert (s.num_experts, s.k, s.fused_shared) == (256, 8, 0)


@pytest.mark.parametrize("batch", [1, 8, 64])
def test_the_shared_mlp_s_own_launches_are_gone(batch):
    plain = {op.name for op in _cm(False).breakdown([1] * batch, [512] * batch).ops}
    fused = {op.name for op in _cm(True).breakdown([1] * batch, [512] * batch).ops}
    gone = {"shared_up", "shared_down", "fp8_quant_shared", "moe_shared_add"}
    assert gone <= plain and plain - fused == gone and fused <= plain
    # launches per forward: the two GEMMs and the activation (layer_ops.extra_kernels) and
    # the two quantisations and two adds (moe_kernels), 7 a MoE layer
    assert _cm(False)._kernels - _cm(True)._kernels == 7 * DSV3.moe_layers


@pytest.mark.parametrize("batch", [1, 8, 64])
def test_the_grouped_gemms_read_one_more_expert_and_carry_its_rows(batch):
    ops = {}
    for fused in (False, True):
        step = _cm(fused).breakdown([1] * batch, [512] * batch)
        ops[fused] = {op.name: op for op in step.ops}
    h, f_dev, L = DSV3.hidden_size, DSV3.expert_ffn_size / 8, DSV3.moe_layers
    b = 2.0  # the routed rows in and out at 16 bits; the FP8 weights at one byte
    for name, weight, width in (("experts_up", 2 * h * f_dev, h + 2 * f_dev),
                                ("experts_down", f_dev * h, f_dev + h)):
        extra = ops[True][name].hbm_bytes - ops[False][name].hbm_bytes
        # one more expert's slice (touched with probability 1) and ``batch`` more rows
        assert extra == pytest.approx(L * (weight * 1.0 + batch * width * b), rel=1e-9)


@pytest.mark.parametrize("batch", [1, 8, 300])
def test_step_time_agrees_with_breakdown_with_the_fusion(batch):
    cm = _cm(True)
    new, ctx = [1] * batch, list(range(100, 100 + batch))
    assert cm.step_time(new, ctx) == pytest.approx(cm.breakdown(new, ctx).time_s, rel=1e-9)
    mixed = [1] * batch + [2048]  # a prefill chunk beside the decodes
    assert cm.step_time(mixed, ctx + [0]) == pytest.approx(
        cm.breakdown(mixed, ctx + [0]).time_s, rel=1e-9)
