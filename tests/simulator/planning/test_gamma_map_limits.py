"""Gamma maps rank only cells that can exist (KV budget, max_context), and gamma 0 means what
the engine runs: chain drafting nothing, with its draft loaded."""
from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
import pytest

from hardware.profile import load_profile
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.planning.analytic import analytic_point, check_point
from simulator.planning.gamma_map import MAX_GAMMA_MAP_POINTS, crossover_batch, gamma_map
from simulator.scenario import PolicyConfig
from simulator.simulate import prepare, simulate
from tests.helpers import scenario, workload

# OPT-13B and OPT-125M (facebook/opt-13b and opt-125m config.json): hidden 5120 / 768,
# ffn_dim 20480 / 3072, 40 / 12 layers, vocab 50272, fp16.  KV per token: K and V, every
# layer, hidden wide, 2 bytes: 2 x 40 x 5120 x 2 = 819,200 B (DESIGN.md section 4) and
# 2 x 12 x 768 x 2 = 36,864 B for the draft's own cache.
KV_PER_TOKEN = 2 * 40 * 5120 * 2 + 2 * 12 * 768 * 2
HIDDEN_BYTES = (4 * 5120 + 2 * 20480) * 2  # per token: the widest layer's activations
LOGIT_BYTES = 4 * 50272                    # per sampled token: fp32 logits
BLOCK = 16                                 # vLLM's default block_size
MAX_BATCHED = 2048                         # the scenario's max_num_batched_tokens


@functools.lru_cache(maxsize=1)
def _free_bytes() -> float:
    """Device memory at gpu_memory_utilization 0.9 less both models' weights."""
    usable = 0.9 * load_profile("a100-40gb").memory_bytes
    return usable - load_model("opt-13b").weight_bytes() - load_model("opt-125m").weight_bytes()


def hand_blocks(batch: int, verify: int) -> int:
    """KV blocks of OPT-13B + OPT-125M on one A100-40GB, as vLLM sizes them: usable memory
    less the weights and the activation headroom of one forward (logits for the sampled
    tokens), cut into blocks of 16 tokens of both models' KV."""
    act = MAX_BATCHED * HIDDEN_BYTES + min(batch * verify, MAX_BATCHED) * LOGIT_BYTES
    return math.floor((_free_bytes() - act) / (BLOCK * KV_PER_TOKEN))


def largest_batch(context: int, gamma: int) -> int:
    """The largest batch whose KV fits (the need grows with the batch, the budget does not)."""
    per_request = math.ceil((context + gamma + 1) / BLOCK)
    b = 1
    while (b + 1) * per_request <= hand_blocks(b + 1, gamma + 1):
        b += 1
    return b


def test_the_models_are_the_published_shapes():
    t, d = load_model("opt-13b"), load_model("opt-125m")
    assert (t.hidden_size, t.ffn_size, t.num_layers, t.vocab_size) == (5120, 20480, 40, 50272)
    assert (d.hidden_size, d.num_layers) == (768, 12)
    assert t.kv_bytes_per_token() + d.kv_bytes_per_token() == KV_PER_TOKEN


def test_a_cell_over_the_kv_budget_is_marked_and_never_ranked():
    top = largest_batch(512, 4)
    fits = analytic_point({"batch": top, "context": 512, "gamma": 4})
    over = analytic_point({"batch": top + 1, "context": 512, "gamma": 4})
    assert fits["feasible"] and fits["kv_fits"]
    assert fits["kv_tokens"] == hand_blocks(top, 5) * BLOCK
    assert not over["feasible"] and over["limit"] == "kv" and not over["kv_fits"]
    assert "KV blocks" in over["infeasible_reason"]
    cells = gamma_map(batches=[top, top + 1], contexts=[512], gammas=range(1, 5))
    ok, bad = cells.iloc[0], cells.iloc[1]
    assert ok["feasible"] and ok["best_gamma"] >= 1 and ok["speedup"] > 1
    assert not bad["feasible"] and bad["limit"] == "kv"
    assert pd.isna(bad["best_gamma"]) and math.isnan(bad["speedup"])


def test_a_cell_too_big_only_for_large_gammas_keeps_its_best_feasible_gamma():
    # context 8: gamma <= 7 needs 1 block per request, gamma >= 8 needs 2
    batch = hand_blocks(4096, 9) // 2 + 1
    assert batch <= hand_blocks(batch, 8) and 2 * batch > hand_blocks(batch, 9)
    raw = [analytic_point({"batch": batch, "context": 8, "gamma": g}) for g in range(13)]
    assert [pt["feasible"] for pt in raw] == [True] * 8 + [False] * 5
    cell = gamma_map(batches=[batch], contexts=[8], gammas=range(13)).iloc[0]
    best = max(range(8), key=lambda g: raw[g]["speedup"])
    assert cell["feasible"] and cell["best_gamma"] == best
    assert cell["speedup"] == raw[best]["speedup"] and cell["largest_feasible_gamma"] == 7


def test_past_the_targets_max_context_is_marked():
    # vLLM schedules at most max_model_len - 1 - num_computed_tokens new tokens
    # (vllm/v1/core/sched/scheduler.py): 2040 + 1 + gamma < 2048 for gamma <= 6
    ok = analytic_point({"context": 2040, "gamma": 6})
    over = analytic_point({"context": 2040, "gamma": 7})
    assert ok["feasible"] and not over["feasible"] and over["limit"] == "max_context"
    assert "max_context 2048" in over["infeasible_reason"]
    cell = gamma_map(batches=[1], contexts=[2044], gammas=range(0, 9)).iloc[0]
    assert cell["feasible"] and cell["largest_feasible_gamma"] == 2 and cell["best_gamma"] <= 2
    # plain decoding too: 2046 tokens in the KV plus one new is the last step that fits
    assert analytic_point({"context": 2046, "policy": "none"})["feasible"]
    last = analytic_point({"context": 2047, "policy": "none"})
    assert not last["feasible"] and last["limit"] == "max_context"


def test_the_draft_decides_only_when_it_drafts():
    # LLaMA-2-7B (max_context 4096) with LLaMA-68M (2048): vLLM's Top1Proposer speculates
    # only while seq_len + k < the draft's max_model_len (simulator.cost.drafting)
    point = {"target": "llama-2-7b", "draft": "llama-68m", "context": 2040}
    assert analytic_point({**point, "gamma": 6})["feasible"]
    over = analytic_point({**point, "gamma": 7})
    assert not over["feasible"] and over["limit"] == "draft_max_context"
    assert analytic_point({**point, "context": 3000, "gamma": 0})["feasible"]


def test_the_crossover_stops_at_the_largest_batch_that_fits():
    found = crossover_batch({"alpha": 0.8, "context": 512.0}, gammas=range(1, 5),
                            max_batch=4096)
    top = largest_batch(512, 1)  # gamma 1 holds the fewest logits: the most blocks
    assert math.isnan(found["crossover_batch"]) and found["limit"] == "kv"
    assert found["largest_batch"] == found["last_paying_batch"] == top
    assert "KV blocks" in found["reason"]


def test_a_map_is_refused_before_any_point_is_built(monkeypatch):
    import simulator.planning.sweep as sweep

    def no(*args, **kwargs):
        raise AssertionError("built")

    monkeypatch.setattr(sweep.SweepSpec, "analytic", no)
    with pytest.raises(SpecsimError, match=f"the limit is {MAX_GAMMA_MAP_POINTS:,}"):
        gamma_map(batches=range(1, 1001), contexts=range(1, 101), gammas=range(2))


def test_gamma_0_is_the_engines_chain_drafting_nothing_with_its_draft_loaded():
    w = workload([0.0] * 8, [100] * 8, [20] * 8)
    runs = {}
    for name in ("none", "chain:num_speculative_tokens=0"):
        sc = scenario(name)
        runs[name.split(":")[0]] = (simulate(sc, workload=w).steps,
                                    prepare(sc, workload=w).deployment, sc)
    (none, none_dep, sc), (chain0, chain0_dep, _) = runs["none"], runs["chain"]
    # the engine's chain-0 keeps the draft: its weights and KV count against memory
    assert none_dep.memory.kv_bytes_per_token == 2 * 40 * 5120 * 2
    assert chain0_dep.memory.kv_bytes_per_token == KV_PER_TOKEN
    seqs = sc.batching.max_num_seqs
    assert analytic_point({"batch": seqs, "gamma": 0})["kv_tokens"] \
        == chain0_dep.memory.kv_tokens < none_dep.memory.kv_tokens \
        == analytic_point({"batch": seqs, "policy": "none"})["kv_tokens"]
    # ... drafts nothing: its decode steps are none's, and the analytic chain-0 point's
    dec = (chain0["num_prefill"] == 0) & (chain0["num_decode"] == 8)
    assert dec.sum() >= 10 and (chain0.loc[dec, "draft_s"] == 0.0).all()
    np.testing.assert_array_equal(chain0["verify_s"], none["verify_s"])
    for row in chain0[dec].itertuples():
        ctx = row.kv_read_tokens / 8 - 1
        point = analytic_point({"batch": 8, "context": ctx, "gamma": 0})
        assert point["iteration_s"] == pytest.approx(row.duration_s, rel=1e-12)
        assert point["speedup"] == 1.0
    # ... and, which a decode-step model does not see, prefills its draft's KV
    assert (chain0.loc[chain0["num_prefill"] > 0, "draft_s"] > 0).all()
    assert (none["draft_s"] == 0).all()


def test_a_tree_has_no_gamma_0_in_either_mode():
    with pytest.raises(SpecsimError) as err:
        PolicyConfig("specinfer", {"num_speculative_tokens": 0})
    assert "num_speculative_tokens" in str(err.value)
    with pytest.raises(SpecsimError) as err:
        check_point({"policy": "tree", "gamma": 0,
                     "acceptance": {"model": "sequoia", "rates": [0.8]}})
    assert err.value.field == "gamma"


def test_weights_that_do_not_fit_mark_every_cell():
    # OPT-66B's fp16 weights (~123 GiB) on one 24 GiB A10
    point = {"hardware": "a10", "target": "opt-66b", "draft": "opt-125m", "context": 128.0}
    pt = analytic_point(point)
    assert not pt["feasible"] and pt["limit"] == "memory" and not pt["kv_fits"]
    assert "does not fit" in pt["infeasible_reason"]
    found = crossover_batch(point, gammas=range(1, 3))
    assert found["largest_batch"] == 0 and found["limit"] == "memory"


def test_the_memory_knobs_move_the_budget_as_vllm_sizes_it():
    # half the blocks' tokens at block_size 32; less memory at utilisation 0.8
    base = analytic_point({"batch": 1, "context": 128, "gamma": 4})
    assert base["kv_tokens"] == hand_blocks(1, 5) * BLOCK
    big = analytic_point({"batch": 1, "context": 128, "gamma": 4, "block_size": 32})
    blocks32 = math.floor((_free_bytes() - MAX_BATCHED * HIDDEN_BYTES - 5 * LOGIT_BYTES)
                          / (32 * KV_PER_TOKEN))
    assert big["kv_tokens"] == blocks32 * 32
    assert big["kv_needed_tokens"] == 32 * math.ceil((128 + 4 + 1) / 32)
    low = analytic_point({"batch": 1, "context": 128, "gamma": 4,
                          "gpu_memory_utilization": 0.8})
    less = 0.1 * load_profile("a100-40gb").memory_bytes
    blocks = math.floor((_free_bytes() - less - MAX_BATCHED * HIDDEN_BYTES - 5 * LOGIT_BYTES)
                        / (BLOCK * KV_PER_TOKEN))
    assert low["kv_tokens"] == blocks * BLOCK
