"""Prefill/decode disaggregation (simulator/engine/disagg.py, simulator/simulate_disagg.py)
against hand arithmetic, the models' published KV layouts and the aggregated engine."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from simulator.disagg_config import Disaggregation, Link, Pool
from simulator.scenario import EngineOptions, load_scenario
from simulator.simulate import simulate
from tests.helpers import REPO, ConstantCost, scenario, workload
from tests.simulator.engine.test_fast_forward import assert_identical

DISAGG = REPO / "workloads" / "scenarios" / "deepseek_disagg.yaml"
FAST = Link(bandwidth_bytes_per_s=1e30, latency_s=0.0, source="test: an infinitely fast link")


def _disagg(sc, prefill=1, decode=1, link=FAST, transfer="layerwise", draft_kv="transferred"):
    par = sc.parallelism
    return dataclasses.replace(sc, disaggregation=Disaggregation(
        Pool(prefill, par), Pool(decode, par), link, transfer, draft_kv))


def test_ttft_is_the_prefill_and_the_second_token_one_decode_step_after_the_transfer():
    """One request, no queueing, a constant 10 ms forward: its prompt (100 tokens, under the
    2048-token budget) is one prefill step, so its first token is at 10 ms; with an
    infinitely fast link its KV is on the decode side then, and each later token takes one
    decode step (policy none: one token a step)."""
    sc = _disagg(scenario("none"))
    res = simulate(sc, workload=workload([0.0], [100], [5]), target_cost=ConstantCost(0.01),
                   record_events=True)
    req = res.requests.iloc[0]
    assert req["prefill_done_s"] == pytest.approx(0.01, abs=1e-12)
    assert req["ttft_s"] == pytest.approx(0.01, abs=1e-12)
    tokens = res.events[(res.events.event == "token")].time_s.to_numpy()
    assert tokens[0] == pytest.approx(req["kv_ready_s"] + 0.01, abs=1e-12)
    assert tokens == pytest.approx(0.01 + 0.01 * np.arange(1, 5), abs=1e-12)
    assert req["finish_s"] == pytest.approx(0.05, abs=1e-12)


@pytest.mark.parametrize("transfer", ["after_prefill", "layerwise"])
def test_the_transfer_is_latency_plus_bytes_over_bandwidth(transfer):
    """OPT-13B (40 layers, hidden 5120, fp16 K and V: 2 x 5120 x 40 x 2 = 819,200 bytes a
    token, facebook/opt-13b config.json) plus the chain policy's draft OPT-125M (12 layers,
    hidden 768: 2 x 768 x 12 x 2 = 36,864 bytes a token): 1000 prompt tokens over a 10 GB/s
    link with 1 ms latency.  The prefill is one step: the target's 10 ms forward and the
    draft's 1 ms prefill (its KV built beside the target's, to be sent).  Layer-wise, the
    prefill overlaps the transfer: what is left is the larger of the last layer's share and
    the part the prefill did not cover."""
    link = Link(bandwidth_bytes_per_s=10e9, latency_s=1e-3, source="test")
    sc = _disagg(scenario("chain:num_speculative_tokens=4"), link=link, transfer=transfer)
    res = simulate(sc, workload=workload([0.0], [1000], [4]), target_cost=ConstantCost(0.01),
                   draft_cost=ConstantCost(0.001))
    req = res.requests.iloc[0]
    nbytes = 1000 * (819_200 + 36_864)
    assert req["kv_transfer_bytes"] == nbytes
    assert req["prefill_done_s"] == pytest.approx(0.011, rel=1e-12)
    whole = nbytes / 10e9  # 85.6 ms
    left = whole if transfer == "after_prefill" else max(whole / 40, whole - 0.011)
    assert req["kv_ready_s"] - req["prefill_done_s"] == pytest.approx(1e-3 + left, rel=1e-12)
    assert req["ttft_s"] == pytest.approx(0.011 + 1e-3 + left, rel=1e-12)


def test_a_rebuilt_draft_kv_is_not_sent_and_costs_a_draft_prefill_on_the_decode_side():
    """draft_kv: rebuilt: only the target's 819,200 bytes a token cross the link; the prefill
    step is the target's 10 ms alone, and the first decode step's draft time carries the
    draft's prefill of the 1000-token context (one 1 ms draft forward) on top of the
    drafting that the transferred case's first decode step has."""
    cost = dict(target_cost=ConstantCost(0.01), draft_cost=ConstantCost(0.001))
    wl = workload([0.0], [1000], [4])
    sc = scenario("chain:num_speculative_tokens=4")
    sent = simulate(_disagg(sc), workload=wl, **cost)
    rebuilt = simulate(_disagg(sc, draft_kv="rebuilt"), workload=wl, **cost)
    assert rebuilt.requests["kv_transfer_bytes"].iloc[0] == 1000 * 819_200
    assert rebuilt.requests["prefill_done_s"].iloc[0] == pytest.approx(0.01, rel=1e-12)
    first_decode = [r.steps[r.steps.num_decode > 0].draft_s.iloc[0] for r in (sent, rebuilt)]
    assert first_decode[1] - first_decode[0] == pytest.approx(0.001, rel=1e-9)


def test_deepseek_v3_sends_its_latent_kv_and_the_mtp_module_s():
    """DeepSeek-V3 (config.json: 61 layers, MLA kv_lora_rank 512 + qk_rope_head_dim 64,
    num_nextn_predict_layers 1), the KV cache 16-bit (kv_cache_dtype auto): (512 + 64) x 61
    x 2 = 70,272 bytes a token for the target, (512 + 64) x 1 x 2 = 1,152 for its MTP layer."""
    sc = load_scenario(DISAGG)
    res = simulate(sc, workload=workload([0.0], [1000], [8]))
    assert res.requests["kv_transfer_bytes"].iloc[0] == 1000 * (70_272 + 1_152)
    assert res.info["disaggregation"]["kv_bytes_per_token"] == 70_272 + 1_152


def test_1p1d_decodes_as_the_aggregated_deployment():
    """Invariant: requests far apart (none overlaps another), both pools the aggregated
    deployment's parallelism, an infinitely fast link: each request's prefill is the same
    lone prefill step(s) as aggregated, and its decode the same steps on the same random
    stream, so its TTFT and its decode time (finish - first token) are the aggregated
    run's, up to the rounding of sums started from another clock reading."""
    agg = load_scenario(REPO / "workloads" / "scenarios" / "mtp_moe.yaml")
    wl = workload([0.0, 30.0, 60.0], [700, 3000, 128], [64, 200, 17])
    a = simulate(agg, workload=wl).requests
    d = simulate(_disagg(agg), workload=wl).requests
    assert d["ttft_s"].to_numpy() == pytest.approx(a["ttft_s"].to_numpy(), rel=1e-9)
    decode_a = (a["finish_s"] - a["first_token_s"]).to_numpy()
    decode_d = (d["finish_s"] - d["kv_ready_s"]).to_numpy()
    assert decode_d == pytest.approx(decode_a, rel=1e-9)
    assert (d["num_accepted_tokens"] == a["num_accepted_tokens"]).all()


def _busy():
    rng = np.random.default_rng(5)
    n = 60
    return workload(np.sort(rng.uniform(0, 2.0, n)), rng.integers(50, 1500, n),
                    rng.integers(1, 120, n))


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding_tokens"])
def test_fast_forward_and_seed_give_identical_results(router):
    link = Link(bandwidth_bytes_per_s=5e9, latency_s=2e-5, source="test")
    sc = dataclasses.replace(_disagg(scenario("chain:num_speculative_tokens=3"), prefill=2,
                                     decode=3, link=link), router=router)
    on = simulate(dataclasses.replace(sc, engine=EngineOptions(fast_forward=True)),
                  workload=_busy())
    off = simulate(dataclasses.replace(sc, engine=EngineOptions(fast_forward=False)),
                   workload=_busy())
    assert_identical(on, off)
    assert_identical(on, simulate(sc, workload=_busy()))
    req = on.requests
    assert (req.status == "finished").all()
    # a request with one output token finishes on its prefill instance, sending nothing;
    # the others on the decode pool (replicas 2, 3, 4)
    one = req.output_tokens == 1
    assert one.any() and set(req.replica[~one]) == {2, 3, 4}
    assert set(req.replica[one]) <= {0, 1}
    assert (req.kv_transfer_bytes[one] == 0).all() and (req.kv_transfer_bytes[~one] > 0).all()
    assert on.info["replicas"] == 5
    pd.testing.assert_series_equal(req.emitted_tokens, req.output_tokens, check_names=False)


def test_decode_admission_waits_for_a_slot_and_the_client_gets_the_first_token_then():
    """max_num_seqs 2, a constant 10 ms forward, three 100-token prompts at t = 0 with three
    output tokens each.  Prefill: A and B in the first step (ends 10 ms), C in the second
    (20 ms).  Decode: A and B are admitted at 10 ms and decode at 20 and 30 ms; C's KV is
    there at 20 ms but both slots are taken until A and B retire at 30 ms, so the decode
    instance streams C's first token at 30 ms (SGLang's decode side sends the prefill's
    token when the request joins its batch) and C finishes two steps later."""
    sc = _disagg(scenario("none", batching={"max_num_seqs": 2}))
    res = simulate(sc, workload=workload([0.0] * 3, [100] * 3, [3] * 3),
                   target_cost=ConstantCost(0.01))
    req = res.requests
    assert req["prefill_done_s"].to_numpy() == pytest.approx([0.01, 0.01, 0.02], abs=1e-12)
    assert req["kv_ready_s"].to_numpy() == pytest.approx([0.01, 0.01, 0.02], abs=1e-12)
    assert req["ttft_s"].to_numpy() == pytest.approx([0.01, 0.01, 0.03], abs=1e-12)
    assert req["finish_s"].to_numpy() == pytest.approx([0.03, 0.03, 0.05], abs=1e-12)


def _closed(cap, arrivals):
    rng = np.random.default_rng(11)
    n = arrivals.size
    wl = dataclasses.replace(workload(arrivals, rng.integers(50, 900, n),
                                      rng.integers(1, 80, n)), max_concurrency=cap)
    link = Link(bandwidth_bytes_per_s=5e9, latency_s=2e-5, source="test")
    sc = _disagg(scenario("chain:num_speculative_tokens=2"), prefill=2, decode=2, link=link)
    return simulate(sc, workload=wl).requests


@pytest.mark.parametrize("cap", [1, 3, 7])
def test_a_closed_loop_client_holds_the_cap_and_sends_as_slots_free(cap):
    """Every request due at 0 through a 2P2D deployment: the client keeps ``cap`` in flight
    (a one-token request's slot frees on its prefill instance, the others' on the decode
    side), and each request sent late was sent at another's finish."""
    from tests.simulator.engine.test_closed_loop import _in_flight
    req = _closed(cap, np.zeros(40))
    assert (req.status == "finished").all()
    assert _in_flight(req) == cap
    late = req["arrival_s"].to_numpy() > 0
    assert late.sum() == 40 - cap
    assert np.isin(req["arrival_s"].to_numpy()[late], req["finish_s"].to_numpy()).all()


def test_a_closed_loop_cap_above_the_load_is_the_open_loop_run():
    arrivals = np.arange(30) * 2.0  # paced: never 50 in flight
    closed, open_ = _closed(50, arrivals), _closed(None, arrivals)
    pd.testing.assert_frame_equal(closed, open_)
