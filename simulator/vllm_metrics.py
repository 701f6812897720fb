"""A run's metrics under the keys of ``vllm bench serve --save-result``.

vLLM's serving benchmark (vllm/benchmarks/serve.py: ``calculate_metrics`` and the result
dict of ``benchmark``) writes, per run: ``duration``, ``completed``, ``failed``,
``total_input_tokens``, ``total_output_tokens``, ``request_throughput``,
``request_goodput``, ``output_throughput``, ``total_token_throughput``, and for each
selected metric (ttft, tpot, itl by default, e2el on request) ``mean_<m>_ms``,
``median_<m>_ms``, ``std_<m>_ms`` and ``p<p>_<m>_ms`` for each selected percentile (99 by
default).  Its definitions, which this module follows:

- TTFT and E2EL per completed request; TPOT per completed request with more than one output
  token, ``(e2el - ttft) / (output_len - 1)``;
- ITL pooled over every streamed chunk of every request: with speculative decoding one
  chunk carries every token a step emits, so it is the time between a request's steps,
  which is what specsim's ITL samples are;
- percentiles by ``np.percentile`` (linear interpolation), ``median`` by ``np.median``,
  ``std`` the population standard deviation (``np.std``);
- throughputs over the benchmark's duration (the first request sent to the last response:
  specsim's ``duration_s``, in simulated time).

Where a run holds more ITL samples than it keeps exactly (a sketch past 2^22 samples), the
ITL median and percentiles come from the sketch, within its stated relative accuracy, and
``std_itl_ms`` is left out (None).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

PERCENTILES = (99.0,)
METRICS = ("ttft", "tpot", "itl", "e2el")


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)  # vLLM's naming: p99, p99.9


def _stats(name: str, values: np.ndarray, percentiles: Sequence[float], out: dict) -> None:
    finite = np.isfinite(values)
    if finite.all():  # a copy of its own, scaled (2M ITL samples: one pass, not three)
        ms = np.multiply(values, 1e3) if values.size else np.zeros(1)
    else:  # a copy of its own (boolean indexing): scaled in place
        ms = values[finite]
        if not ms.size:  # vLLM computes over [0] when there are none
            ms = np.zeros(1)
        np.multiply(ms, 1e3, out=ms)
    mean, std = float(np.mean(ms)), float(np.std(ms))  # sums: before ``ms`` is reordered
    out[f"mean_{name}_ms"] = mean
    # the order statistics partition ``ms`` itself (no copy of a run's 2M ITL samples
    # each): a median or percentile depends on the values, not on their order
    out[f"median_{name}_ms"] = float(np.median(ms, overwrite_input=True))
    out[f"std_{name}_ms"] = std
    for p in percentiles:
        out[f"p{_p_word(p)}_{name}_ms"] = float(np.percentile(ms, p, overwrite_input=True))


def _itl_stats(results, percentiles: Sequence[float], out: dict) -> None:
    if results.itl_sketch is None:  # every sample kept exactly
        _stats("itl", np.asarray(results.itl_s, dtype=np.float64), percentiles, out)
        return
    q = np.array([0.5] + [p / 100.0 for p in percentiles])
    values = results.itl_quantiles(q) * 1e3
    out["mean_itl_ms"] = float(results.itl_mean() * 1e3)
    out["median_itl_ms"] = float(values[0])
    out["std_itl_ms"] = None
    for p, v in zip(percentiles, values[1:]):
        out[f"p{_p_word(p)}_itl_ms"] = float(v)


def bench_serve_metrics(results, percentiles: Sequence[float] = PERCENTILES) -> dict[str, Any]:
    """One policy's ``Results`` as vLLM's ``bench serve`` result keys (module docstring)."""
    req = results.request_columns()  # the run's columns: no DataFrame needed
    finished = req.finished()
    done = {name: np.asarray(req.columns[name])[finished]
            for name in ("prompt_tokens", "output_tokens", "ttft_s", "e2e_s")}
    completed = int(np.count_nonzero(finished))
    summary = results.summary()
    duration = float(summary["duration_s"])
    inputs = int(done["prompt_tokens"].sum())
    outputs = int(done["output_tokens"].sum())
    rate = (lambda n: float(n) / duration) if duration > 0 else (lambda n: float("nan"))
    goodput = summary.get("goodput_requests_per_s")
    out: dict[str, Any] = {
        "duration": duration, "completed": completed, "failed": len(req) - completed,
        "total_input_tokens": inputs, "total_output_tokens": outputs,
        "request_throughput": rate(completed),
        "request_goodput": None if goodput is None or goodput != goodput else float(goodput),
        "output_throughput": rate(outputs), "total_token_throughput": rate(inputs + outputs)}
    ttft = done["ttft_s"].astype(np.float64, copy=False)
    e2el = done["e2e_s"].astype(np.float64, copy=False)
    many = done["output_tokens"] > 1
    tpot = (e2el[many] - ttft[many]) / (done["output_tokens"][many] - 1.0)
    _stats("ttft", ttft, percentiles, out)
    _stats("tpot", tpot, percentiles, out)
    _itl_stats(results, percentiles, out)
    _stats("e2el", e2el, percentiles, out)
    return out
