"""``mixed_chunk_pricer``: ``mixed_step_time`` of decodes and one chunk, bound once.

The bound pricer (simulator/cost/mixed_chunk.py) repeats ``step_models.mixed_time``'s
arithmetic with the cost model's numbers read once; it must give the same float bit for bit
(the lazy form prices its chunk steps by it, the reference paths by ``mixed_step_time``), on
kernel shapes (FA2-class and FA3's causal pairs with a per-query overhead) and flat rates,
with graphs, eager, async scheduling and no host step, across the capture sizes' edge; and
give way where ``mixed_step_time`` does (a 1-token chunk, no decode, MLA, a subclass).
"""
import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.dp_attention import DpAttentionCostModel
from simulator.cost.parallelism import Parallelism
from simulator.models.spec import load_model
from tests.simulator.cost.test_few_step import _cost_model as _few_cost_model
from tests.simulator.cost.test_hot_path import EXECUTIONS, PROFILES, _cost_model

# (profile, model, tp, execution) of test_few_step's builder: FA3's causal prefill kernel
FA3 = [("h100-sxm", "llama-2-70b", 2, "fa3"), ("h200", "llama-2-70b", 4, "fa3"),
       ("a100-80gb-flat", "llama-2-7b", 1, "async")]


def _agree(cm, seed: int) -> int:
    """Draw batches (1 to 300 decodes, a chunk of 1 to 600 tokens over up to 4k) and hold the
    bound pricer to ``mixed_step_time``; how many it priced."""
    price, rng, priced = cm.mixed_chunk_pricer(), np.random.default_rng(seed), 0
    for _ in range(200):
        n = int(rng.integers(0, 301))
        s = float(rng.integers(0, 8192) * max(n, 1))
        c, x = int(rng.integers(1, 601)), int(rng.integers(0, 4096))
        if rng.random() < 0.2:  # the token budget's edge: decodes and chunk fill 512
            n, c = int(rng.integers(1, 500)), 0
            c = 512 - n
        logits = float(n + (rng.random() < 0.5))
        want = cm.mixed_step_time(n, s, [c], [x], logits)
        got = price(n, s, c, x, logits)
        assert got == want or (got is None and want is None), (n, s, c, x, logits)
        priced += want is not None
    return priced


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("execution", EXECUTIONS)
def test_the_bound_pricer_is_mixed_step_time_bit_for_bit(profile, execution):
    cm = _cost_model(profile, "llama-2-70b", 2, execution)
    assert _agree(cm, PROFILES.index(profile) * 10 + EXECUTIONS.index(execution)) > 100


@pytest.mark.parametrize("case", FA3)
def test_the_bound_pricer_on_fa3s_causal_kernel(case):
    cm = _few_cost_model(*case)
    assert cm._prefill_causal and (cm._shapes or case[0].endswith("-flat"))
    assert _agree(cm, FA3.index(case)) > 100


def test_the_bound_pricer_gives_way_where_mixed_step_time_has_no_line():
    """MLA (deepseek-v3) prices its chunks by array: the default wrapper, the same None or
    float; a subclass (DP attention) keeps its own ``mixed_step_time``."""
    par = Parallelism(tensor_parallel=8)
    mla = CostModel(load_profile("h100-sxm"), load_model("deepseek-v3"), par)
    assert _agree(mla, 1) >= 0
    dp = DpAttentionCostModel(load_profile("h100-sxm"), load_model("deepseek-v3"), Parallelism(
        tensor_parallel=1, data_parallel_attention=8, expert_parallel=8))
    assert dp.mixed_chunk_pricer()(4, 4000.0, 300, 100, 5.0) is None
