"""DeepEP's dispatch and combine as the DP-attention cost model prices them, against the
DeepEP README's kernel tables (deepseek-ai/DeepEP, V1 "Performance", now docs/legacy.md;
H800 with one ConnectX-7 400 Gb/s InfiniBand NIC per GPU, DeepSeek-V3's hidden 7168 and
top-8, FP8 dispatch, BF16 combine).

hardware/profiles/h100-sxm.yaml's ``all_to_all`` and ``ep_normal`` blocks are read from these
same tables, so the first two tests check the transcription and that the bytes the cost
model sends are the ones the README's bandwidths count (its tests/test_low_latency.py and
tests/test_internode.py), not an out-of-sample prediction; the SGLang deployment's
published throughputs (tests/published/moe_cases.py) are that.
"""
import itertools
import math

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.dp_attention import cost_model, dispatch_bytes, reached
from simulator.cost.parallelism import Parallelism
from simulator.models.spec import load_model

H, K, E = 7168, 8, 256
# "Low-latency kernels with pure RDMA", 128 tokens per rank: EP -> (dispatch, combine) us
LOW_LATENCY_US = {8: (77, 114), 16: (118, 195), 32: (155, 273), 64: (173, 314),
                  128: (192, 369), 256: (194, 360)}
# "Normal kernels with NVLink and RDMA forwarding", 4096 tokens per rank: EP -> RDMA
# bottleneck bandwidth (dispatch, combine) GB/s
NORMAL_GBPS = {16: (43, 43), 32: (58, 57), 64: (51, 50)}


def _coll():
    return load_profile("h100-sxm").collectives


@pytest.mark.parametrize("ep", sorted(LOW_LATENCY_US))
def test_low_latency_dispatch_and_combine_match_the_readme(ep):
    # the README counts 7168 + 56 x 4 + 16 bytes a dispatched copy (FP8, scales, 16 bytes of
    # metadata) and 7168 x 2 a combined one; the cost model's dispatch_bytes leaves out the
    # 16 (0.2%): 1% covers it and the README's rounding to whole microseconds
    d, c = dispatch_bytes("all_to_all", 128, ep, H, K, 2.0)
    assert d == 128 * K * (H + H // 128 * 4) and c == 128 * K * H * 2
    want_d, want_c = LOW_LATENCY_US[ep]
    assert _coll().all_to_all_s(d, ep) * 1e6 == pytest.approx(want_d, rel=0.01)
    assert _coll().all_to_all_s(c, ep) * 1e6 == pytest.approx(want_c, rel=0.01)


@pytest.mark.parametrize("ep", sorted(NORMAL_GBPS))
def test_normal_kernels_reach_the_readme_bottleneck_bandwidth(ep):
    # test_internode.py: RDMA bytes = (token, node) pairs, the own node included, x 7168 x 2
    # for BF16, x (1 + 4/128) / 2 for FP8; the README's 3% gap between dispatch and combine
    # is within the one curve's mean (hardware/profiles/h100-sxm.yaml)
    d, c = dispatch_bytes("deepep_normal", 4096, ep, H, K, 2.0, 8, E)
    pairs = 4096 * reached(K, ep // 8, E)
    assert d == pytest.approx(pairs * H * 2 * (1 + 4 / 128) / 2, rel=1e-12)
    assert c == pytest.approx(pairs * H * 2, rel=1e-12)
    for nbytes, gbps in zip((d, c), NORMAL_GBPS[ep]):
        assert nbytes / _coll().ep_normal_s(nbytes, ep) / 1e9 == pytest.approx(gbps, rel=0.02)


def test_normal_kernels_inside_one_node_use_nvlink():
    # the README's intra-node figure is the H800's 160 GB/s NVLink, not an H100's: within
    # one node the profile's send/recv (NVLink) prices the same bytes
    c = _coll()
    assert c.ep_normal_s(64e6, 8) == c.send_recv_s(64e6)
    assert c.ep_normal_s(64e6, 16) > 4 * c.ep_normal_s(64e6, 8)   # RDMA at ~43 GB/s
    assert "send/recv" in c.basis("ep_normal", 8) and "own curve" in c.basis("ep_normal", 32)


def test_reached_is_the_exact_expectation():
    # exact enumeration: every k-subset of E experts spread evenly over n places, equally
    # likely, counting the distinct places each subset touches
    for experts, places, k in ((8, 4, 2), (8, 2, 3), (12, 3, 4), (16, 4, 5)):
        per = experts // places
        touched = [len({e // per for e in subset})
                   for subset in itertools.combinations(range(experts), k)]
        assert reached(k, places, experts) == pytest.approx(np.mean(touched), rel=1e-12)
    assert reached(K, 1, E) == 1.0
    # DeepSeek-V3 on 4 nodes: 4 (1 - C(192, 8) / C(256, 8))
    assert reached(K, 4, E) == pytest.approx(4 * (1 - math.comb(192, 8) / math.comb(256, 8)))


@pytest.mark.parametrize("mode,price", [("all_to_all", "all_to_all_s"),
                                        ("deepep_normal", "ep_normal_s")])
def test_the_cost_model_charges_each_moe_layer_that_collective(mode, price):
    # DeepSeek-V3 over 16 H100s (2 nodes), one 512-token request a rank: 58 MoE layers, each
    # one dispatch and one combine of the busiest rank's 512 tokens
    model = load_model("deepseek-v3")
    par = Parallelism(tensor_parallel=1, data_parallel_attention=16, expert_parallel=16,
                      moe_dispatch=mode)
    cm = cost_model(load_profile("h100-sxm"), model, par)
    ops = {op.name: op for op in cm.breakdown(np.full(16, 512.0), np.zeros(16)).ops}
    d, c = dispatch_bytes(mode, 512, 16, H, K, 2.0, 8, E)
    fn = getattr(_coll(), price)
    assert ops["moe_dispatch"].time_s == pytest.approx(58 * fn(d, 16), rel=1e-9)
    assert ops["moe_combine"].time_s == pytest.approx(58 * fn(c, 16), rel=1e-9)


def test_a_bad_ep_normal_block_names_its_field():
    from hardware.collectives_yaml import collectives_to_dict, parse_collectives
    from simulator.inputs.errors import SpecsimError
    block = collectives_to_dict(_coll())
    assert parse_collectives(block, source="p.yaml").gpus_per_node == 8   # round trip
    for key, value, field in (("gpus_per_node", None, "collectives.ep_normal.gpus_per_node"),
                              ("gpus_per_node", 0, "collectives.ep_normal.gpus_per_node"),
                              ("worlds", [], "collectives.ep_normal.worlds")):
        bad = collectives_to_dict(_coll())
        if value is None:
            del bad["ep_normal"][key]
        else:
            bad["ep_normal"][key] = value
        with pytest.raises(SpecsimError) as err:
            parse_collectives(bad, source="p.yaml")
        assert field in str(err.value)
