"""Yield tables of the model-based policies: exclusive (depth, rank) probabilities and the expected
accepted length they give."""
import numpy as np
import pytest

from simulator.acceptance.sequoia import SequoiaAcceptance
from simulator.acceptance.tree_topk import TopKCoverageAcceptance
from simulator.policies.tree_acceptance import exclusive_table
from simulator.speculation.closed_forms import tree_expected_accepted
from simulator.speculation.token_tree import TokenTree
from simulator.speculation.tree_shapes import expected_from_table


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
