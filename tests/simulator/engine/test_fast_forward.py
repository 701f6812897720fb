"""Fast-forward is exact: ``engine.fast_forward: true`` (the default) gives the same
DataFrames as the step-by-step reference (``false``), bit for bit, for every shipped scenario
and on random scenarios (speculative policies, adaptive controllers, preemption, several
replicas under both routers).  Not "statistically similar": identical."""
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cost.execution import parse_execution
from simulator.inputs.yaml_io import load_yaml_file
from simulator.scenario import EngineOptions, PolicyConfig, load_scenario, scenario_from_dict
from simulator.simulate import simulate
from tests.helpers import REPO, scenario, workload
from tests.simulator.engine.test_invariants import _utilisation_for_blocks

SCENARIOS = sorted(p for p in (REPO / "workloads" / "scenarios").glob("*.yaml")
                   if not p.name.startswith(("sweep_", "plan_", "prices_")))


def _both(sc, wl=None):
    """(fast-forward, step-by-step) results of ``sc``."""
    on = simulate(dataclasses.replace(sc, engine=EngineOptions(fast_forward=True)), workload=wl)
    off = simulate(dataclasses.replace(sc, engine=EngineOptions(fast_forward=False)),
                   workload=wl)
    return on, off


def identical_or_unservable(sc, wl=None):
    """The fast-forward result of ``sc``, checked identical to the step-by-step one; None
    where the configuration can serve nothing, which both modes must then say."""
    try:
        on, off = _both(sc, wl)
    except ValueError as exc:
        assert "max_num_batched_tokens" in str(exc) or "no request can be served" in str(exc)
        return None
    assert_identical(on, off)
    return on


def assert_identical(on, off) -> None:
    pd.testing.assert_frame_equal(on.requests, off.requests, check_exact=True)
    pd.testing.assert_frame_equal(on.steps, off.steps, check_exact=True)
    assert np.array_equal(np.asarray(on.itl_s), np.asarray(off.itl_s))
    assert np.array_equal(on.accepted_hist, off.accepted_hist)
    assert np.array_equal(on.drafted_hist, off.drafted_hist)
    s_on, s_off = on.summary(), off.summary()
    assert s_on.keys() == s_off.keys()
    for key in s_on:  # exact, NaN == NaN
        a, b = s_on[key], s_off[key]
        assert a == b or (pd.isna(a) and pd.isna(b)), key


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: Path(p).stem)
def test_every_shipped_scenario_is_identical(path):
    assert_identical(*_both(load_scenario(path)))


@pytest.mark.parametrize("path", SCENARIOS[:3] + SCENARIOS[-3:], ids=lambda p: Path(p).stem)
def test_shipped_scenarios_on_three_replicas(path):
    # a disaggregated scenario's pools set their replicas (top-level ones are refused)
    where = "disaggregation.decode." if "disaggregation" in load_yaml_file(path) else ""
    sc = load_scenario(path, [f"{where}replicas=3", "router=least_outstanding_tokens",
                              "workload.max_requests=120"])
    assert_identical(*_both(sc))


@pytest.mark.parametrize("path", SCENARIOS[:3] + SCENARIOS[-3:], ids=lambda p: Path(p).stem)
def test_shipped_scenarios_with_prefill_and_decode_apart(path):
    """SGLang's default scheduling (engine/prefill_first.py) on the shipped scenarios."""
    sc = load_scenario(path, ["batching.mixed_chunk=false", "workload.max_requests=120"])
    assert_identical(*_both(sc))


def test_fast_forward_takes_the_decode_stretches_with_steps_apart():
    """Prefill first, fast-forward still skips the pure-decode stretches: 16 requests at
    once, 64 in and 400 out, budget 512: two prefill steps (8 prompts each), then 399
    decode steps, all vectorised."""
    sc = scenario("none", hardware="a10", target="opt-1.3b", draft=None,
                  batching={"max_num_batched_tokens": 512, "mixed_chunk": False})
    on, off = _both(sc, workload(np.zeros(16), np.full(16, 64), np.full(16, 400)))
    assert_identical(on, off)
    assert on.steps["prefill_tokens"].tolist()[:3] == [512, 512, 0]
    assert len(on.steps) == 2 + 399 and on.info["engine"]["vectorised"] == 399


def test_fast_forward_takes_the_decode_stretches():
    """The reference and fast-forward agree and fast-forward really skips: a long decode-only
    batch (16 requests, 400 tokens each, no arrivals after the first) under ``none``."""
    sc = scenario("none", hardware="a10", target="opt-1.3b", draft=None)
    wl = workload(np.zeros(16), np.full(16, 64), np.full(16, 400))
    on, off = _both(sc, wl)
    assert_identical(on, off)
    assert len(on.steps) == 1 + 399  # one prefill step, then one decode step per token
    # the reference yields to SimPy every iteration; fast-forward computes every decode
    # iteration (the last one retiring the batch) in vectorised passes, yielding never
    assert off.info["engine"]["timeouts"] == 400 and off.info["engine"]["vectorised"] == 0
    assert on.info["engine"]["vectorised"] == 399 and on.info["engine"]["timeouts"] == 0
    assert on.info["engine"]["iterations"] == off.info["engine"]["iterations"] == 400


@pytest.mark.parametrize("target, policy, chunked", [
    ("deepseek-v3", {"name": "none"}, True),
    ("deepseek-v3", {"name": "mtp", "num_speculative_tokens": 1}, True),
    ("llama-3.1-70b", {"name": "none"}, False)])
def test_vllm_v0_runs_with_steps_apart_identically(target, policy, chunked):
    """vLLM 0.7.x runs an MLA model without chunked prefill, and any model whose scenario
    turns it off, prefill and decode steps apart (simulator/engine_overrides.py), on the real
    cost model: fast-forward agrees with the reference and still skips the decode
    stretches; no step carries both kinds."""
    sc = scenario_from_dict({
        "name": "v0-apart", "hardware": "h200", "target": target, "policy": policy,
        "parallelism": {"tensor_parallel": 8}, "execution": {"engine": "vllm-v0.7"},
        "acceptance": {"model": "iid", "alpha": 0.8},
        "batching": {"max_num_seqs": 16, "enable_chunked_prefill": chunked},
        "workload": {"synthetic": {"num_requests": 24,
                                   "arrival": {"process": "poisson", "rate_per_s": 4.0},
                                   "prompt": {"dist": "fixed", "tokens": 128},
                                   "output": {"dist": "fixed", "tokens": 48}}}}, source="test")
    on, off = _both(sc)
    assert_identical(on, off)
    both = (on.steps["prefill_tokens"] > 0) & (on.steps["num_decode"] > 0)
    assert not both.any() and on.info["engine"]["vectorised"] > 0
    assert on.info["engine_override"]


POLICIES = [("none", {}), ("chain", {"num_speculative_tokens": 1}),
            ("chain", {"num_speculative_tokens": 4}),
            ("adaptive", {"base": {"name": "chain", "num_speculative_tokens": 6},
                          "controller": {"kind": "goodput", "prior_alpha": 0.5}}),
            ("adaptive", {"base": {"name": "chain", "num_speculative_tokens": 4},
                          "draft_len_schedule": [[2, 4], [8, 2], [64, 1]]})]


@st.composite
def cases(draw):
    n = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.floats(0, 0.3), min_size=n, max_size=n))
    prompt = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 80), min_size=n, max_size=n))
    policy = draw(st.sampled_from(range(len(POLICIES))))
    return {"arrival": np.cumsum(gaps), "prompt": prompt, "output": output, "policy": policy,
            "alpha": draw(st.floats(0, 1)), "block_size": draw(st.sampled_from([1, 8, 16])),
            "blocks": draw(st.integers(30, 200)), "seqs": draw(st.integers(1, 16)),
            "batched": draw(st.integers(16, 512)), "chunked": draw(st.booleans()),
            "replicas": draw(st.integers(1, 3)),
            "router": draw(st.sampled_from(["round_robin", "least_outstanding_tokens"])),
            "seed": draw(st.integers(0, 2**31)),
            "per_request": draw(st.booleans()),  # per-request alphas (beta-drawn) or one
            "mixed": draw(st.booleans())}  # prefill chunks in decode steps, or steps apart


@settings(max_examples=60, deadline=None, derandomize=True,  # same examples every run
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_random_scenarios_are_identical(case):
    _random_case(case)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_random_scenarios_with_steps_apart_are_identical(case):
    """Prefill and decode steps apart (engine/prefill_first.py) under every policy: the
    chain and varied stretches start only where the head cannot be admitted on the whole
    budget."""
    _random_case({**case, "mixed": False})


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_random_scenarios_with_sglangs_reservation_are_identical(case):
    """Steps apart under SGLang's KV reservation (engine/reserve.py): a stretch starts only
    where the head is blocked without the reservation, and the ratio's decay counts the
    stretch's decode steps."""
    _random_case({**case, "mixed": False}, engine="sglang-v0.5")


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_random_scenarios_on_vllm_09_are_identical(case):
    """vLLM 0.9's engine: every captured forward piecewise, a uniform batch's too
    (engines.yaml piecewise_graphs), and its speculative path's host work."""
    _random_case(case, engine="vllm-v0.9")


def _random_case(case, engine: str | None = None) -> None:
    name, params = POLICIES[case["policy"]]
    gamma = 6 if name == "adaptive" else params.get("num_speculative_tokens", 0)
    util = _utilisation_for_blocks(case["blocks"], case["block_size"], case["batched"],
                                   name != "none", case["seqs"] * (1 + gamma))
    sc = scenario("none", alpha=case["alpha"], hardware="a10", target="opt-1.3b",
                  draft="opt-125m", replicas=case["replicas"], router=case["router"],
                  seed=case["seed"],
                  batching={"block_size": case["block_size"], "max_num_seqs": case["seqs"],
                            "max_num_batched_tokens": case["batched"],
                            "enable_chunked_prefill": case["chunked"],
                            "gpu_memory_utilization": util, "mixed_chunk": case["mixed"]})
    sc = dataclasses.replace(sc, policy=PolicyConfig(name, params))
    if engine is not None:  # the pool still sized by gpu_memory_utilization (util above)
        ex = parse_execution({"engine": engine}, source="test")
        spec = dataclasses.replace(ex["spec"], mem_fraction_static=False)
        sc = dataclasses.replace(sc, execution={**ex, "spec": spec})
    if case["per_request"]:
        sc = dataclasses.replace(sc, acceptance={"model": "per_request", "mean": case["alpha"],
                                                 "concentration": 3.0})
    identical_or_unservable(sc, workload(case["arrival"], case["prompt"], case["output"]))


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding_tokens"])
@pytest.mark.parametrize("policy", ["none", "chain:num_speculative_tokens=3"])
def test_ties_between_arrivals_and_step_ends(router, policy):
    """Every step takes 0.25 s and requests arrive on multiples of 0.25 s: arrivals and step
    completions tie exactly, and the router reads replicas at those instants.  Arrivals are
    URGENT events, so both modes route before a tied step completes."""
    from tests.helpers import ConstantCost
    rng = np.random.default_rng(7)
    n = 60
    arrival = np.sort(rng.integers(0, 40, n)) * 0.25
    sc = scenario(policy, hardware="a10", target="opt-1.3b", draft="opt-125m", replicas=3,
                  router=router, batching={"max_num_seqs": 4, "max_num_batched_tokens": 256})
    wl = workload(arrival, rng.integers(1, 200, n), rng.integers(1, 30, n))
    cost = ConstantCost(0.25)
    on = simulate(dataclasses.replace(sc, engine=EngineOptions(fast_forward=True)),
                  workload=wl, target_cost=cost, draft_cost=cost)
    off = simulate(dataclasses.replace(sc, engine=EngineOptions(fast_forward=False)),
                   workload=wl, target_cost=cost, draft_cost=cost)
    assert_identical(on, off)
    starts = on.steps["start_s"].to_numpy()
    assert np.isin(starts, arrival).any()  # the ties this test is about do happen


@pytest.mark.parametrize("steps_table", ["sampled", "off"])
def test_kept_rows_and_summary_do_not_depend_on_the_mode(steps_table):
    """With the steps table sampled or off, both modes keep the same rows, and the summary
    (from exact totals over every step) equals that of the run that kept every row."""
    sc = load_scenario(None, ["replicas=2", "workload.max_requests=150"])
    runs = {}
    for table in ("all", steps_table):
        for ff in (True, False):
            runs[table, ff] = simulate(dataclasses.replace(
                sc, engine=EngineOptions(fast_forward=ff, steps_table=table)))
    assert_identical(runs[steps_table, True], runs[steps_table, False])
    full, kept = runs["all", True], runs[steps_table, True]
    assert kept.info["steps_table"]["rows_total"] == len(full.steps)
    if steps_table == "off":
        assert len(kept.steps) == 0
    else:  # under SAMPLED_ROWS_CAP a sampled table has stride 1: every row
        pd.testing.assert_frame_equal(kept.steps, full.steps, check_exact=True)
    s_full, s_kept = full.summary(), kept.summary()
    assert all(s_full[k] == s_kept[k] or (pd.isna(s_full[k]) and pd.isna(s_kept[k]))
               for k in s_full)


@pytest.mark.parametrize("acceptance", [{"model": "iid", "alpha": 0.7},
                                        {"model": "per_request", "mean": 0.6,
                                         "concentration": 4.0}])
def test_chain_stretches_are_taken_and_identical(acceptance):
    """Chain speculation is fast-forwarded too (simulator/engine/chain_stretch.py), with its
    random acceptance: the same draws in the same order, so the same results.  The prompts
    straddle the draft's context (llama-68m: 2048; the target's is 4096), so requests stop
    being speculated mid-run (vLLM's rule)."""
    rng = np.random.default_rng(11)
    n = 40
    sc = scenario("chain:num_speculative_tokens=4", hardware="a100-40gb", target="llama-2-7b",
                  draft="llama-68m", replicas=2,
                  batching={"max_num_seqs": 16, "max_num_batched_tokens": 2048,
                            "block_size": 16})
    sc = dataclasses.replace(sc, acceptance=acceptance)
    prompt = np.where(rng.random(n) < 0.3, rng.integers(1950, 2040, n), rng.integers(8, 400, n))
    wl = workload(np.sort(rng.uniform(0, 20, n)), prompt, rng.integers(20, 200, n))
    on, off = _both(sc, wl)
    assert_identical(on, off)
    steps = on.steps
    full = steps["draft_tokens"] == 4 * steps["num_decode"]
    assert (~full & (steps["num_decode"] > 0)).any()  # some decodes were not speculated
    info = on.info["engine"]
    assert off.info["engine"]["vectorised"] == 0
    assert info["vectorised"] > info["iterations"] / 4  # stretches were taken
    # and the stretches' draws were the step-by-step ones: acceptance really varied
    assert steps.loc[full & (steps["num_decode"] > 0), "accepted_tokens"].nunique() > 5


def test_chain_stretch_gives_back_unused_draws():
    """A stretch draws a block of uniforms, keeps the iterations before its first stop and
    restores the generator for the rest: after a run the replicas' generators stand where
    the step-by-step ones stand (the same number of draws)."""
    from simulator.engine.replica import Replica
    states = {}
    init = Replica.__init__

    def keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        states.setdefault(self.fast_forward, []).append(self.rng)

    sc = scenario("chain:num_speculative_tokens=3", hardware="a10", target="opt-1.3b",
                  draft="opt-125m", replicas=2)
    rng = np.random.default_rng(3)
    wl = workload(np.sort(rng.uniform(0, 10, 30)), rng.integers(8, 300, 30),
                  rng.integers(5, 120, 30))
    Replica.__init__ = keep
    try:
        on, off = _both(sc, wl)
    finally:
        Replica.__init__ = init
    assert_identical(on, off)
    assert on.info["engine"]["vectorised"] > 0
    for a, b in zip(states[True], states[False]):
        assert a.bit_generator.state == b.bit_generator.state


@pytest.mark.parametrize("gamma", [4, 9])
def test_chain_admissions_run_fused_and_identical(gamma, monkeypatch):
    """Under fast-forward the chain iterations a stretch does not take (mostly admissions:
    every decode drafting, a new prompt's chunk) run fused (simulator/engine/chain_step.py):
    the same results as the ordinary path.  gamma 9: the draft's nine forwards are summed
    pairwise by numpy, so no scalar price applies and both the fused step and the stretch's
    first pass take the vectorised prices."""
    import simulator.engine.replica as replica_module
    fused = []
    complete = replica_module.chain_complete

    def counted(replica, spec, step, now):
        fused.append(int(step.prefill_pos.size))
        complete(replica, spec, step, now)

    monkeypatch.setattr(replica_module, "chain_complete", counted)
    rng = np.random.default_rng(gamma)
    n = 60
    sc = scenario(f"chain:num_speculative_tokens={gamma}", hardware="a100-40gb",
                  target="llama-2-7b", draft="llama-68m", replicas=2,
                  batching={"max_num_seqs": 24, "max_num_batched_tokens": 1024})
    wl = workload(np.sort(rng.uniform(0, 12, n)), rng.integers(8, 1500, n),
                  rng.integers(10, 150, n))
    on, off = _both(sc, wl)
    assert_identical(on, off)
    assert len(fused) > n / 2 and sum(1 for p in fused if p) > n / 2  # admissions, fused
    assert on.info["engine"]["vectorised"] > 0
