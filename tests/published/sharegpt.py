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
    ``prompt`` and ``output``, those the filter refuses skipped, in the order drawn (at
    most ``max_draws`` rounds of ``n`` pairs; a ValueError when that keeps fewer)."""
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
