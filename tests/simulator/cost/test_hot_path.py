"""The cost model's hot path (issue 14 item 4).

A uniform batch (n requests of u new tokens each) whose attention stays under one roof has a
step time that depends on (n, u, S) alone, S the sum of the contexts.  ``step_time`` and the
vectorised ``uniform_step_times`` must give the same float bit for bit (the engine's
step-by-step and fast-forward paths call one each), and both must agree with the per-request
``breakdown`` within rounding.  The general path's shortcuts are checked against
``breakdown`` and against the kernel formula written out by hand.
"""
import dataclasses
import functools
import itertools

import numpy as np
import pytest

from hardware.kernels import ATTENTION_DECODE, ATTENTION_PREFILL
from hardware.profile import load_profile
from simulator.cost import token_terms
from simulator.cost.cost_model import CostModel
from simulator.cost.drafting import chain_draft_pricer
from simulator.cost.execution import eager, resolve_execution
from simulator.cost.parallelism import Parallelism
from simulator.models.spec import load_model

REL = 1e-12


@functools.cache
def _profile(name: str):
    if name == "a100-80gb-flat":  # the same device without its kernels: block
        return dataclasses.replace(load_profile("a100-80gb"), kernels=None)
    return load_profile(name)


_model = functools.cache(load_model)
PROFILES = ("a100-80gb", "a100-80gb-flat", "h100-sxm", "tpu-v4")
# how the forward runs: graphs (the profile's default), eager, async scheduling with the
# profile's host costs and with a host slower than the GPU, no overheads, no host step
EXECUTIONS = ("graphs", "eager", "async", "async-slow-host", "no-overheads", "no-host")


def _cost_model(profile: str, model: str, tp: int, execution: str) -> CostModel:
    hw, spec, par = _profile(profile), _model(model), Parallelism(tensor_parallel=tp)
    if execution == "no-overheads":
        return CostModel(hw, spec, par, overheads=False)
    if execution == "no-host":
        return CostModel(hw, spec, par, host=False)
    ex = {"graphs": None, "eager": eager(hw),
          "async": dataclasses.replace(resolve_execution(hw), async_scheduling=True),
          "async-slow-host": dataclasses.replace(resolve_execution(hw), async_scheduling=True,
                                                 cpu_step_s=0.02, cpu_per_seq_s=2e-5)}
    return CostModel(hw, spec, par, execution=ex[execution])


MATRIX = [pytest.param(p, m, tp, ex, u, id=f"{p}-{m}-tp{tp}-{ex}-u{u}")
          for p, m, tp, ex, u in itertools.product(PROFILES, ("llama-2-70b", "opt-13b"),
                                                   (1, 2, 4), EXECUTIONS, (1, 5))]


def _batches(rng, u: int, count: int, max_n: int = 256):
    """Random uniform batches: (new, ctx, logits), sizes from 1 to ``max_n``."""
    out = []
    for _ in range(count):
        n = int(rng.integers(1, max_n + 1))
        out.append((np.full(n, float(u)), rng.integers(0, 8192, n).astype(np.float64),
                    np.full(n, float(u))))
    return out


@pytest.mark.parametrize("profile, model, tp, execution, u", MATRIX)
def test_uniform_batches_bitwise_and_within_rounding(profile, model, tp, execution, u):
    cm = _cost_model(profile, model, tp, execution)
    rng = np.random.default_rng([PROFILES.index(profile), EXECUTIONS.index(execution), tp, u,
                                 len(model)])
    for new, ctx, logits in _batches(rng, u, 12):
        n = new.size
        vector = cm.uniform_step_times(n, u, np.array([int(ctx.sum())], dtype=np.int64), n * u)
        assert vector is not None and vector.shape == (1,)
        assert cm.step_time(new, ctx, logits) == vector[0]
        assert cm.step_time(new, ctx) == vector[0]  # logits default: every new token
    # K forwards at once, each against its own batch's step_time, bit for bit
    n = int(rng.integers(1, 200))
    batches = [rng.integers(0, 8192, n).astype(np.float64) for _ in range(9)]
    sums = np.array([int(c.sum()) for c in batches], dtype=np.int64)
    vector = cm.uniform_step_times(n, u, sums, n * u)
    scalar = np.array([cm.step_time(np.full(n, float(u)), c) for c in batches])
    assert np.array_equal(vector, scalar)
    # one batch on Python numbers (the engine's short stretches), bit for bit
    assert [cm.uniform_step_time(n, u, int(s), n * u) for s in sums] == vector.tolist()
    price = cm.uniform_pricer(n, u, n * u)  # the same as a function of the sum alone
    assert [price(float(s)) for s in sums] == vector.tolist()
    # and the closed form is the per-request path's sum within rounding
    for new, ctx, logits in _batches(rng, u, 8):
        closed = cm.uniform_step_times(new.size, u, np.array([int(ctx.sum())]), new.size * u)
        assert closed[0] == pytest.approx(cm.breakdown(new, ctx, logits).time_s, rel=REL)


@pytest.mark.parametrize("profile", PROFILES)
def test_a_decode_stretch_in_one_call(profile):
    # what fast-forward asks: K decode iterations, every request one token longer each time
    cm = _cost_model(profile, "llama-2-70b", 2, "graphs")
    ctx = np.random.default_rng(3).integers(1, 4000, 48).astype(np.float64)
    steps = 40
    times = cm.uniform_step_times(48, 1, int(ctx.sum()) + 48 * np.arange(steps), 48)
    expected = [cm.step_time(np.ones(48), ctx + j, np.ones(48)) for j in range(steps)]
    assert np.array_equal(times, np.array(expected))
    assert [cm.uniform_step_time(48, 1, int(ctx.sum()) + 48 * j, 48)
            for j in range(steps)] == expected
    assert cm.chain_decode_time(ctx, steps) == pytest.approx(sum(expected), rel=REL)
    by_request = sum(cm.breakdown(np.ones(48), ctx + j).time_s for j in range(steps))
    assert float(times.sum()) == pytest.approx(by_request, rel=REL)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("execution", EXECUTIONS)
def test_many_draft_chains_in_one_call(profile, execution):
    # what a chain stretch asks (simulator/engine/chain_stretch.py): the draft's gamma
    # forwards of K iterations, each bitwise chain_decode_time over its own batch
    cm = _cost_model(profile, "opt-125m", 1, execution)
    rng = np.random.default_rng([PROFILES.index(profile), EXECUTIONS.index(execution)])
    for steps in (1, 2, 3, 4, 7, 8, 9, 16, 33, 64):
        n = int(rng.integers(1, 300))
        batches = [rng.integers(0, 2048, n).astype(np.float64) for _ in range(6)]
        sums = np.array([int(c.sum()) for c in batches], dtype=np.int64)
        many = cm.chain_decode_times(n, sums, steps)
        one = np.array([cm.chain_decode_time(c, steps) for c in batches])
        if many is None:  # no closed form: chain_decode_time takes another path
            assert cm.uniform_step_times(n, 1, sums, n) is None
            assert chain_draft_pricer(cm, n, steps) is None
            continue
        assert many.shape == (6,) and np.array_equal(many, one)
        # one batch's as a function of its context sum: bitwise, where numpy adds the
        # forwards left to right (fewer than 8 of them)
        price = chain_draft_pricer(cm, n, steps)
        if steps >= 8:
            assert price is None
        else:
            assert [price(float(s)) for s in sums] == one.tolist()
    assert cm.chain_decode_times(5, np.array([10]), 0) is None
    assert cm.chain_decode_times(0, np.array([10]), 4) is None


def test_piecewise_graphs_in_the_closed_form():
    # u > 128 is not vLLM's uniform-decode case: piecewise graphs while the tokens fit a
    # captured size.  Llama-2-70B at 200 queries a request is compute-bound at every context.
    cm = _cost_model("a100-80gb", "llama-2-70b", 2, "graphs")
    assert cm._uniform(2, 200.0, 400.0).mode == "piecewise"
    for ctx in ([0.0, 0.0], [17.0, 4000.0], [3000.0, 5.0]):
        new = np.full(2, 200.0)
        closed = cm.uniform_step_times(2, 200, np.array([int(sum(ctx))]), 400)[0]
        assert cm.step_time(new, np.array(ctx)) == closed
        assert closed == pytest.approx(cm.breakdown(new, ctx).time_s, rel=REL)


def test_no_closed_form_where_the_roof_can_switch_or_the_step_model_differs():
    hw, model = load_profile("a100-80gb"), load_model("llama-2-70b")
    ctx = np.random.default_rng(4).integers(0, 6000, 32).astype(np.float64)
    sums = np.array([int(ctx.sum())])
    curved = dataclasses.replace(hw, memory_efficiency_curve=((1e3, 0.3), (1e9, 0.9)))
    cases = {
        "switching roof": (CostModel(hw, model, Parallelism(tensor_parallel=2)), 32),
        "curved roofline": (CostModel(curved, model), 1),
        "micro-batched pipeline": (CostModel(hw, model, Parallelism(
            pipeline_parallel=2, micro_batches=2)), 1),
        "single roofline": (CostModel(hw, model, execution=dataclasses.replace(
            resolve_execution(hw), step_model="single_roofline")), 1),
    }
    for name, (cm, u) in cases.items():
        assert cm.uniform_step_times(32, u, sums, 32 * u) is None, name
        assert cm.uniform_step_time(32, u, int(sums[0]), 32 * u) is None, name
        assert cm.uniform_pricer(32, u, 32 * u) is None, name
        new = np.full(32, float(u))
        assert cm.step_time(new, ctx) == pytest.approx(cm.breakdown(new, ctx).time_s,
                                                       rel=REL), name
    cm = cases["switching roof"][0]
    for n, u in ((0, 1), (4, 0), (4, 2.5)):
        assert cm.uniform_step_times(n, u, sums, 4) is None


def test_attention_line_is_the_max_of_the_two_roofs_or_none():
    roof = _profile("a100-80gb-flat").roofline("fp16")
    rng = np.random.default_rng(5)
    x = np.concatenate(([0.0], np.geomspace(1e-3, 1e9, 400)))
    for _ in range(300):
        fs, fb, bs, bb = rng.uniform(0.0, 1e12, 4) * rng.choice([1e-3, 1.0], 4)
        line = roof.attention_line(ATTENTION_DECODE, fs, fb, bs, bb)
        comp = fs * roof.inverse_compute_rate * x + fb * roof.inverse_compute_rate
        mem = bs * roof.inverse_memory_rate * x + bb * roof.inverse_memory_rate
        # one line for every x >= 0 exactly when one roof is above (or on) the other
        one_roof = bool(np.all(comp >= mem) or np.all(mem >= comp))
        assert (line is not None) == one_roof
        if line is not None:
            slope, intercept, latency, floor = line
            assert latency == floor == 0.0
            np.testing.assert_allclose(slope * x + intercept, np.maximum(comp, mem),
                                       rtol=1e-14)


def test_attention_line_with_kernel_shapes_uses_the_kind_rates():
    roof = _profile("a100-80gb").roofline("fp16")
    for kind in (ATTENTION_DECODE, ATTENTION_PREFILL):
        crate, mrate, latency, floor = roof.kind_rates(kind)
        slope, intercept, lat, flo = roof.attention_line(kind, 1.0, 2.0, 1e6, 3e6)
        assert (slope, intercept) == (1e6 / mrate, 3e6 / mrate) and (lat, flo) == (latency,
                                                                                 floor)
        # compute's slope twice memory's, its intercept far below: the roofs cross
        assert roof.attention_line(kind, 2e6 * crate / mrate, 1.0, 1e6, 3e6) is None
    curved = dataclasses.replace(load_profile("a100-80gb"),
                                 compute_efficiency_curve=((1e6, 0.2), (1e12, 0.7)))
    assert curved.roofline("fp16").attention_line(ATTENTION_DECODE, 1, 1, 1, 1) is None


def test_attention_time_is_the_kernel_formula_written_out():
    # one decode kernel over the 1-query requests, one multi-query kernel over the others,
    # each max(sum of per-request roofs + latency, floor); 0-query requests are not there
    roof = _profile("a100-80gb").roofline("fp16")
    rng = np.random.default_rng(6)
    for _ in range(100):
        n = int(rng.integers(1, 80))
        queries = rng.choice([0.0, 1.0, 1.0, 1.0, 5.0, 512.0], n)
        flops = rng.uniform(1e6, 1e11, n)
        nbytes = rng.uniform(1e4, 1e9, n)
        expected = 0.0
        for kind, members in ((ATTENTION_DECODE, queries == 1), (ATTENTION_PREFILL,
                                                                 queries > 1)):
            if members.any():
                crate, mrate, latency, floor = roof.kind_rates(kind)
                total = sum(max(f / crate, b / mrate)
                            for f, b in zip(flops[members], nbytes[members]))
                expected += max(total + latency, floor)
        assert roof.attention_time(flops, nbytes, queries) == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("execution", EXECUTIONS)
def test_mixed_batches_match_the_breakdown(profile, execution):
    cm = _cost_model(profile, "llama-2-70b", 2, execution)
    rng = np.random.default_rng(7)
    for i in range(25):
        n = int(rng.integers(1, 100))
        new = rng.choice([1.0, 1.0, 1.0, 4.0, 6.0], n)
        new[: i % 3] = rng.integers(16, 600, i % 3)   # prefill chunks
        if i % 4 == 0:
            new[-(i % 5 + 1):] = 0.0                  # requests with nothing to compute
        ctx = rng.integers(0, 6000, n).astype(np.float64)
        logits = (new > 0).astype(np.float64)
        assert cm.step_time(new, ctx, logits) == pytest.approx(
            cm.breakdown(new, ctx, logits).time_s, rel=REL)


def _close(a: float, b: float) -> bool:
    """Within REL of ``b``, relative only (pytest.approx adds an absolute 1e-12, loose here)."""
    return abs(a - b) <= REL * abs(b)


def test_the_memos_and_tables_are_bounded_and_keep_pricing_right(monkeypatch):
    monkeypatch.setattr(token_terms, "MEMO_SIZE", 64)
    monkeypatch.setattr(token_terms, "TABLE_MAX", 2048)  # read when a model is built
    cm = _cost_model("a100-80gb", "llama-2-7b", 1, "graphs")
    rng = np.random.default_rng(8)
    for total in range(1, 200):
        chunk = float(total if total % 2 else 2048 + 37 * total)  # past the tables: scalar
        new = np.array([chunk, 1.0])  # a chunk and a decode: the general path
        ctx = np.array([0.0, float(rng.integers(0, 4000))])
        cm.step_time(new, ctx)
        cm.step_time(np.ones(total), rng.integers(0, 4000, total))  # uniform: closed form
        assert len(cm._tables.memo) <= 64 and len(cm._uniform_cache) <= 64
        # at most a table of the layer terms per launch mode and one of the head terms
        assert cm._tables.tabulated <= 3 * 2048
    new, ctx = np.array([3.0, 1.0]), np.array([0.0, 100.0])
    assert _close(cm.step_time(new, ctx), cm.breakdown(new, ctx).time_s)
    new, ctx = np.array([2048 + 37 * 3.0, 1.0]), np.array([0.0, 100.0])  # evicted: recomputed
    assert _close(cm.step_time(new, ctx), cm.breakdown(new, ctx).time_s)
    new, ctx = np.ones(5), np.arange(5.0)
    assert _close(cm.step_time(new, ctx), cm.breakdown(new, ctx).time_s)


# token counts around the blocks' edges, the captured sizes, and spread over the tables
_EDGES = {0, 1, 2, 3, 4, 7, 8, 9, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1023, 1024,
          1025, 2047, 2048, 4095, 4096, 65535}
COUNTS = sorted(_EDGES | set(np.random.default_rng(9).integers(0, 65536, 60).tolist()))


TABLE_MODELS = ["curved", "offload"] + [
    f"{p}:{m}:{tp}" for p, m, tp in itertools.product(PROFILES, ("llama-2-70b", "opt-13b"),
                                                      (1, 2))]


def _table_model(name: str) -> CostModel:
    """A model of TABLE_MODELS: curved efficiencies, weights offloaded, or profile:model:tp
    run eager (both launch modes' tables differ then)."""
    hw = _profile("a100-80gb")
    if name == "curved":
        curved = dataclasses.replace(hw, kernels=None,
                                     memory_efficiency_curve=((1e3, 0.3), (1e9, 0.9)),
                                     compute_efficiency_curve=((1e6, 0.2), (1e12, 0.7)))
        return CostModel(curved, _model("opt-13b"), Parallelism(tensor_parallel=2),
                         execution=eager(hw))
    if name == "offload":
        return CostModel(hw, _model("llama-2-7b"), Parallelism(offload_fraction=0.3))
    profile, model, tp = name.split(":")
    return _cost_model(profile, model, int(tp), "eager")


@pytest.mark.parametrize("name", TABLE_MODELS)
def test_table_entries_are_the_scalar_terms_within_rounding(name):
    cm = _table_model(name)
    layers = cm._layers
    for t in map(float, COUNTS):
        for mode in ("eager", "full", "piecewise"):
            scalar = token_terms.terms_time(token_terms.token_terms(cm, t, layers, True, mode))
            assert _close(cm._tables.layers(t, mode), scalar), (name, t, mode)
        scalar = token_terms.terms_time(token_terms.head_terms(cm, t))
        assert _close(cm._tables.head(t), scalar), (name, t)
    assert cm._tables.memo == {}  # every count above came from a table


def _mixed_steps(rng, count: int, top: int = 512):
    """Engine-like steps: n decodes (1 or gamma + 1 tokens) and a prefill chunk of 1..top."""
    out = []
    for _ in range(count):
        n = int(rng.integers(1, 129))
        new = np.append(np.full(n, float(rng.choice([1, 2, 5]))), float(rng.integers(1, top)))
        out.append((new, rng.integers(0, 6000, n + 1).astype(np.float64)))
    return out


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("execution", ("graphs", "eager", "async", "no-overheads"))
def test_new_token_totals_match_the_breakdown_and_the_scalar_path(profile, execution):
    cm = _cost_model(profile, "llama-2-70b", 2, execution)
    scalar = CostModel(cm.hardware, cm.model, cm.parallel, execution=cm.execution,
                       tables=False)
    rng = np.random.default_rng([PROFILES.index(profile), len(execution)])
    steps = _mixed_steps(rng, 40) + _mixed_steps(rng, 4, 70_000)  # some past the tables
    steps.append((np.array([2.5, 1.0, 1.0]), np.array([10.0, 20.0, 30.0])))  # not whole
    for new, ctx in steps:
        logits = (new > 0).astype(np.float64)
        truth = cm.breakdown(new, ctx, logits).time_s
        assert _close(cm.step_time(new, ctx, logits), truth)
        assert _close(scalar.step_time(new, ctx, logits), truth)
        assert _close(cm.step_time(new, ctx), cm.breakdown(new, ctx).time_s)


def _probes(rng):
    """Batches of every kind: mixed, uniform decode and chain (the closed form), past the
    tables, fractional tokens, a request with nothing to compute."""
    probes = _mixed_steps(rng, 6)
    probes += [(np.ones(40), rng.integers(0, 5000, 40).astype(np.float64)),
               (np.full(24, 5.0), rng.integers(0, 5000, 24).astype(np.float64)),
               (np.array([66_000.0, 1.0]), np.array([0.0, 300.0])),
               (np.array([3.5, 1.0, 0.0]), np.array([7.0, 8.0, 9.0]))]
    return probes


@pytest.mark.parametrize("profile", PROFILES)
def test_a_step_time_does_not_depend_on_what_was_priced_before(profile, monkeypatch):
    # the engine's fast-forward and step-by-step modes price steps in different orders and
    # must give bit-identical results: a batch's time is a function of the batch alone
    monkeypatch.setattr(token_terms, "MEMO_SIZE", 8)  # memo entries evicted and recomputed
    rng = np.random.default_rng(10 + PROFILES.index(profile))
    probes = _probes(rng)
    others = _mixed_steps(rng, 700, 20_000) + [
        (np.full(n, 1.0), rng.integers(0, 5000, n).astype(np.float64))
        for n in rng.integers(1, 256, 200)] + [
        (np.array([float(c), 1.0]), np.array([0.0, 5.0])) for c in rng.integers(65_536,
                                                                               90_000, 100)]
    cm = _cost_model(profile, "llama-2-70b", 2, "graphs")
    first = [cm.step_time(new, ctx) for new, ctx in probes]
    for new, ctx in others:
        cm.step_time(new, ctx)
    assert [cm.step_time(new, ctx) for new, ctx in probes] == first
    fresh = _cost_model(profile, "llama-2-70b", 2, "graphs")
    for new, ctx in others[::-1]:
        fresh.step_time(new, ctx)
    assert [fresh.step_time(new, ctx) for new, ctx in probes[::-1]] == first[::-1]
    # and the uniform probes' closed form reads the same table entries in either model
    for model in (cm, fresh):
        for (new, ctx), t in zip(probes[6:8], first[6:8]):
            vector = model.uniform_step_times(new.size, int(new[0]), np.array([ctx.sum()]),
                                              int(new.sum()))
            assert vector[0] == t
