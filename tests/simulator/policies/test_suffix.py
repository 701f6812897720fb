"""suffix: the trie's counts, tree speculation and verification, SuffixDecoding on agents."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from simulator.engine.plan import BatchView
from simulator.inputs.errors import SpecsimError
from simulator.policies.base import PolicyContext
from simulator.policies.suffix import SuffixDecoding
from simulator.scenario import load_scenario, scenario_from_dict
from simulator.simulate import simulate
from simulator.speculation.suffix_index import Cursor, Speculation, SuffixIndex, tree_accepted
from tests.helpers import REPO
from workloads.workload import Workload

SCENARIOS = REPO / "workloads" / "scenarios"


def substring_counts(seqs, depth):
    """Occurrences of every substring of <= depth tokens, and of those a token follows."""
    count, follow = Counter(), Counter()
    for s in seqs:
        s = list(s)
        for i in range(len(s)):
            for n in range(1, min(depth, len(s) - i) + 1):
                count[tuple(s[i:i + n])] += 1
                if n < depth and i + n < len(s):
                    follow[tuple(s[i:i + n])] += 1
    return count, follow


def index_counts(index: SuffixIndex):
    """Walk the trie: substring -> (count, out)."""
    out, stack = {}, [((), 0)]
    while stack:
        path, node = stack.pop()
        for c in index.children(node):
            sub = path + (index.token(c),)
            out[sub] = (index.count[c], index.out(c))
            stack.append((sub, c))
    return out


def test_trie_counts_every_substring_occurrence():
    rng = np.random.default_rng(0)
    for depth in (2, 3, 5):
        seqs = [rng.integers(0, 3, size=rng.integers(1, 15)) for _ in range(4)]
        index = SuffixIndex(depth)
        for s in seqs[:2]:
            index.add(s)
        cursor = Cursor()  # online: the others arrive in pieces
        index.extend(cursor, seqs[2][:3])
        index.extend(cursor, seqs[2][3:])
        index.add(seqs[3])
        count, follow = substring_counts(seqs, depth)
        assert index_counts(index) == {s: (count[s], follow[s]) for s in count}


def test_node_ids_follow_first_occurrences_and_freed_ids_are_reused_last_first():
    """Ids break speculation's ties, so they are part of the result: without removals a
    node's id is its rank by (end of its first occurrence, length); after a removal, new
    nodes take the freed ids, the last freed first, before any new id."""
    rng = np.random.default_rng(7)
    for depth in (2, 4, 6):
        seqs = [rng.integers(0, 3, size=rng.integers(1, 12)).tolist() for _ in range(4)]
        index, first = SuffixIndex(depth), {}
        end = 0
        for s in seqs:
            index.add(s)
            for i in range(len(s)):
                for n in range(1, min(depth, i + 1) + 1):
                    first.setdefault(tuple(s[i - n + 1:i + 1]), (end + i, n))
            end += len(s)
        order = sorted(first, key=first.get)
        assert [index.find(sub) for sub in order] == list(range(1, len(order) + 1))
        index.remove(seqs[0])
        freed = list(index._free)
        index.add([9, 9, 9])  # a token never seen: every node new
        made = [index.find([9] * n) for n in range(1, min(depth, 3) + 1)]
        assert made == (freed[::-1] + list(range(len(order) + 1, len(order) + 4)))[:len(made)]


def test_removing_a_sequence_undoes_it():
    rng = np.random.default_rng(1)
    seqs = [rng.integers(0, 4, size=12) for _ in range(3)]
    index = SuffixIndex(4)
    for s in seqs:
        index.add(s)
    index.remove(seqs[0])
    fresh = SuffixIndex(4)
    for s in seqs[1:]:
        fresh.add(s)
    assert index_counts(index) == index_counts(fresh)
    assert len(index) == len(fresh)
    index.add(seqs[0])  # freed nodes are reused, the counts stay right
    count, follow = substring_counts(seqs, 4)
    assert index_counts(index) == {s: (count[s], follow[s]) for s in count}
    with pytest.raises(SpecsimError):
        SuffixIndex(4).remove([1, 2])


def test_matching_finds_the_longest_suffix_with_a_continuation():
    index = SuffixIndex(6)
    index.add([1, 2, 3, 4, 9, 2, 3, 5])
    assert index.longest_match(np.array([7, 2, 3]), 5)[1] == 2      # "2 3" is followed
    assert index.longest_match(np.array([3, 4]), 5)[1] == 2          # "3 4" -> 9
    assert index.longest_match(np.array([3, 5]), 5) == (-1, 0)       # "5" ends the text
    assert index.longest_match(np.array([1, 2, 3]), 1)[1] == 1       # capped length
    cursor = Cursor()
    online = SuffixIndex(6)
    online.extend(cursor, [1, 2, 3, 4, 1, 2])
    node, length = online.cursor_match(cursor, 5)
    assert length == 2 and online.token(node) == 2                   # "1 2" seen before


def test_tree_speculation_by_frequency():
    index = SuffixIndex(8)
    for s in ([1, 2, 3, 7], [1, 2, 3, 8], [1, 2, 4]):
        index.add(s)
    node = index.find([1, 2])
    spec = index.speculate(node, budget=4, min_prob=0.1)
    # children of "1 2": 3 (2/3) and 4 (1/3); under "1 2 3": 7 and 8 (1/2 each -> 1/3)
    assert spec.tokens[0] == 3 and spec.probs[0] == pytest.approx(2 / 3)
    nodes = {(tok, spec.tokens[par] if par >= 0 else None): p
             for tok, par, p in zip(spec.tokens, spec.parents, spec.probs)}
    assert nodes == pytest.approx({(3, None): 2 / 3, (4, None): 1 / 3, (7, 3): 1 / 3,
                                   (8, 3): 1 / 3})
    assert all(par < i for i, par in enumerate(spec.parents))  # parents come first
    assert spec.score == pytest.approx(5 / 3)
    assert index.speculate(node, 4, min_prob=0.5).tokens == [3]
    assert index.speculate(node, 1, min_prob=0.1).tokens == [3]
    path = index.speculate(node, 4, min_prob=0.1, tree=False)
    assert path.tokens[0] == 3 and path.parents == [-1, 0]


def test_tree_verification_accepts_the_deepest_node_on_the_true_path():
    spec = Speculation(parents=[-1, -1, 0, 2, 1], tokens=[5, 6, 7, 8, 9],
                       probs=[1.0] * 5)
    assert tree_accepted(spec, np.array([5, 7, 8, 1])) == 3
    assert tree_accepted(spec, np.array([5, 7, 0])) == 2
    assert tree_accepted(spec, np.array([6, 9])) == 2
    assert tree_accepted(spec, np.array([6, 7])) == 1
    assert tree_accepted(spec, np.array([1])) == 0
    assert tree_accepted(spec, np.array([5])) == 1  # the output ends


def _hand_policy(prompts, outputs, **params):
    wl = Workload(name="hand", arrival_s=np.zeros(len(prompts)),
                  prompt_tokens=[len(p) for p in prompts],
                  output_tokens=[len(o) for o in outputs], prompt_ids=prompts,
                  output_ids=outputs)
    return SuffixDecoding(SuffixDecoding.parse_params(params, source="test"),
                          PolicyContext(target_cost=None, workload=wl))


def _batch(rids, generated, output_len, prompt_len):
    return BatchView(request_ids=np.asarray(rids), context=np.asarray(prompt_len) + generated,
                     generated=np.asarray(generated), output_len=np.asarray(output_len),
                     prompt_len=np.asarray(prompt_len), batch_size=len(rids), now_s=0.0)


def test_finished_outputs_feed_the_global_trie_fifo():
    outs = tuple(np.array([50 + i, 60 + i, 70 + i]) for i in range(3))
    prompts = tuple(np.array([1, 2]) for _ in range(3))
    pol = _hand_policy(prompts, outs, suffix_decoding_max_cached_requests=1,
                       suffix_decoding_max_tree_depth=4, num_speculative_tokens=2)
    for rid in range(3):  # each request emits its last two tokens and finishes
        batch = _batch([rid], [1], [3], [2])
        plan = pol.propose(batch, None)
        pol.observe(plan, batch, np.array([1]), 0.0)
    only_last = SuffixIndex(4)
    only_last.add(outs[2])
    assert index_counts(pol.global_index.trie()) == index_counts(only_last)


def test_two_tries_speculate_and_the_cost_is_counted():
    # request 1's output repeats request 0's; its prompt shares nothing with it
    out = np.array([30, 31, 32, 33, 34, 35])
    pol = _hand_policy((np.array([1, 2, 3]), np.array([7, 8])), (out, out.copy()),
                       num_speculative_tokens=4, cpu_time_per_request_s=1e-5,
                       cpu_time_per_token_s=1e-6)
    b0 = _batch([0], [6], [6], [3])
    pol.observe(pol.propose(b0, None), b0, np.array([0]), 0.0)  # request 0 finishes
    b1 = _batch([1], [2], [6], [2])  # request 1 has emitted 30 31
    plan = pol.propose(b1, None)
    assert plan.payload[1].tokens == [32, 33]  # match "30 31" (2 tokens) -> budget 2
    assert plan.num_draft.tolist() == [2] and plan.verify_tokens.tolist() == [3]
    assert plan.cpu_time_s == pytest.approx(1e-5 + 4 * 1e-6)  # its 4 tokens indexed
    assert pol.accept(plan, b1, None).tolist() == [2]


@pytest.mark.parametrize("params, field", [
    ({"use_request_tree": False, "use_global_tree": False}, "policy.use_global_tree"),
    ({"suffix_decoding_min_token_prob": 1.5}, "policy.suffix_decoding_min_token_prob"),
    ({"suffix_decoding_max_tree_depth": 1}, "policy.suffix_decoding_max_tree_depth"),
    ({"max_depth": 8}, "policy.max_depth"),
])
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(SpecsimError) as err:
        SuffixDecoding.parse_params(params, source="test")
    assert err.value.field == field


def _agent_run(policy, n=40, seed=2):
    sc = scenario_from_dict({
        "name": "agent", "seed": seed, "hardware": "a100-40gb", "target": "opt-13b",
        "policy": policy, "batching": {"max_num_seqs": 32},
        "workload": {"tokens": {"kind": "agent_loop", "num_requests": n,
                                "arrival": {"process": "poisson", "rate_per_s": 1.0}}},
    }, source="test")
    res = simulate(sc)
    steps = res.steps
    per_step = (steps.emitted_tokens.sum() - steps.num_prefill.sum()) / steps.num_decode.sum()
    return res, float(per_step)


@pytest.fixture(scope="module")
def agent_runs():
    return {label: _agent_run(policy) for label, policy in {
        "none": "none",
        "prompt_lookup": {"name": "prompt_lookup"},
        "suffix": {"name": "suffix"},
        "global_only": {"name": "suffix", "use_request_tree": False},
        "request_only": {"name": "suffix", "use_global_tree": False},
    }.items()}


def test_both_tries_together_win_on_the_agent_workload(agent_runs):
    per_step = {k: v[1] for k, v in agent_runs.items()}
    tpot = {k: v[0].summary()["mean_tpot_s"] for k, v in agent_runs.items()}
    # templates come from earlier outputs, slot fillers from the prompt: each trie alone
    # misses one of them, prompt lookup misses the templates
    for other in ("prompt_lookup", "global_only", "request_only", "none"):
        assert per_step["suffix"] > 1.15 * per_step[other], other
        assert tpot["suffix"] < tpot[other], other


def test_tree_verification_costs_n_plus_one_tokens(agent_runs):
    res, _ = agent_runs["suffix"]
    steps = res.steps
    assert steps.decode_tokens.sum() == steps.draft_tokens.sum() + steps.num_decode.sum()
    assert (res.requests.status == "finished").all()
    assert (steps.draft_tokens <= 16 * steps.num_decode).all()


def test_shipped_scenario_runs():
    res = simulate(load_scenario(SCENARIOS / "suffix.yaml", ["workload.tokens.num_requests=6"]))
    assert (res.requests.status == "finished").all()


def _random_index(rng) -> tuple[int, list[list[int]], SuffixIndex, list[int]]:
    """A depth bound, 1-3 random texts over 3 tokens, their ``SuffixIndex`` and a context."""
    depth = int(rng.integers(2, 7))
    texts = [rng.integers(0, 3, size=int(rng.integers(1, 12))).tolist()
             for _ in range(int(rng.integers(1, 4)))]
    index = SuffixIndex(depth)
    for t in texts:
        index.add(t)
    return depth, texts, index, rng.integers(0, 3, size=int(rng.integers(1, 9))).tolist()


def test_matching_agrees_with_enumerating_every_suffix():
    """``longest_match`` against brute force: the longest suffix (<= the cap and the depth
    bound) that occurs in an indexed text with a token after it, over random small texts;
    the node returned is that suffix's."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        depth, texts, index, context = _random_index(rng)
        cap = int(rng.integers(1, 8))

        def followed(s: list[int]) -> bool:
            n = len(s)
            return n < depth and any(t[i:i + n] == s for t in texts
                                     for i in range(len(t) - n))
        best = max((n for n in range(1, min(cap, len(context)) + 1)
                    if followed(context[-n:])), default=0)
        node, length = index.longest_match(np.array(context), cap)
        assert length == best, (texts, context, cap, depth)
        assert node == (index.find(context[-best:]) if best else -1)


def test_deep_and_roomy_matches_agree_with_enumerating_every_suffix():
    """``matches``: the longest suffix with a continuation (<= ``longest``) and the longest
    (<= ``roomy``), found by brute force over random small texts; the roomy one is given
    only where its length differs, and each node is its suffix's."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        depth, texts, index, context = _random_index(rng)
        longest = int(rng.integers(1, 8))
        roomy = int(rng.integers(0, longest + 1))

        def best(cap: int) -> int:
            return max((n for n in range(1, min(cap, len(context), depth - 1) + 1)
                        if any(t[i:i + n] == context[-n:] for t in texts
                               for i in range(len(t) - n))), default=0)
        want = [best(longest)] + ([best(roomy)] if best(roomy) != best(longest) else [])
        got = index.matches(context, longest, roomy)
        assert [m for _, m in got] == want, (texts, context, longest, roomy, depth)
        assert [node for node, _ in got] == [index.find(context[-m:]) if m else -1
                                             for m in want]


def test_a_match_grows_at_most_by_the_tokens_appended_and_scores_stay_within_budget():
    """Two shortcuts of ``SuffixDecoding.speculate``, on random small tries: the longest
    match after appending tokens is at most that many longer than before (the bound its
    global search runs below), and a speculation scores at most its node count up to
    rounding far below ``_ROUNDING`` (a try whose budget cannot beat the best is skipped)."""
    from simulator.policies.suffix import _ROUNDING
    rng = np.random.default_rng(5)
    for _ in range(300):
        depth = int(rng.integers(2, 8))
        index = SuffixIndex(depth)
        for _ in range(int(rng.integers(1, 5))):
            index.add(rng.integers(0, 3, size=int(rng.integers(1, 15))).tolist())
        context = rng.integers(0, 3, size=int(rng.integers(1, 10))).tolist()
        grown = context + rng.integers(0, 3, size=int(rng.integers(0, 4))).tolist()
        before = index.longest_in(context, depth)[1]
        node, after = index.longest_in(grown, depth)
        assert after <= before + len(grown) - len(context), (context, grown)
        for budget in (1, 3, 8):
            for tree in (True, False):
                spec = index.speculate(node, budget, 0.0, tree, after)
                assert spec.score <= len(spec) * (1 + 1e-12) < budget * _ROUNDING or not spec


def test_rows_planned_again_after_a_roll_back_match_a_fresh_policy():
    """``plan_rows``' rows thrown away (``keep_rows``) and planned again are answered from
    the last pass's speculations: the same rows, and the rows a policy that never planned
    past there gives (the CPU seconds included: the tokens indexed are put back)."""
    rep = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]
    prompts = (np.array(rep), np.array([1, 2, 3, 1, 2, 3, 1]))
    outs = (np.array(rep * 2), np.array([2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1]))
    ids, gens, outl = np.array([0, 1]), np.array([1, 1]), np.array([26, 12])
    pol = _hand_policy(prompts, outs, num_speculative_tokens=3)
    first = pol.plan_rows(ids, gens, outl, 3, None)
    pol.keep_rows(1)
    at = gens + first.accepted[0] + 1  # where the kept row leaves each request
    again = pol.plan_rows(ids, at, outl, 2, None)
    fresh = _hand_policy(prompts, outs, num_speculative_tokens=3)
    fresh.plan_rows(ids, gens, outl, 1, None)
    fresh.keep_rows(1)
    expect = fresh.plan_rows(ids, at, outl, 2, None)
    for got, want in zip(again, expect):
        assert np.array_equal(got, want)
    for got, old in zip(again, first):
        assert np.array_equal(got[:1], old[1:2])
