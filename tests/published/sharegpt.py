"""What ``vllm bench serve --dataset-name sharegpt`` sends, and why the ShareGPT cases of
``dp_cases.py`` still replay its mean lengths.

The client (vllm-project/vllm, vllm/benchmarks/datasets.py ``ShareGPTDataset``, read at
commit 0056b87): it keeps the conversations of two turns or more, shuffles them with
``random.seed(seed)`` (``--seed``, default 0), and walks them in that order, taking each
one's first turn -- ``conversations[0]`` the prompt, ``conversations[1]`` the answer, both
tokenized with the served model's tokenizer -- and the answer's token count as the request's
output length (``max_tokens``) unless ``--sharegpt-output-len`` is given.  A pair that
``is_valid_sequence`` refuses (vllm/benchmarks/dataset_utils.py, its defaults "copied from
the original sample_sharegpt_requests" of benchmark_serving.py: prompt or output under 4
tokens, prompt over 1,024, prompt and output together over 2,048) is skipped (``continue``)
and the next conversation taken: the requests are drawn from the lengths' distribution
conditioned on the filter, never clipped to it.  It oversamples (repeats requests) only when
the dataset runs out before ``--num-prompts``.  ``sample_requests`` draws requests that way
from two length distributions (workloads/lengths.py) and a passed-in Generator.
"""
from __future__ import annotations

import numpy as np

from tests.published.harness import RequestLengths
from workloads.lengths import LengthDistribution

# is_valid_sequence's defaults (vllm/benchmarks/dataset_utils.py at 0056b87)
MIN_LEN = 4
MAX_PROMPT_LEN = 1024
MAX_TOTAL_LEN = 2048


def bench_accepts(prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
    """Which (prompt, output) token counts ``vllm bench serve`` keeps for ShareGPT."""
    prompt, output = np.asarray(prompt), np.asarray(output)
    return ((prompt >= MIN_LEN) & (output >= MIN_LEN) & (prompt <= MAX_PROMPT_LEN)
            & (prompt + output <= MAX_TOTAL_LEN))


def sample_requests(n: int, prompt: LengthDistribution, output: LengthDistribution,
                    rng: np.random.Generator, *, max_draws: int = 1000) -> RequestLengths:
    """``n`` requests as the client samples them: (prompt, output) pairs drawn from
    ``prompt`` and ``output`` independently (no joint statistic was found), those the filter
    refuses skipped, in the order drawn (at most ``max_draws`` rounds of ``n`` pairs; a
    ValueError when that keeps fewer)."""
    kept_p: list[int] = []
    kept_o: list[int] = []
    for _ in range(max_draws):
        if len(kept_p) >= n:
            break
        p, o = prompt.sample(n, rng), output.sample(n, rng)
        ok = bench_accepts(p, o)
        kept_p += p[ok].tolist()
        kept_o += o[ok].tolist()
    if len(kept_p) < n:
        raise ValueError(f"{max_draws} x {n} draws kept {len(kept_p)} of {n} requests: the "
                         "lengths hardly ever pass vllm bench serve's ShareGPT filter")
    return RequestLengths(tuple(kept_p[:n]), tuple(kept_o[:n]))


# why dp_cases.py's ShareGPT cases miss (dp_cases.DP_KNOWN_MISSES)
SHAREGPT_WHY = (
    "ShareGPT's lengths are spread and the stand-in fixes them at their means: an all-at-once "
    "run lasts until its longest answers finish (the page's vLLM run averaged 2,621 output "
    "tokens/s against a peak of 7,451, and took 76.59 s where the medium case, with 4.6x "
    "the input tokens, took 59.26 s), and its mean TPOT mixes short and long answers. Issue "
    "38, after these misses were seen, read what the client sends (this module: each "
    "conversation's first turn, the answer's length as max_tokens, pairs outside "
    "is_valid_sequence's 4 / 1,024 / 2,048 skipped; DeepSeek-R1 runs to max_tokens, the "
    "page's three engines generating 200,752 / 200,767 / 200,813 tokens for the same "
    "prompts) and looked for a published statistic of that sample's shape (median, "
    "percentiles, std, a histogram) in vLLM's and SGLang's code and issues and the serving "
    "papers' repositories; none was found (the one stored table is another sample: "
    "microsoft/sarathi-serve's data/processed_traces/sharegpt_8k_filtered_stats_llama2_"
    "tokenizer.csv at 72339db, multi-turn prompts carrying their history, median 1,730 "
    "tokens, answers capped at 1,024), so the cases keep the means and serve_requests / "
    "sample_requests wait for one. An exploration, not a prediction (at h200's TP "
    "all-reduce before its graph-captured fit): sample_requests' "
    "lognormal prompts and answers at mean/median 1.5 / 2 / 3 (pre-filter means moved until "
    "the kept ones are the page's, seed 0) through serve_requests put the total tokens/s at "
    "+29% / +22% / +17% (vLLM) and +17% / +10% / +4% (SGLang), the runs then lasting until "
    "answers of ~1,830 tokens finish; the mean TPOTs only at 102 / 119 / 134 and 97 / 122 / "
    "162 ms (-55% to -41%, -68% to -47%), vLLM's mean TTFT staying ~5 s where the page "
    "measured 17,743 ms (as in its 128-token case: a delay common to all requests, "
    "unpriced); the concurrency-4 run's output tokens/s at 247 / 249 / 248 (+26% to +27%, "
    "254 fixed): a spread would account for most of the totals' misses (+219% / +181% "
    "fixed), not for the TPOTs' or the concurrency-4 run's")
