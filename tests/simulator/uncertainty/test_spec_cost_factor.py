"""The speculative path's cost factor (``Scenario.spec_cost_factor``, deployment.speculative_path):
every draft forward and the engine's speculative host work take that many times longer,
the target's forwards not at all -- checked where the schedule cannot move (batch 1, every
request at once, fixed lengths), so that each step's draft part is exactly ``g`` times the
point's and its verification part the point's own."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from simulator.scenario import scenario_from_dict
from simulator.simulate import simulate

AT_ONCE = {"synthetic": {"num_requests": 6, "arrival": {"process": "poisson", "rate_per_s": 1e6},
                         "prompt": {"dist": "fixed", "tokens": 100},
                         "output": {"dist": "fixed", "tokens": 30}}}
HF = {"enforce_eager": True, "captured_draft_loop": False, "engine": "eagle-official"}
# (policy, draft, target, hardware, execution): a draft model's chain, EAGLE's layer and
# EAGLE-3's (side cost models, eager and captured), Medusa's heads
PATHS = [
    ("chain", "opt-125m", "opt-13b", "a100-40gb", {}),
    ({"name": "eagle", "num_speculative_tokens": 3}, "eagle-vicuna-7b", "vicuna-7b",
     "a100-80gb", HF),
    ({"name": "eagle3", "num_speculative_tokens": 3}, "eagle3-llama-3.1-8b-instruct",
     "llama-3.1-8b", "h100-sxm", {"engine": "vllm-v0.9"}),
    ({"name": "medusa"}, "medusa-vicuna-7b", "vicuna-7b", "a100-80gb", HF),
]


def scenario(policy, draft, target, hardware, execution):
    return scenario_from_dict({"policy": policy, "draft": draft, "target": target,
                               "hardware": hardware, "execution": execution,
                               "acceptance": {"model": "iid", "alpha": 0.7},
                               "batching": {"max_num_seqs": 1}, "workload": AT_ONCE},
                              source="test")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: str(p[1]))
def test_only_the_speculative_path_is_slower(path):
    sc = scenario(*path)
    point = simulate(sc).steps
    slow = simulate(dataclasses.replace(sc, spec_cost_factor=2.5)).steps
    assert len(slow) == len(point) and point["draft_s"].sum() > 0
    np.testing.assert_allclose(slow["draft_s"], 2.5 * point["draft_s"], rtol=1e-9)
    np.testing.assert_array_equal(slow["verify_s"], point["verify_s"])


def test_a_factor_of_one_is_the_point_estimate_exactly():
    sc = scenario(*PATHS[1])
    pd.testing.assert_frame_equal(simulate(dataclasses.replace(sc, spec_cost_factor=1.0))
                                  .requests, simulate(sc).requests)


def test_a_run_without_speculation_does_not_move():
    sc = dataclasses.replace(scenario(*PATHS[0]), policy=scenario("none", None, "opt-13b",
                                                                  "a100-40gb", {}).policy)
    pd.testing.assert_frame_equal(simulate(dataclasses.replace(sc, spec_cost_factor=3.0))
                                  .requests, simulate(sc).requests)
