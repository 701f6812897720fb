"""Two-batch overlap (simulator/cost/tbo.py): the overlap's closed form, the token-midpoint
split, and the overlapped DP-attention step against its two micro-batches priced apart."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost import tbo
from simulator.cost.dp_attention import COMM, DpAttentionCostModel
from simulator.cost.parallelism import Parallelism, parallelism_from_dict
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model

EP16 = dict(tensor_parallel=1, data_parallel_attention=16, expert_parallel=16)


def test_zero_communication_costs_the_split_alone():
    # no communication: the two micro-batches' compute back to back, nothing else
    assert tbo.overlapped_step(3.0, 2.0, 0.0, 0.0, 61, 58) == 5.0
    assert tbo.overlapped_step(3.0, 2.0, 0.0, 0.0, 61, 58, sm_share=0.15) == 5.0


def test_communication_below_the_other_half_compute_is_hidden():
    c_a, c_b, layers = 7.625, 15.25, 61        # 0.125 s and 0.25 s a layer (exact floats)
    assert tbo.overlapped_step(c_a, c_b, 0.25, 0.125, layers, 58) == c_a + c_b
    assert tbo.overlapped_step(c_a, c_b, 0.19, 0.05, layers, 58) == c_a + c_b


def test_communication_beyond_the_other_half_compute_shows_its_excess():
    # A's 0.5 s a layer under B's 0.2 s: 0.3 s exposed in each of the 58 MoE layers; B's
    # 0.05 s under A's 0.1 s hidden
    got = tbo.overlapped_step(6.1, 12.2, 0.5, 0.05, 61, 58)
    assert got == pytest.approx(6.1 + 12.2 + 58 * 0.3, rel=1e-12)


def test_kernels_holding_sms_slow_the_compute_beside_them():
    # s of the SMs held for the whole m: the compute beside it runs at 1 - s, so a layer
    # pair takes max(m, c + s m); c 0.2, m 0.15, s 0.25: 0.2375, 0.0375 over c
    assert float(tbo.exposed(0.15, 0.2, 0.25)) == pytest.approx(0.0375, rel=1e-12)
    got = tbo.overlapped_step(12.2, 12.2, 0.15, 0.15, 61, 58, sm_share=0.25)
    assert got == pytest.approx(24.4 + 58 * 2 * 0.0375, rel=1e-12)


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


def _models(dispatch: str = "all_to_all"):
    hw, m = load_profile("h100-sxm"), load_model("deepseek-v3")
    par = Parallelism(**EP16, moe_dispatch=dispatch)
    serial = DpAttentionCostModel(hw, m, par)
    return serial, DpAttentionCostModel(hw, m, dataclasses.replace(par,
                                                                   two_batch_overlap=True))


@pytest.mark.parametrize("dispatch,new", [("all_to_all", 1.0), ("deepep_normal", 512.0)])
def test_overlapped_step_against_its_micro_batches_priced_apart(dispatch, new):
    serial, over = _models(dispatch)
    n = 16 * 8
    full = (np.full(n, new), np.full(n, 1000.0), np.ones(n))
    half = (np.full(n // 2, new), np.full(n // 2, 1000.0), np.ones(n // 2))
    step = over.step_time(*full)
    names = [op.name for op in over.breakdown(*full).ops]
    assert step == pytest.approx(over.breakdown(*full).time_s, rel=1e-12)
    # the two runs of an operator are one operator (drafting.py reads them by name)
    assert len(names) == len(set(names)) and "o_proj" in names
    # each micro-batch is half of every rank's requests: priced apart, serially, each is
    # its compute + its communication + its own host time and replay
    bd = serial.breakdown(*half)
    comm = sum(op.time_s for op in bd.ops if op.name in COMM)
    whole_half = bd.time_s
    # overlapped: at least the two computes (host and replay once), at most the two
    # halves run one after the other
    assert 2 * (whole_half - comm - bd.step_overhead_s - bd.launch_s) <= step
    assert step <= 2 * whole_half


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
