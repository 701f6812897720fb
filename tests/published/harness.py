"""How a published case is predicted: a small scenario built in the case, simulated.

Every run uses the shipped hardware profile of the paper's device, unmodified, and the same
MT-bench-like workload (``PROMPT_TOKENS`` prompt, ``OUTPUT_TOKENS`` answer, greedy-style
acceptance numbers from the papers); nothing is tuned per case.  A speedup is the plain
decode's makespan over the method's on the same requests, all arriving at once and served
``batch`` at a time -- what Spec-Bench and EAGLE time (wall time of generation, prefill
included).

Each case also names the engine it was measured on (``ENGINES``), passed unmodified as the
scenario's ``execution:`` block, the same for every case of that engine: the papers'
Hugging Face-style eager PyTorch code (``hf``), vLLM and SGLang with their defaults (CUDA
graphs, captured draft loop).  A case may also give the source's own workload lengths.
"""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

from simulator.run_setup import scenario_workload
from simulator.scenario import scenario_from_dict
from simulator.simulate import simulate
from tests.published.case_draw import CaseDraw

# MT-bench prompts with the Vicuna template run to ~100-150 tokens; answers are capped at
# 1024 (Spec-Bench) and most are a few hundred tokens.  Fixed a priori for every case.
PROMPT_TOKENS = 128
OUTPUT_TOKENS = 256
REQUESTS_PER_BATCH_SLOT = 16

# The engine each source measured on, as the scenario's ``execution:`` block (one per engine,
# never per case).  vLLM and SGLang: the defaults (CUDA graphs on, the draft loop captured)
# and the speculative path's host work of the named version (simulator/cost/engines.yaml):
# vLLM V1 0.9.2's EagleProposer path (v0.10.1's: vllm-0.10), SGLang 0.4.1's EAGLE worker.
# Hugging Face-style code: eager launches, each draft forward its own host step, and the
# official EAGLE code's speculative host work (its tree building, posterior, syncs) -- also
# charged, for the same kinds of work, to the Medusa and assisted-generation code Spec-Bench
# times, whose own counts were not read (an approximation of those two codebases).
ENGINES: dict[str, dict] = {"hf": {"enforce_eager": True, "captured_draft_loop": False,
                                   "engine": "eagle-official"},
                            "vllm": {"engine": "vllm-v0.9"},
                            # vLLM V1 0.10.x: propose()'s two .item() syncs gone
                            "vllm-0.10": {"engine": "vllm-v0.10"},
                            # vLLM V1 0.11.0: its block-FP8 dense linears on DeepGEMM
                            "vllm-0.11": {"engine": "vllm-v0.11"},
                            # vLLM V0 0.7.x (Feb 2025): its DeepSeek decode path, read
                            "vllm-v0": {"engine": "vllm-v0.7"},
                            "sglang": {"engine": "sglang-v0.4"},
                            # SGLang from April 2025: FA3 prefill on Hopper (issue #5064),
                            # CUTLASS/DeepGEMM block-FP8 GEMMs; 0.4.1's speculative counts
                            "sglang-2025": {"engine": "sglang-v0.4.5"},
                            # SGLang 0.5.x (Sep 2025 on): its DeepSeek decode path, read
                            "sglang-0.5": {"engine": "sglang-v0.5"},
                            # its B200 run with the flags of InferenceX's B200 script: the
                            # all-reduce + add + RMSNorm fusion (simulator/cost/ar_fusion.py)
                            "sglang-0.5-blackwell": {"engine": "sglang-v0.5-blackwell"}}


@dataclass(frozen=True)
class RequestLengths:
    """Each request's prompt and output tokens, in arrival order: a benchmark client's
    sampled requests (``serve_requests``), as tuples so that runs can be cached."""

    prompt: tuple[int, ...]
    output: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.prompt or len(self.prompt) != len(self.output):
            raise ValueError(f"{len(self.prompt)} prompt lengths for {len(self.output)} "
                             "output lengths; give one of each per request, at least one")
        if min(self.prompt + self.output) < 1:
            raise ValueError("every prompt and output length is at least 1 token")

    @property
    def tokens(self) -> int:
        """Input and output tokens of every request."""
        return sum(self.prompt) + sum(self.output)


@dataclass(frozen=True)
class Run:
    """What one simulated run gives a case."""

    makespan_s: float
    tau: float
    tpot_s: float


def _freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value):
    if isinstance(value, tuple) and value and all(
            isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) for v in value):
        return {k: _thaw(v) for k, v in value}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


# One draw of the declared uncertain inputs (tests/published/coverage.py), or None: the
# point estimate.  Part of every run's cache key, so a draw never shares a run with the point
# or with another draw.
_DRAW: CaseDraw | None = None


@contextmanager
def drawn(draw: CaseDraw):
    """Every run inside runs its scenario under ``draw`` (``CaseDraw.apply``)."""
    global _DRAW
    before, _DRAW = _DRAW, draw
    try:
        yield
    finally:
        _DRAW = before


def current_draw() -> CaseDraw | None:
    """The draw runs are under (``drawn``), None outside one: for cases that price their
    own scenarios (moe_cases.py) rather than through ``run``."""
    return _DRAW


def run(hardware: str, target: str, policy: dict, *, draft: str | None = None,
        acceptance: dict | None = None, tensor_parallel: int = 1, batch: int = 1,
        engine: str = "hf", prompt: int = PROMPT_TOKENS, output: int = OUTPUT_TOKENS,
        rounds: int = REQUESTS_PER_BATCH_SLOT) -> Run:
    """Simulate ``policy`` on the fixed workload, ``rounds`` full batches of requests
    (cached: cases share their baselines)."""
    if engine not in ENGINES:
        raise KeyError(f"unknown engine {engine!r}; one of {sorted(ENGINES)}")
    # keyed by the execution block, not the name: engines with the same block share runs
    return _run(hardware, target, _freeze(policy), draft, _freeze(acceptance),
                tensor_parallel, batch, _freeze(ENGINES[engine]), prompt, output, rounds,
                _DRAW.plain() if _DRAW is not None and policy["name"] == "none" else _DRAW)


@lru_cache(maxsize=None)
def _run(hardware, target, policy, draft, acceptance, tensor_parallel, batch, execution,
         prompt, output, rounds, draw=None) -> Run:
    data = _case_data("published-case", hardware, target, policy, {
        "tensor_parallel": tensor_parallel}, batch, execution, batch * rounds, 1e6, prompt,
        output, draft, acceptance)
    return _simulated(data, draw, draft, f"{target} on {hardware}")


def _case_data(name, hardware, target, policy, parallelism, max_num_seqs, execution, n, rate,
               prompt, output, draft, acceptance) -> dict:
    """A case's scenario: ``n`` fixed-length requests arriving as a Poisson stream."""
    data = {"name": name, "seed": 0, "hardware": hardware, "target": target,
            "policy": _thaw(policy), "parallelism": parallelism,
            "batching": {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": 8192},
            "execution": _thaw(execution) if execution else {},
            "workload": {"synthetic": {
                "num_requests": n, "arrival": {"process": "poisson", "rate_per_s": rate},
                "prompt": {"dist": "fixed", "tokens": prompt},
                "output": {"dist": "fixed", "tokens": output}}}}
    if draft is not None:
        data["draft"] = draft
    if acceptance is not None:
        data["acceptance"] = _thaw(acceptance)
    return data


def _simulated(data: dict, draw, draft, where: str,
               lengths: RequestLengths | None = None) -> Run:
    """Simulate a case's scenario (under ``draw`` if given): its makespan, tau, mean TPOT.
    ``lengths`` replaces the scenario's request lengths, request i's in arrival order (the
    arrival times are the scenario's own draw)."""
    scenario = scenario_from_dict(data, source="tests/published")
    scenario = scenario if draw is None else draw.apply(scenario, draft)
    workload = None
    if lengths is not None:
        workload = scenario_workload(scenario)
        if len(workload) != len(lengths.prompt):
            raise ValueError(f"{where}: {len(lengths.prompt)} lengths for {len(workload)} "
                             "requests")
        workload = dataclasses.replace(workload, prompt_tokens=lengths.prompt,
                                       output_tokens=lengths.output)
    res = simulate(scenario, workload=workload)
    req = res.requests
    if not (req["status"] == "finished").all():
        raise AssertionError(f"{where}: not every request finished")
    makespan = float(req["finish_s"].max() - req["arrival_s"].min())
    tau = res.summary().get("mean_acceptance_length", float("nan"))
    return Run(makespan, float(tau), float(req["tpot_s"].mean()))


_SHARED = ("tensor_parallel", "batch", "engine", "prompt", "output", "rounds")


def speedup(hardware: str, target: str, policy: dict, **kw) -> float:
    """Makespan without speculation over makespan with ``policy`` (same requests, batch,
    engine)."""
    base = run(hardware, target, {"name": "none"}, **{k: v for k, v in kw.items()
                                                      if k in _SHARED})
    return base.makespan_s / run(hardware, target, policy, **kw).makespan_s


def tpot_speedup(hardware: str, target: str, policy: dict, **kw) -> float:
    """Mean TPOT without speculation over mean TPOT with ``policy`` (what vLLM's
    ``benchmark_serving`` compares: time per output token after the first)."""
    base = run(hardware, target, {"name": "none"}, **{k: v for k, v in kw.items()
                                                      if k in _SHARED})
    return base.tpot_s / run(hardware, target, policy, **kw).tpot_s


def tau(hardware: str, target: str, policy: dict, **kw) -> float:
    """Mean acceptance length (1 + accepted / drafts) of ``policy``'s run."""
    return run(hardware, target, policy, **kw).tau


def throughput(hardware: str, target: str, policy: dict, **kw) -> float:
    """Output tokens per second of the whole run (prefill included): every request's
    ``output`` tokens over the makespan."""
    rounds, batch = kw.get("rounds", REQUESTS_PER_BATCH_SLOT), kw.get("batch", 1)
    return rounds * batch * kw.get("output", OUTPUT_TOKENS) / run(
        hardware, target, policy, **kw).makespan_s


# ------------------------------------------------ runs under load (tests/published/load_cases)
def load_run(hardware: str, target: str, policy: dict, *, rate_per_s: float,
             num_requests: int, tensor_parallel: int = 1, parallelism: dict | None = None,
             max_num_seqs: int = 256, draft: str | None = None,
             acceptance: dict | None = None, engine: str = "vllm",
             prompt: int = PROMPT_TOKENS, output: int = OUTPUT_TOKENS) -> Run:
    """Simulate ``policy`` serving ``num_requests`` fixed-length requests that arrive as an
    open-loop Poisson stream at ``rate_per_s`` (what ``benchmark_serving --request-rate``
    sends), the replica's batch capped at ``max_num_seqs``; ``parallelism`` adds keys to
    the scenario's ``parallelism:`` block (cached: a case's baseline is shared)."""
    if engine not in ENGINES:
        raise KeyError(f"unknown engine {engine!r}; one of {sorted(ENGINES)}")
    draw = _DRAW.plain() if _DRAW is not None and policy["name"] == "none" else _DRAW
    return _load_run(hardware, target, _freeze(policy), float(rate_per_s), int(num_requests),
                     tensor_parallel, _freeze(parallelism or {}), max_num_seqs, draft,
                     _freeze(acceptance), _freeze(ENGINES[engine]), prompt, output, draw)


@lru_cache(maxsize=None)
def _load_run(hardware, target, policy, rate, n, tensor_parallel, parallelism, max_num_seqs,
              draft, acceptance, execution, prompt, output, draw) -> Run:
    data = _case_data("published-load-case", hardware, target, policy, {
        "tensor_parallel": tensor_parallel, **(_thaw(parallelism) or {})}, max_num_seqs,
        execution, n, rate, prompt, output, draft, acceptance)
    return _simulated(data, draw, draft, f"{target} on {hardware} at {rate} req/s")


def load_tpot_speedup(hardware: str, target: str, policy: dict, **kw) -> float:
    """Mean TPOT without speculation over mean TPOT with ``policy``, both under the same
    open-loop load (``load_run``'s arguments; the baseline without draft or acceptance)."""
    base_kw = {k: v for k, v in kw.items() if k not in ("draft", "acceptance")}
    base = load_run(hardware, target, {"name": "none"}, **base_kw)
    return base.tpot_s / load_run(hardware, target, policy, **kw).tpot_s


# ------------------------------------------- a serving benchmark's run (tests/published/dp_cases)
@dataclass(frozen=True)
class Served:
    """What a serving benchmark prints of one simulated run: the client's duration (first
    send to last finish) and the mean TPOT."""

    duration_s: float
    tpot_s: float
    tokens: int          # input and output tokens of every request

    @property
    def total_tokens_per_s(self) -> float:
        """``vllm bench serve``'s "Total Token throughput": all tokens over the duration."""
        return self.tokens / self.duration_s


def serve(hardware: str, target: str, *, num_requests: int, prompt: int, output: int,
          engine: str, parallelism: dict, batching: dict,
          max_concurrency: int | None = None) -> Served:
    """``num_requests`` requests of fixed lengths sent at once (``vllm bench serve`` without a
    request rate), or held to ``max_concurrency`` in flight (its ``--max-concurrency``),
    served by one replica of ``parallelism`` and ``batching`` without speculation (cached)."""
    if engine not in ENGINES:
        raise KeyError(f"unknown engine {engine!r}; one of {sorted(ENGINES)}")
    draw = _DRAW.plain() if _DRAW is not None else None
    return _serve(hardware, target, int(num_requests), int(prompt), int(output),
                  _freeze(ENGINES[engine]), _freeze(parallelism), _freeze(batching),
                  max_concurrency, draw)


def serve_requests(hardware: str, target: str, *, lengths: RequestLengths, engine: str,
                   parallelism: dict, batching: dict,
                   max_concurrency: int | None = None) -> Served:
    """``serve`` for requests of their own lengths (``lengths``, in the order they are sent),
    as a benchmark client replays a dataset's sampled requests (cached)."""
    if engine not in ENGINES:
        raise KeyError(f"unknown engine {engine!r}; one of {sorted(ENGINES)}")
    draw = _DRAW.plain() if _DRAW is not None else None
    # the scenario's fixed lengths are placeholders: _simulated puts ``lengths`` in their place
    return _serve(hardware, target, len(lengths.prompt), 1, 1, _freeze(ENGINES[engine]),
                  _freeze(parallelism), _freeze(batching), max_concurrency, draw, lengths)


@lru_cache(maxsize=None)
def _serve(hardware, target, n, prompt, output, execution, parallelism, batching,
           max_concurrency, draw, lengths: RequestLengths | None = None) -> Served:
    workload = {"synthetic": {
        "num_requests": n, "arrival": {"process": "poisson", "rate_per_s": 1e6},
        "prompt": {"dist": "fixed", "tokens": prompt},
        "output": {"dist": "fixed", "tokens": output}}}
    if max_concurrency is not None:
        workload["max_concurrency"] = max_concurrency
    data = {"name": "published-serve-case", "seed": 0, "hardware": hardware,
            "target": target, "policy": {"name": "none"}, "parallelism": _thaw(parallelism),
            "batching": _thaw(batching), "execution": _thaw(execution),
            "workload": workload}
    run = _simulated(data, draw, None, f"{target} on {hardware}", lengths)
    return Served(run.makespan_s, run.tpot_s,
                  n * (prompt + output) if lengths is None else lengths.tokens)


def serve_data(data: dict) -> Served:
    """A case's own serving scenario ``data`` (a scenario dict whose workload is synthetic
    with fixed lengths; any deployment, aggregated or ``disaggregation:``; any policy) run
    as ``serve`` runs its own: the client's duration and mean TPOT, under the current draw
    (its plain form where the policy is ``none``: no speculative path to draw on) (cached)."""
    draw = _DRAW
    if draw is not None and data["policy"]["name"] == "none":
        draw = draw.plain()
    return _serve_data(_freeze(data), draw)


@lru_cache(maxsize=None)
def _serve_data(frozen, draw) -> Served:
    data = _thaw(frozen)
    syn = data["workload"]["synthetic"]
    n, prompt, output = syn["num_requests"], syn["prompt"]["tokens"], syn["output"]["tokens"]
    run = _simulated(data, draw, data.get("draft"), f"{data['name']}")
    return Served(run.makespan_s, run.tpot_s, n * (prompt + output))
