"""DeepEP's normal kernels beside compute (simulator/cost/tbo_measured.py): the factors from
the numbers the module cites, worked by hand; the overlapped schedule with them; and, where
``SPECSIM_PROFILE_DATA`` names a copy of github.com/deepseek-ai/profile-data (a checkout, or
its git directory), the kernel durations re-read from its ``train.json``."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from simulator.cost import tbo, tbo_measured

PROFILE_DATA = os.environ.get("SPECSIM_PROFILE_DATA", "")


def _half(**kw) -> tbo.Half:
    return tbo.Half(**{**dict.fromkeys(tbo.Half.__dataclass_fields__, 0.0), **kw})


def test_factors_are_the_traces_means_over_the_unit_tests_times():
    # DeepEP docs/legacy.md: EP64 51 GB/s dispatch, 50 GB/s combine, 4096 tokens, hidden 7168,
    # top-4 groups (4 nodes a token); FP8 7168 + 7168 / 128 * 4 scale bytes = 7392 a copy
    dispatch_s = 4096 * 4 * 7392 / 51e9                 # 121,110,528 B: 2.3747 ms
    combine_s = 4096 * 4 * 7168 * 2 / 50e9              # 234,881,024 B: 4.6976 ms
    assert tbo_measured.unit_seconds() == pytest.approx((dispatch_s, combine_s), rel=1e-12)
    dispatch, combine = tbo_measured.NORMAL_OVERLAP
    assert dispatch == pytest.approx(4345.75e-6 / dispatch_s, rel=1e-12)   # 1.830
    assert combine == pytest.approx(5993.75e-6 / combine_s, rel=1e-12)     # 1.276


def test_overlapped_step_slows_each_collective_by_its_factor():
    # test_tbo's prefill schedule (attention 2, experts 3, dispatch 1, combine 4: 15) with the
    # dispatch twice as long and the combine half: A attn 0-2, dA 2-4 | B attn 2-4, dB 4-6 |
    # A experts 4-7, cA 7-9 | B experts 7-10, cB 10-12 | A waits cA (9) | B waits cB: 12
    h = _half(core=2.0, experts=3.0, dispatch=1.0, combine=4.0)
    assert tbo.overlapped_step(h, h, 1, False) == 15.0
    assert tbo.overlapped_step(h, h, 1, False, comm_factor=(2.0, 0.5)) == 12.0


def test_one_empty_micro_batch_runs_its_collectives_at_their_standalone_time():
    # nothing beside A's collectives: A attn 0-2, dA 2-3, experts 3-6, cA 6-10, whatever the
    # factor (a single request SGLang keeps whole leaves B empty)
    h = _half(core=2.0, experts=3.0, dispatch=1.0, combine=4.0)
    empty = _half()
    assert tbo.overlapped_step(h, empty, 1, False, comm_factor=(2.0, 2.0)) == 10.0
    assert tbo.overlapped_step(empty, h, 1, False, comm_factor=(2.0, 2.0)) == 10.0


def _train_trace() -> dict:
    root = Path(PROFILE_DATA)
    if (root / "train.json").is_file():
        return json.loads((root / "train.json").read_text())
    done = subprocess.run(["git", "--git-dir", str(root), "show", "HEAD:train.json"],
                          capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"no train.json in {root}")
    return json.loads(done.stdout)


def _forward_kernels(trace: dict, annotation: str, kernel: str) -> list[dict]:
    """The kernels named ``kernel`` whose launch falls in a CPU ``annotation`` range."""
    events = trace["traceEvents"]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "user_annotation" and e["name"] == annotation]
    launches = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    return sorted((e for e in events if e.get("cat") == "kernel" and kernel in e["name"]
                   and any(a <= launches.get(e["args"]["correlation"], -1) <= b
                           for a, b in spans)), key=lambda e: e["ts"])


@pytest.mark.skipif(not PROFILE_DATA or not Path(PROFILE_DATA).exists(),
                    reason="SPECSIM_PROFILE_DATA does not name a copy of deepseek-ai/"
                           "profile-data")
def test_the_trace_gives_the_kernel_durations_priced():
    trace = _train_trace()
    sms = {d["numSms"] for d in trace["deviceProperties"]}
    assert sms == {132}                                  # H800
    for annotation, kernel, durations in (
            ("dispatch(F)", "ep::internode::dispatch<", tbo_measured.TRACE_DISPATCH_US),
            ("combine(F)", "ep::internode::combine<", tbo_measured.TRACE_COMBINE_US)):
        found = _forward_kernels(trace, annotation, kernel)
        assert tuple(float(e["dur"]) for e in found) == durations
        # each holds 20 SMs (one block an SM), the grouped GEMMs beside it the other 112
        assert {e["args"]["grid"][0] for e in found} == {20}
    gemms = {e["args"]["grid"][0] * e["args"]["grid"][1] for e in trace["traceEvents"]
             if e.get("cat") == "kernel" and "grouped_gemm::cuda::fp8" in e["name"]}
    assert gemms == {112}


def test_the_factors_apply_to_the_internode_normal_kernels_only():
    """Measured on DeepEP's internode kernels (RDMA): an EP group wider than a node with the
    profile's ep_normal block; within a node, without the block or for the low-latency
    kernels, the collectives keep their standalone price."""
    from hardware.profile import load_profile
    coll = load_profile("h100-sxm").collectives
    assert coll.ep_normal and coll.gpus_per_node == 8
    factors = tbo_measured.overlap_factors
    assert factors(True, coll, 32) == tbo_measured.NORMAL_OVERLAP
    assert factors(True, coll, 8) == (1.0, 1.0)    # intranode: NVLink kernels, not measured
    assert factors(False, coll, 32) == (1.0, 1.0)  # low-latency kernels
    bare = dataclasses.replace(coll, ep_normal=())
    assert factors(True, bare, 32) == (1.0, 1.0)   # priced as the all-to-all
