"""Results of one simulation: the requests and steps DataFrames and their summary.

Metric names follow the serving engines (vLLM's benchmark and spec-decode metrics):
TTFT, TPOT = (E2E - TTFT) / (output_tokens - 1), ITL per emitted step, E2E, queueing delay;
output tokens/s, requests/s, goodput (requests meeting every SLO set, per second); KV-cache
occupancy, MFU, MBU; and for speculation num_drafts, num_draft_tokens,
num_accepted_tokens, acceptance_rate = accepted / draft tokens, mean_acceptance_length
tau = 1 + accepted / drafts (bonus token included), per-position acceptance rates (the
fraction of drafts whose first i+1 tokens were all accepted) and the draft overhead fraction.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from simulator.engine.recorder import Recorder
from simulator.engine.requests import STATUS_NAMES, RequestTable

PERCENTILES = (50, 90, 99)


def _percentiles(prefix: str, values: np.ndarray, out: dict) -> None:
    values = values[np.isfinite(values)]
    out[f"mean_{prefix}_s"] = float(values.mean()) if values.size else float("nan")
    for p in PERCENTILES:
        out[f"p{p}_{prefix}_s"] = float(np.percentile(values, p)) if values.size else float("nan")


@dataclass
class Results:
    """One run: per-request and per-step records plus what the summary needs."""

    label: str
    requests: pd.DataFrame
    steps: pd.DataFrame
    itl_s: np.ndarray
    accepted_hist: np.ndarray
    drafted_hist: np.ndarray
    scenario: Any
    info: dict = field(default_factory=dict)
    events: pd.DataFrame | None = None

    @classmethod
    def from_run(cls, scenario, table: RequestTable, rec: Recorder, dep, workload) -> "Results":
        """Assemble DataFrames from the engine's arrays."""
        status = pd.Categorical.from_codes(table.status.astype(np.int8),
                                           categories=[STATUS_NAMES[i]
                                                       for i in range(len(STATUS_NAMES))])
        req = pd.DataFrame({
            "request_id": np.arange(table.arrival_s.size),
            "replica": table.replica,
            "status": status,
            "reject_reason": table.reject_reason,  # object array sharing one "" string
            "arrival_s": table.arrival_s,
            "first_scheduled_s": table.first_scheduled_s,
            "first_token_s": table.first_token_s,
            "finish_s": table.finish_s,
            "prompt_tokens": table.prompt_len,
            "output_tokens": table.output_len,
            "emitted_tokens": table.generated,
            "preemptions": table.preemptions,
            "num_drafts": table.num_drafts,
            "num_draft_tokens": table.num_draft_tokens,
            "num_accepted_tokens": table.num_accepted,
        })
        if workload.task is not None:
            req["task"] = workload.task
        req["queueing_s"] = req["first_scheduled_s"] - req["arrival_s"]
        req["ttft_s"] = req["first_token_s"] - req["arrival_s"]
        req["e2e_s"] = req["finish_s"] - req["arrival_s"]
        denom = (req["output_tokens"] - 1).where(req["output_tokens"] > 1)
        req["tpot_s"] = (req["e2e_s"] - req["ttft_s"]) / denom
        steps = rec.steps_frame()
        itl = rec.itl.values().copy()
        info = {"kv_blocks": dep.memory.kv_blocks, "block_size": dep.memory.block_size,
                "kv_tokens": dep.memory.kv_tokens,
                "weight_bytes": dep.memory.weight_bytes,
                "hardware": dep.hardware.name, "target": dep.target.name,
                "draft": dep.draft.name if dep.draft else None,
                "peak_flops_per_s": dep.hardware.peak_flops(dep.target.dtype)
                * scenario.parallelism.devices,
                "peak_bandwidth_bytes_per_s": dep.hardware.memory_bandwidth_bytes_per_s
                * scenario.parallelism.devices,
                "weight_bytes_per_step": dep.target_cost.weight_bytes_read_per_step
                * scenario.parallelism.devices,
                "kv_bytes_per_token": dep.target.kv_bytes_per_token(),
                "flops_per_token": 2.0 * (dep.target.param_count()
                                          - dep.target.embedding_params()
                                          + dep.target.lm_head_params()),
                "attn_flops_per_pair": 4.0 * dep.target.q_size * dep.target.num_layers,
                "replicas": scenario.replicas,
                "execution": dep.target_cost.execution.describe()
                if hasattr(dep.target_cost, "execution") else None}
        events = pd.DataFrame(rec.events, columns=["time_s", "event", "request_id", "tokens"]) \
            if rec.record_events else None
        accepted_hist, drafted_hist = rec.histograms()
        return cls(label=scenario.policy.label, requests=req, steps=steps, itl_s=itl,
                   accepted_hist=accepted_hist, drafted_hist=drafted_hist,
                   scenario=scenario, info=info, events=events)

    # ------------------------------------------------------------------ metrics
    def position_rates(self) -> np.ndarray:
        """vLLM's per-position acceptance: P(first i+1 drafts accepted | drafted > i)."""
        acc_ge = self.accepted_hist[::-1].cumsum()[::-1]   # acc_ge[i] = #(accepted >= i)
        dr_ge = self.drafted_hist[::-1].cumsum()[::-1]
        k = int(np.flatnonzero(self.drafted_hist).max()) if self.drafted_hist.any() else 0
        with np.errstate(invalid="ignore", divide="ignore"):
            return acc_ge[1:k + 1] / dr_ge[1:k + 1]

    def acceptance_frame(self) -> pd.DataFrame:
        """Accepted-length and draft-length histograms with per-position rates."""
        k = int(np.flatnonzero(self.drafted_hist).max()) if self.drafted_hist.any() else 0
        rates = self.position_rates()
        return pd.DataFrame({"length": np.arange(k + 1),
                             "accepted_count": self.accepted_hist[:k + 1],
                             "drafted_count": self.drafted_hist[:k + 1],
                             "position_rate": np.concatenate(([np.nan], rates))})

    def summary(self) -> dict:
        """The headline metrics of the run as one flat dict."""
        req, steps, info = self.requests, self.steps, self.info
        done = req[req["status"] == "finished"]
        out: dict[str, Any] = {"policy": self.label,
                               "requests": int(len(req)),
                               "finished": int(len(done)),
                               "rejected": int((req["status"] == "rejected").sum())}
        for name in ("ttft", "tpot", "e2e", "queueing"):
            _percentiles(name, done[f"{name}_s"].to_numpy(float), out)
        _percentiles("itl", self.itl_s.astype(np.float64), out)
        if len(done):
            span = float(done["finish_s"].max() - req["arrival_s"].min())
        else:
            span = float("nan")
        out["duration_s"] = span
        out["output_tokens_per_s"] = float(done["output_tokens"].sum()) / span if span else 0.0
        out["requests_per_s"] = len(done) / span if span else 0.0
        slo = self.scenario.slo
        good = np.ones(len(done), bool)
        if slo.ttft_s is not None:
            good &= done["ttft_s"].to_numpy() <= slo.ttft_s
        if slo.tpot_s is not None:
            tpot = done["tpot_s"].to_numpy()
            good &= ~(tpot > slo.tpot_s)  # single-token outputs have no TPOT: they pass
        out["slo_attainment"] = float(good.mean()) if len(done) else float("nan")
        out["goodput_requests_per_s"] = float(good.sum()) / span if span else 0.0
        # utilisation, over the time the replicas were busy
        busy = float(steps["duration_s"].sum()) if len(steps) else 0.0
        if busy > 0:
            w = steps["duration_s"].to_numpy()
            out["mean_kv_occupancy"] = float((steps["kv_occupancy"].to_numpy() * w).sum() / busy)
            tokens = (steps["prefill_tokens"] + steps["decode_tokens"]).to_numpy(float)
            flops = tokens * info["flops_per_token"] + \
                steps["attn_pairs"].to_numpy() * info["attn_flops_per_pair"]
            hbm = info["weight_bytes_per_step"] + \
                steps["kv_read_tokens"].to_numpy() * info["kv_bytes_per_token"]
            out["mfu"] = float(flops.sum() / busy / info["peak_flops_per_s"])
            out["mbu"] = float(hbm.sum() / busy / info["peak_bandwidth_bytes_per_s"])
            out["draft_overhead_fraction"] = float(steps["draft_s"].sum()) / busy
        else:
            out.update(mean_kv_occupancy=0.0, mfu=0.0, mbu=0.0, draft_overhead_fraction=0.0)
        out["preemptions"] = int(req["preemptions"].sum())
        out.update(backlog_summary(req))
        drafts = int(req["num_drafts"].sum())
        draft_tokens = int(req["num_draft_tokens"].sum())
        accepted = int(req["num_accepted_tokens"].sum())
        out["num_drafts"] = drafts
        out["num_draft_tokens"] = draft_tokens
        out["num_accepted_tokens"] = accepted
        out["acceptance_rate"] = accepted / draft_tokens if draft_tokens else float("nan")
        out["mean_acceptance_length"] = 1.0 + accepted / drafts if drafts else float("nan")
        return out

    def summary_frame(self) -> pd.DataFrame:
        """The summary as a one-row DataFrame."""
        return pd.DataFrame([self.summary()])


# A run is *saturated* when the queue of requests waiting to be admitted grows through the
# trace (arrivals outpace service): sampled at the middle, three quarters and the end of the
# arrival span, it does not shrink, it ends at least SATURATED_GROWTH times as long as at the
# middle, and at least max(SATURATED_MIN_WAITING, SATURATED_MIN_FRACTION of the requests)
# long.  A queue that grows linearly with time (any overload, 1.2x as much as 3x) doubles from
# mid-trace to the end; one burst that the server works off (every arrival at once), or a
# stable queue that fluctuates around a few requests, does not.  Requests in the running
# batch are being served, not queued.  Below SATURATED_MIN_REQUESTS no trend can be told.
SATURATED_GROWTH = 1.5
SATURATED_MIN_WAITING = 5
SATURATED_MIN_FRACTION = 0.02
SATURATED_MIN_REQUESTS = 20


def backlog_summary(req: pd.DataFrame) -> dict:
    """``waiting_mid`` and ``waiting_last`` (requests arrived but not yet admitted at the
    middle and at the end of the arrival span), ``waiting_at_last_arrival`` (the latter as a
    fraction of the served requests) and ``saturated``."""
    served = req[req["status"] != "rejected"]
    if not len(served):
        return {"waiting_at_last_arrival": float("nan"), "waiting_mid": 0,
                "waiting_last": 0, "saturated": False}
    arrival = served["arrival_s"].to_numpy(float)
    admitted = served["first_scheduled_s"].to_numpy(float)  # NaN: never admitted
    first, last = float(arrival.min()), float(arrival.max())

    def waiting(fraction: float) -> int:
        t = first + fraction * (last - first)
        return int(np.count_nonzero((arrival <= t) & ~(admitted <= t)))
    w_mid, w_3q, w_last = waiting(0.5), waiting(0.75), waiting(1.0)
    n = len(served)
    saturated = bool(n >= SATURATED_MIN_REQUESTS and last > first
                     and w_last >= max(SATURATED_MIN_WAITING, SATURATED_MIN_FRACTION * n)
                     and w_last >= SATURATED_GROWTH * w_mid and w_3q >= w_mid)
    return {"waiting_at_last_arrival": w_last / n, "waiting_mid": w_mid,
            "waiting_last": w_last, "saturated": saturated}
