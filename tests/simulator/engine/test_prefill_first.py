"""Prefill and decode steps apart, prefill first (``batching.mixed_chunk: false``, SGLang's
default: simulator/engine/prefill_first.py), against hand-worked closed forms, and how the
mode is chosen (the scenario's key, else the named engine's).

SGLang's scheduler (python/sglang/srt/managers/scheduler.py ``get_next_batch_to_run``)
forms a prefill batch first ("Run prefill first if possible") and mixes the running decodes
into it only under ``--enable-mixed-chunk`` (server_args.py ``enable_mixed_chunk: bool =
False``); vLLM V1 fills one token budget with the decodes, then prefill chunks.
"""
import dataclasses

import numpy as np
import pytest

from simulator.cost.execution import parse_execution
from simulator.inputs.errors import SpecsimError
from simulator.scenario import load_scenario
from simulator.simulate import mixed_chunk, simulate
from tests.helpers import ConstantCost, scenario, workload

D = 0.25  # seconds a forward, whatever it carries: the closed forms count steps


def _run(mixed: bool, arrival=(0.0, 0.0), prompt=(100, 300), output=(5, 3)):
    sc = scenario("none", batching={"max_num_batched_tokens": 100, "mixed_chunk": mixed})
    return simulate(sc, workload=workload(list(arrival), list(prompt), list(output)),
                    target_cost=ConstantCost(D))


def test_two_requests_arriving_together_mixed():
    """Budget 100, A (100 in, 5 out) and B (300 in, 3 out) at t = 0, vLLM's mixed steps:
    step 1 prefills A (100: A's first token at 1 D); steps 2-4 decode A and prefill 99 of B
    each; step 5 decodes A (its 5th token: done at 5 D) and B's last 3 (B's first token at
    5 D); steps 6-7 decode B (done at 7 D).  7 steps, 6 of them carry a decode."""
    res = _run(True)
    req, steps = res.requests, res.steps
    assert req["ttft_s"].tolist() == [1 * D, 5 * D]
    assert req["e2e_s"].tolist() == [5 * D, 7 * D]
    assert steps["prefill_tokens"].tolist() == [100, 99, 99, 99, 3, 0, 0]
    assert steps["num_decode"].tolist() == [0, 1, 1, 1, 1, 1, 1]


def test_two_requests_arriving_together_prefill_first():
    """The same requests, prefill first: steps 1-4 prefill (A's 100, then B's 300 in three
    full-budget chunks while A's decode waits: B's first token at 4 D, sooner than mixed);
    steps 5-6 decode both (B's 3rd token: done at 6 D), steps 7-8 decode A (its 5th token at
    8 D, later than mixed).  8 steps, 4 decode steps, no step carries both."""
    res = _run(False)
    req, steps = res.requests, res.steps
    assert req["ttft_s"].tolist() == [1 * D, 4 * D]
    assert req["e2e_s"].tolist() == [8 * D, 6 * D]
    assert steps["prefill_tokens"].tolist() == [100, 100, 100, 100, 0, 0, 0, 0]
    assert steps["num_decode"].tolist() == [0, 0, 0, 0, 2, 2, 1, 1]
    assert steps["start_s"].tolist() == [k * D for k in range(8)]


def test_a_late_arrival_stops_the_decodes_for_its_prefill():
    """A (10 in, 6 out) from t = 0; B (150 in, 1 out) arrives at 1.5 D, during A's first
    decode.  Prefill first: A's prefill (step 1), A's decode (step 2, its 2nd token at 2 D),
    then B's 100 and 50 (steps 3-4, A waits; B done at 4 D), then A's last 4 tokens (done at
    8 D).  Mixed: A decodes in every step from 1 D (done at 6 D), beside B's chunks of 99
    and 51 in steps 3-4 (B done at 4 D)."""
    late = dict(arrival=(0.0, 1.5 * D), prompt=(10, 150), output=(6, 1))
    first, mixed = _run(False, **late), _run(True, **late)
    assert first.requests["e2e_s"].tolist() == [8 * D, 4 * D - 1.5 * D]
    assert first.steps["num_decode"].tolist() == [0, 1, 0, 0, 1, 1, 1, 1]
    assert mixed.requests["e2e_s"].tolist() == [6 * D, 4 * D - 1.5 * D]
    assert mixed.steps["prefill_tokens"].tolist() == [10, 0, 99, 51, 0, 0]


def test_no_step_carries_prefill_and_decodes_on_a_real_cost_model():
    """An open-loop run on the roofline cost model: every step is one kind or the other."""
    rng = np.random.default_rng(7)
    n = 40
    wl = workload(np.cumsum(rng.exponential(0.05, n)), rng.integers(50, 900, n),
                  rng.integers(1, 60, n))
    sc = scenario("none", batching={"max_num_batched_tokens": 512, "mixed_chunk": False})
    steps = simulate(sc, workload=wl).steps
    both = (steps["prefill_tokens"] > 0) & (steps["num_decode"] > 0)
    assert not both.any() and (steps["num_decode"] > 0).any()


@pytest.mark.parametrize("engine, expected", [("sglang-v0.4", False),
                                              ("sglang-v0.4.5", False), ("vllm-v0.9", True)])
def test_the_named_engine_sets_the_default(engine, expected):
    sc = dataclasses.replace(load_scenario(), execution=parse_execution(
        {"engine": engine}, source="test"))
    assert mixed_chunk(sc) is expected
    # the scenario's key wins (SGLang's --enable-mixed-chunk)
    on = dataclasses.replace(sc, batching=dataclasses.replace(sc.batching, mixed_chunk=True))
    assert mixed_chunk(on) is True
    assert mixed_chunk(load_scenario()) is True  # no engine named: vLLM's mixed steps


def test_a_bad_value_names_the_field():
    with pytest.raises(SpecsimError, match="batching.mixed_chunk"):
        load_scenario(overrides=["batching.mixed_chunk=sometimes"])
