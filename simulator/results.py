"""Results of one simulation: the requests and steps DataFrames and their summary.

Metric names follow the serving engines (vLLM's benchmark and spec-decode metrics):
TTFT, TPOT = (E2E - TTFT) / (output_tokens - 1), ITL per emitted step, E2E, queueing delay;
output tokens/s, requests/s, goodput (requests meeting every SLO set, per second); KV-cache
occupancy, MFU, MBU; and for speculation num_drafts, num_draft_tokens,
num_accepted_tokens, acceptance_rate = accepted / draft tokens, mean_acceptance_length
tau = 1 + accepted / drafts (bonus token included), per-position acceptance rates (the
fraction of drafts whose first i+1 tokens were all accepted) and the draft overhead fraction.

Long runs keep bounded memory (``simulator.engine.recorder``): ITL samples are exact up to
``ITL_EXACT_CAP`` and a relative-error sketch beyond (``itl_s`` is then empty and
``itl_sketch`` answers quantiles within its stated accuracy), and the steps table may be
sampled or off; the utilisation metrics then come from ``step_totals``, exact over every
step, so the summary is the same whichever rows were kept.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.engine.exact_sum import exact_sums
from simulator.engine.recorder import Recorder
from simulator.engine.requests import RequestTable
from simulator.engine.sketch import QuantileSketch
from simulator.engine.step import STEP_FIELDS
from simulator.engine.steps_store import totals_of
from simulator.results_columns import RequestColumns, acceptance_columns, steps_frame

if TYPE_CHECKING:  # pandas is imported where a frame is built (cold start)
    import pandas as pd

    from simulator.cost.cost_model import CostModel

PERCENTILES = (50, 90, 99)


def _percentiles(prefix: str, values: np.ndarray, out: dict) -> None:
    values = values[np.isfinite(values)]
    out[f"mean_{prefix}_s"] = float(values.mean()) if values.size else float("nan")
    for p in PERCENTILES:
        out[f"p{p}_{prefix}_s"] = float(np.percentile(values, p)) if values.size else float("nan")


def _flops_per_token(model) -> float:
    """2 FLOPs per weight a token multiplies: the active (top-k) experts and the LM head,
    not the embedding lookup (a tied LM head is the embedding: counted back once)."""
    return 2.0 * (model.active_param_count() - model.embedding_params()
                  + model.tied_embeddings * model.lm_head_params())


def _weight_bytes_per_step(cost: CostModel, totals: dict | None) -> float:
    """Weight bytes one device reads per step: a MoE model's at the run's mean tokens per
    step (the experts those tokens touch: an upper bound on the mean, the touched count
    being concave in the tokens); a dense model's whatever the tokens."""
    steps = float(totals["steps"]) if totals else 0.0
    if not steps:
        return float(cost.weight_bytes_read_per_step)
    return float(cost.weight_bytes_read((totals["prefill_tokens"] + totals["decode_tokens"])
                                        / steps))


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
    itl_sketch: QuantileSketch | None = None  # every ITL sample, when too many to keep exactly
    step_totals: dict | None = None           # exact sums over every step (None: from steps)
    # the summary, computed on the first summary() call: a run's CLI, its vLLM-keyed metrics
    # and its report all read it, and on a 10k-request run each computation costs tens of ms.
    # A Results is not changed after it is built; dataclasses.replace() starts a fresh one.
    _summary: dict | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_run(cls, scenario, table: RequestTable, rec: Recorder, dep, workload) -> "Results":
        """Assemble the run's tables from the engine's arrays: as columns, which
        ``requests`` and ``steps`` turn into DataFrames on first read (results_columns.py)."""
        req = RequestColumns.of_run(table, workload.task)
        steps = rec.steps_columns()
        itl, sketch = rec.itl_samples()
        info = {"kv_blocks": dep.memory.kv_blocks, "block_size": dep.memory.block_size,
                "kv_tokens": dep.memory.kv_tokens,
                "weight_bytes": dep.memory.weight_bytes,
                "hardware": dep.hardware.name, "target": dep.target.name,
                "draft": dep.draft.name if dep.draft else None,
                "peak_flops_per_s": dep.hardware.peak_flops(dep.target.dtype)
                * scenario.parallelism.devices,
                "peak_bandwidth_bytes_per_s": dep.hardware.memory_bandwidth_bytes_per_s
                * scenario.parallelism.devices,
                "weight_bytes_per_step": _weight_bytes_per_step(dep.target_cost,
                                                                rec.step_totals())
                * scenario.parallelism.devices,
                "kv_bytes_per_token": dep.target.kv_bytes_per_token(),
                "flops_per_token": _flops_per_token(dep.target),
                "attn_flops_per_pair": 4.0 * dep.target.q_size * dep.target.num_layers,
                "replicas": scenario.replicas,
                "steps_table": rec.steps_info(), "itl": itl_info(itl, sketch),
                "execution": dep.target_cost.execution.describe()}
        events = None
        if rec.record_events:
            import pandas as pd
            events = pd.DataFrame(rec.events, columns=["time_s", "event", "request_id",
                                                       "tokens"])
        accepted_hist, drafted_hist = rec.histograms()
        return cls(label=scenario.policy.label, requests=req, steps=steps, itl_s=itl,
                   accepted_hist=accepted_hist, drafted_hist=drafted_hist,
                   scenario=scenario, info=info, events=events, itl_sketch=sketch,
                   step_totals=rec.step_totals())

    # ------------------------------------------------------------------ ITL and step totals
    def _itl_exact(self) -> np.ndarray:
        """The finite ITL samples: ``itl_s`` itself when all are (every caller only reads
        them; a run's 2M samples copied cost more than the summary's arithmetic)."""
        values = np.asarray(self.itl_s, dtype=np.float64)
        finite = np.isfinite(values)
        return values if finite.all() else values[finite]

    def itl_count(self) -> int:
        """How many ITL samples the run had (kept or sketched)."""
        return self.itl_sketch.count if self.itl_sketch is not None else self._itl_exact().size

    def itl_mean(self) -> float:
        """The mean ITL: the exactly rounded sum over the count (any order of arrival)."""
        if self.itl_sketch is not None:
            return self.itl_sketch.mean
        values = self._itl_exact()
        return float(exact_sums(values)[0]) / values.size if values.size else float("nan")

    def itl_quantiles(self, q) -> np.ndarray:
        """numpy's default (linear) ITL quantiles at ``q`` in [0, 1]: exact from the samples,
        or within the sketch's relative accuracy when the run kept a sketch."""
        q = np.asarray(q, dtype=np.float64)
        if self.itl_sketch is not None:
            return self.itl_sketch.quantiles(q)
        values = self._itl_exact()
        return np.quantile(values, q) if values.size else np.full(q.shape, np.nan)

    def itl_histogram(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lower edge, upper edge, count) of log-spaced ITL bins (the sketch's bins)."""
        sketch = self.itl_sketch
        if sketch is None:
            sketch = QuantileSketch()
            sketch.add(self._itl_exact())
        return sketch.bins()

    def totals(self) -> dict:
        """Exact totals over every step: the recorder's, or those of a full steps table."""
        if self.step_totals is not None:
            return self.step_totals
        steps = self.steps.reindex(columns=list(STEP_FIELDS), fill_value=0)
        return totals_of(steps.to_numpy(dtype=np.float64))

    # ------------------------------------------------------------------ metrics
    def position_rates(self) -> np.ndarray:
        """vLLM's per-position acceptance: P(first i+1 drafts accepted | drafted > i)."""
        acc_ge = self.accepted_hist[::-1].cumsum()[::-1]   # acc_ge[i] = #(accepted >= i)
        dr_ge = self.drafted_hist[::-1].cumsum()[::-1]
        k = int(np.flatnonzero(self.drafted_hist).max()) if self.drafted_hist.any() else 0
        with np.errstate(invalid="ignore", divide="ignore"):
            return acc_ge[1:k + 1] / dr_ge[1:k + 1]

    def acceptance_columns(self) -> dict[str, np.ndarray]:
        """``acceptance_frame``'s columns."""
        return acceptance_columns(self.accepted_hist, self.drafted_hist,
                                  self.position_rates())

    def acceptance_frame(self) -> pd.DataFrame:
        """Accepted-length and draft-length histograms with per-position rates."""
        import pandas as pd
        return pd.DataFrame(self.acceptance_columns())

    # ------------------------------------------------------------------ the tables
    def request_columns(self) -> RequestColumns:
        """The requests table as columns: the run's own while ``requests`` was never read,
        else the frame's (which a caller may have been given, or have changed)."""
        value = self.__dict__["_requests"]
        return value if isinstance(value, RequestColumns) else RequestColumns.of_frame(value)

    def unread_columns(self) -> tuple[RequestColumns | None, dict[str, np.ndarray] | None]:
        """The run's own columns of the requests and steps tables whose DataFrames were
        never read (None for one that was: its frame is what there is to write)."""
        req, steps = self.__dict__["_requests"], self.__dict__["_steps"]
        return (req if isinstance(req, RequestColumns) else None,
                steps if isinstance(steps, dict) else None)

    def summary(self) -> dict:
        """The headline metrics of the run as one flat dict (a copy of the one computed on
        the first call: the caller may change it)."""
        if self._summary is None:
            self._summary = self._compute_summary()
        return dict(self._summary)

    def _compute_summary(self) -> dict:
        req = self.request_columns()
        cols, finished = req.columns, req.finished()
        n_done = int(np.count_nonzero(finished))

        def done(name: str) -> np.ndarray:
            return np.asarray(cols[name])[finished]
        out: dict[str, Any] = {"policy": self.label,
                               "requests": len(req),
                               "finished": n_done,
                               "rejected": int(np.count_nonzero(req.rejected()))}
        for name in ("ttft", "tpot", "e2e", "queueing"):
            _percentiles(name, done(f"{name}_s").astype(float), out)
        self._itl_summary(out)
        # pandas' max and min (NaN skipped) of the finished requests' finish and every arrival
        span = float(_nan_skipped(done("finish_s"), np.max)
                     - _nan_skipped(np.asarray(cols["arrival_s"]), np.min)) \
            if n_done else float("nan")
        out["duration_s"] = span
        out["output_tokens_per_s"] = float(done("output_tokens").sum()) / span if span else 0.0
        out["requests_per_s"] = n_done / span if span else 0.0
        slo = self.scenario.slo
        good = np.ones(n_done, bool)
        if slo.ttft_s is not None:
            good &= done("ttft_s") <= slo.ttft_s
        if slo.tpot_s is not None:
            tpot = done("tpot_s")
            good &= ~(tpot > slo.tpot_s)  # single-token outputs have no TPOT: they pass
        out["slo_attainment"] = float(good.mean()) if n_done else float("nan")
        out["goodput_requests_per_s"] = float(good.sum()) / span if span else 0.0
        out.update(self._utilisation())
        out["preemptions"] = int(cols["preemptions"].sum())
        out.update(self._prefix_summary(req))
        out.update(backlog_summary(req))
        drafts = int(cols["num_drafts"].sum())
        draft_tokens = int(cols["num_draft_tokens"].sum())
        accepted = int(cols["num_accepted_tokens"].sum())
        out["num_drafts"] = drafts
        out["num_draft_tokens"] = draft_tokens
        out["num_accepted_tokens"] = accepted
        out["acceptance_rate"] = accepted / draft_tokens if draft_tokens else float("nan")
        out["mean_acceptance_length"] = 1.0 + accepted / drafts if drafts else float("nan")
        return out

    def _prefix_summary(self, req: RequestColumns) -> dict:
        """Prefix caching: vLLM's hit rate (prompt tokens found over tokens looked up, at
        every admission), the cached prompt tokens of the finished requests (their
        ``num_cached_tokens``: prefill never run) and that as a fraction of their prompts."""
        pc = self.info.get("prefix_cache") or {}
        queries = int(pc.get("queries_tokens", 0))
        finished = req.finished()
        cached = int(np.asarray(req.columns["cached_tokens"])[finished].sum()) \
            if "cached_tokens" in req.columns else 0
        prompts = int(np.asarray(req.columns["prompt_tokens"])[finished].sum())
        return {"prefix_cache_hit_rate": pc.get("hits_tokens", 0) / queries if queries
                else float("nan"),
                "prefix_cached_tokens": cached,
                "prefix_cached_fraction": cached / prompts if prompts else float("nan")}

    def _itl_summary(self, out: dict) -> None:
        out["mean_itl_s"] = self.itl_mean()
        if self.itl_sketch is None:
            values = self._itl_exact()
            est = np.percentile(values, PERCENTILES) if values.size else \
                np.full(len(PERCENTILES), np.nan)
        else:
            est = self.itl_sketch.quantiles(np.asarray(PERCENTILES) / 100.0)
        for p, v in zip(PERCENTILES, est.tolist()):
            out[f"p{p}_itl_s"] = float(v)
        out["itl_relative_error"] = 0.0 if self.itl_sketch is None else \
            self.itl_sketch.relative_accuracy

    def _utilisation(self) -> dict:
        """KV occupancy, MFU, MBU and draft overhead over the time the replicas were busy,
        from the exact totals over every step (whichever rows the steps table kept)."""
        t, info = self.totals(), self.info
        busy = float(t["duration_s"])
        if not busy > 0:
            return {"mean_kv_occupancy": 0.0, "mfu": 0.0, "mbu": 0.0,
                    "draft_overhead_fraction": 0.0}
        flops = (t["prefill_tokens"] + t["decode_tokens"]) * info["flops_per_token"] + \
            t["attn_pairs"] * info["attn_flops_per_pair"]
        hbm = t["steps"] * info["weight_bytes_per_step"] + \
            t["kv_read_tokens"] * info["kv_bytes_per_token"]
        return {"mean_kv_occupancy": float(t["duration_weighted_kv_occupancy"]) / busy,
                "mfu": float(flops / busy / info["peak_flops_per_s"]),
                "mbu": float(hbm / busy / info["peak_bandwidth_bytes_per_s"]),
                "draft_overhead_fraction": float(t["draft_s"]) / busy}

    def summary_frame(self) -> pd.DataFrame:
        """The summary as a one-row DataFrame."""
        import pandas as pd
        return pd.DataFrame([self.summary()])



def _requests_frame(self: Results) -> pd.DataFrame:
    value = self.__dict__["_requests"]
    if isinstance(value, RequestColumns):  # from_run's: the frame built on first read
        value = self.__dict__["_requests"] = value.frame()
    return value


def _steps_frame(self: Results) -> pd.DataFrame:
    value = self.__dict__["_steps"]
    if isinstance(value, dict):  # from_run's columns: the frame built on first read
        value = self.__dict__["_steps"] = steps_frame(value)
    return value


def _setter(key: str):
    def store(self: Results, value) -> None:
        self.__dict__[key] = value
    return store


# ``Results(requests=..., steps=...)`` takes DataFrames, or (``from_run``) the columns that
# they are built from when first read: a `specsim run` that writes Parquet and prints the
# summary reads none, and never imports pandas (results_columns.py)
Results.requests = property(_requests_frame, _setter("_requests"),  # type: ignore[assignment]
                            doc="The requests DataFrame, one row per request.")
Results.steps = property(_steps_frame, _setter("_steps"),  # type: ignore[assignment]
                         doc="The steps DataFrame, one row per kept engine step.")

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


def itl_info(itl_s: np.ndarray, sketch: QuantileSketch | None) -> dict:
    """What ``Results.info["itl"]`` says: how many samples and how their quantiles are known."""
    if sketch is None:
        return {"samples": int(itl_s.size), "kept": "exact", "relative_error": 0.0}
    return {"samples": int(sketch.count), "kept": "sketch", "relative_error":
            sketch.relative_accuracy, "sketch": sketch.describe()}


def _nan_skipped(values: np.ndarray, reduce) -> float:
    """``reduce`` (np.max, np.min) over the values that are not NaN, NaN if none: pandas'."""
    kept = values[~np.isnan(values)] if np.isnan(values).any() else values
    return float(reduce(kept)) if kept.size else float("nan")


def backlog_summary(req: pd.DataFrame | RequestColumns) -> dict:
    """``waiting_mid`` and ``waiting_last`` (requests arrived but not yet admitted at the
    middle and at the end of the arrival span), ``waiting_at_last_arrival`` (the latter as a
    fraction of the served requests) and ``saturated``."""
    cols = req if isinstance(req, RequestColumns) else RequestColumns.of_frame(req)
    served = ~cols.rejected()
    if not served.any():
        return {"waiting_at_last_arrival": float("nan"), "waiting_mid": 0,
                "waiting_last": 0, "saturated": False}
    arrival = np.asarray(cols.columns["arrival_s"], dtype=float)[served]
    admitted = np.asarray(cols.columns["first_scheduled_s"], dtype=float)[served]  # NaN: never
    first, last = float(arrival.min()), float(arrival.max())

    def waiting(fraction: float) -> int:
        t = first + fraction * (last - first)
        return int(np.count_nonzero((arrival <= t) & ~(admitted <= t)))
    w_mid, w_3q, w_last = waiting(0.5), waiting(0.75), waiting(1.0)
    n = int(np.count_nonzero(served))
    saturated = bool(n >= SATURATED_MIN_REQUESTS and last > first
                     and w_last >= max(SATURATED_MIN_WAITING, SATURATED_MIN_FRACTION * n)
                     and w_last >= SATURATED_GROWTH * w_mid and w_3q >= w_mid)
    return {"waiting_at_last_arrival": w_last / n, "waiting_mid": w_mid,
            "waiting_last": w_last, "saturated": saturated}
