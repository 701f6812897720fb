"""jacobi and lookahead: the in-context target rule, the 2-D window's pricing, Jacobi's lag."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.engine.plan import BatchView
from simulator.inputs.errors import SpecsimError
from simulator.policies.base import PolicyContext
from simulator.policies.in_context import FollowIndex
from simulator.policies.lookahead import InContextTarget, JacobiDecoding, LookaheadDecoding
from simulator.policies.lookahead_lanes import LaneState, longest_prefix
from simulator.policies.token_text import TokenText
from simulator.scenario import load_scenario, scenario_from_dict
from simulator.simulate import simulate
from tests.helpers import REPO
from tests.simulator.engine.test_fast_forward import _both, assert_identical
from workloads.workload import Workload

SCENARIOS = REPO / "workloads" / "scenarios"


def _workload(prompts, outputs):
    return Workload(name="hand", arrival_s=np.zeros(len(prompts)),
                    prompt_tokens=[len(p) for p in prompts],
                    output_tokens=[len(o) for o in outputs], prompt_ids=prompts,
                    output_ids=outputs)


def test_off_path_rule_copies_the_latest_continuation():
    text = TokenText((np.array([1, 2, 3, 1, 2, 4, 9]),), (np.array([5, 6]),))
    target = InContextTarget(text, order=2)
    target.see(0, 0)
    assert target.predict(0, [1, 2]) == 4     # "1 2" last followed by 4
    assert target.predict(0, [7, 2]) == 4     # "7 2" unseen: back off to "2" -> 4
    assert target.predict(0, [3]) == 1
    assert target.predict(0, [8]) == 8        # never seen: repeat
    target.see(0, 2)                          # the output 5 6 becomes visible: 9 -> 5
    assert target.predict(0, [9]) == 5


def _latest_follower(text, tail, order):
    """The off-path rule by its definition: what followed the latest occurrence of the
    tail's last k tokens, the longest k first; an unseen token repeats."""
    for k in range(min(order, len(tail)), 0, -1):
        for i in range(len(text) - 1, k - 1, -1):
            if text[i - k:i] == tail[-k:]:
                return text[i]
    return tail[-1]


def test_off_path_rule_matches_its_definition_as_the_text_grows():
    rng = np.random.default_rng(3)
    for order in (1, 2, 3):
        prompt, output = rng.integers(0, 4, 30), rng.integers(0, 4, 40)
        text = TokenText((prompt,), (output,))
        target = InContextTarget(text, order=order)
        generated = 0
        while generated <= output.size:
            target.see(0, generated)
            seen = text.known(0, generated).tolist()
            tails = [rng.integers(0, 5, int(rng.integers(1, 5))).tolist() for _ in range(6)]
            assert target.predict_each(0, tails) == [_latest_follower(seen, t, order)
                                                     for t in tails]
            generated += int(rng.integers(1, 12))


def test_follow_index_matches_the_rule_at_every_visible_length():
    """lookahead's whole-text index read at a visible length: the rule's definition on the
    visible text (order 2; without pairs, order 1), for every length from the prompt on."""
    rng = np.random.default_rng(5)
    for size in (0, 1, 2, 30):
        prompt, output = rng.integers(0, 4, size), rng.integers(0, 4, 40)
        tokens = np.concatenate((prompt, output)).tolist()
        index = FollowIndex(tokens, size)
        for visible in range(size, len(tokens) + 1):
            tails = [rng.integers(0, 5, int(rng.integers(1, 4))).tolist() for _ in range(6)]
            for pairs, order in ((True, 2), (False, 1)):
                assert index.next_tokens(visible, tails, pairs) == [
                    _latest_follower(tokens[:visible], t, order) for t in tails]


def test_lanes_rolled_back_and_replayed_are_the_lanes_stepped_once():
    """A request's lanes and pool stepped k times, against the same stepped further from a
    mark, rolled back and stepped k times again (plan_rows' rows not kept): the same lanes,
    the same pool."""
    rng = np.random.default_rng(11)
    for _ in range(60):
        prompt, output = rng.integers(0, 5, 20), rng.integers(0, 5, 60)
        tokens = np.concatenate((prompt, output)).tolist()
        width, starts = int(rng.integers(1, 4)), rng.integers(0, 5, 4).tolist()
        gens = np.cumsum(rng.integers(1, 3, 30)).tolist()
        direct, again = (LaneState(FollowIndex(tokens, 20), 20, starts, width, 2)
                         for _ in range(2))
        first, k, more = int(rng.integers(0, 10)), int(rng.integers(0, 10)), 10
        for g in gens[:first]:
            direct.step(g)
            again.step(g)
        again.mark()
        for g in gens[first:first + k + more]:
            again.step(g)
        again.roll_back()
        for g in gens[first:first + k]:
            direct.step(g)
            again.step(g)
        assert again.lanes() == direct.lanes() and again.pool == direct.pool


def test_planned_rows_are_the_rows_stepped_one_by_one():
    """LaneState.plan (its inlined step and verification) against the same rows made one at
    a time by candidates, verified and step: the same rows, and the same lanes and pool
    after them, for n-grams of 2 to 5 tokens (one-token lanes, and runs of tokens too long
    for one uint64 on the last)."""
    rng = np.random.default_rng(12)
    for width in (1, 2, 3, 4) * 15:
        prompt, output = rng.integers(0, 6, 20), rng.integers(0, 6, 80)
        tokens = np.concatenate((prompt, output)).tolist()
        if width == 4:
            tokens[-1] = 1 << 17  # 18 bits a token: a run of 4 is 72 bits
        starts, most = rng.integers(0, 6, 4).tolist(), int(rng.integers(1, 4))
        planned, stepped = (LaneState(FollowIndex(tokens, 20), 20, starts, width, most)
                            for _ in range(2))
        g, end, steps = int(rng.integers(0, 5)), 80, int(rng.integers(1, 60))
        rows, gens = planned.plan(g, steps, end)
        want = []
        for j in range(steps):
            cands = stepped.candidates(g)
            accepted = stepped.verified(g, cands) if cands else 0
            assert accepted == longest_prefix(stepped.grams().get(tokens[19 + g], []),
                                              tokens[20 + g:20 + g + width])
            want += [len(cands) * width, stepped.held(), accepted]
            if g + accepted + 1 >= end or j == steps - 1:
                break
            stepped.step(g)
            g += accepted + 1
        assert rows == want and len(gens) == len(want) // 3
        assert planned.lanes() == stepped.lanes() and planned.pool == stepped.pool


def _batch(generated, output_len, prompt_len):
    n = len(generated)
    return BatchView(request_ids=np.arange(n), context=np.asarray(prompt_len) + generated,
                     generated=np.asarray(generated), output_len=np.asarray(output_len),
                     prompt_len=np.asarray(prompt_len), batch_size=n, now_s=0.0)


def test_lookahead_prices_both_branches_in_one_forward():
    prompt = np.array([1, 2, 3, 4, 5, 6, 7, 8] * 3)
    output = np.array([1, 2, 3, 4, 5, 6, 7, 8] * 4)
    w, n, g = 3, 4, 2
    pol = LookaheadDecoding(LookaheadDecoding.parse_params(
        {"W": w, "N": n, "G": g}, source="test"),
        PolicyContext(target_cost=None, workload=_workload((prompt,), (output,))))
    rng = np.random.default_rng(0)
    generated = 1
    for step in range(8):
        batch = _batch([generated], [output.size], [prompt.size])
        plan = pol.propose(batch, rng)
        lanes = sum(len(lane) for lane in pol.lanes(0))
        cands = plan.num_draft[0] // (n - 1)
        assert cands <= g
        assert plan.verify_tokens[0] == 1 + lanes + plan.num_draft[0]
        if step >= n - 2:  # the lanes are full: W (N - 1) lookahead tokens
            assert lanes == w * (n - 1)
        accepted = pol.accept(plan, batch, rng)
        pol.observe(plan, batch, accepted, 0.0)
        generated += int(accepted[0]) + 1
    # on a periodic text the pool's n-grams are right: drafts get accepted
    assert generated > 1 + 8 + 8
    assert pol.max_verify_tokens == 1 + (w + g) * (n - 1)


def test_jacobi_window_lags_behind_copied_text():
    # the target copies a period-5 text; the window starts as the last token repeated
    prompt = np.array([10, 11, 12, 13, 14] * 4)
    output = np.array([10, 11, 12, 13, 14] * 6)
    pol = JacobiDecoding(JacobiDecoding.parse_params({"window_size": 4, "init": "repeat"},
                                                     source="test"),
                         PolicyContext(target_cost=None,
                                       workload=_workload((prompt,), (output,))))
    rng = np.random.default_rng(0)
    generated, steps = 1, 0
    while generated < 20:
        batch = _batch([generated], [output.size], [prompt.size])
        plan = pol.propose(batch, rng)
        accepted = pol.accept(plan, batch, rng)
        pol.observe(plan, batch, accepted, 0.0)
        generated += int(accepted[0]) + 1
        steps += 1
    # every refined guess copies the token after the guess before it: one position behind
    assert steps == 19


@pytest.mark.parametrize("cls, params, field", [
    (LookaheadDecoding, {"ngram_size": 1}, "policy.ngram_size"),
    (LookaheadDecoding, {"window_size": 0}, "policy.window_size"),
    (LookaheadDecoding, {"guess_set_size": 0}, "policy.guess_set_size"),
    (LookaheadDecoding, {"pool": 3}, "policy.pool"),
    (JacobiDecoding, {"init": "zeros"}, "policy.init"),
])
def test_bad_parameters_name_the_field(cls, params, field):
    with pytest.raises(SpecsimError) as err:
        cls.parse_params(params, source="test")
    assert err.value.field == field


def _run(kind, policy, n=12, seed=4):
    sc = scenario_from_dict({
        "name": kind, "seed": seed, "hardware": "a100-40gb", "target": "opt-13b",
        "policy": policy, "batching": {"max_num_seqs": 16},
        "workload": {"tokens": {"kind": kind, "num_requests": n,
                                "arrival": {"process": "poisson", "rate_per_s": 0.3},
                                **({"code": {"dist": "uniform", "min_tokens": 150,
                                             "max_tokens": 300}} if kind == "code_edit" else {})}},
    }, source="test")
    res = simulate(sc)
    steps = res.steps
    return res, float((steps.emitted_tokens.sum() - steps.num_prefill.sum())
                      / steps.num_decode.sum())


@pytest.fixture(scope="module")
def runs():
    return {(kind, name): _run(kind, {"name": name})
            for kind in ("code_edit", "free_chat") for name in ("jacobi", "lookahead")}


def test_plain_jacobi_barely_beats_one_token_per_step(runs):
    for kind in ("code_edit", "free_chat"):
        assert 1.0 <= runs[kind, "jacobi"][1] < 1.1, kind


def test_lookahead_with_its_pool_does_better_on_copied_text(runs):
    jacobi, lookahead = runs["code_edit", "jacobi"][1], runs["code_edit", "lookahead"][1]
    assert lookahead > 1.4 and lookahead > jacobi + 0.3
    assert runs["free_chat", "lookahead"][1] < 1.1  # nothing to copy: little to find


def test_every_request_finishes_with_consistent_counts(runs):
    for res, _ in runs.values():
        req = res.requests
        assert (req.status == "finished").all()
        assert (req.num_accepted_tokens <= req.num_draft_tokens).all()


def test_shipped_scenario_runs():
    res = simulate(load_scenario(SCENARIOS / "lookahead.yaml",
                                 ["workload.tokens.num_requests=4"]))
    assert (res.requests.status == "finished").all()


def test_jacobi_takes_the_varied_stretches_with_identical_results():
    """Jacobi on the lookahead scenario's code edits: advanced on arrays (VariedDraft) under
    fast-forward, the same tables as step by step."""
    on, off = _both(load_scenario(SCENARIOS / "lookahead.yaml",
                                  ["policy={name: jacobi, window_size: 6}",
                                   "workload.tokens.num_requests=12"]))
    assert_identical(on, off)
    assert off.info["engine"]["vectorised"] == 0
    assert on.info["engine"]["vectorised"] > on.info["engine"]["iterations"] / 2


def test_planned_rows_draw_a_new_requests_lanes_as_its_first_plan_does():
    """``plan_rows`` of requests with no lanes yet draws them from the generator it is
    handed, the same draws in the same order as ``plan_counts`` (the engine's rows path
    then takes a request's first iterations): the same lanes, the same first row, the
    generator left in the same state."""
    rng = np.random.default_rng(5)
    prompts = tuple(rng.integers(0, 9, size) for size in (30, 41, 25))
    outputs = tuple(rng.integers(0, 9, size) for size in (20, 33, 28))
    made = [LookaheadDecoding(LookaheadDecoding.parse_params(
        {"W": 4, "N": 4, "G": 3}, source="test"),
        PolicyContext(target_cost=None, workload=_workload(prompts, outputs)))
        for _ in range(2)]
    ids, gens = np.array([2, 0, 1]), np.array([0, 0, 0])
    outs = np.array([o.size for o in outputs])[ids]
    one, ahead = np.random.default_rng(11), np.random.default_rng(11)
    plan = made[0].plan_counts(ids, None, gens, outs, None, 3, one)
    rows = made[1].plan_rows(ids, gens, outs, 1, ahead)
    made[1].keep_rows(0)
    assert [made[1].lanes(rid) for rid in ids.tolist()] == \
        [made[0].lanes(rid) for rid in ids.tolist()]
    assert one.random() == ahead.random()
    assert rows.num_draft[0].tolist() == plan.num_draft.tolist()
    assert rows.verify_tokens[0].tolist() == plan.verify_tokens.tolist()
