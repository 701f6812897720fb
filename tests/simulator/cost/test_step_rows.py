"""``rows_step_times``: K forwards of one batch's requests, each row with its own contexts,
must be ``step_time``'s float row by row, bit for bit, on every kind of device pricing of
``test_verify_rows`` (kernel shapes with FA2- and FA3-class prefill kernels, flat rates, MLA,
eager and graphs) and every kind of row: uniform (the closed form), decodes, verifications,
a feature drafter's first forward (re-read tokens, its LM-head tokens given apart), past
numpy's pairwise-summation block (128 requests)."""
import numpy as np
import pytest

from tests.simulator.cost.test_verify_rows import CASES, _cost_model


def _rows(rng: np.random.Generator, k: int, n: int, u: int):
    tokens = np.concatenate([np.full((2, n), u), np.ones((1, n), np.int64),
                             rng.integers(1, u + 2, (k - 3, n))])
    context = rng.integers(0, 6000, (k, n))
    return tokens, context


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
@pytest.mark.parametrize("n", [1, 5, 130])
def test_each_row_is_step_times_float(case, n):
    cm = _cost_model(*case)
    rng = np.random.default_rng(n)
    tokens, context = _rows(rng, 7, n, 4)
    got = cm.rows_step_times(tokens, context)
    want = [cm.step_time(t.astype(float), c.astype(float), t.astype(float))
            for t, c in zip(tokens, context)]
    assert got.tolist() == want
    logits = np.full(n, 1.0)  # a drafter's first forward: one LM-head token a request
    got = cm.rows_step_times(tokens, context, logits)
    assert got.tolist() == [cm.step_time(t.astype(float), c.astype(float), logits)
                            for t, c in zip(tokens, context)]


def test_rows_it_has_no_shortcut_for_are_step_times_own():
    cm = _cost_model("h200", "deepseek-v3", 8, "graphs")
    tokens = np.array([[0.0, 2.0, 1.5], [1.0, 1.0, 1.0]])  # an idle request, a fraction
    context = np.array([[10.0, 20.0, 30.0], [5.0, 6.0, 7.0]])
    want = [cm.step_time(t, c, t) for t, c in zip(tokens, context)]
    assert cm.rows_step_times(tokens, context).tolist() == want


def test_a_dp_attention_target_prices_its_rows_by_its_own_step_time():
    # DpAttentionCostModel overrides step_time; the rows' closed form is CostModel's
    from hardware.profile import load_profile
    from simulator.cost.cost_model import CostModel
    from simulator.cost.dp_attention import DpAttentionCostModel
    from simulator.cost.parallelism import Parallelism
    from simulator.models.spec import load_model
    hw, m = load_profile("h200"), load_model("deepseek-v3")
    cm = DpAttentionCostModel(hw, m, Parallelism(tensor_parallel=1, data_parallel_attention=8,
                                                 expert_parallel=8))
    tokens, context = _rows(np.random.default_rng(3), 5, 8, 3)
    want = [cm.step_time(t.astype(float), c.astype(float), t.astype(float))
            for t, c in zip(tokens, context)]
    assert cm.rows_step_times(tokens, context).tolist() == want
    plain = CostModel(hw, m, Parallelism(tensor_parallel=8))
    assert plain.rows_step_times(tokens, context).tolist() != want


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_rows_of_one_attention_kernel_are_step_times_float(case):
    # rows in which no request decodes (verifications of several lengths; uniform ones,
    # which MLA prices without a closed form) and rows of decodes alone: one attention
    # kernel in every row, its sums unmasked; every row the same count (a chain's
    # verification, as floats as the engine passes it: its work on that count as a number),
    # past the decode form's query bound too (MLA's expanded form, FA3's query overhead)
    cm = _cost_model(*case)
    rng = np.random.default_rng(11)
    for tokens in (rng.integers(2, 6, (6, 5)), np.full((4, 5), 4), np.ones((3, 5), np.int64),
                   np.full((3, 5), 4.0), np.full((3, 5), 20.0)):
        context = rng.integers(0, 6000, tokens.shape)
        want = [cm.step_time(t.astype(float), c.astype(float), t.astype(float))
                for t, c in zip(tokens, context)]
        assert cm.rows_step_times(tokens, context).tolist() == want
