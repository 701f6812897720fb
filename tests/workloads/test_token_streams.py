"""Token-level workloads: the structure that makes each kind what it is (lecture 000, 5.3)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from workloads.arrivals import ConstantArrivals
from workloads.lengths import FixedLength
from workloads.token_streams import (
    CODE_HEADER,
    WORD_BASE,
    AgentLoop,
    CodeEdit,
    FreeChat,
    token_workload,
)

ARRIVALS = ConstantArrivals(rate_per_s=1.0)


def build(spec, n=60, seed=0):
    return token_workload(spec, n, ARRIVALS, np.random.default_rng(seed))


def ngrams(seq: np.ndarray, n: int) -> list[tuple]:
    items = seq.tolist()
    return [tuple(items[i:i + n]) for i in range(len(items) - n + 1)]


def fraction_found(seq: np.ndarray, pool: set, n: int) -> float:
    grams = ngrams(seq, n)
    return sum(g in pool for g in grams) / len(grams)


def mean_fraction_in_prompt(w, n: int = 3) -> float:
    return float(np.mean([fraction_found(o, set(ngrams(p, n)), n)
                          for p, o in zip(w.prompt_ids, w.output_ids)]))


def mean_fraction_in_earlier_outputs(w, n: int = 4, start: int = 20) -> float:
    seen: set = set()
    fractions = []
    for i, out in enumerate(w.output_ids):
        if i >= start:
            fractions.append(fraction_found(out, seen, n))
        seen.update(ngrams(out, n))
    return float(np.mean(fractions))


@pytest.mark.parametrize("spec", [CodeEdit(vocab_size=5000), AgentLoop(vocab_size=5000),
                                  FreeChat(vocab_size=5000)])
def test_ids_in_vocab_counts_consistent_and_labelled(spec):
    w = build(spec)
    for ids, count in zip(w.prompt_ids + w.output_ids,
                          np.concatenate([w.prompt_tokens, w.output_tokens])):
        assert len(ids) == count and ids.dtype == np.int64
        assert ids.min() >= 0 and ids.max() < 5000
    assert w.task.tolist() == [spec.kind] * len(w) and w.name == spec.kind
    assert np.array_equal(w.arrival_s, np.arange(60.0))


@pytest.mark.parametrize("spec", [CodeEdit(), AgentLoop(), FreeChat()])
def test_same_seed_same_tokens(spec):
    a, b, c = build(spec, 10, 1), build(spec, 10, 1), build(spec, 10, 2)
    assert all(np.array_equal(x, y) for x, y in zip(a.output_ids, b.output_ids))
    assert all(np.array_equal(x, y) for x, y in zip(a.prompt_ids, b.prompt_ids))
    assert not all(len(x) == len(y) and np.array_equal(x, y)
                   for x, y in zip(a.output_ids, c.output_ids))


def test_code_edit_output_is_the_prompt_code_with_a_consistent_renaming():
    spec = CodeEdit(renamed_identifiers=3)
    w = build(spec, 40)
    for prompt, output in zip(w.prompt_ids, w.output_ids):
        assert np.array_equal(prompt[:len(CODE_HEADER)], CODE_HEADER)
        code = prompt[len(CODE_HEADER):]
        assert len(code) == len(output)
        differs = code != output
        mapping = {}
        for before, after in zip(code[differs], output[differs]):
            assert mapping.setdefault(before, after) == after  # one new name per old name
        assert len(mapping) <= 3 and all(b >= WORD_BASE for b in mapping)
        for before, after in mapping.items():
            assert np.all(output[code == before] == after)  # every occurrence renamed
            assert after not in prompt  # the new name appears nowhere in the prompt
        assert len(set(mapping.values())) == len(mapping)


def test_code_edit_copies_almost_everything_and_free_chat_copies_almost_nothing():
    code = build(CodeEdit(), 40)
    # A copy breaks only where a renamed token sits: each one spoils at most n n-grams.
    for prompt, output in zip(code.prompt_ids, code.output_ids):
        changed = np.count_nonzero(prompt[len(CODE_HEADER):] != output)
        pool = set(ngrams(prompt, 3))
        found = sum(g in pool for g in ngrams(output, 3))
        assert found >= len(output) - 2 - 3 * changed
    assert mean_fraction_in_prompt(code) > 0.8
    # Zipf(1) over 31,744 ids: sum p^2 ~ (pi^2 / 6) / H^2 ~ 0.014, so a trigram repeats with
    # probability ~ 3e-6 per pair of positions: ~0.1% of output trigrams over a 300-token prompt.
    assert mean_fraction_in_prompt(build(FreeChat(), 40)) < 0.02


def test_renaming_nothing_is_an_exact_copy():
    w = build(CodeEdit(renamed_identifiers=0, code=FixedLength(50)), 5)
    assert w.output_tokens.tolist() == [50] * 5 and w.prompt_tokens.tolist() == [58] * 5
    for prompt, output in zip(w.prompt_ids, w.output_ids):
        assert np.array_equal(prompt[len(CODE_HEADER):], output)


def test_agent_outputs_share_templates_across_requests():
    agent = build(AgentLoop(), 60)
    chat = build(FreeChat(), 60)
    # A step is ~48 template tokens and 3 slots of 4 copied tokens; a 4-gram touching a slot
    # (7 per slot) is request-specific, so about 1 - 3 * 7 / 60 ~ 0.65 of 4-grams recur.
    assert mean_fraction_in_earlier_outputs(agent) > 0.5
    assert mean_fraction_in_earlier_outputs(chat) < 0.01


def test_agent_needs_both_the_prompt_and_earlier_outputs():
    w = build(AgentLoop(), 60)
    seen: set = set()
    from_prompt, from_history, from_both = [], [], []
    for prompt, out in zip(w.prompt_ids, w.output_ids):
        grams = ngrams(out, 3)
        prompt_grams = set(ngrams(prompt, 3))
        in_prompt = [g in prompt_grams for g in grams]
        in_history = [g in seen for g in grams]
        from_prompt.append(np.mean(in_prompt))
        from_history.append(np.mean(in_history))
        from_both.append(np.mean(np.logical_or(in_prompt, in_history)))
        seen.update(grams)
    # Trigrams inside a 4-token slot (2 of the ~60 per step per slot) come only from the
    # prompt; template trigrams come only from earlier outputs.
    prompt_share, history_share, both = (np.mean(x[20:]) for x in
                                         (from_prompt, from_history, from_both))
    assert 0.05 < prompt_share < 0.2
    assert both > history_share + 0.05 and both > prompt_share + 0.5


def test_agent_slot_fillers_come_from_the_requests_own_prompt():
    w = build(AgentLoop(), 60)
    for i, (prompt, output) in enumerate(zip(w.prompt_ids, w.output_ids)):
        others = set(np.concatenate([o for j, o in enumerate(w.output_ids) if j != i]).tolist())
        own = set(output.tolist()) - others  # what no other output says: the slot fillers
        assert own and own <= set(prompt.tolist())
    # Every prompt starts with the same shared system prompt.
    head = w.prompt_ids[0][:64]
    assert all(np.array_equal(p[:64], head) for p in w.prompt_ids)


def test_one_template_without_slots_repeats_verbatim():
    w = build(AgentLoop(num_templates=1, slots_per_template=0, max_steps=3), 30)
    template = min(w.output_ids, key=len)
    for out in w.output_ids:
        steps = len(out) // len(template)
        assert len(out) == steps * len(template) and 1 <= steps <= 3
        assert np.array_equal(out, np.tile(template, steps))


def test_free_chat_unigram_frequencies_follow_zipf():
    w = build(FreeChat(vocab_size=5000, zipf_exponent=1.0), 200)
    tokens = np.concatenate(w.prompt_ids + w.output_ids)
    harmonic = float(np.sum(1.0 / np.arange(1, 5000 - WORD_BASE + 1)))
    for rank in (1, 2, 10):
        p = 1.0 / (rank * harmonic)
        observed = np.mean(tokens == WORD_BASE + rank - 1)
        assert abs(observed - p) < 5 * math.sqrt(p * (1 - p) / len(tokens))


@pytest.mark.parametrize("make, field", [
    (lambda: CodeEdit(vocab_size=500), "vocab_size"),
    (lambda: CodeEdit(identifiers_per_request=2, renamed_identifiers=3), "renamed_identifiers"),
    (lambda: CodeEdit(vocab_size=1024, identifiers_per_request=768, renamed_identifiers=1),
     "vocab_size"),
    (lambda: AgentLoop(num_templates=0), "num_templates"),
    (lambda: AgentLoop(slot_tokens=1.5), "slot_tokens"),
    (lambda: FreeChat(zipf_exponent=0.0), "zipf_exponent"),
])
def test_bad_parameters_name_their_field(make, field):
    with pytest.raises(SpecsimError) as info:
        make()
    assert info.value.field == field
