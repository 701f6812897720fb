"""vLLM's async scheduling in the engine loop (``execution.async_scheduling``,
Replica._release): step k+1 is planned as step k starts, so a request that arrives while a
step runs is first scheduled in the step after the next (without it: the next), exactly,
and one that arrives at an idle engine at once; fast-forward on/off and the seed give
identical results; off, nothing changes."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from simulator.scenario import EngineOptions
from simulator.sim2real.compare import run_scenario
from simulator.sim2real.measured_run import VLLM_BATCHING, MeasuredRun
from simulator.simulate import simulate
from tests.simulator.engine.test_fast_forward import assert_identical
from workloads.workload import Workload


def _workload(seed: int = 5, n: int = 150) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(name="p", arrival_s=np.cumsum(rng.exponential(0.05, n)),
                    prompt_tokens=rng.integers(20, 600, n),
                    output_tokens=rng.integers(20, 200, n))


def _simulate(wl: Workload, lag: bool, ff: bool = True):
    run = MeasuredRun(name="t", model="llama-2-7b", hardware="h100-sxm", tensor_parallel=1,
                      batching=dict(VLLM_BATCHING), engine="vLLM", workload=wl)
    sc = run_scenario(run, None)
    sc = dataclasses.replace(sc, execution={**sc.execution, "async_scheduling": lag},
                             engine=EngineOptions(fast_forward=ff, steps_table="all"))
    return simulate(sc, workload=wl)


@pytest.mark.parametrize("lag", [False, True])
def test_a_request_arriving_mid_step_joins_the_next_or_the_one_after(lag):
    """Light load (the token budget never defers an admission): every request's first
    scheduled step is the one after the step in flight at its arrival (sync), or the one
    after that (async); at an idle engine its arrival."""
    res = _simulate(_workload(), lag)
    start = res.steps["start_s"].to_numpy()
    end = start + res.steps["duration_s"].to_numpy()
    ahead = 2 if lag else 1
    mid_step = 0
    for a, first in zip(res.requests["arrival_s"], res.requests["first_scheduled_s"]):
        running = np.flatnonzero((start < a) & (end > a))
        if not running.size:
            assert first == a
        else:
            mid_step += 1
            assert first == start[running[0] + ahead]
    assert mid_step >= len(res.requests) // 4  # the mid-step rule is what is tested


def test_off_is_the_engine_without_the_switch():
    """``async_scheduling: false`` is the engine as it was before the switch: the same
    frames as a scenario that does not name it, on arrivals that land mid-step."""
    wl = _workload(3, 60)
    off = _simulate(wl, False)
    run = MeasuredRun(name="t", model="llama-2-7b", hardware="h100-sxm", tensor_parallel=1,
                      batching=dict(VLLM_BATCHING), engine="vLLM", workload=wl)
    sc = run_scenario(run, None)
    execution = {k: v for k, v in sc.execution.items() if k != "async_scheduling"}
    sc = dataclasses.replace(sc, execution=execution,
                             engine=EngineOptions(fast_forward=True, steps_table="all"))
    assert_identical(off, simulate(sc, workload=wl))


def test_an_idle_engine_schedules_at_once_either_way():
    """One request: scheduled at its arrival, its TTFT its one prefill step (the step is
    shorter with async scheduling only by the host time the device hides: cost model)."""
    wl = Workload(name="one", arrival_s=np.array([0.5]), prompt_tokens=np.array([300]),
                  output_tokens=np.array([40]))
    for res in (_simulate(wl, True), _simulate(wl, False)):
        assert res.requests["first_scheduled_s"].iloc[0] == 0.5
        assert res.requests["ttft_s"].iloc[0] == pytest.approx(
            res.steps["duration_s"].iloc[0], rel=1e-12)


def test_fast_forward_and_seed_give_identical_results_with_async_scheduling():
    on, off = _simulate(_workload(7), True, ff=True), _simulate(_workload(7), True, ff=False)
    assert_identical(on, off)
    again = _simulate(_workload(7), True, ff=True)
    pd.testing.assert_frame_equal(on.requests, again.requests, check_exact=True)
