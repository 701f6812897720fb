"""Token-tree preconditions, checked where the seeds state them (issue 11, item 8); split
from test_spec_preconditions.py.

- Token-tree siblings carry distinct tokens (else MSS / naive sampling miscount them).
- min(1, p/q) with p(x) = q(x) = 0 rejects: the target's impossible tokens are never emitted.
- token_level acceptance refuses a tree wider than its toy vocabulary, before any step.
"""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from simulator.acceptance.token_level import TokenLevelAcceptance
from simulator.inputs.errors import SpecsimError
from simulator.scenario import PolicyConfig
from simulator.simulate import simulate
from simulator.speculation.enumeration import (
    chain_step,
    children_tuples,
    output_distribution,
    target_distribution,
    total_variation,
    tree_step,
)
from simulator.speculation.token_tree import TokenTree, check_distinct_siblings
from simulator.speculation.toy_lm import ToyLM
from simulator.speculation.tree_verification import (
    mss_schedule,
    naive_schedule,
    tree_outcomes,
    verify_tree,
    without_replacement_draft_probs,
)
from simulator.speculation.verification import (
    first_token_distribution,
    ratio_acceptance,
    speculative_sampling_verdict,
    verdict_outcomes,
)
from tests.helpers import scenario, workload


# ------------------------------------------------------------------ 4. distinct siblings
@pytest.mark.parametrize("build", [
    lambda: TokenTree(np.array([-1, -1]), np.array([3, 3])),
    lambda: TokenTree.from_config([2]).with_tokens([1, 1]),
    lambda: TokenTree.from_config([2, 2]).with_tokens([0, 4, 4, 1, 4, 0]),   # under node 0
    lambda: TokenTree.from_expansion([2], lambda path, k: [4, 4]),
    lambda: TokenTree.from_expansion([1, 3], lambda path, k: [2] * k),
], ids=["init", "with_tokens", "grandchildren", "expansion", "expansion_deeper"])
def test_twin_siblings_are_refused_by_every_constructor(build):
    with pytest.raises(SpecsimError) as err:
        build()
    assert err.value.field == "tokens" and "two children" in err.value.message


def test_equal_tokens_under_different_parents_and_empty_slots_are_fine():
    tree = TokenTree.from_config([2, 2]).with_tokens([0, 1, 0, 1, 0, 1])  # cousins may match
    assert tree.num_nodes == 6
    check_distinct_siblings(tree.parents, np.array([[0, 1, -1, 2, -1, -1]]))  # -1: empty
    # merge-based construction stores a shared prefix once: its siblings are always distinct
    merged = TokenTree.from_sequences([[1, 2], [1, 3], [1, 2, 5], [4]])
    assert merged.parents.tolist() == [-1, 0, 1, 0, -1]
    assert merged.tokens.tolist() == [1, 2, 5, 3, 4]


def test_twins_in_per_request_tokens_are_refused_by_the_walk_and_the_enumeration():
    tree = TokenTree.from_config([2])
    p = np.full((2, 3, 4), 0.25)
    tokens = np.array([[0, 1], [2, 2]])                    # request row 1 has twins
    for call in (lambda: verify_tree(tree, p, np.random.default_rng(0), "naive",
                                     tokens=tokens),
                 lambda: tree_outcomes(tree, p, "mss", draft_probs=p, tokens=tokens)):
        with pytest.raises(SpecsimError, match="request row 1"):
            call()


def test_twins_would_be_miscounted_which_is_why_they_are_refused():
    # Naive sampling with token a twice: P(emit a) = p(a) + (1 - p(a)) p(a)/(1 - p(a)) = 2 p(a)
    p = np.array([0.3, 0.7])
    accept, stop = naive_schedule(p, np.array([0, 0]))
    emit_a = accept[0] + (1 - accept[0]) * accept[1] + (1 - accept[0]) * (1 - accept[1]) * stop[0]
    assert emit_a == pytest.approx(2 * p[0])
    # MSS: the twin's draft distribution no longer holds a (q_2(a) = 0), and what is left of
    # the target has none either (r(a) = 0 after a rejection of a): 0/0, which must reject --
    # taking it as 1 would emit a whenever the first copy was rejected
    q = np.array([0.9, 0.1])
    qs = without_replacement_draft_probs(q, np.array([0, 0]))
    accept, stop = mss_schedule(p, np.array([0, 0]), qs)
    assert qs[1, 0] == 0 and accept[0] == pytest.approx(p[0] / q[0]) and accept[1] == 0.0


@pytest.mark.parametrize("method", ["mss", "naive"])
@pytest.mark.parametrize("config", [(2,), (3, 1), (2, 2)])
def test_mss_and_naive_on_distinct_sampled_children_are_lossless(method, config):
    # exact enumeration: every children tuple (without replacement, so never twins)
    rng = np.random.default_rng(sum(config))
    target = ToyLM.random_target(4, rng, sharpness=1.5)
    draft = target.noisy_draft(rng, noise=1.0)
    dist = output_distribution(tree_step(target, draft, config, method), 4, 3)
    assert total_variation(dist, target_distribution(target, 3)) < 1e-12


# ------------------------------------------------------------------ 5. zero probabilities
def test_zero_over_zero_rejects_and_nothing_is_nan():
    p = np.array([0.0, 0.0, 0.3, 0.5, 0.2])
    q = np.array([0.0, 0.4, 0.0, 0.5, 0.4])
    with np.errstate(all="raise"):
        got = ratio_acceptance(p, q)
    assert got.tolist() == [0.0, 0.0, 1.0, 1.0, 0.5]
    assert float(ratio_acceptance(0.0, 0.0)) == 0.0


def test_a_token_the_target_cannot_emit_is_never_emitted():
    # Token 0 has p = q = 0.  Forced as the draft (no sampler would draw it), it is rejected
    # and the correction comes from the residual, which has no mass on it either.
    p = np.array([[0.0, 0.5, 0.5], [0.0, 0.5, 0.5]])
    q = np.array([[0.0, 0.7, 0.3]])
    verdict = speculative_sampling_verdict(np.array([0]), q, p)
    assert verdict.accept.tolist() == [0.0]
    out = verdict_outcomes(verdict)
    assert np.isfinite(out).all() and out[..., 0].sum() == 0.0
    assert out[0] == pytest.approx([0.0, 0.0, 1.0])        # residual norm(max(0, p - q))
    # and averaged over drafts x ~ q the first token is exactly p
    assert first_token_distribution("speculative_sampling", p[0], q[0]) == \
        pytest.approx(p[0], abs=1e-15)


@pytest.mark.parametrize("method", ["mss", "mss_plain_q", "naive", "greedy"])
def test_tree_walks_never_accept_a_child_the_target_gives_no_mass(method):
    # root children [0, 1]; token 0 has p = q = 0 at the root
    tree = TokenTree.from_config([2]).with_tokens([0, 1])
    p = np.array([[0.0, 0.6, 0.4], [0.2, 0.3, 0.5], [0.3, 0.3, 0.4]])
    q = np.array([[0.0, 0.5, 0.5], [0.4, 0.3, 0.3], [0.2, 0.5, 0.3]])
    out = tree_outcomes(tree, p, method, draft_probs=q)
    assert np.isfinite(out).all() and out.sum() == pytest.approx(1.0)
    assert out[1].sum() == 0.0                              # node 0 (token 0) never accepted
    assert out[0, 0] == 0.0                                 # nor emitted as the correction


def test_lossless_with_structural_zeros_in_both_tables():
    # tables where some tokens are impossible for the target and the draft (softmax rows
    # with -inf logits); the draft's support may be narrower than a node's width
    rng = np.random.default_rng(8)
    v = 4
    logits = rng.standard_normal((v + 1, v + 1, v))
    mask = rng.random((v + 1, v + 1, v)) < 0.3
    mask[..., 0] = False                                    # keep every row non-empty
    target = ToyLM(np.where(mask, 0.0, np.exp(logits)) /
                   np.where(mask, 0.0, np.exp(logits)).sum(-1, keepdims=True))
    noisy = np.where(mask | (rng.random(mask.shape) < 0.3), 0.0,
                     np.exp(logits + rng.standard_normal(mask.shape)))
    noisy[..., 0] = np.where(noisy[..., 0] == 0, 1e-3, noisy[..., 0])
    draft = ToyLM(noisy / noisy.sum(-1, keepdims=True))
    want = target_distribution(target, 3)
    assert total_variation(output_distribution(chain_step(target, draft, 3), v, 3), want) \
        < 1e-12
    for method in ("mss", "naive"):
        dist = output_distribution(tree_step(target, draft, (3, 2), method), v, 3)
        assert total_variation(dist, want) < 1e-12


def test_an_empty_slot_is_the_same_as_no_child():
    # a drafter with fewer than k tokens of positive q leaves -1: exactly the narrower tree
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(4), size=4), rng.dirichlet(np.ones(4), size=4)
    wide, narrow = TokenTree.from_config([3]), TokenTree.from_config([2])
    for method in ("mss", "naive", "greedy"):
        a = tree_outcomes(wide, p, method, draft_probs=q, tokens=np.array([2, 0, -1]))
        b = tree_outcomes(narrow, p[:3], method, draft_probs=q[:3], tokens=np.array([2, 0]))
        assert a[:3] == pytest.approx(b, abs=1e-15) and a[3].sum() == 0.0


# ------------------------------------------------------------------ 6. token_level widths
def _specinfer(expansion, acceptance, own=None):
    sc = scenario("none", target="llama-2-7b", draft="llama-68m")
    params = {"expansion": expansion}
    if own is not None:
        params["acceptance"] = own
    return dataclasses.replace(sc, policy=PolicyConfig("specinfer", params),
                               acceptance=acceptance)


def test_a_tree_wider_than_the_toy_vocabulary_is_refused_before_any_step():
    sc = _specinfer([3, 1], {"model": "token_level", "vocab_size": 2})
    with pytest.raises(SpecsimError) as err:
        simulate(sc, workload=workload([0.0], [10], [10]))
    e = err.value
    assert e.field == "acceptance.vocab_size" and "3 children" in e.message
    assert "vocab_size 2" in e.message and "at least 3" in e.fix
    own = _specinfer([3, 1], {"model": "iid", "alpha": 0.5},
                     own={"model": "token_level", "vocab_size": 2})
    with pytest.raises(SpecsimError) as err:
        simulate(own, workload=workload([0.0], [10], [10]))
    assert err.value.field == "policy.acceptance.vocab_size"


def test_a_tree_as_wide_as_the_vocabulary_runs():
    sc = _specinfer([3, 1], {"model": "token_level", "vocab_size": 3})
    res = simulate(sc, workload=workload([0.0, 0.0], [20, 30], [30, 30]))
    req = res.requests
    assert (req["status"] == "finished").all() and (req["num_drafts"] > 0).all()
    assert (req["num_accepted_tokens"] <= 2 * req["num_drafts"]).all()


def test_a_draft_whose_support_is_narrower_than_the_tree_runs():
    # at a low temperature softmax underflows: some draft rows have fewer than 3 tokens
    model = TokenLevelAcceptance(vocab_size=8, sharpness=2.0, temperature=0.004)
    narrow = ((model.draft.table > 0).sum(-1) < 3).sum()
    assert narrow > 0
    tree = TokenTree.from_config([3, 1])
    rng = np.random.default_rng(1)
    bound = model.bind(64, rng)
    ids = np.arange(64)
    for _ in range(30):
        got = bound.sample_tree(tree, np.zeros(64), ids, rng)
        assert ((got >= 0) & (got <= 2)).all()


def test_children_tuples_of_a_narrow_support_are_distinct_tokens():
    q = np.array([0.0, 0.6, 0.0, 0.4])
    tuples = children_tuples(q, 3, "sampled")
    assert sum(w for _, w in tuples) == pytest.approx(1.0)
    for kids, _ in tuples:
        assert len(set(kids.tolist())) == len(kids) == 2
    assert set(itertools.chain.from_iterable(k.tolist() for k, _ in tuples)) == {1, 3}
