"""What a client measures beyond the engine: the serving frontend's request-in and
first-token-out path, priced where it was measured.

The simulator's requests arrive where the engine (vLLM's ``AsyncLLM``) stamps them, and
their first token and finish are when its output handler takes the engine core's step
output: the ``llm_request`` span vLLM exports (``gen_ai.latency.time_to_first_token``,
``gen_ai.latency.e2e``) measures exactly that interval, and the simulator's ``ttft_s`` and
``e2e_s`` are that server-side interval.  A client (``vllm bench serve``, guidellm,
inference-perf) measures from sending the HTTP request to receiving the event, so it also
sees, in vLLM 0.11.0 (the wheel's sources):

- before the engine's stamp: the HTTP request and the prompt's tokenisation, which
  ``OpenAIServingCompletion.create_completion`` does (``renderer.render_prompt_and_embeds``,
  vllm/entrypoints/openai/serving_completion.py:138-142) before ``engine_client.generate``
  (:223); ``Processor.process_inputs`` stamps ``arrival_time = time.time()`` only then
  (vllm/v1/engine/processor.py:349-350), and the span starts at that stamp
  (vllm/v1/engine/output_processor.py:489-497);
- after it: the output handler stamps the step's outputs once (``IterationStats()``,
  vllm/v1/engine/async_llm.py:442; vllm/v1/metrics/stats.py:96, the TTFT at :122) and then
  detokenises them in chunks of ``VLLM_V1_OUTPUT_PROC_CHUNK_SIZE`` (async_llm.py:446-464)
  into each request's queue, from which ``completion_stream_generator`` serialises the SSE
  event (serving_completion.py:461), and the event crosses the network to the client.

Measured request by request (``calibrate/frontend_gap.py``: guidellm 0.6's client timings
against the same run's vLLM 0.11.0 spans, by ``response_id``; inference-sim's ground truth,
github.com/inference-sim/inference-sim at e7a4aa3, runs ``jan20-prefill-llama7b-tp1-1`` and
``jan20-codellama-prefill-1``, 397 requests): with one request in flight the client's TTFT
is the span's plus 4.21 ms plus 1.815 ms per 1,000 prompt tokens (least squares over the 80
synchronous requests, 1,760-3,929 prompt tokens; the part before the span, 7.2-8.4 ms median
at ~3,000 tokens, grows with the prompt: tokenising; the part after it is 1.4-1.8 ms), and
the client's E2E the span's plus the same (9.3 against 9.5 ms median). With requests running
the gap grows by 0.060 ms per running request at arrival (``load_slope``: least squares with
an offset per run and the prompt tokens, over the 318 requests not sent in a burst, 0-20
running; bootstrap sd 0.034 ms, so known to about half its size; in the run reaching 20
running, 0.040 of its 0.053 ms is after the span's first-token stamp): the output handler
stamps a step's outputs and then detokenises every running request's output
(async_llm.py:446-464) and each request's generator serialises its event
(serving_completion.py:461) on the API server's one asyncio thread, so the new request's
first-token event waits behind work that grows with the batch. At 5-29 running that is about
1 ms (10.2-11.0 ms median against 9.5 idle); at the 80-110 running of a 20 requests/s stage
of the inference-perf experiments it is 5-7 ms, a line extrapolated past the 20 running it
was measured at. The gap also grows when requests arrive together (guidellm's ``throughput``
burst, 40 at once: 20-28 ms, all of it before the span: their tokenising queued on that
thread), which is not priced here. ``Frontend`` is that measured fixed, per-prompt-token and
per-running-request latency; it is applied to the vLLM versions in ``MEASURED_FRONTENDS``
(the same path, serving_completion -> AsyncLLM -> the engine core and back, in 0.11 to 0.15;
re-measure it where a client and spans of one newer run are both at hand); V0 (0.6, 0.7) and
other engines get none, and their runs say so in their notes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Frontend:
    """Latency a client sees beyond the engine's own interval, once per request:
    ``fixed_s + per_prompt_token_s * prompt_tokens + per_running_s * running`` (``running``:
    the other requests in the engine when it arrives) added to TTFT and to E2E alike (the
    path in is paid once before the first token, the path out once per event, the same for
    the first and the last)."""

    fixed_s: float = 0.0
    per_prompt_token_s: float = 0.0
    per_running_s: float = 0.0

    def __post_init__(self) -> None:
        if not (self.fixed_s >= 0.0 and self.per_prompt_token_s >= 0.0
                and self.per_running_s >= 0.0):
            raise ValueError("frontend latencies are non-negative")

    def latency_s(self, prompt_tokens: np.ndarray,
                  running: np.ndarray | None = None) -> np.ndarray:
        """Each request's latency outside the engine (s); ``running`` None: an idle engine."""
        out = self.fixed_s + self.per_prompt_token_s * np.asarray(prompt_tokens, np.float64)
        if running is not None:
            out = out + self.per_running_s * np.asarray(running, np.float64)
        return out

    def client_view(self, ttft_s: np.ndarray, e2e_s: np.ndarray, prompt_tokens: np.ndarray,
                    arrival_s: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(TTFT, E2E) as a client measures them, from the engine's (server-side) ones;
        ``arrival_s`` (the engine's arrivals, the order of the other arrays) gives each
        request's running count (:func:`running_at_arrival`), None prices an idle engine."""
        e2e = np.asarray(e2e_s, np.float64)
        running = None if arrival_s is None else running_at_arrival(arrival_s, e2e)
        extra = self.latency_s(prompt_tokens, running)
        return np.asarray(ttft_s, np.float64) + extra, e2e + extra


def running_at_arrival(arrival_s: np.ndarray, e2e_s: np.ndarray) -> np.ndarray:
    """Per request, the other requests in the engine at its arrival (arrived at or before
    it, not finished: ``start <= t < start + e2e``), as calibrate/frontend_gap.py counts the
    measured spans."""
    start = np.asarray(arrival_s, np.float64)
    end = start + np.asarray(e2e_s, np.float64)
    begun = np.searchsorted(np.sort(start), start, side="right")
    ended = np.searchsorted(np.sort(end), start, side="right")
    return begun - ended - 1


NO_FRONTEND = Frontend()
# vLLM 0.11 V1's OpenAI server (the measurement above: calibrate/frontend_gap.py's idle line
# and load_slope).  per_running_s was measured at 0-20 running requests (bootstrap sd 0.034
# ms, docs/calibration.md) and is applied at 80-110 in the inference-perf replays: a line
# extrapolated past its range, on which their TTFT gain from it (7.5% -> 3.8%) rests
VLLM_V1_FRONTEND = Frontend(fixed_s=4.21e-3, per_prompt_token_s=1.815e-6, per_running_s=60e-6)
# the engines each measured frontend applies to: (name, first minor, last minor) of vLLM 0.x;
# V1's path (serving_completion -> AsyncLLM -> the engine core) from 0.11, where it was
# measured, to 0.15, the newest a measured run names; V0 (0.6, 0.7) has another path
MEASURED_FRONTENDS = (("vllm", 11, 15, VLLM_V1_FRONTEND),)
_VERSION = re.compile(r"^([a-z]+)[^0-9]*0\.(\d+)")  # vLLM 0.11.0, vllm-v0.11, ...


def frontend_for(engine: str) -> Frontend:
    """The priced frontend of a measured run's engine (its name and version as the run
    states it, e.g. ``vLLM 0.11.0``); an engine or version not measured adds nothing
    (:func:`frontend_note` says so)."""
    found = _VERSION.match(engine.strip().lower())
    if found:
        for name, first, last, frontend in MEASURED_FRONTENDS:
            if found.group(1) == name and first <= int(found.group(2)) <= last:
                return frontend
    return NO_FRONTEND


def frontend_note(engine: str) -> str | None:
    """A client-measured run's note where its engine has no measured frontend."""
    if frontend_for(engine) is not NO_FRONTEND:
        return None
    return (f"no measured frontend for {engine!r} (vLLM 0.11-0.15 only): the client's "
            "latencies are compared with the engine interval alone")
