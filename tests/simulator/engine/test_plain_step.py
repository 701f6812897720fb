"""The fused plain-decode iteration (simulator/engine/plain_step.py) is exact: with it, a
``none`` run gives the DataFrames of the ordinary ``_schedule`` / ``_complete`` path bit for
bit, in both engine modes, with preemptions (small KV caches), token budgets smaller than the
batch, chunked and unchunked prefill, several replicas under both routers.  Prefix caching
is off in the runs that preempt: with it, a preempted request's blocks are cached for its
re-admission (block_keys.py) and the engine takes the cached path, not the fused one."""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.engine.completion import Completion
from simulator.engine.lazy_decode import LazyDecodes
from simulator.engine.plain_step import PlainSteps
from simulator.engine.replica import Replica
from simulator.scenario import EngineOptions
from simulator.simulate import simulate
from tests.helpers import scenario, workload
from tests.simulator.engine.test_fast_forward import assert_identical
from tests.simulator.engine.test_invariants import _utilisation_for_blocks


def _fused_and_ordinary(monkeypatch, sc, wl, fast_forward: bool):
    """(fused, ordinary) results of ``sc``, and (calls of the fused path, iterations it
    took)."""
    sc = dataclasses.replace(sc, engine=EngineOptions(fast_forward=fast_forward))
    taken = [0, 0]

    def counting(original):
        def schedule(self, now):
            step = original(self, now)
            taken[0] += 1
            taken[1] += step is not None
            return step
        return schedule

    with monkeypatch.context() as m:  # under fast-forward the lazy form's iteration is fused
        m.setattr(PlainSteps, "_plain_schedule", counting(PlainSteps._plain_schedule))
        m.setattr(LazyDecodes, "_lazy_schedule", counting(LazyDecodes._lazy_schedule))
        fused = simulate(sc, workload=wl)
    with monkeypatch.context() as m:  # neither fused iteration nor the lazy form
        m.setattr(PlainSteps, "_plain_schedule", lambda self, now: None)
        m.setattr(LazyDecodes, "_lazy_enter", lambda self: False)
        ordinary = simulate(sc, workload=wl)
    return fused, ordinary, tuple(taken)


@st.composite
def cases(draw):
    n = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.floats(0, 0.3), min_size=n, max_size=n))
    return {"arrival": np.cumsum(gaps),
            "prompt": draw(st.lists(st.integers(1, 300), min_size=n, max_size=n)),
            "output": draw(st.lists(st.integers(1, 80), min_size=n, max_size=n)),
            "block_size": draw(st.sampled_from([1, 8, 16])),
            "blocks": draw(st.integers(30, 200)), "seqs": draw(st.integers(1, 16)),
            "batched": draw(st.integers(1, 512)), "chunked": draw(st.booleans()),
            "replicas": draw(st.integers(1, 3)), "fast_forward": draw(st.booleans()),
            "router": draw(st.sampled_from(["round_robin", "least_outstanding_tokens"]))}


def _none_run(case: dict):
    """The ``none`` scenario and workload of a drawn case."""
    util = _utilisation_for_blocks(case["blocks"], case["block_size"], case["batched"],
                                   False, case["seqs"])
    sc = scenario("none", hardware="a10", target="opt-1.3b", draft=None,
                  replicas=case["replicas"], router=case["router"],
                  batching={"block_size": case["block_size"], "max_num_seqs": case["seqs"],
                            "max_num_batched_tokens": case["batched"],
                            "enable_chunked_prefill": case["chunked"],
                            "gpu_memory_utilization": util,
                            "enable_prefix_caching": False})
    return sc, workload(case["arrival"], case["prompt"], case["output"])


@settings(max_examples=60, deadline=None, derandomize=True,  # same examples every run
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cases())
def test_random_none_runs_match_the_ordinary_path(monkeypatch, case):
    sc, wl = _none_run(case)
    try:
        fused, ordinary, _ = _fused_and_ordinary(monkeypatch, sc, wl, case["fast_forward"])
    except ValueError as exc:  # a configuration that can serve nothing says so, in both
        assert "max_num_batched_tokens" in str(exc) or "no request can be served" in str(exc)
        return
    assert_identical(fused, ordinary)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cases())
def test_fast_forward_without_the_lazy_form_is_exact(monkeypatch, case):
    """``Replica.lazy_decodes`` off (what the engine benchmark compares against): the fused
    iteration, fast_forward.py's stretches and their crossing steps give the step-by-step
    reference's DataFrames too."""
    sc, wl = _none_run(case)
    try:
        with monkeypatch.context() as m:
            m.setattr(Replica, "lazy_decodes", False)
            eager = simulate(dataclasses.replace(sc, engine=EngineOptions(fast_forward=True)),
                             workload=wl)
        reference = simulate(dataclasses.replace(sc, engine=EngineOptions(fast_forward=False)),
                             workload=wl)
    except ValueError as exc:  # a configuration that can serve nothing says so, in both
        assert "max_num_batched_tokens" in str(exc) or "no request can be served" in str(exc)
        return
    assert_identical(eager, reference)


def _small_kv(policy: str, blocks: int):
    """OPT-1.3B on an A10 with ``blocks`` KV blocks of 16 tokens, 8 sequences, a 256-token
    chunked-prefill budget and no prefix caching."""
    util = _utilisation_for_blocks(blocks, 16, 256, False, 8)
    return scenario(policy, hardware="a10", target="opt-1.3b", draft=None,
                    batching={"block_size": 16, "max_num_seqs": 8, "max_num_batched_tokens": 256,
                              "enable_chunked_prefill": True, "gpu_memory_utilization": util,
                              "enable_prefix_caching": False})


@pytest.mark.parametrize("fast_forward", [True, False])
def test_the_fused_path_carries_the_mixed_steps(monkeypatch, fast_forward):
    """A batch that keeps decoding while long prompts arrive, with a KV cache small enough to
    preempt: the fused path takes the mixed steps, the ordinary one the preemptions, and
    the results are those of the ordinary path alone.  With fast-forward (the lazy form,
    lazy_decode.py), the decode iteration that crosses an arrival comes planned from its
    stretch, so the fused path is asked for fewer than the iterations left."""
    rng = np.random.default_rng(3)
    n = 40
    sc = _small_kv("none", 60)
    wl = workload(np.sort(rng.uniform(0, 4, n)), rng.integers(100, 600, n),
                  rng.integers(20, 120, n))
    fused, ordinary, (calls, taken) = _fused_and_ordinary(monkeypatch, sc, wl, fast_forward)
    assert_identical(fused, ordinary)
    mixed = int(((fused.steps["num_prefill"] > 0) & (fused.steps["num_decode"] > 0)).sum())
    assert mixed > 0 and taken >= mixed
    engine = fused.info["engine"]
    stepped = engine["iterations"] - engine["vectorised"]  # the iterations not in a stretch
    if fast_forward:  # the crossing ones come from stretches, the preempting ones ordinary
        assert taken < stepped
    else:
        assert calls == stepped
    assert int(fused.steps["preemptions"].sum()) > 0  # the ordinary path's part is exercised


def test_a_chunk_that_spends_the_budget_is_fused_while_requests_wait(monkeypatch):
    """Long prompts arriving faster than they prefill: a chunk that takes the whole token
    budget leaves no room for an admission, so the lazy form fuses it though requests wait
    (``_lazy_chunk``'s ``fill``), and a last chunk short of the budget (an admission may
    follow) is left to ``_plan_prefills``.  Both kinds occur, and the run is the ordinary
    path's and the step-by-step reference's bit for bit."""
    rng = np.random.default_rng(11)
    n = 60
    sc = _small_kv("none", 400)
    wl = workload(np.sort(rng.uniform(0, 3, n)), rng.integers(600, 1500, n),
                  rng.integers(20, 200, n))
    seen = {"fused": 0, "left": 0}
    chunk = LazyDecodes._lazy_chunk

    def watched(self, now, nd, size, budget, fill=False):
        step = chunk(self, now, nd, size, budget, fill)
        if fill:
            seen["fused" if step is not None else "left"] += 1
        return step

    with monkeypatch.context() as m:
        m.setattr(LazyDecodes, "_lazy_chunk", watched)
        fused, ordinary, _ = _fused_and_ordinary(monkeypatch, sc, wl, True)
    assert seen["fused"] > 0 and seen["left"] > 0
    assert_identical(fused, ordinary)
    assert_identical(fused, simulate(dataclasses.replace(
        sc, engine=EngineOptions(fast_forward=False)), workload=wl))


@pytest.mark.parametrize("policy", ["none", "chain:num_speculative_tokens=3"])
@pytest.mark.parametrize("chunked", [True, False])
def test_one_chunk_by_scalar_stores_is_the_array_path(monkeypatch, policy, chunked):
    """``_emit_prefills`` takes a lone chunk by scalar stores (``_emit_prefill_one``): with
    the array path in its place the results are identical, on runs whose KV cache is small
    enough to preempt, so that lone chunks resume preempted requests (whose gaps run on from
    their last token) as well as start new ones, and some do not finish their prefill."""
    rng = np.random.default_rng(5)
    n = 40
    chain = policy != "none"
    util = _utilisation_for_blocks(40, 16, 256, chain, 8 * (4 if chain else 1))
    sc = scenario(policy, hardware="a10", target="opt-1.3b",
                  draft="opt-125m" if chain else None,
                  batching={"block_size": 16, "max_num_seqs": 8, "max_num_batched_tokens": 256,
                            "enable_chunked_prefill": chunked, "gpu_memory_utilization": util,
                            "enable_prefix_caching": False})
    prompts = rng.integers(100, 300 if chunked else 200, n)
    wl = workload(np.sort(rng.uniform(0, 4, n)), prompts, rng.integers(20, 120, n))
    seen = {"calls": 0, "resumed": 0, "unfinished": 0}
    one = Completion._emit_prefill_one

    def watched(self, step, now):
        p = int(step.prefill_pos[0])
        seen["calls"] += 1
        seen["unfinished"] += not bool(step.completes[0])
        seen["resumed"] += bool(step.completes[0]) and int(self.b.generated[p]) > 0
        return one(self, step, now)

    for fast_forward in (True, False):  # (none's lazy form completes its chunks itself)
        sc = dataclasses.replace(sc, engine=EngineOptions(fast_forward=fast_forward))
        with monkeypatch.context() as m:
            m.setattr(Completion, "_emit_prefill_one", watched)
            scalar = simulate(sc, workload=wl)
        with monkeypatch.context() as m:
            m.setattr(Completion, "_emit_prefill_one", Completion._emit_prefill_many)
            arrays = simulate(sc, workload=wl)
        assert_identical(scalar, arrays)
        assert int(scalar.requests["preemptions"].sum()) > 0
    assert seen["calls"] > 0 and seen["resumed"] > 0
    assert seen["unfinished"] > 0 or not chunked


def test_a_pricer_without_a_scalar_form_prices_short_stretches_the_same(monkeypatch):
    """A pricer whose declared ``uniform_pricer`` gives None (no closed form on Python
    numbers): the lazy form's short stretches go to the vectorised pass
    (``uniform_step_times``), and the run is the same bit for bit."""
    from simulator.cost.cost_model import CostModel
    sc = dataclasses.replace(scenario("none", replicas=2),
                             engine=EngineOptions(fast_forward=True))
    sc = dataclasses.replace(sc, workload={**sc.workload, "max_requests": 200})
    closure = simulate(sc)
    calls = [0]
    vector = CostModel.uniform_step_times

    def counted(self, *args):
        calls[0] += 1
        return vector(self, *args)

    with monkeypatch.context() as m:
        m.setattr(CostModel, "uniform_pricer", lambda self, n, u, logits: None)
        m.setattr(CostModel, "uniform_step_times", counted)
        fallback = simulate(sc)
    assert calls[0] > 100  # the short stretches did price through it
    assert_identical(closure, fallback)


def test_a_plain_policy_with_a_prefill_time_has_it_called(monkeypatch):
    """The lazy form skips ``prefill_time`` only where it is the base's (which adds 0): a
    plain-decode policy that overrides it gets its time added, as the ordinary path adds it."""
    from simulator.policies.none import NoSpeculation
    sc = scenario("none", replicas=2, batching={"max_num_batched_tokens": 256})
    sc = dataclasses.replace(sc, workload={**sc.workload, "max_requests": 120})
    calls = [0]

    def prefill_time(self, new_tokens, context):
        calls[0] += 1
        return 1e-4 * float(new_tokens.sum())

    monkeypatch.setattr(NoSpeculation, "prefill_time", prefill_time)
    fused, ordinary, taken = _fused_and_ordinary(monkeypatch, sc, None, True)
    assert calls[0] > 0 and taken[1] > 0
    assert fused.steps["draft_s"].gt(0).any()  # the chunks' proposer time is there
    assert_identical(fused, ordinary)
