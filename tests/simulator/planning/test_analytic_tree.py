"""The analytic planner's tree expectation asks the acceptance model's declared kind."""
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.planning.analytic import _expected


def test_chain_only_model_is_refused_for_a_branching_tree():
    with pytest.raises(SpecsimError, match="no tree semantics") as err:
        _expected({"acceptance": {"model": "iid", "alpha": 0.8}, "policy": "tree",
                   "alpha": 0.8}, (2, 1))
    assert err.value.field == "acceptance.model"


def test_sequoia_tree_expectation_is_its_closed_form():
    # config (2, 1): two ranked children of the root, each with one child.  Sequoia's rates
    # by sibling rank, the same at every depth: P(first) = 0.6, P(second) = (1 - 0.6) * 0.8
    # (its elder sibling rejected); each grandchild is a first child of an accepted parent:
    # 1 (bonus) + 0.6 + 0.6 * 0.6 + 0.32 + 0.32 * 0.6
    out = _expected({"acceptance": {"model": "sequoia", "rates": [0.6, 0.8]},
                     "policy": "tree", "alpha": 0.8}, (2, 1))
    second = (1 - 0.6) * 0.8
    assert out == pytest.approx(1 + 0.6 + 0.6 * 0.6 + second + second * 0.6)
