"""A measured serving run: the deployment that served it, the requests it served (arrivals,
lengths, declared shared prefixes) and what was measured of each (TTFT, E2E, ITL) or only of
the whole run (a published aggregate).  ``latency_metrics`` computes the same statistics of
measured and predicted requests, as vLLM's ``bench serve`` names them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

import numpy as np

from simulator.engine.frontend import frontend_note
from simulator.inputs.errors import SpecsimError
from workloads.workload import Workload

STATS = ("mean", "p50", "p90", "p99")
METRICS = ("ttft", "tpot", "e2e")
# vLLM V1's engine defaults the readers assume where a run does not say otherwise
# (vllm/engine/arg_utils.py, v0.11.0: block_size 16, gpu_memory_utilization 0.9, chunked
# prefill and prefix caching on for the V1 engine)
VLLM_BATCHING = {"block_size": 16, "gpu_memory_utilization": 0.9,
                 "enable_chunked_prefill": True, "enable_prefix_caching": True}
# where a run's latencies were measured: the engine's own spans, or a load generator's client
MeasuredAt = Literal["server", "client"]


@dataclass(frozen=True)
class MeasuredRun:
    """One run: ``model`` (catalog name or Hugging Face id), ``hardware`` (a profile name,
    None: the command's ``--profile``), the engine's knobs, the replayed requests and the
    per-request measurements (seconds; None where the run does not have them).
    ``measured_at``: ``"server"`` (the engine's request spans: compared with the simulated
    engine interval) or ``"client"`` (a load generator: compared with it plus the engine's
    frontend, simulator/engine/frontend.py)."""

    name: str
    model: str
    hardware: str | None
    tensor_parallel: int
    batching: Mapping[str, object]
    engine: str
    workload: Workload
    ttft_s: np.ndarray | None = None
    e2e_s: np.ndarray | None = None
    itl_s: np.ndarray | None = None
    aggregates: Mapping[str, float] | None = None  # measured statistics, where only these
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    measured_at: MeasuredAt = "server"
    async_scheduling: bool = False  # the server ran vLLM's async scheduling (replayed so)

    def __post_init__(self) -> None:
        if self.measured_at not in ("server", "client"):
            raise SpecsimError(f"measured_at {self.measured_at!r}: expected server or "
                               "client", source=self.source or None, field="measured_at")

    def report_notes(self) -> tuple[str, ...]:
        """The run's notes, and that its engine's frontend is not priced where it was
        measured at the client (simulator/engine/frontend.py)."""
        note = frontend_note(self.engine) if self.measured_at == "client" else None
        return self.notes + ((note,) if note else ())

    def measured(self) -> dict[str, float]:
        """The run's measured statistics (see ``latency_metrics``)."""
        if self.ttft_s is None:
            return dict(self.aggregates or {})
        wl = self.workload
        return latency_metrics(wl.arrival_s, wl.output_tokens, self.ttft_s, self.e2e_s,
                               self.itl_s)


def _stats(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return dict.fromkeys(STATS, float("nan"))
    q = np.quantile(values, [0.5, 0.9, 0.99])
    return {"mean": float(values.mean()), "p50": float(q[0]), "p90": float(q[1]),
            "p99": float(q[2])}


def latency_metrics(arrival_s: np.ndarray, output_tokens: np.ndarray, ttft_s: np.ndarray,
                    e2e_s: np.ndarray, itl_s: np.ndarray | None = None) -> dict[str, float]:
    """``{metric}_{stat}_ms`` for TTFT, TPOT ((E2E - TTFT) / (output - 1), requests of two
    or more tokens, as vLLM's bench does), E2E and ITL (when given), and the output token
    throughput over the run (first arrival to last finish)."""
    out: dict[str, float] = {}
    multi = output_tokens > 1
    tpot = (e2e_s[multi] - ttft_s[multi]) / (output_tokens[multi] - 1)
    series = {"ttft": ttft_s, "tpot": tpot, "e2e": e2e_s}
    if itl_s is not None:
        series["itl"] = itl_s
    for name, values in series.items():
        for stat, value in _stats(np.asarray(values, np.float64)).items():
            out[f"{name}_{stat}_ms"] = value * 1e3
    span = float(np.max(arrival_s + e2e_s) - np.min(arrival_s))
    out["output_throughput"] = float(output_tokens.sum()) / span if span > 0 else float("nan")
    return out
