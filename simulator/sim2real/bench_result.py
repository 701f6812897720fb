"""A ``vllm bench serve --save-result`` file's requests as a specsim Workload.

Its requests in the order vLLM sent them, each with its measured prompt length
(``input_lens``) and output length (``output_lens``), arriving at the measured
``start_times`` where the result has them, else as ``vllm bench serve`` sends them
(``request_rate`` requests/s with gamma gaps of shape ``burstiness``, Poisson at 1; every
request at once when the rate is ``inf``), drawn from the given generator; under the result's
``max_concurrency`` the client is closed loop (simulator/engine/closed_loop.py).  Requests
that failed in the measurement (an output length of 0, or an error) are left out.
"""
from __future__ import annotations

import math

import numpy as np

from simulator.inputs.errors import SpecsimError

MAX_REQUESTS = 1_000_000         # requests a result may hold (docs/limits.md)
FIELD = "RESULT"


def _lengths(data: dict, key: str, minimum: int) -> np.ndarray:
    values = data.get(key)
    if not isinstance(values, list) or not values:
        raise SpecsimError(f"the result has no {key} list", field=f"{FIELD}.{key}",
                           fix="save the result with 'vllm bench serve --save-result' (it "
                               "writes input_lens and output_lens)")
    if len(values) > MAX_REQUESTS:
        raise SpecsimError(f"{len(values):,} requests; at most {MAX_REQUESTS:,}",
                           field=f"{FIELD}.{key}", fix="benchmark fewer prompts")
    if not all(isinstance(v, int) and not isinstance(v, bool) and minimum <= v <= 10_000_000
               for v in values):
        raise SpecsimError(f"every entry must be a whole number from {minimum} to 10,000,000",
                           field=f"{FIELD}.{key}")
    return np.asarray(values, dtype=np.int64)


def _rate(data: dict) -> tuple[float, float]:
    rate, burst = data.get("request_rate", "inf"), data.get("burstiness", 1.0)
    if isinstance(rate, str) and rate.strip().lower() in ("inf", "infinity"):
        rate = math.inf
    ok = isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0
    if not ok or (isinstance(rate, float) and math.isnan(rate)):
        raise SpecsimError(f"expected a positive number or 'inf', got {rate!r}",
                           field=f"{FIELD}.request_rate")
    if isinstance(burst, bool) or not isinstance(burst, (int, float)) or not burst > 0 \
            or not math.isfinite(burst):
        raise SpecsimError(f"expected a positive number, got {burst!r}",
                           field=f"{FIELD}.burstiness")
    return float(rate), float(burst)


def result_requests(data: dict, rng: np.random.Generator):
    """The measured run's requests as a specsim Workload, and the index in the result's
    lists of each request it holds (in its order; the failed ones left out)."""
    from workloads.arrivals import GammaArrivals
    from workloads.workload import Workload

    prompts = _lengths(data, "input_lens", 1)
    outputs = _lengths(data, "output_lens", 0)
    if prompts.size != outputs.size:
        raise SpecsimError(f"input_lens has {prompts.size} entries, output_lens "
                           f"{outputs.size}", field=f"{FIELD}.output_lens")
    errors = data.get("errors")
    ok = outputs > 0
    if isinstance(errors, list) and len(errors) == ok.size:
        ok &= np.array([not e for e in errors])
    if not ok.any():
        raise SpecsimError("no request of the result completed", field=f"{FIELD}.output_lens")
    rate, burst = _rate(data)
    n = int(prompts.size)  # arrivals drawn for every request sent, as the client did
    starts = _start_times(data, n)
    if starts is not None:
        arrivals = starts
    elif math.isinf(rate):
        arrivals = np.zeros(n)
    else:
        arrivals = GammaArrivals(rate, 1.0 / math.sqrt(burst)).sample(n, rng)
    order = np.argsort(arrivals[ok], kind="stable")
    wl = Workload(name="vllm bench serve result", arrival_s=arrivals[ok][order],
                  prompt_tokens=prompts[ok][order], output_tokens=outputs[ok][order],
                  max_concurrency=_concurrency(data))
    return wl, np.flatnonzero(ok)[order]


def result_workload(data: dict, rng: np.random.Generator):
    """The measured run's requests as a specsim Workload, and how many were left out."""
    wl, kept = result_requests(data, rng)
    return wl, len(data["input_lens"]) - kept.size


def _start_times(data: dict, n: int) -> np.ndarray | None:
    """The measured send times (seconds from the first), where the result has them."""
    starts = data.get("start_times")
    if starts is None:
        return None
    if not isinstance(starts, list) or len(starts) != n or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in starts):
        raise SpecsimError(f"expected {n} finite times, one per request",
                           field=f"{FIELD}.start_times")
    arrivals = np.asarray(starts, dtype=np.float64)
    return arrivals - arrivals.min()


def _concurrency(data: dict) -> int | None:
    cap = data.get("max_concurrency")
    if cap is None:
        return None
    if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_REQUESTS:
        raise SpecsimError(f"expected a whole number from 1 to {MAX_REQUESTS:,}, got "
                           f"{cap!r}", field=f"{FIELD}.max_concurrency")
    return cap


