"""Shared tree helpers of the model-based policies: drafting cost, tree shapes, expected yield."""
import itertools

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.acceptance.sequoia import SequoiaAcceptance
from simulator.acceptance.tree_topk import TopKCoverageAcceptance
from simulator.cost.cost_model import CostModel
from simulator.cost.drafting import OperatorPrices, forward_tokens, level_draft_time
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.policies.tree_acceptance import exclusive_table
from simulator.speculation.closed_forms import tree_expected_accepted
from simulator.speculation.token_tree import TokenTree
from simulator.speculation.tree_shapes import (
    best_tree,
    dynamic_tree,
    expected_from_table,
    parallel_chains,
    tree_from_choices,
)


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


def test_choices_become_a_depth_first_tree_with_their_ranks():
    tree = tree_from_choices([[1], [0], [0, 0], [0, 1], [1, 0]], field="choices")
    assert tree.parents.tolist() == [-1, 0, 0, -1, 3]
    assert tree.child_rank.tolist() == [0, 0, 1, 1, 0]


@pytest.mark.parametrize("choices, words", [
    ([[1]], "sibling"), ([[0, 0]], "parent"), ([[0], [0]], "twice"), ([], "empty"),
    ([[0], [-1]], "whole numbers"), ("[[0]]", "list of paths"), ([[0], [0.5]], "whole"),
])
def test_bad_choices_name_the_field(choices, words):
    with pytest.raises(SpecsimError, match=words) as err:
        tree_from_choices(choices, field="policy.choices")
    assert err.value.field.startswith("policy.choices")


def test_parallel_chains_hang_from_the_root():
    tree = parallel_chains(3, 2)
    assert tree.parents.tolist() == [-1, 0, -1, 2, -1, 4]
    assert tree.child_rank.tolist() == [0, 0, 1, 0, 2, 0]


def test_exclusive_table_of_sequoia_and_topk_coverage():
    rates = [0.6, 0.5, 0.3]
    table = exclusive_table(SequoiaAcceptance(tuple(rates)), 4, 3, field="x")
    row = [0.6, 0.4 * 0.5, 0.4 * 0.5 * 0.3]         # r_k times the earlier ranks' failures
    assert table == pytest.approx(np.tile(row, (4, 1)))
    cov = ((0.5, 0.7, 0.8), (0.3, 0.45, 0.5))
    table = exclusive_table(TopKCoverageAcceptance(cov), 3, 3, field="x")
    diffs = [[0.5, 0.2, 0.1], [0.3, 0.15, 0.05], [0.3, 0.15, 0.05]]  # deeper rows repeat
    assert table == pytest.approx(np.array(diffs))


def test_expected_yield_of_a_small_tree_in_closed_form():
    # <2,1> under Sequoia rates (a, b): a + a^2 + (1-a) b (1 + a)
    a, b = 0.7, 0.4
    tree = TokenTree.from_config([2, 1])
    table = exclusive_table(SequoiaAcceptance((a, b)), 2, 2, field="x")
    closed = a + a * a + (1 - a) * b * (1 + a)
    assert expected_from_table(tree, table) == pytest.approx(closed, rel=1e-12)
    probs = table[tree.depth - 1, tree.child_rank]
    assert tree_expected_accepted(tree.parents, probs) == pytest.approx(closed, rel=1e-12)


def _all_paths(table):
    depth, width = table.shape
    for d in range(1, depth + 1):
        for ranks in itertools.product(range(width), repeat=d):
            yield ranks, float(np.prod([table[i, r] for i, r in enumerate(ranks)]))


def test_best_tree_is_the_best_subset_found_by_brute_force():
    # exclusive probabilities fall with rank, so the top-N path values form a valid tree and
    # their sum bounds every N-node tree: best_tree must reach it
    table = exclusive_table(TopKCoverageAcceptance(((0.55, 0.7, 0.78), (0.35, 0.5, 0.57),
                                                    (0.25, 0.37, 0.45))), 3, 3, field="x")
    values = sorted((v for _, v in _all_paths(table)), reverse=True)
    for budget in (1, 3, 7, 12, 39):
        tree = best_tree(table, budget)
        assert tree.num_nodes == budget
        assert expected_from_table(tree, table) == pytest.approx(sum(values[:budget]))


def test_dynamic_tree_expands_topk_then_reranks():
    a, b = 0.7, 0.5
    table = exclusive_table(SequoiaAcceptance((a, b)), 2, 2, field="x")
    # candidates: n0 .7, n1 .15; children n00 .49, n01 .105, n10 .105, n11 .0225
    tree = dynamic_tree(table, steps=2, topk=2, budget=3)
    assert tree.parents.tolist() == [-1, 0, -1]       # n0, n00, n1
    assert expected_from_table(tree, table) == pytest.approx(0.7 + 0.49 + 0.15)
    deep = exclusive_table(SequoiaAcceptance((a, b)), 4, 2, field="x")
    full = dynamic_tree(deep, steps=3, topk=2, budget=2 + 2 * 4)
    assert full.num_nodes == 10 and full.max_depth == 3
    assert dynamic_tree(deep, steps=4, topk=1, budget=4).is_chain


def test_dynamic_tree_never_beats_the_unconstrained_best_tree():
    table = exclusive_table(TopKCoverageAcceptance(((0.6, 0.72, 0.8, 0.85),)), 5, 4, field="x")
    for budget in (5, 10, 20):
        dyn = expected_from_table(dynamic_tree(table, 5, 2, budget), table)
        assert dyn <= expected_from_table(best_tree(table, budget), table) + 1e-12
