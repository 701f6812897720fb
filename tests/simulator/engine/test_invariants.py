"""Invariants on randomised scenarios: completion, exact lengths, KV budget, time, determinism."""
import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hardware.profile import load_profile
from simulator.cost.memory_plan import activation_bytes
from simulator.cost.parallelism import Parallelism
from simulator.models.spec import load_model
from simulator.simulate import simulate
from tests.helpers import scenario, workload


def _utilisation_for_blocks(blocks: int, block_size: int, batched: int,
                            with_draft: bool, logits: int) -> float:
    """gpu_memory_utilization leaving about ``blocks`` KV blocks for opt-1.3b (+ opt-125m)."""
    hw, t, d = load_profile("a10"), load_model("opt-1.3b"), load_model("opt-125m")
    drafts = [d] if with_draft else []
    weights = t.weight_bytes() + sum(m.weight_bytes() for m in drafts)
    act = activation_bytes(t, Parallelism(), batched, logits_tokens=logits)
    per_block = (t.kv_bytes_per_token() + sum(m.kv_bytes_per_token() for m in drafts)) \
        * block_size
    return (weights + act + (blocks + 0.5) * per_block) / hw.memory_bytes


@st.composite
def cases(draw):
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.floats(0, 0.2), min_size=n, max_size=n))
    prompt = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    policy = draw(st.sampled_from(["none", "chain:num_speculative_tokens=1",
                                   "chain:num_speculative_tokens=4"]))
    alpha = draw(st.floats(0, 1))
    block_size = draw(st.sampled_from([1, 8, 16]))
    blocks = draw(st.integers(30, 200))
    seqs = draw(st.integers(1, 16))
    batched = draw(st.integers(16, 512))
    chunked = draw(st.booleans())
    replicas = draw(st.integers(1, 2))
    router = draw(st.sampled_from(["round_robin", "least_outstanding_tokens"]))
    seed = draw(st.integers(0, 2**31))
    return (np.cumsum(gaps), prompt, output, policy, alpha, block_size, blocks, seqs, batched,
            chunked, replicas, router, seed)


@settings(max_examples=40, deadline=None, derandomize=True,  # same examples every run
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_invariants(case):
    (arr, prompt, output, policy, alpha, bs, blocks, seqs, batched, chunked, replicas,
     router, seed) = case
    gamma = int(policy.rsplit("=", 1)[1]) if "=" in policy else 0
    util = _utilisation_for_blocks(blocks, bs, batched, policy != "none", seqs * (1 + gamma))
    sc = scenario(policy, alpha=alpha, hardware="a10", target="opt-1.3b", draft="opt-125m",
                  replicas=replicas, router=router, seed=seed,
                  batching={"block_size": bs, "max_num_seqs": seqs,
                            "max_num_batched_tokens": batched,
                            "enable_chunked_prefill": chunked,
                            "gpu_memory_utilization": util})
    wl = workload(arr, prompt, output)
    try:
        res = simulate(sc, workload=wl)
    except ValueError as exc:  # a configuration that can serve nothing must say why
        assert "max_num_batched_tokens" in str(exc) or "no request can be served" in str(exc)
        return
    req = res.requests
    # every request finishes or is rejected with a reason
    assert set(req["status"]) <= {"finished", "rejected"}
    rejected = req[req["status"] == "rejected"]
    assert (rejected["reject_reason"].str.len() > 0).all()
    done = req[req["status"] == "finished"]
    # each finished request emits exactly its output length
    assert (done["emitted_tokens"] == done["output_tokens"]).all()
    # causality
    assert (done["first_scheduled_s"] >= done["arrival_s"]).all()
    assert (done["first_token_s"] > done["first_scheduled_s"]).all()
    assert (done["finish_s"] >= done["first_token_s"]).all()
    # KV use never exceeds the budget
    assert (res.steps["kv_blocks_used"] <= res.info["kv_blocks"]).all()
    # time never goes backwards, per replica steps do not overlap
    for _, s in res.steps.groupby("replica"):
        start = s["start_s"].to_numpy()
        end = start + s["duration_s"].to_numpy()
        assert (np.diff(start) >= 0).all()
        assert (start[1:] >= end[:-1] - 1e-12).all()
    # accepted drafts never exceed drafted ones
    assert (req["num_accepted_tokens"] <= req["num_draft_tokens"]).all()
    # same seed, same DataFrames
    again = simulate(sc, workload=wl)
    pd.testing.assert_frame_equal(res.requests, again.requests)
    pd.testing.assert_frame_equal(res.steps, again.steps)


def test_preemption_recomputes_and_still_finishes():
    # a KV cache of ~12 blocks of 16 tokens for 6 requests of 100 + 60 tokens forces
    # preemption; every request must still finish with its exact length.
    util = _utilisation_for_blocks(12, 16, 256, with_draft=False, logits=64)
    sc = scenario("none", hardware="a10", target="opt-1.3b", draft="opt-125m",
                  batching={"max_num_batched_tokens": 256, "gpu_memory_utilization": util})
    wl = workload(np.zeros(6), [100] * 6, [60] * 6)
    res = simulate(sc, workload=wl)
    assert res.info["kv_blocks"] == 12
    assert res.summary()["preemptions"] > 0
    assert (res.requests["status"] == "finished").all()
    assert (res.requests["emitted_tokens"] == 60).all()
    assert (res.steps["kv_blocks_used"] <= res.info["kv_blocks"]).all()
