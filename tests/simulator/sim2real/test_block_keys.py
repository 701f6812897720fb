"""Block keys of the prefix cache (simulator/engine/block_keys.py): a declared shared prefix,
a request's own blocks found again after a preemption (vLLM V1's recompute preemption with
prefix caching: vllm/v1/core/sched/scheduler.py frees a preempted request's blocks, which
stay cached in the free block queue until evicted), run only while a preempted request
waits where no prefix is shared, so that the engine keeps its fast paths the rest of the
time (simulator/engine/own_cache.py)."""
import numpy as np
import pytest

from simulator.engine.block_keys import BlockKeys, block_keys
from simulator.simulate import simulate
from tests.helpers import scenario
from tests.simulator.engine.test_fast_forward import assert_identical
from tests.simulator.engine.test_invariants import _utilisation_for_blocks
from workloads.workload import Workload


def test_a_declared_prefix_names_only_the_blocks_inside_it():
    """Group 0 shares 40 tokens = 2 full blocks of 16 (the third block holds tokens 32-47,
    past the prefix: not shared); group 1 names other keys."""
    keys = block_keys(np.array([100, 100, 100]), 16, prefix_group=np.array([0, 0, 1]),
                      shared_prefix_tokens=np.array([40, 40, 40]))
    assert [k.size for k in keys] == [2, 2, 2]
    assert (keys[0] == keys[1]).all() and not np.isin(keys[2], keys[0]).any()
    full = BlockKeys(keys, np.array([7, 7, 7]))
    assert full[0].size == 7 and (full[0][:2] == full[1][:2]).all()
    assert not np.isin(full[0][2:], full[1]).any()  # own keys: no other request's
    assert not np.isin(full[2], np.concatenate([full[0], full[1]])).any()


def test_own_keys_never_collide_with_hash_or_id_keys():
    hashes = block_keys(np.array([1024]), 16, prefix_hashes=(np.array([2**40 - 1, 3]),))
    own = BlockKeys(None, np.array([64, 64]))
    assert hashes[0].min() >= 0 and own[0].max() < 0 and own[1].max() < 0
    assert not np.isin(own[0], own[1]).any()


def _preempting(caching: bool, policy: str = "none", declared: bool = False):
    rng = np.random.default_rng(5)
    n = 30
    chain = policy != "none"
    util = _utilisation_for_blocks(60, 16, 256, chain, 8 * (4 if chain else 1))
    sc = scenario(policy, hardware="a10", target="opt-1.3b",
                  draft="opt-125m" if chain else None,
                  batching={"block_size": 16, "max_num_seqs": 8, "max_num_batched_tokens": 256,
                            "enable_chunked_prefill": True, "gpu_memory_utilization": util,
                            "enable_prefix_caching": caching})
    zero = {"prefix_group": np.zeros(n, np.int64), "shared_prefix_tokens": np.zeros(n, np.int64)}
    wl = Workload(name="p", arrival_s=np.sort(rng.uniform(0, 2, n)),
                  prompt_tokens=rng.integers(100, 600, n), output_tokens=rng.integers(20, 120, n),
                  **(zero if declared else {}))
    return simulate(sc, workload=wl)


def test_a_preempted_request_finds_its_own_blocks_again():
    """No prompt is shared, so every hit is a re-admitted request's own blocks: first
    admissions find nothing, re-admissions find some, and the prefill computed plus the hits
    covers every prompt at least once."""
    cached, plain = _preempting(True), _preempting(False)
    assert plain.requests["preemptions"].sum() > 0
    pc = cached.info["prefix_cache"]
    assert pc["keys"] == "own blocks" and pc["hits_tokens"] > 0
    assert (cached.requests["cached_tokens"] == 0).all()  # first admissions find nothing
    assert (cached.requests["status"] == "finished").all()
    prompts = int(cached.requests["prompt_tokens"].sum())
    recomputed = int(cached.steps["prefill_tokens"].sum()) - prompts
    assert recomputed >= 0
    assert int(cached.steps["prefill_tokens"].sum()) + pc["hits_tokens"] >= prompts


def test_no_cache_where_nothing_is_preempted():
    """The default scenario on an A100-80GB never preempts: no cache was started."""
    res = simulate(scenario("none", hardware="a100-80gb", target="opt-1.3b", draft=None))
    assert res.info["prefix_cache"]["keys"] is None
    assert res.requests["preemptions"].sum() == 0


@pytest.mark.parametrize("policy", ["none", "chain"])
def test_a_cache_run_while_preempted_requests_wait_is_the_one_run_throughout(policy):
    """Own keys only: running the cache only while a preempted request waits (the engine's
    fast paths the rest of the time) gives the DataFrames, hits and lookups of a cache that
    ran throughout (a shared prefix of 0 tokens makes the workload name keys, so its cache
    runs from the start)."""
    lazy, eager = _preempting(True, policy), _preempting(True, policy, declared=True)
    assert lazy.requests["preemptions"].sum() > 0
    assert lazy.info["prefix_cache"]["hits_tokens"] == eager.info["prefix_cache"]["hits_tokens"]
    assert lazy.info["prefix_cache"]["queries_tokens"] == \
        eager.info["prefix_cache"]["queries_tokens"]
    assert_identical(lazy, eager)
