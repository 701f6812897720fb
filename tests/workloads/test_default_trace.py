"""The shipped default trace: reproducible byte for byte, and shaped as its docstring says."""
from __future__ import annotations

import math

import numpy as np

from simulator.models.spec import load_model
from workloads import make_default_trace
from workloads.traces import DEFAULT_TRACE_PATH, read_specsim


def phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def test_regenerated_file_is_byte_identical(tmp_path):
    out = tmp_path / "default_trace.csv"
    assert make_default_trace.main(["--output", str(out)]) == 0
    assert out.read_bytes() == DEFAULT_TRACE_PATH.read_bytes()


def test_header_is_the_specsim_csv_header_and_no_comment_lines():
    lines = DEFAULT_TRACE_PATH.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "arrival_s,prompt_tokens,output_tokens"
    assert len(lines) == 201 and not any(line.startswith("#") for line in lines)


def test_requests_fit_opt_context_and_respect_the_caps():
    w = read_specsim(DEFAULT_TRACE_PATH)
    assert len(w) == 200 and w.arrival_s[0] == 0.0
    assert w.prompt_tokens.max() <= 1800 and w.output_tokens.max() <= 240
    assert (w.prompt_tokens + w.output_tokens).max() <= load_model("opt-13b").max_context


def test_shape_is_within_sampling_bounds_of_the_recipe():
    w = read_specsim(DEFAULT_TRACE_PATH)
    n = len(w)
    # Poisson at 2 req/s: the rate estimate (n - 1) / T has sd about 2 / sqrt(n - 1).
    assert abs(w.mean_rate_per_s - 2.0) < 5 * 2.0 / math.sqrt(n - 1)
    # Medians: standard error median * sigma * sqrt(2 pi) / (2 sqrt(n)) (caps are above them).
    for values, median, mean in ((w.prompt_tokens, 400, 600), (w.output_tokens, 100, 150)):
        sigma = math.sqrt(2 * math.log(mean / median))
        se = median * sigma * math.sqrt(2 * math.pi) / (2 * math.sqrt(n))
        assert abs(np.median(values) - median) < 5 * se + 1
    # The output cap is hit with probability P(X >= 239.5) for the uncapped lognormal.
    sigma = math.sqrt(2 * math.log(1.5))
    p_cap = 1 - phi(math.log(239.5 / 100) / sigma)
    assert abs(np.mean(w.output_tokens == 240) - p_cap) < 5 * math.sqrt(p_cap * (1 - p_cap) / n)
