"""How a published case is predicted: a small scenario built in the case, simulated.

Every run uses the shipped hardware profile of the paper's device, unmodified, and the same
MT-bench-like workload (``PROMPT_TOKENS`` prompt, ``OUTPUT_TOKENS`` answer, greedy-style
acceptance numbers from the papers); nothing is tuned per case.  A speedup is the plain
decode's makespan over the method's on the same requests, all arriving at once and served
``batch`` at a time -- what Spec-Bench and EAGLE time (wall time of generation, prefill
included).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from simulator.scenario import scenario_from_dict
from simulator.simulate import simulate

# MT-bench prompts with the Vicuna template run to ~100-150 tokens; answers are capped at
# 1024 (Spec-Bench) and most are a few hundred tokens.  Fixed a priori for every case.
PROMPT_TOKENS = 128
OUTPUT_TOKENS = 256
REQUESTS_PER_BATCH_SLOT = 16


@dataclass(frozen=True)
class Run:
    """What one simulated run gives a case."""

    makespan_s: float
    tau: float


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


def run(hardware: str, target: str, policy: dict, *, draft: str | None = None,
        acceptance: dict | None = None, tensor_parallel: int = 1, batch: int = 1) -> Run:
    """Simulate ``policy`` on the fixed workload (cached: cases share their baselines)."""
    return _run(hardware, target, _freeze(policy), draft, _freeze(acceptance),
                tensor_parallel, batch)


@lru_cache(maxsize=None)
def _run(hardware, target, policy, draft, acceptance, tensor_parallel, batch) -> Run:
    n = batch * REQUESTS_PER_BATCH_SLOT
    data = {"name": "published-case", "seed": 0, "hardware": hardware, "target": target,
            "policy": _thaw(policy), "parallelism": {"tensor_parallel": tensor_parallel},
            "batching": {"max_num_seqs": batch, "max_num_batched_tokens": 8192},
            "workload": {"synthetic": {
                "num_requests": n, "arrival": {"process": "poisson", "rate_per_s": 1e6},
                "prompt": {"dist": "fixed", "tokens": PROMPT_TOKENS},
                "output": {"dist": "fixed", "tokens": OUTPUT_TOKENS}}}}
    if draft is not None:
        data["draft"] = draft
    if acceptance is not None:
        data["acceptance"] = _thaw(acceptance)
    res = simulate(scenario_from_dict(data, source="tests/published"))
    req = res.requests
    if not (req["status"] == "finished").all():
        raise AssertionError(f"{target} on {hardware}: not every request finished")
    makespan = float(req["finish_s"].max() - req["arrival_s"].min())
    tau = res.summary().get("mean_acceptance_length", float("nan"))
    return Run(makespan, float(tau))


def speedup(hardware: str, target: str, policy: dict, **kw) -> float:
    """Makespan without speculation over makespan with ``policy`` (same requests, batch)."""
    base_kw = {k: v for k, v in kw.items() if k in ("tensor_parallel", "batch")}
    base = run(hardware, target, {"name": "none"}, **base_kw)
    return base.makespan_s / run(hardware, target, policy, **kw).makespan_s


def tau(hardware: str, target: str, policy: dict, **kw) -> float:
    """Mean acceptance length (1 + accepted / drafts) of ``policy``'s run."""
    return run(hardware, target, policy, **kw).tau
