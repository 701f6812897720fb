"""Where the rate search starts: an analytic estimate of a deployment's capacity.

The estimate prices one replica with the analytic model (``analytic.analytic_point``: the
cost model and the policy's expected tokens per step from its acceptance, no event loop) at
the trace's mean context (mean prompt + half the mean output).  Saturated, a replica runs
the largest batch whose KV cache fits, up to the engine's ``max_num_seqs``: a request's
decode takes ``mean output x step / (batch x E)`` seconds of it and its prefill the
prompt's marginal forward time (a chunk's forward less a one-token decode, per token).
Where the SLO's p99 TPOT binds first, the rate is that at which the batch a steady load
keeps in flight (Little: rate x mean output x TPOT) steps at the limit, prefill chunks
included.  Times the replicas.  Fields the analytic model does not price (quantization,
expert or pipeline parallelism, execution overrides) are left at its defaults: it is only
a start.  The search snaps ``starting_rate`` to its lattice and brackets and bisects from
there, so with feasibility monotone in the rate the answer is the one a start anywhere else
finds; a close start saves the doublings from the trace's own rate.

Policies the analytic model prices: ``none``, ``chain``, ``eagle3``, ``mtp``; any other (or
a scenario it cannot price: an inline hardware profile, a chain without a draft, an
acceptance model without a closed form) has no estimate, and the search starts at the
trace's rate as before.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.inputs.errors import SpecsimError

ESTIMATED_POLICIES = ("none", "chain", "eagle3", "mtp")
# The estimate is of a steady, mean load: no p99 tails, no bursts of arrivals, no short
# trace's last burst (the backlog check), so it is above the sustained rate; on the plans
# measured (docs/benchmarks.md, bench_plan) the rate found was 0.33-0.79 of it.  The search
# starts at this fraction of it, the middle of that range on the lattice's log scale.
START_FRACTION = 0.5


def starting_rate(scenario, workload, p99_tpot_s: float | None) -> float | None:
    """Where the rate search starts: ``START_FRACTION`` of ``capacity_estimate``; None
    without an estimate."""
    estimate = capacity_estimate(scenario, workload, p99_tpot_s)
    return None if estimate is None else START_FRACTION * estimate


def capacity_estimate(scenario, workload, p99_tpot_s: float | None) -> float | None:
    """Requests/s the scenario's replicas serve by the analytic model (the module
    docstring); None where it has no estimate."""
    if scenario.policy.name not in ESTIMATED_POLICIES or scenario.hardware_inline is not None \
            or len(workload) == 0:
        return None
    try:
        rate = _estimate(scenario, workload, p99_tpot_s)
    except SpecsimError:
        return None
    return rate if math.isfinite(rate) and rate > 0 else None


def _point(scenario, context: float) -> dict[str, Any]:
    """The analytic point of one replica of ``scenario`` at ``context`` (batch to be set)."""
    from simulator.acceptance.provenance import effective_acceptance
    policy = scenario.policy
    gamma = int(policy.params.get("num_speculative_tokens", 0) or 0) \
        if policy.name != "none" else 0
    b = scenario.batching
    return {"hardware": scenario.hardware, "hardware_dir": scenario.hardware_dir,
            "target": scenario.target, "draft": scenario.draft,
            "tensor_parallel": scenario.parallelism.tensor_parallel,
            "policy": policy.name, "gamma": gamma, "context": context,
            "acceptance": effective_acceptance(scenario) if gamma else None,
            "overheads": scenario.overheads,
            "gpu_memory_utilization": b.gpu_memory_utilization, "block_size": b.block_size,
            "max_num_batched_tokens": b.max_num_batched_tokens}


def _largest(holds, hi: int) -> int:
    """The largest batch in [1, hi] for which ``holds`` (monotone: true up to a point), else 1."""
    if holds(hi):
        return hi
    lo = 1
    if not holds(lo):
        return 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo


def _estimate(scenario, workload, p99_tpot_s: float | None) -> float:
    from functools import lru_cache

    from simulator.planning.analytic import analytic_point
    prompt = float(np.mean(workload.prompt_tokens))
    output = float(np.mean(workload.output_tokens))
    point = _point(scenario, prompt + output / 2.0)
    row = lru_cache(maxsize=None)(lambda b: analytic_point({**point, "batch": b}))
    chunk = max(1.0, min(prompt, float(scenario.batching.max_num_batched_tokens)))
    per_token = prefill_s_per_token(point, chunk)
    top = _largest(lambda b: bool(row(b)["kv_fits"]), scenario.batching.max_num_seqs)
    step, e = row(top)["iteration_s"], row(top)["expected_tokens"]
    rate = top * e / (output * step + top * e * prompt * per_token)  # saturated
    if p99_tpot_s is not None:
        def holds(b: int) -> bool:  # at the TPOT limit, b = rate x output x TPOT (Little)
            busy = 1.0 - b / (output * p99_tpot_s) * prompt * per_token
            return busy > 0 and row(b)["iteration_s"] / busy <= row(b)["expected_tokens"] \
                * p99_tpot_s
        if not holds(top):  # the TPOT limit binds below the largest batch
            rate = min(rate, _largest(holds, top) / (output * p99_tpot_s))
    return scenario.replicas * rate


def prefill_s_per_token(point: dict[str, Any], chunk: float) -> float:
    """Seconds a prompt token adds to a step: one ``chunk``-token forward less a one-token
    decode, per token, on the point's target."""
    from simulator.planning.analytic import point_cost_models
    from simulator.planning.head_drafts import point_draft
    tcm, _ = point_cost_models(point["hardware"], point["hardware_dir"], point["target"],
                               point_draft({**point, "batch": 1}), point["tensor_parallel"],
                               point["overheads"], None, point["policy"], 0)
    return max(tcm.step_time(np.array([chunk]), np.zeros(1)) - tcm.decode_time(1, 0.0),
               0.0) / chunk
