"""``FeatureDraft.draft_rows``: K iterations' draft seconds at once must be
``iteration_draft_s``'s float row by row, bit for bit (the engine's carried stretches take
them instead of one call an iteration): EAGLE's chain and EAGLE-2's tree on Vicuna-7B,
EAGLE-3 on Llama, MTP on a small MoE and on DeepSeek-V3 (MLA attention, TP8), batches of
one request (uniform rows: the closed form) up to past numpy's pairwise block, re-read
tokens from 1 (nothing accepted) to the tree's depth + 1, a few rows (priced on Python
numbers where the requests are few: feature_rows.py) and more (on arrays)."""
import numpy as np
import pytest

from simulator.models.spec import load_model

from tests.simulator.policies import test_eagle, test_eagle3, test_mtp


def _policies():
    yield "eagle", test_eagle.make(test_eagle.EagleSpeculation, {"num_speculative_tokens": 5})
    yield "eagle2", test_eagle.make(test_eagle.Eagle2Speculation)
    yield "eagle3", test_eagle3.make({"num_speculative_tokens": 3})
    yield "mtp", test_mtp.make({"num_speculative_tokens": 3}, tp=2)
    yield "mtp-dsv3", test_mtp.make({"num_speculative_tokens": 3}, tp=8,
                                    target=load_model("deepseek-v3"))


@pytest.mark.parametrize("name,policy", list(_policies()), ids=lambda x: x
                         if isinstance(x, str) else "")
@pytest.mark.parametrize("n", [1, 3, 8, 130])
@pytest.mark.parametrize("k", [9, 40])
def test_each_row_is_iteration_draft_s(name, policy, n, k):
    rng = np.random.default_rng(n)
    depth = policy.tree.max_depth
    context = rng.integers(0, 5000, (k, n))
    reread = rng.integers(1, depth + 2, (k, n)).astype(np.float64)
    reread[0] = 1.0  # every request re-reading one token: a uniform first forward
    reread[1] = 2.0  # every request re-reading two: uniform, past the decode kernel
    ids = np.arange(n)
    got = policy.draft_rows(ids, context, reread)
    assert got is not None
    want = [policy.iteration_draft_s(ids, c, r, rng) for c, r in zip(context, reread)]
    assert got.tolist() == want


@pytest.mark.parametrize("name,policy", list(_policies()), ids=lambda x: x
                         if isinstance(x, str) else "")
@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_few_draft_s_is_iteration_draft_s(name, policy, n):
    """``few_draft_s`` (a tree walk's list pass prices by it, on lists of ints): each
    iteration's float is ``iteration_draft_s``'s, re-read counts alike or not, the last
    iteration's ints or the policy's floats (a pass's first re-read)."""
    price = policy.few_draft_s(n)
    assert price is not None
    rng = np.random.default_rng(n)
    depth = policy.tree.max_depth
    ids = np.arange(n)
    for j in range(60):
        context = rng.integers(0, 5000, n)
        reread = rng.integers(1, depth + 2, n)
        if j % 3 == 0:  # every request re-reading the same count: the closed form
            reread[:] = reread[0]
        listed = reread.astype(np.float64).tolist() if j % 2 else reread.tolist()
        want = policy.iteration_draft_s(ids, context, reread.astype(np.float64), rng)
        assert price(context.tolist(), listed) == want, (context, reread)
    assert policy.few_draft_s(9) is None  # more than a few: the arrays' path
