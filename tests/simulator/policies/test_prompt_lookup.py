"""prompt_lookup: vLLM's n-gram rule, greedy acceptance measured on real token ids."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.engine.plan import BatchView
from simulator.inputs.errors import SpecsimError
from simulator.policies.base import PolicyContext
from simulator.policies.ngram_index import BULK_FROM, NgramIndex, TextNgrams
from simulator.policies.prompt_lookup import PROMPT_LOOKUP_S_PER_REQUEST, PromptLookup, ngram_lookup
from simulator.policies.token_text import matched_prefix
from simulator.scenario import load_scenario, scenario_from_dict
from simulator.simulate import simulate
from tests.helpers import REPO
from workloads.workload import Workload

SCENARIOS = REPO / "workloads" / "scenarios"


def naive_lookup(tokens, min_n, max_n, k):
    """The rule by its definition: longest n first, earliest occurrence, >= 1 token after it."""
    t = list(tokens)
    for n in range(min(max_n, len(t) - 1), min_n - 1, -1):
        suffix = t[len(t) - n:]
        for start in range(0, len(t) - n):  # the match must end before the last token
            if t[start:start + n] == suffix:
                return t[start + n:start + n + k]
    return []


def test_lookup_hand_examples():
    # "A B C A B": the suffix "A B" recurs at 0, followed by C (the lecture's example)
    assert ngram_lookup(np.array([1, 2, 3, 1, 2]), 1, 3, 4).tolist() == [3, 1, 2]
    # longest n wins over an earlier shorter match: "2 3" at 1 beats "3" at 0
    assert ngram_lookup(np.array([3, 9, 2, 3, 7, 2, 3]), 1, 2, 1).tolist() == [7]
    # equal lengths: the earliest occurrence (vLLM's tie rule)
    assert ngram_lookup(np.array([5, 1, 5, 2, 5]), 1, 1, 1).tolist() == [1]
    # below prompt_lookup_min: nothing
    assert ngram_lookup(np.array([1, 2, 3, 4, 1]), 2, 3, 4).size == 0
    assert ngram_lookup(np.array([7]), 1, 3, 4).size == 0


def test_lookup_matches_its_definition_on_random_text():
    rng = np.random.default_rng(0)
    for _ in range(400):
        tokens = rng.integers(0, 4, size=rng.integers(1, 30))
        lo = int(rng.integers(1, 4))
        hi = int(rng.integers(lo, 6))
        k = int(rng.integers(1, 6))
        assert ngram_lookup(tokens, lo, hi, k).tolist() == naive_lookup(tokens, lo, hi, k)


def test_matched_prefix_is_greedy_chain_verification():
    assert matched_prefix(np.array([4, 5, 6]), np.array([4, 5, 9, 9])) == 2
    assert matched_prefix(np.array([4, 5]), np.array([4, 5, 6])) == 2
    assert matched_prefix(np.array([4, 5, 6]), np.array([4])) == 1  # output ends
    assert matched_prefix(np.array([1]), np.array([2])) == 0


def _policy(prompts, outputs, **params):
    wl = Workload(name="hand", arrival_s=np.zeros(len(prompts)),
                  prompt_tokens=[len(p) for p in prompts],
                  output_tokens=[len(o) for o in outputs], prompt_ids=prompts,
                  output_ids=outputs)
    parsed = PromptLookup.parse_params(params, source="test")
    return PromptLookup(parsed, PolicyContext(target_cost=None, workload=wl))


def _batch(generated, output_len, prompt_len):
    n = len(generated)
    return BatchView(request_ids=np.arange(n), context=np.asarray(prompt_len) + generated,
                     generated=np.asarray(generated), output_len=np.asarray(output_len),
                     prompt_len=np.asarray(prompt_len), batch_size=n, now_s=0.0)


def test_acceptance_is_measured_on_the_target_tokens():
    # request 0 copies its prompt and then deviates at the 4th token; request 1 never matches
    p0, o0 = np.array([10, 11, 12, 13, 14, 15]), np.array([10, 11, 12, 99, 14, 15])
    p1, o1 = np.array([1, 2, 3]), np.array([4, 5, 6, 7])
    pol = _policy((p0, p1), (o0, o1), num_speculative_tokens=4, prompt_lookup_min=1,
                  prompt_lookup_max=2)
    batch = _batch([1, 1], [6, 4], [6, 3])  # each has emitted its first output token
    plan = pol.propose(batch, np.random.default_rng(0))
    # context of 0 is ... 15 10: "10" recurs at 0 -> drafts 11 12 13 14; request 1: nothing
    assert plan.payload[0].tolist() == [11, 12, 13, 14]
    assert plan.num_draft.tolist() == [4, 0] and plan.verify_tokens.tolist() == [5, 1]
    assert plan.cpu_time_s == pytest.approx(2 * PROMPT_LOOKUP_S_PER_REQUEST)
    assert pol.accept(plan, batch, np.random.default_rng(0)).tolist() == [2, 0]


def test_a_draft_cap_limits_the_proposal():
    p, o = np.arange(20, 40), np.arange(20, 40)
    pol = _policy((p,), (o,), num_speculative_tokens=6)
    batch = _batch([3], [20], [20])
    plan = pol.propose_limited(batch, np.random.default_rng(0), np.array([2]))
    assert plan.payload[0].tolist() == [23, 24]
    assert pol.propose_limited(batch, None, np.array([0])).num_draft.tolist() == [0]


@pytest.mark.parametrize("params, field", [
    ({"prompt_lookup_min": 4, "prompt_lookup_max": 2}, "policy.prompt_lookup_min"),
    ({"prompt_lookup_max": 0}, "policy.prompt_lookup_max"),
    ({"prompt_lookup_min": 0}, "policy.prompt_lookup_min"),
    ({"num_speculative_tokens": 0}, "policy.num_speculative_tokens"),
    ({"ngram_size": 3}, "policy.ngram_size"),
])
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(SpecsimError) as err:
        PromptLookup.parse_params(params, source="test")
    assert err.value.field == field


def test_the_growing_index_gives_the_lookups_answer():
    """``NgramIndex`` (the policy's, kept as a request's text grows) against its definition:
    texts grown a few tokens at a time or by runs long enough for the bulk pass (a prompt),
    any n-gram bounds, any cap, every answer the same (the same tokens: they become the
    draft)."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        text = rng.integers(0, int(rng.integers(2, 6)), size=int(rng.integers(1, 120)))
        lo = int(rng.integers(1, 4))
        hi = int(rng.integers(lo, 7))
        index, size = NgramIndex(lo, hi), int(rng.integers(0, 4))
        while size <= text.size:
            k = int(rng.integers(0, 6))
            want = naive_lookup(text[:size], lo, hi, k) if k > 0 else []
            assert index.lookup(text[:size], k).tolist() == want
            long = rng.random() < 0.3
            size += int(rng.integers(BULK_FROM, 3 * BULK_FROM) if long else rng.integers(1, 4))


def test_an_index_grown_ahead_answers_for_the_shorter_text():
    """Rows planned ahead and not kept (``plan_rows``) leave the index past the text the
    next lookup reads: it answers as for that text, by the definition."""
    rng = np.random.default_rng(8)
    for _ in range(300):
        text = rng.integers(0, int(rng.integers(2, 5)), size=int(rng.integers(2, 80)))
        lo = int(rng.integers(1, 3))
        hi = int(rng.integers(lo, 6))
        index, ahead = NgramIndex(lo, hi), int(rng.integers(1, text.size + 1))
        index.lookup(text[:ahead], 4)
        for size in sorted(rng.integers(1, ahead + 1, size=5).tolist()):
            assert index.lookup(text[:size], 4).tolist() == naive_lookup(text[:size], lo,
                                                                         hi, 4)


def test_an_index_of_the_whole_text_answers_for_every_prefix():
    """The index of a request's whole text (prompt and output) at once, built (``NgramIndex``)
    or read from the text (``TextNgrams``, the policy's): every prefix the request reaches
    is answered by the definition on that prefix, as an array (``lookup``) and as a span of
    the text (``span``)."""
    rng = np.random.default_rng(9)
    for _ in range(200):
        text = rng.integers(0, int(rng.integers(2, 5)), size=int(rng.integers(0, 80)))
        lo = int(rng.integers(1, 3))
        hi = int(rng.integers(lo, 6))
        tokens = text.tolist()
        for index in (NgramIndex(lo, hi, text), TextNgrams(lo, hi, text)):
            for size in range(text.size + 1):
                k = int(rng.integers(0, 6))
                want = naive_lookup(text[:size], lo, hi, k) if k > 0 else []
                assert index.lookup(text[:size], k).tolist() == want
                start, stop = index.span(tokens, size, k)  # plan_rows' form of it
                assert tokens[start:stop] == want


def test_a_workload_without_token_ids_is_refused():
    sc = load_scenario(None, ["policy=prompt_lookup", "draft=null", "workload.max_requests=3"])
    with pytest.raises(SpecsimError) as err:
        simulate(sc)
    assert err.value.field == "workload"


def _token_run(kind, policy, n=20, rate=0.3, seed=1):
    sc = scenario_from_dict({
        "name": kind, "seed": seed, "hardware": "a100-40gb", "target": "opt-13b",
        "policy": policy, "batching": {"max_num_seqs": 32},
        "workload": {"tokens": {"kind": kind, "num_requests": n,
                                "arrival": {"process": "poisson", "rate_per_s": rate},
                                **({"code": {"dist": "uniform", "min_tokens": 150,
                                             "max_tokens": 300}} if kind == "code_edit" else {})}},
    }, source="test")
    res = simulate(sc)
    steps = res.steps
    per_step = (steps.emitted_tokens.sum() - steps.num_prefill.sum()) / steps.num_decode.sum()
    return res, float(per_step)


@pytest.fixture(scope="module")
def runs():
    out = {}
    for kind in ("code_edit", "free_chat"):
        for name in ("none", "prompt_lookup"):
            out[kind, name] = _token_run(kind, {"name": name})
    return out


def test_prompt_lookup_wins_on_code_edits(runs):
    none, _ = runs["code_edit", "none"]
    pl, per_step = runs["code_edit", "prompt_lookup"]
    # copies break only at the two renamed identifiers: several tokens per forward
    assert per_step > 2.5
    assert pl.summary()["mean_tpot_s"] < 0.5 * none.summary()["mean_tpot_s"]


def test_prompt_lookup_gives_little_on_free_chat(runs):
    none, _ = runs["free_chat", "none"]
    pl, per_step = runs["free_chat", "prompt_lookup"]
    assert 1.0 <= per_step < 1.05  # only chance matches on frequent tokens
    ratio = pl.summary()["mean_tpot_s"] / none.summary()["mean_tpot_s"]
    assert 0.95 < ratio < 1.05


def test_token_accounting_invariants(runs):
    for kind in ("code_edit", "free_chat"):
        res, _ = runs[kind, "prompt_lookup"]
        req, steps = res.requests, res.steps
        assert (req.status == "finished").all()
        assert (req.num_accepted_tokens <= req.num_draft_tokens).all()
        # a chain of k drafts costs k + 1 tokens in the verification forward
        assert steps.decode_tokens.sum() == steps.draft_tokens.sum() + steps.num_decode.sum()


def test_same_seed_same_result():
    a, _ = _token_run("code_edit", {"name": "prompt_lookup"}, n=6, seed=3)
    b, _ = _token_run("code_edit", {"name": "prompt_lookup"}, n=6, seed=3)
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)


def test_shipped_scenario_runs():
    res = simulate(load_scenario(SCENARIOS / "prompt_lookup.yaml",
                                 ["workload.tokens.num_requests=6"]))
    assert (res.requests.status == "finished").all()
    assert res.summary()["num_accepted_tokens"] > 0
