"""Drafting cost of token trees: forwards per level, level-by-level draft time, operator prices."""
import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.drafting import OperatorPrices, forward_tokens, level_draft_time
from simulator.models.spec import load_model
from simulator.speculation.token_tree import TokenTree


@pytest.fixture(scope="module")
def draft():
    return CostModel(load_profile("a100-40gb"), load_model("llama-68m"))


def test_forward_tokens_are_the_nodes_that_get_children():
    # <2,2,1>: the root, then the 2 depth-1 nodes, then the 4 depth-2 nodes (each has a child)
    assert forward_tokens(TokenTree.from_config([2, 2, 1])).tolist() == [1, 2, 4]
    assert forward_tokens(TokenTree.chain(5)).tolist() == [1] * 5
    # leaves drafted at depth 1 besides the chain need no forward of their own
    assert forward_tokens(TokenTree.from_config([3, 1])).tolist() == [1, 3]


def test_a_chain_drafts_as_gamma_sequential_decodes(draft):
    ctx = np.array([100.0, 700.0, 33.0])
    assert level_draft_time(draft, ctx, [1] * 4) == pytest.approx(
        draft.chain_decode_time(ctx, 4), rel=1e-12)


def test_level_forwards_carry_their_nodes_and_see_earlier_ones(draft):
    ctx = np.array([200.0, 50.0])
    expected = (draft.step_time([1, 1], ctx) + draft.step_time([2, 2], ctx + 1)
                + draft.step_time([4, 4], ctx + 3))
    assert level_draft_time(draft, ctx, [1, 2, 4]) == pytest.approx(expected, rel=1e-12)
    # EAGLE re-reads accepted tokens in its first forward: they start before the prefix end
    reread = np.array([3.0, 1.0])
    expected = (draft.step_time(reread, ctx - (reread - 1), [1, 1])
                + draft.step_time([2, 2], ctx + 1, [2, 2]))
    got = level_draft_time(draft, ctx, [1, 2], logits=[1, 2], first_tokens=reread)
    assert got == pytest.approx(expected, rel=1e-12)


def test_operator_prices_match_the_roofline_by_hand():
    hw = load_profile("a100-40gb").plain_roofline()
    spec = load_model("medusa-vicuna-7b")
    prices = OperatorPrices(CostModel(hw, spec))
    h, v, b = spec.hidden_size, spec.vocab_size, spec.dtype_bytes
    peak, bw = hw.peak_flops(spec.dtype), hw.memory_bandwidth_bytes_per_s
    for t in (1, 64, 4096):
        square = max(2 * t * h * h / peak, (h * h + 2 * t * h) * b / bw)
        head = max(2 * t * h * v / peak, (h * v + t * (h + v)) * b / bw)
        assert prices.square_linear_s(t) == pytest.approx(square, rel=1e-12)
        assert prices.lm_head_s(t) == pytest.approx(head, rel=1e-12)
    assert prices.square_linear_s(0) == prices.lm_head_s(0) == 0.0


@pytest.mark.parametrize("profile", ["a100-80gb", "a100-80gb-flat", "h100-sxm", "tpu-v4"])
@pytest.mark.parametrize("execution", ["graphs", "eager", "async"])
def test_a_single_chunk_prefill_is_step_times_to_the_bit(profile, execution):
    # the draft's prefill of one chunk (the usual case) is priced on numbers by the closed
    # form step_time takes for a one-request batch; it must be step_time's float
    from simulator.cost.drafting import draft_prefill_time
    from tests.simulator.cost.test_hot_path import _cost_model
    cm = _cost_model(profile, "llama-68m", 1, execution)
    rng = np.random.default_rng(len(profile) + len(execution))
    for _ in range(40):
        c, x = float(rng.integers(1, 3000)), float(rng.integers(0, 3000))
        got = draft_prefill_time(cm, np.array([c]), np.array([x]), 4, None)
        assert got == cm.step_time(np.array([c]), np.array([x]), np.zeros(1))
        # past the draft's context: skipped, as draft_prefill_mask skips it
        limit = int(x + c + 1 + 4)
        assert draft_prefill_time(cm, np.array([c]), np.array([x]), 4, limit) == 0.0
        assert draft_prefill_time(cm, np.array([c]), np.array([x]), 4, limit + 1) == got


@pytest.mark.parametrize("profile", ["a100-80gb", "a100-80gb-flat", "h100-sxm", "tpu-v4"])
@pytest.mark.parametrize("execution", ["graphs", "eager", "async"])
def test_a_several_chunk_prefill_is_step_times_within_rounding(profile, execution):
    # several prompts' chunks (the cost model's chunks-only price, on numbers): step_time's
    # float within rounding, the chunks past the draft's context skipped first
    from simulator.cost.drafting import draft_prefill_time
    from tests.simulator.cost.test_hot_path import _cost_model
    cm = _cost_model(profile, "llama-68m", 1, execution)
    rng = np.random.default_rng(len(profile) * len(execution))
    for _ in range(40):
        k = int(rng.integers(2, 5))
        c, x = rng.integers(1, 3000, k).astype(float), rng.integers(0, 3000, k).astype(float)
        got = draft_prefill_time(cm, c, x, 4, None)
        assert got == pytest.approx(cm.step_time(c, x, np.zeros(k)), rel=1e-12, abs=0.0)
        limit = int((x + c).max() + 1 + 4)  # the longest one is skipped
        keep = x + c < (x + c).max()
        want = cm.step_time(c[keep], x[keep], np.zeros(int(keep.sum()))) if keep.any() else 0.0
        assert draft_prefill_time(cm, c, x, 4, limit) == pytest.approx(want, rel=1e-12, abs=0.0)
