"""Fast-forward of a policy whose per-request draft counts vary (``VariedDraft``,
simulator/engine/varied_stretch.py): the ``adaptive`` wrapper around ``chain``, every
controller, its iterations taken on arrays.  The same DataFrames as the step-by-step
reference (``engine.fast_forward: false``), bit for bit: on the shipped scenarios that use
it and on random ones (controllers, schedules, switches, acceptance models, drafts' context
limits, preemption, admissions, several replicas)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.policies.base import PolicyBase
from simulator.policies.chain import ChainSpeculation
from simulator.scenario import PolicyConfig, load_scenario, scenario_from_dict
from tests.helpers import REPO, scenario, workload
from tests.simulator.engine.test_fast_forward import (
    _both,
    assert_identical,
    identical_or_unservable,
)

SCENARIOS = REPO / "workloads" / "scenarios"


@pytest.mark.parametrize("name", ["adaptive", "adaptive_schedule"])
def test_shipped_adaptive_scenarios_take_stretches(name):
    """The shipped goodput and schedule scenarios: identical, and most iterations taken
    on arrays (the step-by-step reference takes none)."""
    on, off = _both(load_scenario(SCENARIOS / f"{name}.yaml"))
    assert_identical(on, off)
    assert off.info["engine"]["vectorised"] == 0
    assert on.info["engine"]["vectorised"] > on.info["engine"]["iterations"] / 2


def test_the_wrapped_chain_learns_nothing():
    """The stretch tells the controllers and the draft model's catch-up what an iteration
    did, never the wrapped chain's ``observe``: it must be the base class's (which does
    nothing), or the stretch would skip what it learns."""
    assert ChainSpeculation.observe is PolicyBase.observe


def test_other_bases_stay_on_the_general_path():
    """A base switched on or off as a whole (``GateControl``) offers no varied stretch:
    its iterations run step by step, identically."""
    rng = np.random.default_rng(3)
    sc = scenario("none", hardware="a100-40gb", target="vicuna-7b", draft="eagle-vicuna-7b")
    sc = dataclasses.replace(sc, policy=PolicyConfig("adaptive", {
        "base": {"name": "eagle", "num_speculative_tokens": 3},
        "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 256, 1]]}))
    wl = workload(np.sort(rng.uniform(0, 3, 16)), rng.integers(8, 300, 16),
                  rng.integers(5, 80, 16))
    on, off = _both(sc, wl)
    assert_identical(on, off)
    assert on.info["engine"]["vectorised"] == 0


CONTROLLERS = ["fixed", "acceptance_ema", "goodput",
               {"kind": "acceptance_ema", "candidate_steps": [0, 1, 3], "warmup_batches": 2,
                "update_interval": 1},
               {"kind": "goodput", "prior_alpha": 0.3, "decay": 0.9}]
ACCEPTANCE = [{"model": "iid", "alpha": 0.75},
              {"model": "per_request", "mean": 0.6, "concentration": 3.0},
              {"model": "positional", "rates": [0.9, 0.7, 0.6, 0.5, 0.4, 0.3]},
              {"model": "context_decay", "alpha0": 0.9, "scale_tokens": 400}]


@st.composite
def cases(draw):
    n = draw(st.integers(1, 24))
    return {"arrival": np.cumsum(draw(st.lists(st.floats(0, 0.3), min_size=n, max_size=n))),
            # prompts up to past llama-68m's 2,048-token context: some not speculable
            "prompt": draw(st.lists(st.integers(1, 2100), min_size=n, max_size=n)),
            "output": draw(st.lists(st.integers(1, 150), min_size=n, max_size=n)),
            "gamma": draw(st.integers(1, 6)),
            "controller": draw(st.sampled_from(range(len(CONTROLLERS)))),
            "schedule": draw(st.booleans()), "disable": draw(st.sampled_from([None, 3, 8])),
            "kill": draw(st.booleans()),
            "acceptance": draw(st.sampled_from(range(len(ACCEPTANCE)))),
            "tight": draw(st.booleans()), "seqs": draw(st.integers(1, 16)),
            "batched": draw(st.integers(64, 1024)), "chunked": draw(st.booleans()),
            "replicas": draw(st.integers(1, 3)),
            "router": draw(st.sampled_from(["round_robin", "least_outstanding_tokens"])),
            "seed": draw(st.integers(0, 2**31))}


def _policy(case) -> PolicyConfig:
    params = {"base": {"name": "chain", "num_speculative_tokens": case["gamma"]},
              "controller": CONTROLLERS[case["controller"]]}
    if case["schedule"]:
        params["num_speculative_tokens_per_batch_size"] = [[1, 2, 6], [3, 5, 2], [6, 9, 1]]
    if case["disable"] is not None:
        params["speculative_disable_by_batch_size"] = case["disable"]
    if case["kill"]:
        params.update(acceptance_rate_window_size=8, acceptance_rate_threshold=0.5)
    return PolicyConfig("adaptive", params)


@settings(max_examples=50, deadline=None, derandomize=True,  # same examples every run
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_random_adaptive_runs_are_identical(case):
    sc = scenario("none", hardware="a100-40gb", target="llama-2-7b", draft="llama-68m",
                  replicas=case["replicas"], router=case["router"], seed=case["seed"],
                  batching={"max_num_seqs": case["seqs"],
                            "max_num_batched_tokens": case["batched"],
                            "enable_chunked_prefill": case["chunked"],
                            # a few hundred KV blocks: preemptions
                            "gpu_memory_utilization": 0.35 if case["tight"] else 0.9})
    sc = dataclasses.replace(sc, policy=_policy(case),
                             acceptance=ACCEPTANCE[case["acceptance"]])
    identical_or_unservable(sc, workload(case["arrival"], case["prompt"], case["output"]))


@pytest.mark.parametrize("name", ["prompt_lookup", "suffix", "lookahead", "token_trace"])
def test_shipped_model_free_scenarios_take_stretches(name):
    """The shipped prompt lookup, suffix decoding and lookahead scenarios (and the token
    trace one): identical, and most iterations taken on arrays."""
    on, off = _both(load_scenario(SCENARIOS / f"{name}.yaml"))
    assert_identical(on, off)
    assert off.info["engine"]["vectorised"] == 0
    assert on.info["engine"]["vectorised"] > on.info["engine"]["iterations"] / 2


MODEL_FREE = [{"name": "prompt_lookup", "num_speculative_tokens": 3, "prompt_lookup_min": 1},
              {"name": "prompt_lookup", "num_speculative_tokens": 8, "prompt_lookup_max": 5},
              {"name": "suffix"},
              {"name": "suffix", "num_speculative_tokens": 4, "speculate_tree": False,
               "suffix_decoding_max_cached_requests": 3},
              {"name": "lookahead"},
              {"name": "lookahead", "window_size": 2, "ngram_size": 3, "guess_set_size": 2},
              {"name": "jacobi"},
              {"name": "jacobi", "window_size": 3, "init": "repeat"},
              # adaptive around the lookups: their caps from the controllers
              {"name": "adaptive", "base": {"name": "prompt_lookup",
                                            "num_speculative_tokens": 6},
               "controller": "goodput"},
              {"name": "adaptive", "base": {"name": "suffix", "num_speculative_tokens": 8},
               "num_speculative_tokens_per_batch_size": [[1, 2, 8], [3, 256, 2]],
               "acceptance_rate_window_size": 8, "acceptance_rate_threshold": 0.4}]


@st.composite
def token_cases(draw):
    return {"kind": draw(st.sampled_from(["code_edit", "agent_loop", "free_chat"])),
            "n": draw(st.integers(1, 16)), "rate": draw(st.floats(0.2, 20.0)),
            "policy": draw(st.sampled_from(range(len(MODEL_FREE)))),
            "seqs": draw(st.integers(1, 16)), "batched": draw(st.integers(256, 2048)),
            "chunked": draw(st.booleans()), "caching": draw(st.booleans()),
            "tight": draw(st.booleans()), "replicas": draw(st.integers(1, 3)),
            "seed": draw(st.integers(0, 2**31))}


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(token_cases())
def test_random_model_free_runs_are_identical(case):
    """The model-free proposers on token workloads (their lookups on the real ids), alone
    and under the adaptive wrapper, with and without prefix caching, tight KV (preemption), admissions and several replicas."""
    sc = scenario_from_dict({
        "name": "t", "seed": case["seed"], "hardware": "a100-40gb", "target": "opt-13b",
        "replicas": case["replicas"], "policy": MODEL_FREE[case["policy"]],
        "batching": {"max_num_seqs": case["seqs"], "max_num_batched_tokens": case["batched"],
                     "enable_chunked_prefill": case["chunked"],
                     "enable_prefix_caching": case["caching"],
                     "gpu_memory_utilization": 0.7 if case["tight"] else 0.9},
        "workload": {"tokens": {"kind": case["kind"], "num_requests": case["n"],
                                "arrival": {"process": "poisson",
                                            "rate_per_s": case["rate"]}}}}, source="test")
    identical_or_unservable(sc)
