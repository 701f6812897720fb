"""``walk_tree``'s shortcuts (issue 36): with one conditional vector for every request it
reads each tree row's children's probabilities from one table, and a few requests walk
on Python numbers (``TreeWalk``, bound once a tree); both must give the general walk's
accepted lengths with the same draws (the generator left in the same state), written out
below as it stood before."""
import numpy as np
import pytest

from simulator.acceptance.sampling import TreeWalk, walk_tree
from simulator.acceptance.sequoia import SequoiaAcceptance
from simulator.acceptance.tree_topk import TopKCoverageAcceptance
from simulator.policies.tree_acceptance import PolicyAcceptance
from simulator.speculation.token_tree import TokenTree


def _general(tree, cond, rng, batch):
    table = tree.child_table
    cond = np.broadcast_to(cond, (batch, tree.num_nodes))
    rows = np.zeros(batch, dtype=np.intp)
    accepted = np.zeros(batch, dtype=np.int64)
    active = np.ones(batch, dtype=bool)
    b = np.arange(batch)[:, None]
    for _ in range(tree.max_depth):
        kids = table[rows]
        probs = np.where(kids >= 0, cond[b, np.maximum(kids, 0)], 0.0)
        ok = rng.random(probs.shape) < probs
        hit = ok.any(axis=1)
        first = np.argmax(ok, axis=1)
        active &= hit
        if not active.any():
            break
        rows = np.where(active, kids[b[:, 0], first] + 1, rows)
        accepted += active
    return accepted


TREES = [TokenTree.chain(5), TokenTree.from_config([3, 2, 2, 1]),
         TokenTree.from_config([1, 4, 1, 2, 1, 1])]


@pytest.mark.parametrize("tree", TREES, ids=["chain5", "3-2-2-1", "1-4-1-2-1-1"])
@pytest.mark.parametrize("batch", [1, 2, 8, 9, 40])
def test_walks_as_the_general_walk_with_the_same_draws(tree, batch):
    seeds = np.random.default_rng(17)
    for _ in range(40):
        level = seeds.uniform(0.05, 0.99)
        cond = np.minimum(seeds.uniform(0.0, 1.0, tree.num_nodes) * 2 * level, 1.0)
        seed = int(seeds.integers(1 << 30))
        mine, ref = np.random.default_rng(seed), np.random.default_rng(seed)
        got = walk_tree(tree, cond, mine, batch)
        assert got.tolist() == _general(tree, cond, ref, batch).tolist()
        assert got.dtype == np.int64
        assert mine.random() == ref.random()  # the same number of draws taken
        rows = seeds.uniform(0.0, 1.0, (batch, tree.num_nodes))  # per-request conditionals
        mine, ref = np.random.default_rng(seed), np.random.default_rng(seed)
        assert walk_tree(tree, rows, mine, batch).tolist() == \
            _general(tree, rows, ref, batch).tolist()
        assert mine.random() == ref.random()


def test_a_certain_tree_is_walked_to_its_depth():
    tree = TREES[1]
    assert walk_tree(tree, np.ones(tree.num_nodes), np.random.default_rng(0), 1).tolist() == \
        [tree.max_depth]


@pytest.mark.parametrize("model", [
    TopKCoverageAcceptance(((0.6, 0.8, 0.9, 0.95), (0.4, 0.55, 0.6, 0.62))),
    SequoiaAcceptance((0.7, 0.5, 0.2, 0.1))], ids=["tree_topk", "sequoia"])
@pytest.mark.parametrize("batch", [1, 3, 9])
def test_models_and_policies_walk_their_conditionals_with_the_same_draws(model, batch):
    """``sample_tree`` of a parametric model, and a policy's ``sample_all`` of it (its walk
    kept for the tree), are the general walk under ``node_conditionals``: the same lengths
    and the generator left where it leaves it."""
    tree = TREES[2]
    cond = model.node_conditionals(tree)
    policy = PolicyAcceptance(model, "scenario", bound=True)
    ctx, ids = np.full(batch, 100), np.arange(batch)
    for seed in range(30):
        ref, mine, kept = (np.random.default_rng(seed) for _ in range(3))
        want = _general(tree, cond, ref, batch).tolist()
        assert model.sample_tree(tree, ctx, ids, mine).tolist() == want
        assert policy.sample_all(tree, ctx, ids, kept).tolist() == want
        assert mine.random() == kept.random() == ref.random()
    assert policy.tree_walk(tree) is policy.tree_walk(tree)
    assert PolicyAcceptance(model, "scenario", bound=False).tree_walk(tree) is None
    assert policy.tree_walk(TREES[0]) is None  # a chain is drawn as a chain


# a tree whose paths end at different depths (leaves at depths 1, 2 and 4)
UNEVEN = TokenTree(np.array([-1, 0, 1, 2, 0, -1, 5, -1], np.intp))


@pytest.mark.parametrize("tree", [*TREES, UNEVEN], ids=["chain5", "3-2-2-1", "1-4-1-2-1-1",
                                                        "uneven"])
@pytest.mark.parametrize("batch", [1, 2, 8, 9, 40])
def test_a_walk_from_uniforms_drawn_ahead_is_the_generators_walk(tree, batch):
    """``TreeWalk.ahead`` (issue 36: a stretch draws its walks' uniforms in chunks): from the
    uniforms the generator would give, at any offset of the list, the general walk's
    lengths, and it says how many the general walk took (the generator's next uniform is
    the list's next), never more than ``most``."""
    seeds = np.random.default_rng(23)
    for trial in range(40):
        level = seeds.uniform(0.05, 0.99)
        cond = np.minimum(seeds.uniform(0.0, 1.0, tree.num_nodes) * 2 * level, 1.0)
        cond[seeds.uniform(size=tree.num_nodes) < 0.1] = 0.0  # children never taken
        seed = int(seeds.integers(1 << 30))
        ref = np.random.default_rng(seed)
        want = _general(tree, cond, ref, batch).tolist()
        walk = TreeWalk(tree, cond)
        at = trial % 7  # uniforms of earlier walks before this one's
        draws = [-1.0] * at + np.random.default_rng(seed).random(walk.most(batch) + 1).tolist()
        got, used = walk.ahead(batch)(draws, at)
        assert got == want and all(type(n) is int for n in got)  # a list of ints
        assert 0 < used <= walk.most(batch) and used % (batch * tree.child_table.shape[1]) == 0
        assert draws[at + used] == ref.random()  # the same number of draws taken
