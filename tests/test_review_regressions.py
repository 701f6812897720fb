"""Regressions found in review: resume with all-digit keys, sampling tree walks need an rng."""
import numpy as np
import pandas as pd
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.planning.sweep import ResultSink
from simulator.speculation.token_tree import TokenTree
from simulator.speculation.tree_verification import verify_tree


def test_resume_keeps_all_digit_keys_as_strings(tmp_path):
    # a key of only digits (or digits with one 'e') would read back as a number and the
    # point would be run again on resume
    path = tmp_path / "sweep.csv"
    keys = ["0123456789012345", "12345e6789012345"]
    # laid out as the sink writes it (point, key first: a sweep resumes only its own file)
    pd.DataFrame({"point": [0, 1], "key": keys, "speedup": [1.5, 2.0],
                  "error": [None, None]}).to_csv(path, index=False)
    store = ResultSink(path)
    assert store.done_keys() == set(keys)


def test_sampling_tree_walk_without_rng_is_an_error():
    tree = TokenTree.from_sequences([[0], [1]])  # two root children carrying tokens 0 and 1
    p = np.full((1, tree.num_nodes + 1, 3), 1 / 3)
    with pytest.raises(SpecsimError, match="rng"):
        verify_tree(tree, p, None, "naive")
    # greedy needs no randomness
    verify_tree(tree, p, None, "greedy")
