"""A named engine's start-up overrides of the batching (simulator/engine_overrides.py).

The rule, as vLLM 0.7.1-0.7.3 write it (vllm/config.py, read in the PyPI sdists;
engines.yaml ``vllm-v0.7``, ``mla_disables_chunked_prefill``), in VllmConfig.__post_init__:
"if self.model_config and self.model_config.use_mla: logger.info('MLA is enabled; forcing
chunked prefill and prefix caching to be disabled.')", then
``scheduler_config.chunked_prefill_enabled = False`` and ``cache_config.enable_prefix_caching
= False``; ``max_num_batched_tokens`` is not touched (0.8.0 added that reset, for non-GPU
platforms only).  The scheduler then runs ``Scheduler._schedule_default`` (core/scheduler.py):
"Don't schedule decodes if prefills are scheduled", whole prompts within the token budget.
"""
import dataclasses

import pytest

from simulator.engine_overrides import engine_batching
from simulator.scenario import scenario_from_dict
from simulator.simulate import simulate
from tests.helpers import ConstantCost, workload

D = 0.25  # seconds a forward, whatever it carries: the closed form counts steps


def _scenario(engine: str | None, target: str = "deepseek-v3", **batching):
    data = {"name": "override", "hardware": "h200", "target": target,
            "parallelism": {"tensor_parallel": 8}, "policy": {"name": "none"},
            "batching": {"max_num_seqs": 64, "max_num_batched_tokens": 512, **batching},
            "workload": {"trace": "default", "max_requests": 8}}
    if engine is not None:
        data["execution"] = {"engine": engine}
    return scenario_from_dict(data, source="test")


def test_vllm_07_runs_an_mla_model_without_chunked_prefill_or_prefix_caching():
    asked = _scenario("vllm-v0.7", enable_chunked_prefill=True, enable_prefix_caching=True)
    got, note = engine_batching(asked)
    b = got.batching
    assert (b.enable_chunked_prefill, b.enable_prefix_caching, b.mixed_chunk) == \
        (False, False, False)
    assert b.max_num_batched_tokens == 512  # 0.7.x leaves the budget as it was
    assert dataclasses.replace(got, batching=asked.batching) == asked  # nothing else moves
    assert "MLA is enabled; forcing chunked prefill and prefix caching to be disabled" in note
    assert "batching.enable_chunked_prefill, batching.enable_prefix_caching" in note
    assert engine_batching(got) == (got, "")  # applied once: nothing left to override


@pytest.mark.parametrize("engine, target", [("vllm-v0.7", "llama-3.1-70b"),  # no MLA
                                            ("vllm-v0.9", "deepseek-v3"),  # V1: chunked MLA
                                            ("sglang-v0.4", "deepseek-v3"),
                                            (None, "deepseek-v3")])
def test_other_engines_and_models_keep_the_scenarios_batching(engine, target):
    sc = _scenario(engine, target)
    assert engine_batching(sc) == (sc, "")


def test_a_scenario_that_already_asks_what_the_engine_does_gets_no_note():
    sc = _scenario("vllm-v0.7", enable_chunked_prefill=False, enable_prefix_caching=False,
                   mixed_chunk=False)
    assert engine_batching(sc) == (sc, "")


def test_v0_schedule_default_timeline():
    """Budget 512.  A (100 in, 5 out) and B (300 in, 3 out) at t = 0, C (200 in, 2 out) at
    1.5 D, during the decode step 2.  _schedule_default: step 1 prefills A and B whole
    (400 <= 512; both first tokens at 1 D), step 2 decodes both, step 3 prefills C alone (A
    and B wait: C's first token at 3 D), step 4 decodes all three (B's 3rd and C's 2nd
    token: both done at 4 D), steps 5-6 decode A (done at 6 D).  With chunked prefill on
    (what the scenario asks) step 3 would carry C's prompt beside A's and B's decodes."""
    sc = _scenario("vllm-v0.7")
    res = simulate(sc, workload=workload([0.0, 0.0, 1.5 * D], [100, 300, 200], [5, 3, 2]),
                   target_cost=ConstantCost(D))
    req, steps = res.requests, res.steps
    assert req["ttft_s"].tolist() == [1 * D, 1 * D, 3 * D - 1.5 * D]
    assert req["e2e_s"].tolist() == [6 * D, 4 * D, 4 * D - 1.5 * D]
    assert steps["prefill_tokens"].tolist() == [400, 0, 200, 0, 0, 0]
    assert steps["num_decode"].tolist() == [0, 2, 0, 3, 1, 1]
    assert "forcing chunked prefill" in res.info["engine_override"]


def test_specsim_run_notes_the_override_once_for_all_policies():
    """The engine logs it once at start-up: one note however many policies ran."""
    from types import SimpleNamespace

    from simulator.cli.run import engine_notes
    sc = _scenario("vllm-v0.7")
    note = engine_batching(sc)[1]
    runs = [SimpleNamespace(info={"engine_override": note}) for _ in range(3)]
    assert engine_notes(runs) == [f"note: {note}"]
    assert engine_notes([SimpleNamespace(info={"engine_override": ""})]) == []


def _mixed_steps(steps) -> int:
    """Steps that carry prefill tokens beside decodes."""
    return int(((steps["prefill_tokens"] > 0) & (steps["num_decode"] > 0)).sum())


@pytest.mark.parametrize("written", [None, True])
def test_v0_without_chunked_prefill_keeps_prefill_and_decode_steps_apart_for_every_model(
        written):
    """vLLM V0 (engines.yaml ``unchunked_prefill_apart``: core/scheduler.py _schedule_default,
    "Don't schedule decodes if prefills are scheduled") on a non-MLA model.  A (100 in, 5 out)
    at 0, B (300 in, 3 out) at 1.5 D: step 1 prefills A, step 2 decodes it, step 3 prefills B
    alone (B's first token at 3 D), steps 4-5 decode both (B done at 5 D), step 6 A's last
    token (6 D).  A ``mixed_chunk: true`` written in the scenario is overridden too: V0 has
    no flag that mixes whole prompts with decodes."""
    extra = {} if written is None else {"mixed_chunk": written}
    sc = _scenario("vllm-v0.7", "llama-3.1-70b", enable_chunked_prefill=False, **extra)
    got, note = engine_batching(sc)
    assert got.batching.mixed_chunk is False
    assert "Don't schedule decodes if prefills are scheduled" in note
    assert ("(written true)" in note) is bool(written)
    assert engine_batching(got) == (got, "")  # applied once
    res = simulate(sc, workload=workload([0.0, 1.5 * D], [100, 300], [5, 3]),
                   target_cost=ConstantCost(D))
    steps = res.steps
    assert steps["prefill_tokens"].tolist() == [100, 0, 300, 0, 0, 0]
    assert steps["num_decode"].tolist() == [0, 1, 0, 2, 2, 1]
    assert _mixed_steps(steps) == 0
    assert res.requests["ttft_s"].tolist() == [1 * D, 3 * D - 1.5 * D]
    assert res.requests["e2e_s"].tolist() == [6 * D, 5 * D - 1.5 * D]
    assert res.info["engine_override"] == note


@pytest.mark.parametrize("engine, chunked", [("vllm-v0.7", True),  # V0 chunked: mixes
                                             ("vllm-v0.9", False),  # V1 mixes either way
                                             ("vllm-v0.10", False),
                                             (None, False)])
def test_v0_with_chunked_prefill_and_v1_mix_prefill_and_decode(engine, chunked):
    """The same arrivals where the steps may mix: B's 300-token prompt goes in beside A's
    decode in step 3 (vLLM V0's _schedule_chunked_prefill, V1's one token budget), A done at
    5 D; no override, no note."""
    sc = _scenario(engine, "llama-3.1-70b", enable_chunked_prefill=chunked)
    assert engine_batching(sc) == (sc, "")
    res = simulate(sc, workload=workload([0.0, 1.5 * D], [100, 300], [5, 3]),
                   target_cost=ConstantCost(D))
    assert res.steps["prefill_tokens"].tolist()[:3] == [100, 0, 300]
    assert res.steps["num_decode"].tolist()[:3] == [0, 1, 1]
    assert _mixed_steps(res.steps) == 1
    assert res.requests["e2e_s"].tolist() == [5 * D, 5 * D - 1.5 * D]
    assert res.info["engine_override"] == ""


def test_v0_leaves_mixed_chunk_false_as_written_without_a_note():
    sc = _scenario("vllm-v0.7", "llama-3.1-70b", enable_chunked_prefill=False,
                   mixed_chunk=False)
    assert engine_batching(sc) == (sc, "")
