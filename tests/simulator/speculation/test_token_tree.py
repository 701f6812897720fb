"""Token trees (construction, linearisation, tree attention inputs) and tree verification."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.speculation.token_tree import TokenTree, sample_children, top_k_children
from simulator.speculation.toy_lm import ToyLM
from simulator.speculation.tree_verification import (
    greedy_schedule,
    mss_schedule,
    naive_schedule,
    tree_outcomes,
    verify_greedy,
    verify_tree,
)
from simulator.speculation.verification import greedy_verification


def test_exercise_5_of_lecture_000_merge_order_and_positions():
    a, b, c, d, e, f, g = range(7)
    tree = TokenTree.from_sequences([[a, b, c], [a, b, d, e], [f, g]])
    assert tree.num_nodes == 7                      # 3 + 4 + 2 = 9 tokens sequence by sequence
    assert tree.tokens.tolist() == [a, b, c, d, e, f, g]          # depth-first order
    assert tree.position_ids().tolist() == [1, 2, 3, 3, 4, 1, 2]  # r(0) a(1) b(2) c(3) d(3) ...
    mask = tree.attention_mask()
    sees = [int(tree.tokens[j]) for j in np.flatnonzero(mask[4])]
    assert sees == [a, b, d, e]                     # e sees a, b, d and itself; not c, f, g


def test_slides_mask_of_lecture_000_section_4_3():
    words = ["machine", "learning", "algorithm", "system", "design", "translation", "model"]
    ids = {w: i for i, w in enumerate(words)}
    seqs = [["machine", "learning", "algorithm"], ["machine", "learning", "system", "design"],
            ["machine", "translation", "model"]]
    tree = TokenTree.from_sequences([[ids[w] for w in s] for s in seqs])
    assert [words[t] for t in tree.tokens] == words
    expected = np.array([            # the ✓ table of section 4.3, rows and columns as listed
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 0, 1, 0, 0, 0],
        [1, 1, 0, 1, 1, 0, 0],
        [1, 0, 0, 0, 0, 1, 0],
        [1, 0, 0, 0, 0, 1, 1]], dtype=bool)
    assert np.array_equal(tree.attention_mask(), expected)


def test_expansion_configurations_of_specinfer():
    tree = TokenTree.from_config([2, 2, 1])           # SpecInfer Figure 3: 4 sequences
    assert len(tree.paths()) == 4 and tree.num_nodes == 2 + 4 + 4
    tree = TokenTree.from_config([1, 1, 3, 1, 1, 1, 1, 1])  # its experiments' configuration
    assert len(tree.paths()) == 3 and tree.max_depth == 8
    assert tree.num_nodes == 1 + 1 + 3 * 6
    assert TokenTree.chain(4).is_chain and not tree.is_chain
    # The mask of a chain is the ordinary causal mask.
    assert np.array_equal(TokenTree.chain(4).attention_mask(), np.tril(np.ones((4, 4), bool)))


def test_expansion_with_top_k_children_follows_the_draft():
    rng = np.random.default_rng(0)
    draft = ToyLM.random_target(5, rng)
    tree = TokenTree.from_expansion(
        [2, 1], lambda path, k: top_k_children(draft.probs(list(path)), k))
    first = np.argsort(-draft.probs([]))[:2]
    assert tree.tokens[tree.children(-1)].tolist() == first.tolist()
    for node in tree.children(-1):
        child = tree.children(node)[0]
        assert tree.tokens[child] == draft.probs([int(tree.tokens[node])]).argmax()


def test_children_without_replacement_follow_successive_draws():
    # P(first = i, second = j) = q_i * q_j / (1 - q_i) for sampling without replacement.
    rng = np.random.default_rng(3)
    q = np.array([0.4, 0.3, 0.2, 0.1])
    n = 80_000
    drawn = sample_children(np.tile(q, (n, 1)), 2, rng)
    freq = np.zeros((4, 4))
    np.add.at(freq, (drawn[:, 0], drawn[:, 1]), 1.0 / n)
    exact = np.array([[q[i] * q[j] / (1 - q[i]) if i != j else 0.0 for j in range(4)]
                      for i in range(4)])
    assert np.all(np.abs(freq - exact) <= 5 * np.sqrt(exact * (1 - exact) / n) + 1.0 / n)
    assert sample_children(np.array([0.0, 1.0, 0.0]), 2, rng).tolist() == [1, -1]


def test_exercise_6_of_lecture_000_mss_vs_naive():
    p = np.full(4, 0.25)
    children = np.array([1, 2])                                   # t2 from SSM 1, t3 from SSM 2
    qs = np.array([[0.5, 0.5, 0, 0], [0.25, 0.25, 0.25, 0.25]])
    accept, _ = mss_schedule(p, children, qs)
    assert accept == pytest.approx([0.5, 1.0])
    assert 1 - np.prod(1 - accept) == pytest.approx(1.0)
    accept, _ = naive_schedule(p, children)
    assert 1 - np.prod(1 - accept) == pytest.approx(0.5)


def test_slides_example_averaged_over_the_second_draft():
    # Lecture 000, section 4.5: LLM uniform over 4 tokens, SSM 1 always t1, SSM 2 uniform.
    # Averaged over SSM 2's draw: MSS accepts with 81.25 %, naive sampling with 43.75 %.
    p = np.full(4, 0.25)
    q1, q2 = np.array([1.0, 0, 0, 0]), np.full(4, 0.25)
    mss = naive = 0.0
    for second in range(4):
        accept, _ = mss_schedule(p, np.array([0, second]), np.stack([q1, q2]))
        mss += q2[second] * (1 - np.prod(1 - accept))
        kids = np.array([0] if second == 0 else [0, second])      # a merged tree has no twins
        accept, _ = naive_schedule(p, kids)
        naive += q2[second] * (1 - np.prod(1 - accept))
    assert mss == pytest.approx(0.8125) and naive == pytest.approx(0.4375)


def test_exercise_7_of_lecture_000_top1_with_the_plain_formula():
    p, q = np.array([0.5, 0.5]), np.array([0.6, 0.4])
    tree = TokenTree(np.array([-1]), np.array([0]))                # the draft's top-1, always
    out = tree_outcomes(tree, np.stack([p, p]), "mss_plain_q", draft_probs=np.stack([q, q]))
    first = np.array([out[1].sum(), out[0, 1]])                    # accept token 0, or correct
    assert first == pytest.approx([5 / 6, 1 / 6])


def _greedy_tree_decode(target, draft, config, context, length):
    text = list(context)
    while len(text) < len(context) + length:
        tree = TokenTree.from_expansion(
            config, lambda path, k: top_k_children(draft.probs(text + list(path)), k))
        rows = [target.probs(text)] + [
            target.probs(text + [int(tree.tokens[j]) for j in tree.path_to(i)])
            for i in range(tree.num_nodes)]
        verdict = verify_greedy(tree, np.array(rows))
        path = tree.path_to(int(verdict.last_node)) if verdict.last_node >= 0 else []
        text += [int(tree.tokens[j]) for j in path] + [int(verdict.next_token)]
    return text[len(context):len(context) + length]


@pytest.mark.parametrize("config", [(2,), (2, 2, 1), (1, 3, 1, 1), (3, 2)])
def test_greedy_tree_reproduces_the_targets_greedy_decoding(config):
    rng = np.random.default_rng(len(config))
    target = ToyLM.random_target(6, rng)
    draft = target.noisy_draft(rng, noise=1.5)
    for context in ([], [3], [0, 5]):
        assert _greedy_tree_decode(target, draft, config, context, 30) == \
            target.greedy_decode(context, 30)


def test_greedy_tree_never_accepts_less_than_its_best_chain():
    rng = np.random.default_rng(11)
    target = ToyLM.random_target(5, rng, sharpness=2.5)
    draft = target.noisy_draft(rng, noise=1.0)
    for trial in range(40):
        config = tuple(rng.integers(1, 4, size=rng.integers(1, 5)))
        context = list(rng.integers(0, 5, size=2))
        tree = TokenTree.from_expansion(
            config, lambda path, k: sample_children(draft.probs(context + list(path)), k, rng))
        rows = np.array([target.probs(context)] + [
            target.probs(context + [int(tree.tokens[j]) for j in tree.path_to(i)])
            for i in range(tree.num_nodes)])
        tree_len = int(verify_greedy(tree, rows).accepted)
        best = 0
        for path in tree.paths():
            chain_rows = np.concatenate([rows[:1], rows[np.array(path) + 1]])
            accepted, _ = greedy_verification(tree.tokens[path], chain_rows)
            best = max(best, int(accepted))
        assert tree_len >= best
        assert tree_len == best       # greedy: the tree follows exactly the best matching chain


@pytest.mark.parametrize("method", ["mss", "naive", "mss_plain_q", "greedy"])
def test_tree_walk_matches_the_exact_outcome(method):
    rng = np.random.default_rng(5)
    vocab = 4
    tree = TokenTree.from_config([3, 2]).with_tokens([0, 1, 2, 3, 0, 1, 2, 3, 0])
    p = rng.dirichlet(np.ones(vocab), size=tree.num_nodes + 1)
    q = rng.dirichlet(np.ones(vocab), size=tree.num_nodes + 1)
    exact = tree_outcomes(tree, p, method, draft_probs=q)
    assert exact.sum() == pytest.approx(1.0)
    n = 60_000
    verdict = verify_tree(tree, np.tile(p, (n, 1, 1)), rng, method,
                          draft_probs=np.tile(q, (n, 1, 1)))
    freq = np.zeros_like(exact)
    np.add.at(freq, (verdict.last_node + 1, verdict.next_token), 1.0 / n)
    assert np.all(np.abs(freq - exact) <= 5 * np.sqrt(exact * (1 - exact) / n) + 1.0 / n)
    depth = np.concatenate([[0], tree.depth])
    assert np.array_equal(verdict.accepted, depth[verdict.last_node + 1])


def test_schedules_agree_on_point_masses():
    # With a one-hot target, every schedule accepts exactly the argmax child.
    p = np.array([0.0, 0.0, 1.0, 0.0])
    kids = np.array([1, 2, 3])
    for accept, stop in (greedy_schedule(p, kids), naive_schedule(p, kids),
                         mss_schedule(p, kids, np.full((3, 4), 0.25))):
        assert accept[0] == 0 and accept[1] == pytest.approx(1.0)


@pytest.mark.parametrize("config", [[], [2, 0], [1, -1], [1.5], [True], "21"])
def test_bad_expansion_configurations_are_named(config):
    with pytest.raises(SpecsimError) as err:
        TokenTree.from_config(config)
    assert err.value.field == "config"


def test_empty_and_malformed_trees_are_named():
    with pytest.raises(SpecsimError, match="tree"):
        TokenTree(np.array([], dtype=int))
    with pytest.raises(SpecsimError, match="sequences"):
        TokenTree.from_sequences([])
    with pytest.raises(SpecsimError, match="sequences"):
        TokenTree.from_sequences([[1, 2], []])
    with pytest.raises(SpecsimError, match="parents"):
        TokenTree(np.array([-1, 2, 0]))                    # a parent after its child
    with pytest.raises(SpecsimError, match="parents"):
        TokenTree(np.array([-1, 0, -1, 1]))                # subtree of node 0 split
    tree = TokenTree.from_config([2])
    with pytest.raises(SpecsimError, match="tokens"):
        verify_greedy(tree, np.full((3, 4), 0.25))
    tree = tree.with_tokens([0, 1])
    with pytest.raises(SpecsimError, match="target_probs"):
        verify_greedy(tree, np.full((2, 4), 0.25))
    with pytest.raises(SpecsimError, match="draft_probs"):
        verify_tree(tree, np.full((3, 4), 0.25), np.random.default_rng(0), "mss")
    with pytest.raises(SpecsimError, match="method"):
        verify_tree(tree, np.full((3, 4), 0.25), None, "typical")
    with pytest.raises(SpecsimError, match="target_probs"):
        verify_greedy(tree, np.array([[0.5, 0.6, 0, 0]] * 3))


def test_every_node_is_reachable_from_dfs_paths():
    tree = TokenTree.from_config([2, 3, 1])
    seen = sorted(itertools.chain.from_iterable(tree.paths()))
    assert sorted(set(seen)) == list(range(tree.num_nodes))
    # DFS: every subtree is a contiguous block.
    for node in range(tree.num_nodes):
        below = [i for i in range(tree.num_nodes) if node in tree.path_to(i)]
        assert below == list(range(node, node + len(below)))
