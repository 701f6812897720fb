"""The roofline cost model against DESIGN.md's reference arithmetic and lecture 000 sec. 1-2."""
import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel, draft_cost_ratio
from simulator.cost.execution import Execution
from simulator.cost.parallelism import Parallelism
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model


@pytest.fixture(scope="module")
def a100():
    return load_profile("a100-40gb")


@pytest.fixture(scope="module")
def opt13b():
    return load_model("opt-13b")


def test_reference_arithmetic_plain_roofline(a100, opt13b):
    # DESIGN.md sec. 4: at 312 TFLOP/s and 1555 GB/s, fp16, no overheads, OPT-13B reads
    # 25.68 GB of weights per step, 819,200 KV bytes per context token, and its batch-1
    # decode at context 512 takes 16.79 ms.
    plain = a100.plain_roofline()
    assert plain.peak_flops("fp16") == 312e12
    assert plain.memory_bandwidth_bytes_per_s == 1555e9
    cm = CostModel(plain, opt13b)
    assert cm.weight_bytes_read_per_step == pytest.approx(25.68e9, rel=0.01)
    assert opt13b.kv_bytes_per_token() == 819_200
    assert cm.decode_time(1, 512) == pytest.approx(16.79e-3, rel=0.01)
    # and independently of the model's own bookkeeping: weights + KV over the bandwidth
    by_hand = (25.68e9 + 512 * 819_200) / 1555e9
    assert cm.decode_time(1, 512) == pytest.approx(by_hand, rel=0.01)


def test_breakdown_sums_to_step_time_and_names_the_roof(a100, opt13b):
    cm = CostModel(a100, opt13b)
    rng = np.random.default_rng(0)
    for _ in range(20):
        new = rng.integers(1, 40, 17)
        ctx = rng.integers(0, 3000, 17)
        cost = cm.breakdown(new, ctx)
        total = sum(op.time_s for op in cost.ops) + cost.step_overhead_s + cost.pipeline_s \
            + cost.launch_s
        assert cost.time_s == pytest.approx(total)
        assert cm.step_time(new, ctx) == pytest.approx(cost.time_s, rel=1e-12)
    decode = {op.name: op for op in cm.breakdown(np.ones(1), [512]).ops}
    assert decode["mlp_up"].bound == "memory" and decode["attention"].bound == "memory"
    prefill = {op.name: op for op in cm.breakdown([2048], [0]).ops}
    assert prefill["mlp_up"].bound == "compute"


def test_verification_nearly_free_at_batch_one(a100, opt13b):
    # lecture 000 sec. 1.2 and the foundation issue: with overheads on, verifying 32 tokens
    # at batch 1 costs within 5% of a 1-token decode.
    cm = CostModel(a100, opt13b)
    assert cm.verify_time(1, 512, 32) <= 1.05 * cm.decode_time(1, 512)


def test_compute_roof_shows_at_batch_32(a100, opt13b):
    # lecture 000 sec. 1.2: at batch 32, context 512, 8 tokens per request hits the compute
    # roof (the notes' roofline gives 26.9 -> 37.6 ms); clearly dearer than 1 token.
    cm = CostModel(a100, opt13b)
    assert cm.verify_time(32, 512, 8) > 1.2 * cm.verify_time(32, 512, 1)


def _memory_bound_batch(cm, context, tokens=8, tolerance=1.1):
    """Largest power-of-two batch at which verifying ``tokens`` costs < tolerance x decode."""
    best = 0
    for b in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        if cm.verify_time(b, context, tokens) < tolerance * cm.verify_time(b, context, 1):
            best = b
    return best


def test_long_context_stays_memory_bound_to_larger_batch(a100, opt13b):
    # lecture 000 sec. 2.5: each request reads its whole KV every step; verification reads it
    # once for all its tokens, so at long context the step stays memory-bound longer.
    cm = CostModel(a100, opt13b)
    short, long8k, long16k = (_memory_bound_batch(cm, c) for c in (512, 8192, 16384))
    assert long8k > short
    assert long16k >= long8k


def test_draft_ratio_c_far_above_parameter_ratio(a100, opt13b):
    # lecture 000 sec. 2.5: OPT-125M has ~1% of OPT-13B's parameters, but a fixed overhead
    # of about 1.5 ms per step makes c about 0.09 on an A100, an order of magnitude above
    # the parameter ratio; once CUDA graphs cut the fixed overhead to 0.2 ms, c is 0.02.
    draft = load_model("opt-125m")
    param_ratio = draft.param_count() / opt13b.param_count()
    a100 = dataclasses.replace(a100, kernels=None)  # the lecture's flat roofline
    lecture = Execution(cuda_graphs=False, kernel_launch_s=0.0, cpu_step_s=1.5e-3)
    c = draft_cost_ratio(CostModel(a100, opt13b, execution=lecture),
                         CostModel(a100, draft, execution=lecture), 1, 512)
    assert c > 5 * param_ratio
    assert c == pytest.approx(0.09, abs=0.01)
    graphs = Execution(cuda_graphs=True, graph_launch_s=0.0, cpu_step_s=0.2e-3)
    c_graphs = draft_cost_ratio(CostModel(a100, opt13b, execution=graphs),
                                CostModel(a100, draft, execution=graphs), 1, 512)
    assert c_graphs == pytest.approx(0.02, abs=0.005)
    # without overheads the ratio falls back to the bytes (here: parameter) ratio
    c_plain = draft_cost_ratio(CostModel(a100, opt13b, overheads=False),
                               CostModel(a100, draft, overheads=False), 1, 512)
    assert c_plain == pytest.approx(param_ratio, rel=0.15)


def test_tensor_parallel_divides_and_adds_all_reduce(a100, opt13b):
    one = CostModel(a100, opt13b)
    four = CostModel(a100, opt13b, Parallelism(tensor_parallel=4))
    ops = {op.name: op for op in four.breakdown(np.ones(8), np.full(8, 512)).ops}
    assert "all_reduce" in ops and ops["all_reduce"].time_s > 0
    assert "all_reduce" not in {op.name for op in one.breakdown([1], [512]).ops}
    # per-device weight traffic is a quarter; the step is faster but not 4x (all-reduces,
    # overheads)
    assert ops["mlp_up"].hbm_bytes == pytest.approx(
        {o.name: o for o in one.breakdown(np.ones(8), np.full(8, 512)).ops}["mlp_up"].hbm_bytes / 4,
        rel=0.01)
    t1, t4 = one.decode_time(8, 512), four.decode_time(8, 512)
    assert t1 / 4 < t4 < t1
    with pytest.raises(SpecsimError, match="tensor_parallel"):
        CostModel(a100, opt13b, Parallelism(tensor_parallel=3))


def test_pipeline_parallel_microbatches(a100, opt13b):
    pp = CostModel(a100, opt13b, Parallelism(pipeline_parallel=2, micro_batches=4))
    base = CostModel(a100, opt13b)
    new, ctx = np.ones(64), np.full(64, 512.0)
    assert pp.step_time(new, ctx) == pytest.approx(pp.breakdown(new, ctx).time_s)
    # with micro-batches the step takes longer than the unsplit single-device sum divided
    # over stages, and the makespan formula adds (pp - 1) stage fills
    assert pp.step_time(new, ctx) > base.step_time(new, ctx) / 2
    with pytest.raises(SpecsimError, match="pipeline_parallel"):
        CostModel(a100, opt13b, Parallelism(pipeline_parallel=41))


def test_offloading_streams_weights_over_the_host_link(a100, opt13b):
    # SpecInfer's offloading case: weights cross PCIe every step, so the step is host-bound
    # and verifying many tokens is nearly free relative to it.
    off = CostModel(a100, opt13b, Parallelism(offload_fraction=1.0))
    t = off.decode_time(1, 512)
    assert t == pytest.approx(25.68e9 / a100.host_link.bandwidth_bytes_per_s, rel=0.1)
    assert {op.name: op for op in off.breakdown([1], [512]).ops}["mlp_up"].bound == "host"
    assert off.verify_time(1, 512, 64) < 1.02 * t


def test_chain_decode_time_matches_sequential_steps(a100):
    cm = CostModel(a100, load_model("opt-125m"))
    ctx = np.random.default_rng(1).integers(0, 2000, 50).astype(float)
    seq = sum(cm.step_time(np.ones(50), ctx + j) for j in range(5))
    assert cm.chain_decode_time(ctx, 5) == pytest.approx(seq, rel=1e-12)


def test_calibration_curve_changes_prediction(a100, opt13b):
    import dataclasses
    curve = dataclasses.replace(a100, compute_efficiency_curve=((1e6, 0.1), (1e12, 0.9)),
                                memory_efficiency_curve=((1e3, 0.2), (1e9, 0.95)))
    a = CostModel(a100, opt13b).step_time([2048], [0])
    b = CostModel(curve, opt13b).step_time([2048], [0])
    assert a != b


def test_bad_step_input(a100, opt13b):
    cm = CostModel(a100, opt13b)
    with pytest.raises(SpecsimError, match="new_tokens"):
        cm.breakdown([-1], [0])
    with pytest.raises(SpecsimError, match="context"):
        cm.breakdown([1, 2], [0, 1, 2])
    with pytest.raises(SpecsimError, match="offload_fraction"):
        Parallelism(offload_fraction=1.5)
    with pytest.raises(SpecsimError, match="tensor_parallel"):
        Parallelism(tensor_parallel=0)
