"""SGLang's overlapped prefill caps every DeepGEMM GEMM at the SMs DeepEP's normal kernels
leave (tbo.py docstring): the schedule worked by hand with a capped attention GEMM, the
operators' placement in the capped parts, and DeepSeek-V3's overlapped prefill on the
large-EP blog's engine held between the bounds its compute and communication give."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost import tbo
from simulator.cost.dp_attention import COMM, DpAttentionCostModel
from simulator.cost.execution import resolve_execution
from simulator.cost.parallelism import Parallelism
from simulator.cost.spec_catalog import load_engine
from simulator.models.spec import load_model


def _half(**kw) -> tbo.Half:
    return tbo.Half(**{**dict.fromkeys(tbo.Half.__dataclass_fields__, 0.0), **kw})


def test_prefill_schedule_with_a_capped_attention_gemm_worked_by_hand():
    # s = 0.5, cap 1.5; attention 1 (any SMs) then its GEMM 1 (capped): A attn 0-1, GEMM
    # 1-2.5 (1.5 x 1), dA 2.5-3.5 | B attn beside dA at half rate: 0.5 done by 3.5, the
    # other 0.5 at full rate: 3.5-4, GEMM 4-5.5, dB 5.5-6.5 | A experts (3 = 1.5 x 2)
    # 5.5-8.5 | B waits dB (6.5), experts 8.5-11.5
    h = _half(core=1.0, core_gemm=1.0, experts=2.0, dispatch=1.0)
    assert tbo.overlapped_step(h, h, 1, False, sm_share=0.5, expert_factor=1.5) == 11.5
    # the same GEMM uncapped (test_tbo: 10.5): B's attention and GEMM both beside dA at half
    # rate, all at full rate outside it; the cap costs it 0.5 here, A's GEMM 0.5
    flat = _half(core=2.0, experts=2.0, dispatch=1.0)
    assert tbo.overlapped_step(flat, flat, 1, False, sm_share=0.5, expert_factor=1.5) == 10.5
    # a capped GEMM is not slowed further beside a collective: B's GEMM 3 (1.5 x 2) runs
    # 3-6 inside A's dispatch 3-7; dB queues behind it: 7-11
    g = _half(core_gemm=2.0, dispatch=4.0)
    assert tbo.overlapped_step(g, g, 1, False, sm_share=0.5, expert_factor=1.5) == 11.0


def test_capped_gemms_placed_by_name():
    # 61 layers, 58 MoE (DeepSeek-V3): o_proj and q_b_proj per layer, the shared expert per
    # MoE layer, the dense MLP in the lead; SGLang's dense layers run before the overlap,
    # uncapped; vLLM's micro-batches run them under the cap
    times = {"o_proj": 61.0, "q_b_proj": 6.1, "shared_up": 5.8, "moe_shared_add": 11.6,
             "mlp_up": 3.0, "attention": 61.0, "experts_up": 58.0, "lm_head": 2.0}
    capped = frozenset({"o_proj", "q_b_proj", "shared_up", "mlp_up"})
    sg = tbo.half_of(times, 61, 58, capped, lead_capped=False)
    assert (sg.lead, sg.lead_gemm) == (pytest.approx(3.0 + 3.0 + 3.0 + 0.3), 0.0)
    assert (sg.prep, sg.prep_gemm) == (0.0, pytest.approx(0.1))
    assert (sg.core, sg.core_gemm) == (pytest.approx(1.0), pytest.approx(1.0))
    assert (sg.shared, sg.shared_gemm) == (pytest.approx(0.2), pytest.approx(0.1))
    assert (sg.experts, sg.tail) == (1.0, 2.0)
    vl = tbo.half_of(times, 61, 58, capped, lead_capped=True)
    assert (vl.lead, vl.lead_gemm) == (pytest.approx(3.0), pytest.approx(3.0 + 3.0 + 0.3))
    assert dataclasses.replace(vl, lead=sg.lead, lead_gemm=0.0) == sg
    # the share of each operator's seconds run capped, as the parts place them
    share = {n: tbo.capped_share(n, 61, 58, capped, False) for n in times}
    assert share == {"o_proj": 58 / 61, "q_b_proj": 58 / 61, "shared_up": 1.0,
                     "moe_shared_add": 0.0, "mlp_up": 0.0, "attention": 0.0,
                     "experts_up": 1.0, "lm_head": 0.0}
    assert tbo.capped_share("o_proj", 61, 58, capped, True) == 1.0
    # nothing named: the old parts, every GEMM but the experts' at the full SM count
    plain = tbo.half_of(times, 61, 58)
    assert plain.core_gemm == plain.prep_gemm == plain.shared_gemm == 0.0
    assert plain.core == pytest.approx(sg.core + sg.core_gemm)


def _models():
    """SGLang's large-EP prefill (EP32, DeepEP normal, the blog's engine: DeepGEMM for
    the block-FP8 linears), serial and overlapped."""
    hw, m = load_profile("h100-sxm"), load_model("deepseek-v3")
    par = Parallelism(tensor_parallel=1, data_parallel_attention=32, expert_parallel=32,
                      moe_dispatch="deepep_normal")
    ex = resolve_execution(hw, {"spec": load_engine("sglang-v0.4.5")}, max_num_seqs=32 * 8)
    return [DpAttentionCostModel(hw, m, dataclasses.replace(par, two_batch_overlap=o),
                                 execution=ex) for o in (False, True)]


def test_overlapped_prefill_between_its_capped_compute_and_its_communication():
    serial, over = _models()
    capped = over._deepgemm_ops()
    assert {"o_proj", "q_b_proj", "kv_b_proj", "shared_up", "shared_down"} <= capped
    assert "router" not in capped  # the 16-bit gate is not DeepGEMM's
    n = 32 * 4  # four 2,048-token prompts a rank: two whole ones in each micro-batch
    full = (np.full(n, 2048.0), np.zeros(n), np.ones(n))
    half = (np.full(n // 2, 2048.0), np.zeros(n // 2), np.ones(n // 2))
    bd = over.breakdown(*full)
    device = bd.time_s - bd.step_overhead_s - bd.launch_s
    # each micro-batch priced alone: its capped GEMM seconds f times as long (f = SMs /
    # (SMs - 20)), the rest at most 1 / (1 - s) as long beside a collective; the step is at
    # least the two micro-batches' compute so priced and at most that plus their
    # communication, the uncapped compute all at the slow rate
    sms = over._roof.kernels.sm_count
    s, f = 20 / sms, sms / (sms - 20)
    ops = serial.breakdown(*half).ops
    c = {op.name: tbo.capped_share(op.name, over._layers, over._ep_moe.layers, capped,
                                   False) for op in ops}
    gemm = 2 * sum(op.time_s * c[op.name] for op in ops if op.name not in COMM)
    free = 2 * sum(op.time_s * (1 - c[op.name]) for op in ops if op.name not in COMM)
    comm = 2 * sum(op.time_s for op in ops if op.name in COMM)
    assert gemm > 0.4 * (gemm + free)  # the experts and the dense linears: most of it
    assert free + f * gemm <= device * (1 + 1e-9)
    assert device <= free / (1 - s) + f * gemm + comm
    # the operators' seconds are the capped ones: the compute operators add up to the
    # priced compute, the exposed communication to the rest of the step
    computed = sum(op.time_s for op in bd.ops if op.name not in COMM)
    assert computed == pytest.approx(free + f * gemm, rel=1e-9)
    assert sum(op.time_s for op in bd.ops) == pytest.approx(max(device, computed), rel=1e-9)


def test_a_micro_batchs_capped_parts_are_its_deepgemm_seconds():
    # one micro-batch of the step above (two 2,048-token prompts a rank): its *_gemm parts
    # and experts add up to its DeepGEMM operators' seconds over the MoE layers, and with
    # no communication the overlapped step is exactly both micro-batches' uncapped compute
    # plus f times their capped (nothing beside a collective to slow)
    _, over = _models()
    capped = over._deepgemm_ops()
    b = (np.full(2, 2048.0), np.zeros(2), np.ones(2))
    half, ops = over._tbo_half([b] * 32, capped)
    moe = over._ep_moe.layers
    t = {op.name: op.time_s for op in ops}
    dense_gemm = sum(t[n] for n in capped if n in t and n not in tbo.SHARED_OPS
                     and n not in tbo.LEAD_OPS) * moe / over._layers
    shared_gemm = sum(t[n] for n in capped & set(tbo.SHARED_OPS) if n in t)
    assert dense_gemm > 0 and shared_gemm > 0
    assert moe * (half.prep_gemm + half.core_gemm) == pytest.approx(dense_gemm, rel=1e-12)
    assert moe * half.shared_gemm == pytest.approx(shared_gemm, rel=1e-12)
    assert half.lead_gemm == 0.0  # SGLang's dense layers: before the overlap, uncapped
    quiet = dataclasses.replace(half, dispatch=0.0, combine=0.0)
    sms = over._roof.kernels.sm_count
    f = sms / (sms - 20)
    free = half.lead + half.tail + moe * (half.prep + half.core + half.shared)
    capped_s = moe * (half.prep_gemm + half.core_gemm + half.shared_gemm + half.experts)
    assert tbo.overlapped_step(quiet, quiet, moe, False, 20 / sms, f) == \
        pytest.approx(2 * (free + f * capped_s), rel=1e-12)
