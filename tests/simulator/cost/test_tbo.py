"""Two-batch overlap (simulator/cost/tbo.py): the two-stream schedules worked by hand, the
splits, vLLM's thresholds, and the overlapped DP-attention step against its micro-batches'
compute and communication."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost import moe, tbo
from simulator.cost.dp_attention import COMM, DpAttentionCostModel
from simulator.cost.parallelism import Parallelism, parallelism_from_dict
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model

EP16 = dict(tensor_parallel=1, data_parallel_attention=16, expert_parallel=16)


def _half(**kw) -> tbo.Half:
    return tbo.Half(**{**dict.fromkeys(tbo.Half.__dataclass_fields__, 0.0), **kw})


@pytest.mark.parametrize("decode", [False, True])
def test_zero_communication_costs_the_split_alone(decode):
    # no collective: the two micro-batches' compute back to back, nothing else
    a = _half(lead=0.5, prep=0.25, core=1.0, experts=2.0, shared=0.5, tail=0.125)
    b = dataclasses.replace(a, core=1.5)
    assert tbo.overlapped_step(a, b, 3, decode) == 0.625 * 2 + 3 * (3.75 + 4.25)


def test_prefill_schedule_worked_by_hand():
    # one MoE layer, attention 2, experts 3, dispatch 1, combine 4 (SGLang's prefill stages):
    # A attn 0-2, dA 2-3 | B attn 2-4, dB 4-5 | A experts 4-7, cA 7-11 | B experts 7-10,
    # cB queued behind cA: 11-15 | A waits cA (11) | B waits cB: 15
    h = _half(core=2.0, experts=3.0, dispatch=1.0, combine=4.0)
    assert tbo.overlapped_step(h, h, 1, False) == 15.0   # serial: 20, compute alone: 10


def test_prefill_hides_all_but_the_last_combine():
    # every collective shorter than the compute the schedule puts beside it: hidden, except
    # B's last combine, which has only B's own shared expert (0) left to run beside it
    h = _half(core=5.0, experts=5.0, dispatch=1.0, combine=1.0)
    assert tbo.overlapped_step(h, h, 3, False) == 2 * 3 * 10.0 + 1.0


def test_decode_schedule_worked_by_hand():
    # SGLang's decode stages, B two stages behind A: A prep 0-1, core 1-3, dA 3-5 beside A's
    # shared 3-4 | B prep 4-5 | A waits dA, experts 5-8, cA 8-12 | B core 8-10 | A waits cA
    # (12) | B's dA 12-14 beside B's shared 12-13 | B experts 14-17, cB 17-21 | B waits: 21
    h = _half(prep=1.0, core=2.0, shared=1.0, experts=3.0, dispatch=2.0, combine=4.0)
    assert tbo.overlapped_step(h, h, 1, True) == 21.0    # serial: 26, compute alone: 14


def test_sm_share_slows_the_compute_beside_a_collective_and_caps_the_experts():
    # s = 0.5: B's attention (2) starts at 2 beside A's dispatch (2-3): half rate for 1,
    # then 1.5 at full rate: 2-4.5; dB 4.5-5.5 | A experts 4.5-6.5 | B waits 5.5, 6.5-8.5
    h = _half(core=2.0, experts=2.0, dispatch=1.0)
    assert tbo.overlapped_step(h, h, 1, False) == 8.0
    assert tbo.overlapped_step(h, h, 1, False, sm_share=0.5) == 8.5
    # the expert GEMMs on the SMs DeepEP leaves them: 1.5 x as long, A 4.5-7.5, B 7.5-10.5
    assert tbo.overlapped_step(h, h, 1, False, sm_share=0.5, expert_factor=1.5) == 10.5


def test_operators_placed_in_the_stages_by_name():
    # 61 layers, 58 of them MoE (DeepSeek-V3): the dense layers' share of the per-layer
    # operators, the dense MLP and the embedding lead; the routed and shared experts, the
    # router and the collectives are per MoE layer; the LM head is last
    times = {"attention": 61.0, "fused_qkv_a_proj": 6.1, "mlp_up": 3.0, "embedding": 1.0,
             "experts_up": 58.0, "experts_down": 29.0, "shared_up": 5.8, "moe_routing": 11.6,
             "moe_dispatch": 116.0, "moe_combine": 174.0, "lm_head": 2.0}
    h = tbo.half_of(times, 61, 58)
    assert h.lead == pytest.approx(3.0 + 1.0 + 3 * 1.0 + 3 * 0.1)
    assert (h.prep, h.core) == (pytest.approx(0.1), pytest.approx(1.0 + 0.2))
    assert (h.experts, h.shared, h.dispatch, h.combine, h.tail) == \
        (1.5, pytest.approx(0.1), 2.0, 3.0, 2.0)


def test_sglang_splits_a_prefill_between_whole_requests():
    # _split_array_by_half_sum: the first prefix whose sum reaches floor(total / 2)
    assert tbo.split_by_sequence(np.array([3.0, 5.0, 2.0])) == 2        # 8 | 2
    assert tbo.split_by_sequence(np.full(4, 4096.0)) == 2               # even
    assert tbo.split_by_sequence(np.array([1.0, 1.0, 10.0])) == 2       # 2 | 10
    assert tbo.split_by_sequence(np.array([100.0])) == 0                # whole, in B
    (n1, c1, _), (n2, c2, _) = tbo.split_rank(np.array([3.0, 5.0, 2.0]), np.zeros(3),
                                              np.ones(3), by_sequence=True)
    assert list(n1) == [3, 5] and list(n2) == [2]


def test_split_at_the_token_midpoint_keeps_every_token_and_its_context():
    new = np.array([3.0, 5.0, 2.0])
    ctx = np.array([10.0, 0.0, 7.0])
    lg = np.array([1.0, 1.0, 1.0])
    (n1, c1, l1), (n2, c2, l2) = tbo.split_rank(new, ctx, lg)
    assert n1.sum() == 5 and n2.sum() == 5        # floor(10 / 2) each side
    # request 1 straddles the midpoint: 2 tokens in A, 3 in B after those 2
    assert list(n1) == [3, 2] and list(c1) == [10, 0]
    assert list(n2) == [3, 2] and list(c2) == [2, 7]
    assert l1.sum() + l2.sum() == 3 and l1[-1] == 0  # the split request's logit in B


def test_decode_splits_by_request_count():
    new, ctx = np.ones(5), np.arange(5.0)
    (n1, c1, _), (n2, c2, _) = tbo.split_rank(new, ctx, np.ones(5))
    assert list(c1) == [0, 1] and list(c2) == [2, 3, 4]


def _models(dispatch: str = "all_to_all", held: int = 20):
    hw, m = load_profile("h100-sxm"), load_model("deepseek-v3")
    par = Parallelism(**EP16, moe_dispatch=dispatch, deepep_num_sms=held)
    serial = DpAttentionCostModel(hw, m, par)
    return serial, DpAttentionCostModel(hw, m, dataclasses.replace(par,
                                                                   two_batch_overlap=True))


@pytest.mark.parametrize("dispatch,new,held", [("all_to_all", 1.0, 20),
                                               ("deepep_normal", 512.0, 20),
                                               ("deepep_normal", 512.0, 24)])
def test_overlapped_step_within_its_compute_and_its_serial_communication(dispatch, new, held):
    serial, over = _models(dispatch, held)
    n = 16 * 8
    full = (np.full(n, new), np.full(n, 1000.0), np.ones(n))
    half = (np.full(n // 2, new), np.full(n // 2, 1000.0), np.ones(n // 2))
    step = over.step_time(*full)
    bd = over.breakdown(*full)
    names = [op.name for op in bd.ops]
    assert step == pytest.approx(bd.time_s, rel=1e-12)
    # the two runs of an operator are one operator (drafting.py reads them by name)
    assert len(names) == len(set(names)) and "o_proj" in names
    # each micro-batch is half of every rank's requests: priced apart, serially, each is
    # its compute W/2 + its communication M/2 + its own host time and replay; overlapped,
    # the compute stream runs all of W (the experts x SMs / (SMs - held) at prefill), at
    # worst at 1 - s of the SMs, and idles only while a collective runs: W <= step <= W /
    # (1 - s) + M (+ the SMs' held time, low latency), host and replay once
    half_bd = serial.breakdown(*half)
    sms = over._roof.kernels.sm_count
    s, cap = (held / sms, sms / (sms - held)) if dispatch == "deepep_normal" else (0.0, 1.0)
    comm = 2 * sum(op.time_s for op in half_bd.ops if op.name in COMM)
    work = 2 * sum(op.time_s * (cap if op.name in tbo.EXPERT_OPS else 1.0)
                   for op in half_bd.ops if op.name not in COMM)
    # DeepEP's low-latency kernels hold the SMs tbo.LL_SM_S per 1,024 copies as well
    held = 0.0 if dispatch == "deepep_normal" else 4 * over._ep_moe.layers * tbo.LL_SM_S \
        * (n // 16 // 2) * over._ep_moe.k * moe.comm_hot(over._ep_moe, n // 2) / tbo.LL_SM_COPIES
    device = step - bd.step_overhead_s - bd.launch_s
    assert work * (1 - 1e-9) <= device <= work / (1 - s) + comm + held


def test_bad_overlap_and_eplb_settings_name_their_field():
    with pytest.raises(SpecsimError, match="parallelism.enable_two_batch_overlap"):
        parallelism_from_dict({"enable_two_batch_overlap": True}, source="t")
    with pytest.raises(SpecsimError, match="parallelism.enable_two_batch_overlap"):
        parallelism_from_dict({"data_parallel_attention": 8, "expert_parallel": True,
                               "enable_two_batch_overlap": True}, source="t")  # all_gather
    with pytest.raises(SpecsimError, match="parallelism.ep_num_redundant_experts"):
        parallelism_from_dict({"data_parallel_attention": 8, "expert_parallel": True,
                               "ep_num_redundant_experts": 32}, source="t")
    with pytest.raises(SpecsimError, match="parallelism.ep_num_redundant_experts"):
        DpAttentionCostModel(load_profile("h100-sxm"), load_model("deepseek-v3"),
                             Parallelism(**EP16, eplb=True, redundant_experts=5))


def _with_thresholds(decode: int, prefill: int):
    serial, over = _models("all_to_all")
    gated = DpAttentionCostModel(load_profile("h100-sxm"), load_model("deepseek-v3"),
                                 dataclasses.replace(over.parallel,
                                                     tbo_decode_token_threshold=decode,
                                                     tbo_prefill_token_threshold=prefill))
    return serial, over, gated


@pytest.mark.parametrize("per_rank,split", [(31, False), (32, True), (64, True)])
def test_vllm_decode_threshold_splits_at_and_above_it(per_rank, split):
    # vLLM's check_ubatch_thresholds: num_tokens >= dbo_decode_token_threshold (32) for a
    # uniform-decode batch; below it the step is the serial one, exactly
    serial, over, gated = _with_thresholds(32, 512)
    n = 16 * per_rank
    batch = (np.ones(n), np.full(n, 2000.0), np.ones(n))
    want = (over if split else serial).step_time(*batch)
    assert gated.step_time(*batch) == want
    assert gated.breakdown(*batch).time_s == pytest.approx(want, rel=1e-12)


def test_vllm_prefill_threshold_and_every_rank_votes():
    serial, over, gated = _with_thresholds(32, 512)
    # one prompt a rank: 512 tokens split (>=), 511 do not
    for tokens, model in ((512.0, over), (511.0, serial)):
        batch = (np.full(16, tokens), np.zeros(16), np.ones(16))
        assert gated.step_time(*batch) == model.step_time(*batch)
    # one rank below its threshold keeps every rank whole: 15 ranks with 600-token prompts,
    # the last (request 15) with 100
    new = np.full(16, 600.0)
    new[15] = 100.0
    batch = (new, np.zeros(16), np.ones(16))
    assert gated.step_time(*batch) == serial.step_time(*batch)
    # an idle rank votes no: 15 requests over 16 ranks
    batch = (np.full(15, 600.0), np.zeros(15), np.ones(15))
    assert gated.step_time(*batch) == serial.step_time(*batch)
    # a decode rank is judged by the decode threshold: 40 uniform decodes (>= 32) on every
    # rank pass where the prefill threshold (512) would not
    batch = (np.ones(16 * 40), np.full(16 * 40, 100.0), np.ones(16 * 40))
    assert gated.step_time(*batch) == over.step_time(*batch)


def test_overlap_applies_by_batch_kind():
    ones, ctx = np.ones(40), np.full(40, 9.0)
    decode = (ones, ctx)
    assert tbo.overlap_applies([decode, decode], 2, 32, 512, 128)
    # 2 x 250 new tokens: a prefill (no context) below 512; with context and equal counts
    # a uniform batch (e.g. verification) judged by the decode threshold
    chunks = np.array([250.0, 250.0])
    assert not tbo.overlap_applies([decode, (chunks, np.zeros(2))], 2, 32, 512, 128)
    assert not tbo.overlap_applies([decode, (chunks, np.full(2, 5.0))], 2, 32, 512, 128)
    assert tbo.overlap_applies([decode, (chunks, np.full(2, 5.0))], 2, 32, 512, 250)
    assert not tbo.overlap_applies([decode], 2, 32, 512, 128)          # one rank idle
    assert tbo.overlap_applies([], 2, 0, 0, 128)                       # no thresholds


def test_a_threshold_needs_the_overlap_and_a_whole_number():
    base = {"data_parallel_attention": 8, "expert_parallel": True,
            "moe_dispatch": "all_to_all"}
    with pytest.raises(SpecsimError, match="without the overlap") as err:
        parallelism_from_dict({**base, "tbo_decode_token_threshold": 32}, source="t")
    assert err.value.field == "parallelism.tbo_decode_token_threshold"
    with pytest.raises(SpecsimError) as err:
        parallelism_from_dict({**base, "enable_two_batch_overlap": True,
                               "tbo_prefill_token_threshold": 1.5}, source="t")
    assert err.value.field == "parallelism.tbo_prefill_token_threshold"
    par = parallelism_from_dict({**base, "enable_two_batch_overlap": True,
                                 "tbo_prefill_token_threshold": 512}, source="t")
    assert (par.tbo_decode_token_threshold, par.tbo_prefill_token_threshold) == (0, 512)


def test_one_prompt_a_rank_overlaps_in_vllm_not_in_sglang():
    # SGLang cuts between whole requests: one 4,096-token prompt a rank stays whole in one
    # micro-batch, so nothing overlaps and the capped DeepGEMM makes the step no faster
    # than the serial one; vLLM cuts it at its token midpoint and overlaps
    serial, sglang = _models("deepep_normal")
    vllm = DpAttentionCostModel(load_profile("h100-sxm"), load_model("deepseek-v3"),
                                dataclasses.replace(sglang.parallel, tbo_schedule="vllm"))
    batch = (np.full(16, 4096.0), np.zeros(16), np.ones(16))
    assert sglang.step_time(*batch) >= serial.step_time(*batch)
    assert vllm.step_time(*batch) < serial.step_time(*batch)


def test_deepep_sm_count_sets_the_share_and_the_cap():
    # 24 of the H100's 132 SMs (SGLang's tuned --deepep-config): the compute beside a
    # collective keeps 108/132, the capped GEMMs take 132/108 as long; none at decode
    assert tbo.sm_split(132, 24, False) == (24 / 132, 132 / 108)
    assert tbo.sm_split(132, 20, True) == (20 / 132, 1.0)
    for held in (0, 132):
        with pytest.raises(SpecsimError) as err:
            tbo.sm_split(132, held, False)
        assert err.value.field == "parallelism.deepep_num_sms"
    base = {"data_parallel_attention": 8, "expert_parallel": True,
            "moe_dispatch": "deepep_normal"}
    with pytest.raises(SpecsimError, match="without the overlap"):
        parallelism_from_dict({**base, "deepep_num_sms": 24}, source="t")
    with pytest.raises(SpecsimError) as err:
        parallelism_from_dict({**base, "enable_two_batch_overlap": True,
                               "deepep_num_sms": 0}, source="t")
    assert err.value.field == "parallelism.deepep_num_sms"
    par = parallelism_from_dict({**base, "enable_two_batch_overlap": True,
                                 "deepep_num_sms": 24}, source="t")
    assert par.deepep_num_sms == 24 and Parallelism().deepep_num_sms == 20
    # more SMs held: the overlapped prefill no faster (the batch of the bound test above)
    batch = (np.full(128, 512.0), np.full(128, 1000.0), np.ones(128))
    assert _models("deepep_normal", 24)[1].step_time(*batch) > \
        _models("deepep_normal", 20)[1].step_time(*batch)
