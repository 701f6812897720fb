"""Automatic prefix caching (simulator/engine/prefix_cache.py), as vLLM V1 does it.

Closed forms: requests sharing an N-block prefix each save exactly N blocks of prefill once
it is cached; a fully shared prompt still computes its last token (vLLM's
``num_tokens - 1`` cap).  The free block queue's order (vllm/v1/core/block_pool.py: taken
from the head, a request's blocks returned to the tail last block first) checked on the
data structure.  Invariants on random scenarios: the KV budget counts physical blocks
(cached + free = the budget, always), and fast-forward stays bit-for-bit exact."""
import dataclasses

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.engine.block_keys import block_keys
from simulator.engine.prefix_cache import PrefixCache
from simulator.engine.replica import Replica
from simulator.scenario import PolicyConfig
from simulator.simulate import simulate
from tests.helpers import scenario
from tests.simulator.engine.test_fast_forward import (
    POLICIES,
    _both,
    assert_identical,
    identical_or_unservable,
)
from tests.simulator.engine.test_invariants import _utilisation_for_blocks
from workloads.workload import Workload

BS = 16


def _workload(arrival, prompt, output, hashes, hash_block=BS) -> Workload:
    return Workload(name="prefix", arrival_s=np.asarray(arrival, float),
                    prompt_tokens=np.asarray(prompt, np.int64),
                    output_tokens=np.asarray(output, np.int64),
                    prefix_hashes=tuple(np.asarray(h, np.int64) for h in hashes),
                    hash_block_tokens=hash_block)


def _shared_prefix(n_blocks: int, tails, hash_block=BS):
    """Requests whose prompts share ``n_blocks`` blocks of ``hash_block`` tokens, then a
    private tail of ``tails[i]`` tokens (fresh ids)."""
    hashes, prompt, fresh = [], [], 1000
    for tail in tails:
        own = -(-tail // hash_block)
        hashes.append(list(range(n_blocks)) + list(range(fresh, fresh + own)))
        fresh += own
        prompt.append(n_blocks * hash_block + tail)
    return prompt, hashes


def _sc(caching=True, **batching):
    sc = scenario("none", hardware="a10", target="opt-1.3b", draft=None,
                  batching={"enable_prefix_caching": caching, **batching})
    return sc


@pytest.mark.parametrize("hash_block", [BS, 512])
def test_a_shared_prefix_saves_exactly_its_blocks_per_hit(hash_block):
    """Six requests, one at a time (each arrives after the previous one finished): the
    first computes the shared prefix, every later one finds it, whole, in the cache."""
    n_blocks = 3 if hash_block == BS else 1  # 48 tokens; 512 tokens = 32 engine blocks
    tails = [5, 17, 40, 1, 33, 16]
    prompt, hashes = _shared_prefix(n_blocks, tails, hash_block)
    wl = _workload(np.arange(6) * 100.0, prompt, np.full(6, 4), hashes, hash_block)
    on, off = simulate(_sc(True), workload=wl), simulate(_sc(False), workload=wl)
    saved = n_blocks * hash_block  # tokens: whole engine blocks (16 | hash_block)
    assert on.requests["cached_tokens"].tolist() == [0] + [saved] * 5
    assert off.requests["cached_tokens"].tolist() == [0] * 6
    assert on.steps["prefill_tokens"].sum() == sum(prompt) - 5 * saved
    assert off.steps["prefill_tokens"].sum() == sum(prompt)
    s = on.summary()
    assert s["prefix_cached_tokens"] == 5 * saved
    assert s["prefix_cache_hit_rate"] == pytest.approx(5 * saved / sum(prompt))
    # the TTFT effect: each hit request's first token comes sooner than without the cache
    ttft_on, ttft_off = on.requests["ttft_s"].to_numpy(), off.requests["ttft_s"].to_numpy()
    assert ttft_on[0] == ttft_off[0] and (ttft_on[1:] < ttft_off[1:]).all()


def test_a_fully_cached_prompt_still_computes_its_last_token():
    """Identical 64-token prompts: the hit stops one block short, (64 - 1) // 16 = 3 blocks
    (vLLM recomputes the last token for its logits, kv_cache_manager.get_computed_blocks)."""
    wl = _workload([0.0, 100.0], [64, 64], [3, 3], [[7, 8, 9, 10]] * 2)
    res = simulate(_sc(), workload=wl)
    assert res.requests["cached_tokens"].tolist() == [0, 48]


def test_requests_admitted_together_do_not_share_uncomputed_blocks():
    """Arriving at once and admitted in the same step, neither finds the other's prefix: a
    block is cached only once it is computed."""
    prompt, hashes = _shared_prefix(3, [10, 10])
    res = simulate(_sc(), workload=_workload([0.0, 0.0], prompt, [2, 2], hashes))
    assert res.requests["cached_tokens"].tolist() == [0, 0]


def test_token_ids_name_the_blocks():
    """A token-level workload: prompts sharing their first 40 ids share 2 full blocks."""
    rng = np.random.default_rng(3)
    head = rng.integers(300, 900, 40)
    prompts = tuple(np.concatenate((head, rng.integers(300, 900, n))) for n in (30, 9, 50))
    outputs = tuple(rng.integers(300, 900, 5) for _ in prompts)
    wl = Workload(name="ids", arrival_s=np.arange(3) * 100.0,
                  prompt_tokens=np.array([p.size for p in prompts]),
                  output_tokens=np.full(3, 5), prompt_ids=prompts, output_ids=outputs)
    res = simulate(_sc(), workload=wl)
    assert res.requests["cached_tokens"].tolist() == [0, 32, 32]


def test_block_keys_from_hashes_name_prefixes():
    """With 512-token hash blocks and 16-token engine blocks, two prompts sharing their
    first hash id share exactly the 32 engine blocks inside it."""
    keys = block_keys(np.array([600, 700]), 16, prefix_hashes=(np.array([5, 6]),
                                                               np.array([5, 9])))
    assert keys[0].size == 600 // 16 and keys[1].size == 700 // 16
    assert (keys[0][:32] == keys[1][:32]).all() and not np.isin(keys[0][32:], keys[1]).any()
    assert block_keys(np.array([10]), 16) is None


def test_the_free_queue_is_vllms():
    """Taken from the head; a finished request's blocks go back last block first, behind
    the never-used ones; a shared block is freed only by its last holder; blocks of rejected
    drafts go back to the head."""
    cache = PrefixCache(10, 1, [np.array([10, 11, 12]), np.array([10, 11, 12, 13]),
                                np.array([10, 20])])
    cache.allocate(4)                     # request 0: 3 prompt blocks + 1 private
    cache.register(0, 3)
    assert cache.release(0, 4) == 4       # tail: private, 12, 11, 10
    assert cache.lookup(1, 5) == (3, 3)   # all three cached, all in the free queue
    cache.allocate(6)                     # the never-used blocks first: nothing evicted
    assert cache.resident() == 3 and cache.evictions == 0
    cache.allocate(2)                     # the private block, then key 12
    assert cache.evictions == 1 and cache.lookup(1, 5) == (2, 2)
    cache.acquire(1, 2, 5)
    cache.acquire(2, 1, 2)                # key 10 now held twice
    assert cache.lookup(2, 3) == (1, 0)
    assert cache.release(2, 1) == 0       # request 1 still holds it
    assert cache.release(1, 2) == 2
    cache.give_back(3)
    assert cache.evicted_by(3) == set()   # the head's 3 blocks are not cached ones
    assert cache.evicted_by(4) == {11}    # ... then key 11 (request 1's last block)


def _runs(cache: PrefixCache) -> list:
    """The free queue with adjacent runs of free blocks merged (what ``allocate`` and
    ``evicted_by`` read: they take adjacent runs as one)."""
    out: list = []
    for entry in cache.queue:
        if isinstance(entry, list) and out and isinstance(out[-1], list):
            out[-1] = [out[-1][0] + entry[0]]
        else:
            out.append(list(entry) if isinstance(entry, list) else entry)
    return out


def test_cycle_is_allocate_then_give_back_in_turn():
    """``cycle`` (a stretch's iterations at once) against ``allocate`` then ``give_back``
    of each pair, on queues holding cached blocks: the same evictions, residents and runs."""
    rng, evicted = np.random.default_rng(3), 0
    for _ in range(200):
        keys = [np.arange(10 * r, 10 * r + 4) for r in range(6)]
        caches = [PrefixCache(40, 1, keys) for _ in range(2)]
        for cache in caches:  # the same history: requests cached, some released
            for rid in range(6):
                cache.allocate(5)
                cache.register(rid, 4)
            for rid in (0, 2, 4, 5):
                cache.release(rid, 5)
        takes = rng.integers(0, 6, int(rng.integers(1, 12))).tolist()
        backs = [int(rng.integers(0, t + 1)) for t in takes]
        if sum(takes) - sum(backs) > 30:  # more than the 30 free blocks
            continue
        one, many = caches
        for take, back in zip(takes, backs):
            one.allocate(take)
            one.give_back(back)
        many.cycle(takes, backs)
        assert (many.evictions, many.ref, many.free) == (one.evictions, one.ref, one.free)
        assert _runs(many) == _runs(one)
        assert many.evicted_by(30) == one.evicted_by(30)
        evicted += one.evictions > 0
    assert evicted > 20  # the takes reached cached blocks in many of the draws


def _checked(monkeypatch):
    """Check the KV accounting after every completed step: the free queue holds exactly the
    blocks not in use, and no more blocks are cached than the budget holds."""
    seen = {"steps": 0}
    complete = Replica._complete

    def check(self, step, now):
        complete(self, step, now)
        if self.cache is not None:
            c, kv = self.cache, self.limits.kv_blocks
            live = sum(e[0] if isinstance(e, list) else c.free.get(e[0]) == e[1]
                       for e in c.queue)
            assert live == kv - self.used_blocks
            assert c.resident() <= kv and 0 <= self.used_blocks <= kv
            assert sum(r > 0 for r in c.ref.values()) <= self.used_blocks
            seen["steps"] += 1
    monkeypatch.setattr(Replica, "_complete", check)
    return seen


@st.composite
def cases(draw):
    n = draw(st.integers(2, 25))
    hash_block = draw(st.sampled_from([4, 16, 64]))
    prompt = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    hashes, fresh = [], 10_000
    for i, p in enumerate(prompt):  # share a prefix of an earlier request's ids, then fresh
        own = -(-p // hash_block)
        parent = draw(st.integers(-1, i - 1))
        share = min(own, draw(st.integers(0, own))) if parent >= 0 else 0
        ids = hashes[parent][:share] if parent >= 0 else []
        share = len(ids)
        hashes.append(list(ids) + list(range(fresh, fresh + own - share)))
        fresh += own - share
    gaps = draw(st.lists(st.floats(0, 0.1), min_size=n, max_size=n))
    return {"arrival": np.cumsum(gaps), "prompt": prompt, "hashes": hashes,
            "hash_block": hash_block,
            "output": draw(st.lists(st.integers(1, 150), min_size=n, max_size=n)),
            "policy": draw(st.sampled_from(range(len(POLICIES)))),
            "block_size": draw(st.sampled_from([1, 4, 16])),
            "blocks": draw(st.integers(20, 120)), "seqs": draw(st.integers(1, 16)),
            "batched": draw(st.integers(16, 512)), "chunked": draw(st.booleans()),
            "replicas": draw(st.integers(1, 2)), "seed": draw(st.integers(0, 2**31))}


@settings(max_examples=50, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_random_scenarios_keep_the_budget_and_fast_forward_stays_exact(case, monkeypatch):
    seen = _checked(monkeypatch)
    name, params = POLICIES[case["policy"]]
    gamma = 6 if name == "adaptive" else params.get("num_speculative_tokens", 0)
    util = _utilisation_for_blocks(case["blocks"], case["block_size"], case["batched"],
                                   name != "none", case["seqs"] * (1 + gamma))
    sc = scenario("none", alpha=0.7, hardware="a10", target="opt-1.3b", draft="opt-125m",
                  replicas=case["replicas"], seed=case["seed"],
                  batching={"block_size": case["block_size"], "max_num_seqs": case["seqs"],
                            "max_num_batched_tokens": case["batched"],
                            "enable_chunked_prefill": case["chunked"],
                            "gpu_memory_utilization": util})
    sc = dataclasses.replace(sc, policy=PolicyConfig(name, params))
    wl = _workload(case["arrival"], case["prompt"], case["output"], case["hashes"],
                   case["hash_block"])
    on = identical_or_unservable(sc, wl)
    if on is None:
        return
    assert seen["steps"] > 0
    req = on.requests
    done = req[req["status"] == "finished"]
    # a hit is whole blocks, never the whole prompt
    assert (done["cached_tokens"] % case["block_size"] == 0).all()
    assert (done["cached_tokens"] < done["prompt_tokens"]).all()


def test_caching_off_is_the_workload_without_hashes():
    prompt, hashes = _shared_prefix(3, [5, 17, 40, 9])
    wl = _workload(np.arange(4) * 0.01, prompt, np.full(4, 30), hashes)
    plain = dataclasses.replace(wl, prefix_hashes=None)
    a, b = simulate(_sc(False), workload=wl), simulate(_sc(True), workload=plain)
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)


def test_preempted_requests_find_their_prefix_again(monkeypatch):
    """A KV cache too small for the batch's decodes: requests are preempted (their blocks
    freed, last first) and re-admitted on whatever of their prefix is still cached; the
    accounting holds and fast-forward stays exact."""
    seen = _checked(monkeypatch)
    rng = np.random.default_rng(11)
    tails = rng.integers(5, 60, 12).tolist()
    prompt, hashes = _shared_prefix(4, tails)
    util = _utilisation_for_blocks(60, BS, 2048, False, 16)
    sc = _sc(True, gpu_memory_utilization=util, max_num_seqs=16)
    wl = _workload(np.sort(rng.uniform(0, 0.05, 12)), prompt, rng.integers(60, 200, 12),
                   hashes)
    on, off = _both(sc, wl)
    assert_identical(on, off)
    assert on.summary()["preemptions"] > 0 and on.summary()["prefix_cached_tokens"] > 0
    assert on.info["prefix_cache"]["evictions"] > 0 and seen["steps"] > 0


def test_the_mooncake_reader_keeps_hash_ids(tmp_path):
    """hash_ids become prefix_hashes (512 tokens each); a malformed list names its line."""
    from simulator.inputs.errors import SpecsimError
    from workloads.traces import read_mooncake
    good = tmp_path / "t.jsonl"
    good.write_text('{"timestamp": 0, "input_length": 600, "output_length": 3, '
                    '"hash_ids": [4, 5]}\n{"timestamp": 5, "input_length": 20, '
                    '"output_length": 3, "hash_ids": [4]}\n')
    w = read_mooncake(good)
    assert w.hash_block_tokens == 512 and [h.tolist() for h in w.prefix_hashes] == [[4, 5], [4]]
    assert w.truncate(1).prefix_hashes[0].tolist() == [4, 5]
    for line, fix in (('"hash_ids": [1, -2]', "hash_ids[1] is -2, outside the allowed range"),
                      ('"hash_ids": [1, 2.0]', "not a list of whole numbers"),
                      ('"hash_ids": [1, 2, 3]', "block ids for 600 prompt tokens")):
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"timestamp": 0, "input_length": 600, "output_length": 3, '
                       + line + '}\n')
        with pytest.raises(SpecsimError) as err:
            read_mooncake(bad)
        assert err.value.field == "hash_ids" and fix in str(err.value)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"timestamp": 0, "input_length": 6, "output_length": 3, "hash_ids": [1]}'
                     '\n{"timestamp": 1, "input_length": 6, "output_length": 3}\n')
    with pytest.raises(SpecsimError, match="line 2: hash_ids given on some lines only"):
        read_mooncake(mixed)


def test_the_mooncake_conversation_trace_hits_its_shared_histories():
    """The real trace (read in place; skipped when absent): its ids are prefix hashes (an
    id always follows the same id), and replaying its first 200 requests finds some of each
    conversation's history in the cache, in whole blocks."""
    from tests.helpers import SHARED
    from workloads.traces import read_mooncake
    path = SHARED / "traces" / "conversation_trace.jsonl"
    if not path.exists():
        pytest.skip("conversation_trace.jsonl is not present in ../shared/traces")
    w = read_mooncake(path).truncate(200)
    parent = {}
    for h in w.prefix_hashes:
        for i, x in enumerate(h.tolist()):
            assert parent.setdefault(x, (h[i - 1] if i else -1, i)) == (h[i - 1] if i else -1, i)
    sc = scenario("none", hardware="a100-80gb", target="llama-3.1-8b", draft=None)
    res = simulate(sc, workload=w.rescale_rate(0.5))
    cached = res.requests["cached_tokens"].to_numpy()
    assert cached.sum() > 0 and (cached % 16 == 0).all()
    assert (cached < res.requests["prompt_tokens"].to_numpy()).all()


def test_vllm_args_switch_prefix_caching(tmp_path):
    from simulator.vllm_args import load_vllm_args
    path = tmp_path / "args.yaml"
    path.write_text("enable-prefix-caching: false\n")
    assert load_vllm_args(path) == {"enable_prefix_caching": False}
