"""SGLang's admission-time KV reservation (``new_token_ratio``: simulator/engine/reserve.py,
admission.py) against hand-worked numbers.

Sources (sglang 0.5.3, the release GPUStack's SGLang cases ran): global_config.py
``default_init_new_token_ratio`` 0.7, ``default_min_new_token_ratio_factor`` 0.14,
``default_new_token_ratio_decay_steps`` 600, ``retract_decode_steps`` 20; server_args.py
``schedule_conservativeness`` 1.0; managers/scheduler.py lines 568-581 (init, floor, step),
2024-2028 (the decay at every decode batch), 1605-1608 (the reset when idle);
managers/schedule_batch.py lines 1560-1566 (the retraction's estimate);
managers/schedule_policy.py lines 365-372 (the running requests' offset), 559-569
(``add_one_req``: refused where ``extend_input_len + min(max_new_tokens, 4096) >=
rem_total_tokens``), 428 (``_update_prefill_budget``).
"""
import dataclasses

import numpy as np
import pytest

from simulator.cost.execution import parse_execution
from simulator.cost.spec_catalog import _entry
from simulator.engine.reserve import RatioClock, TokenRatio
from simulator.inputs.errors import SpecsimError
from simulator.scenario import PolicyConfig
from simulator.simulate import simulate, token_ratio
from tests.helpers import ConstantCost, scenario, workload
from tests.simulator.engine.test_fast_forward import POLICIES, _both, assert_identical
from tests.simulator.engine.test_invariants import _utilisation_for_blocks

SGLANG = TokenRatio.of(0.7, 1.0, 0.14, 600, 4096, 20)
STEP = (0.7 - 0.7 * 0.14) / 600  # scheduler.py new_token_ratio_decay
D = 0.25  # seconds a forward: the closed forms count steps


def _engine(sc, name):
    """``sc`` on engine ``name``, its KV pool still sized by gpu_memory_utilization (vLLM's
    rule, which _utilisation_for_blocks inverts), not by SGLang's mem_fraction_static."""
    ex = parse_execution({"engine": name}, source="test")
    spec = dataclasses.replace(ex["spec"], mem_fraction_static=False)
    return dataclasses.replace(sc, execution={**ex, "spec": spec})


def test_the_sglang_entries_carry_sglangs_defaults():
    for name in ("sglang-v0.4", "sglang-v0.4.5", "sglang-v0.5"):
        got = token_ratio(_engine(scenario("none"), name))
        assert got == SGLANG
    assert SGLANG.init == 0.7 and SGLANG.floor == pytest.approx(0.098, abs=1e-15)
    assert SGLANG.step == pytest.approx(STEP, rel=1e-15)


def test_no_reservation_without_an_sglang_engine_or_with_mixed_steps():
    assert token_ratio(scenario("none")) is None  # no engine named
    assert token_ratio(_engine(scenario("none"), "vllm-v0.9")) is None
    mixed = scenario("none", batching={"mixed_chunk": True})  # --enable-mixed-chunk
    assert token_ratio(_engine(mixed, "sglang-v0.5")) is None


def test_the_decay_and_its_floor():
    """0.7 less one step a decode batch, down to 0.098 after 600 of them, and no lower."""
    assert SGLANG.at(0.7, 0) == 0.7
    assert SGLANG.at(0.7, 1) == pytest.approx(0.7 - STEP, rel=1e-15)
    assert SGLANG.at(0.7, 300) == pytest.approx(0.399, rel=1e-12)  # halfway: (0.7+0.098)/2
    assert SGLANG.at(0.7, 600) == pytest.approx(0.098, rel=1e-12)
    assert SGLANG.at(0.7, 601) == SGLANG.at(0.7, 10**6) == SGLANG.floor


def test_the_retraction_estimate():
    """(emitted + 20 per request) / output lengths, at most 1: (10 + 30 + 40) / 200."""
    assert SGLANG.retracted(np.array([10, 30]), np.array([100, 100])) == 0.4
    assert SGLANG.retracted(np.array([90, 95]), np.array([100, 100])) == 1.0


def test_the_clock_counts_decode_steps_and_resets():
    """7 steps of which 2 prefill: 5 decays; a retraction at step 7 (the 8th) sets the
    estimate, which decays from step 9 on; going idle puts it back to 0.7."""
    clock = RatioClock(SGLANG)
    clock.prefills = 2
    assert clock.ratio(7) == SGLANG.at(0.7, 5)
    clock.retract(7, np.array([10, 30]), np.array([100, 100]))
    assert clock.ratio(8) == 0.4 and clock.ratio(10) == SGLANG.at(0.4, 2)
    clock.reset(10)
    assert clock.ratio(10) == 0.7


def _first_admission_step(kv: int) -> int:
    """Decode steps A runs before B is admitted, by hand: after m of them A holds 10 + m
    tokens of the ``kv`` (block size 1) and has 1,499 - m left to write, reserved at the
    ratio r_m; B (999 in, 1 out) needs 999 + 1 < kv - (10 + m) - (1,499 - m) * r_m."""
    for m in range(2000):
        room = kv - (10 + m) - (1499 - m) * max(0.7 - m * STEP, 0.098)
        if 999 + 1 < room:
            return m
    raise AssertionError("never admitted")


def _two_requests(engine):
    sc = scenario("none", hardware="a10", target="opt-1.3b", draft=None,
                  batching={"block_size": 1, "max_num_batched_tokens": 1024,
                            "mixed_chunk": False, "gpu_memory_utilization":
                            _utilisation_for_blocks(2000, 1, 1024, False, 1)})
    sc = sc if engine is None else _engine(sc, engine)
    return simulate(sc, workload=workload([0.0, 0.0], [10, 999], [1500, 1]),
                    target_cost=ConstantCost(D))


def test_a_prefill_waits_for_the_reservation_to_shrink():
    """A (10 in, 1,500 out) and B (999 in, 1 out) at t = 0 on about 2,000 KV tokens (1,936
    here: the deployment's).  Step 1 admits A into the empty replica and leaves 1,936 - (10 +
    1,500) = 426 of room, below B's 1,000: refused.  Then each decode step frees more of A's
    reservation than A writes (the ratio falls 0.001 a step over ~1,500 tokens), and B is
    admitted after the hand-computed number of decode steps (on 2,000 tokens 52: after 51
    the room is 2,000 - 61 - 1,448 x 0.64883 = 999.5, after 52 it is 2,000 - 62 - 1,447 x
    0.64783 = 1,000.6).  Without the reservation both prefill together in step 1."""
    assert _first_admission_step(2000) == 52
    res = _two_requests("sglang-v0.5")
    steps = res.steps
    kv = round(steps["kv_blocks_used"].iloc[0] / steps["kv_occupancy"].iloc[0])
    m = _first_admission_step(kv)
    assert kv == 1936 and m > 52  # less KV: a longer wait
    assert steps["prefill_tokens"].tolist()[:m + 3] == [10] + [0] * m + [999, 0]
    assert res.requests["ttft_s"].tolist()[1] == (m + 2) * D
    plain = _two_requests(None).steps
    assert plain["prefill_tokens"].tolist()[:2] == [1009, 0]


def _loaded(policy: int, reserve: bool):
    """40 requests with long outputs on ~2,400 KV tokens (block size 8): the reservation
    holds admissions back for most of the run."""
    rng = np.random.default_rng(3)
    sc = _engine(scenario("none", hardware="a10", target="opt-1.3b", draft="opt-125m",
                          batching={"block_size": 8, "max_num_batched_tokens": 512,
                                    "max_num_seqs": 32, "mixed_chunk": False,
                                    "gpu_memory_utilization":
                                    _utilisation_for_blocks(300, 8, 512, True, 32 * 5)}),
                 "sglang-v0.5")
    if not reserve:  # the same engine without its reservation
        spec = dataclasses.replace(sc.execution["spec"], init_new_token_ratio=0.0)
        sc = dataclasses.replace(sc, execution={**sc.execution, "spec": spec})
    sc = dataclasses.replace(sc, policy=PolicyConfig(*POLICIES[policy]))
    wl = workload(np.cumsum(rng.exponential(0.05, 40)), rng.integers(20, 200, 40),
                  rng.integers(100, 500, 40))
    return wl, sc


@pytest.mark.parametrize("policy", [0, 2, 3, 4])  # none, a chain, adaptive (two kinds)
def test_fast_forward_is_exact_under_the_reservation(policy):
    """Identical DataFrames with fast-forward on and off where the reservation binds (the
    run differs from the one without it)."""
    wl, sc = _loaded(policy, True)
    assert_identical(*_both(sc, wl))
    _, plain = _loaded(policy, False)
    assert not simulate(plain, workload=wl).steps.equals(simulate(sc, workload=wl).steps)


def test_a_partial_reservation_in_the_catalog_names_the_missing_key():
    item = {"value": 0.7, "source": "test"}
    with pytest.raises(SpecsimError, match="x.min_new_token_ratio_factor"):
        _entry("x", {"version": "v", "init_new_token_ratio": item}, "engines.yaml")
