"""Token-tree shapes: trees from choice lists, parallel chains, the best static tree, EAGLE-2's
dynamic tree."""
import itertools

import numpy as np
import pytest

from simulator.acceptance.sequoia import SequoiaAcceptance
from simulator.acceptance.tree_topk import TopKCoverageAcceptance
from simulator.inputs.errors import SpecsimError
from simulator.policies.tree_acceptance import exclusive_table
from simulator.speculation.tree_shapes import (
    best_tree,
    dynamic_tree,
    expected_from_table,
    parallel_chains,
    tree_from_choices,
)


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
