"""The stream model of an eager forward (simulator/cost/stream.py): its closed forms against
the recurrence, enumerated; the eager CostModel priced by it (simulator/cost/eager_stream.py).
"""
import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost import eager_stream, stream
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import Execution
from simulator.cost.spec_catalog import load_engine
from simulator.models.spec import load_model
from simulator.scenario import load_scenario
from tests.helpers import REPO
from tests.simulator.engine.test_fast_forward import identical_or_unservable

L = 4e-6


def test_long_kernels_cost_their_sum_after_the_first_launch():
    # every kernel at least a launch long: the GPU never waits after the first issue
    g = [5e-6, 30e-6, 4e-6, 100e-6]
    assert stream.stream_end(g, L) == pytest.approx(L + sum(g), abs=1e-18)


def test_tiny_kernels_are_paced_by_the_host():
    # every kernel shorter than a launch: each ends before the next is issued
    g = [1e-6, 0.5e-6, 3e-6, 2e-6, 0.0, 2.5e-6]
    assert stream.stream_end(g, L) == pytest.approx(len(g) * L + g[-1], abs=1e-18)


def test_a_long_kernel_hides_the_launches_after_it():
    # a 100 us linear then 10 small kernels: their launches are issued while it runs
    g = [100e-6] + [1e-6] * 10
    assert stream.stream_end(g, L) == pytest.approx(L + 100e-6 + 10 * 1e-6, abs=1e-18)
    # the per-operator model priced each operator max(GPU time, launches): 100 + 40 us
    assert stream.stream_end(g, L) < 100e-6 + 10 * L


def _suffix_max(g, launch):
    """``max_j (j L + g_j + ... + g_n)`` (1-based j), summed the slow way."""
    return max(j * launch + sum(g[j - 1:]) for j in range(1, len(g) + 1))


def test_closed_forms_match_the_recurrence_on_random_streams():
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 10))
        g = list(rng.exponential(L, n) * rng.choice([0.1, 1.0, 10.0], n))
        end = stream.stream_end(g, L)
        assert _suffix_max(g, L) == pytest.approx(end, rel=1e-12)
        one_by_one = stream.chain([stream.kernels(1.0, x, L) for x in g], L)
        assert one_by_one.end == pytest.approx(end, rel=1e-12)
        assert (one_by_one.n, one_by_one.gpu) == (n, pytest.approx(sum(g)))
        # k repeats of a run: the closed form against the run written out k times
        k = int(rng.integers(1, 6))
        rep = stream.repeat(one_by_one, k, L)
        assert rep.end == pytest.approx(stream.stream_end(g * k, L), rel=1e-12)
        # n alike kernels as one operator
        same = stream.kernels(float(n), g[0] * n, L)
        assert same.end == pytest.approx(stream.stream_end([g[0]] * n, L), rel=1e-12)
        # never dearer than the per-operator sum of max(GPU, launches) plus a launch
        assert end <= L + sum(max(x, L) for x in g) + 1e-18


def test_a_forward_is_its_kernels_in_order():
    rng = np.random.default_rng(3)
    for _ in range(100):
        emb, pre, post, head = (list(rng.exponential(L, int(rng.integers(1, 5))))
                                for _ in range(4))
        attention, layers = float(rng.exponential(2 * L)), int(rng.integers(1, 5))
        seg = [stream.chain([stream.kernels(1.0, x, L) for x in part], L)
               for part in (emb, pre, post, head)]
        got = stream.forward_end(seg[0], seg[1], attention, seg[2], layers, seg[3], L)
        kernels = emb + (pre + [attention] + post) * layers + head
        assert got == pytest.approx(stream.stream_end(kernels, L), rel=1e-12)
        # the parts' closed form in the attention, on floats and on arrays
        parts = stream.StreamParts.of(seg[0], seg[1], seg[2], seg[3], layers, L, 0.0)
        assert parts.device_s(attention) == pytest.approx(got, rel=1e-12)
        assert parts.device_s(np.array([attention]), np.maximum)[0] == \
            parts.device_s(attention)


def test_gpu_time_without_a_launch_lengthens_the_kernel_before():
    a = stream.chain([stream.kernels(1.0, 1e-6, L), stream.kernels(0.0, 7e-6, L)], L)
    assert a.end == pytest.approx(stream.stream_end([8e-6], L))


H100 = load_profile("h100-sxm")
LLAMA7B = load_model("llama-2-7b")


def _eager(**kw) -> CostModel:
    ex = Execution(cuda_graphs=False, kernel_launch_s=H100.kernel_overhead_s, cpu_step_s=0.0,
                   **kw)
    return CostModel(H100, LLAMA7B, execution=ex)


@pytest.mark.parametrize("n, u", [(1, 1), (1, 60), (4, 1), (2, 300)])
def test_eager_breakdown_is_step_time(n, u):
    cm = _eager()
    new, ctx = np.full(n, float(u)), np.full(n, 700.0)
    cost = cm.breakdown(new, ctx)
    assert cost.time_s == pytest.approx(cm.step_time(new, ctx), rel=1e-12)
    ops = {op.name: op for op in cost.ops}
    assert all(op.overhead_s == 0.0 for name, op in ops.items() if name != "eager_launches")
    # the stream is no cheaper than its GPU work plus the first launch, and no dearer than
    # every launch on top of the GPU work
    launches = LLAMA7B.num_layers * 11 + 4
    assert cost.gpu_s + cm._launch_s <= cost.time_s
    assert cost.time_s <= cost.gpu_s + launches * cm._launch_s


def test_the_engines_extra_launches_are_priced_in_the_stream():
    # eagle-official's counts (engines.yaml): SafeAILab/EAGLE's Llama layer launches 48
    # kernels and 2 CPU-tensor ops where the generic layer has 11 (9 besides its 2 norms);
    # its EAGLE layer (cnets.py) 40, without the input norm, and no CPU op
    counted = _eager(spec=load_engine("eagle-official"))
    norm, before, after, host, first = eager_stream.engine_launches(counted)
    assert (2 * norm + 9 + before + after, host, first) == (48, 2, True)
    draft = CostModel(H100, load_model("eagle-llama-2-7b-chat"), execution=counted.execution)
    norm, before, after, host, first = eager_stream.engine_launches(draft)
    assert (norm + 9 + before + after, host, first) == (40, 0, False)
    plain = _eager()
    new, ctx = np.ones(1), np.array([600.0])
    extra = counted.step_time(new, ctx) - plain.step_time(new, ctx)
    n = (48 - 11 + 2) * LLAMA7B.num_layers
    # batch 1 on an H100 is launch-bound: each extra launch shows, at most in full with its
    # own GPU time
    assert 0.5 * n * counted._launch_s < extra
    assert extra <= n * counted._launch_s + counted.breakdown(new, ctx).gpu_s
    assert counted.breakdown(new, ctx).time_s == pytest.approx(counted.step_time(new, ctx),
                                                               rel=1e-12)


def test_graph_replay_is_not_a_stream():
    ex = Execution(kernel_launch_s=H100.kernel_overhead_s, graph_launch_s=15e-6)
    cm = CostModel(H100, LLAMA7B, execution=ex)
    assert cm._stream is None and cm._closed
    eager = CostModel(H100, LLAMA7B, execution=dataclasses.replace(ex, cuda_graphs=False))
    assert eager._stream is not None and not eager._closed


@pytest.mark.parametrize("name, extra", [
    ("eagle", []),
    ("eagle2", ["execution.engine=eagle-official", "execution.captured_draft_loop=false"])])
def test_eager_runs_are_identical_with_fast_forward_on_and_off(name, extra):
    # every step of an eager run priced by the stream: its closed forms and its step-by-step
    # prices must agree to the bit (the fast-forward's contract)
    sc = load_scenario(str(REPO / "workloads" / "scenarios" / f"{name}.yaml"),
                       ["execution.enforce_eager=true", "workload.max_requests=60", *extra])
    assert identical_or_unservable(sc) is not None
