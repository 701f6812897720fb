"""The one-call forms of scalar_forms.py and ``ClosedForms.chunk_pricer`` (issue 36) must be
the float of the calls they replace, bit for bit: a staged round's draft chain and
verification (``drafting.chain_round_pricer``) is ``chain_draft_pricer`` then the draft's
``uniform_pricer`` added to the running seconds; a draft's prompt chunk
(``chunk_pricer``) is ``uniform_step_time(1, c, x, 0)`` (hence ``step_time``'s, which
test_hot_path.py holds that to); ``scalar_time`` at an int context sum is its float at the
sum as a float; and a forward's terms (``decode_terms``) are its ``uniform_pricer``'s."""
import numpy as np
import pytest

from simulator.cost.drafting import chain_draft_pricer, chain_round_pricer, decode_terms
from tests.simulator.cost.test_few_step import _cost_model  # the same cost models, cached


# staged.yaml's drafts (side models: no host time), a larger pair, and the other modes
PAIRS = [(("a100-40gb", "opt-125m", 1, "graphs-draft"), ("a100-40gb", "opt-1.3b", 1,
                                                          "graphs-draft")),
         (("h100-sxm", "opt-1.3b", 1, "graphs-draft"), ("h100-sxm", "llama-2-7b", 1,
                                                        "graphs-draft")),
         (("a100-40gb", "opt-125m", 1, "eager-draft"), ("a100-40gb", "opt-1.3b", 1,
                                                        "eager-draft")),
         (("a100-40gb", "opt-125m", 1, "graphs"), ("a100-40gb", "opt-1.3b", 1, "async"))]


@pytest.mark.parametrize("pair", PAIRS, ids=[p[1][3] + "-" + p[1][1] for p in PAIRS])
def test_a_round_in_one_call_is_the_two_pricers_added(pair):
    chain_cm, verify_cm = _cost_model(*pair[0]), _cost_model(*pair[1])
    rng, joined = np.random.default_rng(5), 0
    for n in (1, 2, 3, 5, 8):
        for steps in (1, 2, 3):
            together = chain_round_pricer(chain_cm, n, steps, verify_cm)
            chain = chain_draft_pricer(chain_cm, n, steps)
            verify = verify_cm.uniform_pricer(n, steps + 1, n * (steps + 1))
            if together is None:  # another form (eager launches, host time): no join
                continue
            joined += 1
            for gpu, x in zip(rng.random(50) * 1e-2, rng.integers(0, n * 30_000, 50).tolist()):
                want = float(gpu) + chain(float(x)) + verify(float(x))
                assert together(float(gpu), x) == want  # an int sum: the same float
                assert together(float(gpu), float(x)) == want
    # the usual graphs of side models (staged.yaml's) join; the others never do
    assert joined == (15 if pair[1][3] == "graphs-draft" else 0)


CHUNKED = [("a100-40gb", "opt-1.3b", 1, "graphs-draft"), ("a100-40gb", "opt-125m", 1, "graphs"),
           ("h100-sxm", "llama-2-70b", 2, "eager"), ("h100-sxm", "llama-2-70b", 2, "async"),
           ("h100-sxm", "llama-2-70b", 2, "fa3"), ("h200", "deepseek-v3", 8, "graphs")]


@pytest.mark.parametrize("case", CHUNKED, ids=["-".join(map(str, c)) for c in CHUNKED])
def test_a_prompt_chunk_is_its_uniform_form(case):
    cm = _cost_model(*case)
    chunk = cm.chunk_pricer()
    # none for MLA (its coefficients depend on the count) or an eager stream (its own parts)
    assert (chunk is None) == (case[1] == "deepseek-v3" or case[3] == "eager")
    if chunk is None:
        return
    rng, formed = np.random.default_rng(9), 0
    counts = [2, 3, 16, 17, 127, 128, 129, 512, 2048, 4000, *rng.integers(2, 8192, 60).tolist()]
    for c in counts:
        for x in (0, 1, 77, 4096, int(rng.integers(0, 30_000))):
            want = cm.uniform_step_time(1, float(c), float(x), 0)
            got = chunk(float(c), float(x))
            assert got == want, (c, x)  # bit for bit, None alike where no form applies
            formed += want is not None
    assert formed > 0


@pytest.mark.parametrize("case", CHUNKED[:5], ids=["-".join(map(str, c)) for c in CHUNKED[:5]])
def test_int_sums_and_terms_are_the_pricers_floats(case):
    cm = _cost_model(*case)
    for n, u in ((1, 1), (4, 1), (3, 4), (8, 2)):
        price = cm.uniform_pricer(n, u, n * u)
        sums = np.random.default_rng(n).integers(0, 50_000, 40).tolist()
        assert [price(s) for s in sums] == [price(float(s)) for s in sums]
        terms = decode_terms(cm, n) if u == 1 else None
        if terms is not None:  # fixed + max(slope x + base, floor) x layers + replay
            fixed, slope, base, floor, layers, replay = terms
            assert [fixed + max(slope * s + base, floor) * layers + replay for s in sums] \
                == [price(float(s)) for s in sums]
