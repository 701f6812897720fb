"""The ShareGPT client's filter (tests/published/sharegpt.py) and the harness's replay of
requests of their own lengths (harness.serve_requests)."""
import numpy as np
import pytest

from tests.published import dp_cases
from tests.published.harness import RequestLengths, serve, serve_requests
from tests.published.sharegpt import bench_accepts, sample_requests
from workloads.lengths import FixedLength, LognormalLength, UniformLength


def test_the_filter_is_vllm_bench_serves_is_valid_sequence():
    # vllm/benchmarks/dataset_utils.py is_valid_sequence: prompt or output < 4 refused,
    # prompt > 1024 refused, prompt + output > 2048 refused; the bounds themselves kept
    prompt = np.array([4, 3, 100, 1024, 1025, 1000, 1000])
    output = np.array([4, 100, 3, 1024, 4, 1048, 1049])
    assert bench_accepts(prompt, output).tolist() == [True, False, False, True, False, True,
                                                      False]


def test_refused_pairs_are_skipped_not_clipped():
    rng = np.random.default_rng(0)
    got = sample_requests(500, UniformLength(1, 1500), UniformLength(1, 1500), rng)
    p, o = np.array(got.prompt), np.array(got.output)
    assert len(p) == 500 and bench_accepts(p, o).all()
    # clipping would pile requests on the bounds; skipping leaves them no likelier than any
    # other length (each of 1,500 values ~1/1,500 before the filter)
    assert (p == 1024).sum() <= 5 and (p == 4).sum() <= 5


def test_sampling_is_deterministic_in_the_generator():
    dist = LognormalLength(mean_tokens=220, median_tokens=120)
    a = sample_requests(300, dist, dist, np.random.default_rng(7))
    b = sample_requests(300, dist, dist, np.random.default_rng(7))
    c = sample_requests(300, dist, dist, np.random.default_rng(8))
    assert a == b and a != c


def test_lengths_that_never_pass_are_refused():
    with pytest.raises(ValueError, match="hardly ever pass"):
        sample_requests(10, FixedLength(2000), FixedLength(100), np.random.default_rng(0),
                        max_draws=3)


def test_request_lengths_are_checked():
    with pytest.raises(ValueError, match="one of each"):
        RequestLengths((1, 2), (3,))
    with pytest.raises(ValueError, match="at least 1"):
        RequestLengths((0,), (3,))
    assert RequestLengths((2, 3), (4, 5)).tokens == 14


def test_requests_of_one_length_replay_the_fixed_length_run():
    # the same requests given one by one: the same run (arrivals, lengths, seed streams)
    n, prompt, output = dp_cases.CONC4
    kw = {"engine": "vllm-0.11", "parallelism": dp_cases.TP8, "batching": dp_cases.BATCHING,
          "max_concurrency": 4}
    fixed = serve("h200", "deepseek-v3", num_requests=n, prompt=prompt, output=output, **kw)
    given = serve_requests("h200", "deepseek-v3",
                           lengths=RequestLengths((prompt,) * n, (output,) * n), **kw)
    assert given == fixed


def test_spread_lengths_change_the_run():
    n = 40
    kw = {"engine": "vllm-0.11", "parallelism": dp_cases.TP8, "batching": dp_cases.BATCHING}
    even = serve_requests("h200", "deepseek-v3",
                          lengths=RequestLengths((200,) * n, (200,) * n), **kw)
    # the same tokens, one answer 20x the others: the run lasts until it finishes
    spread = serve_requests("h200", "deepseek-v3", lengths=RequestLengths(
        (200,) * n, (4100,) + (100,) * (n - 1)), **kw)
    assert spread.tokens == even.tokens
    assert spread.duration_s > 3 * even.duration_s
