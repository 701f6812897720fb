"""Replay measured runs through the simulator and set predicted beside measured.

Each run becomes a scenario: its model (a catalog name, or the Hugging Face id a catalog
file comes from), the ``--profile`` hardware unless the run names its own, its tensor
parallelism and batching knobs, no speculation, and its own requests (arrivals, lengths and
declared shared prefix).  A run measured at the server (the engine's spans) is compared
with the simulated engine interval; one measured at a client (a load generator) with that
interval plus the engine's frontend (simulator/engine/frontend.py: HTTP, tokenising, and
the SSE event out), so like is compared with like.  The errors are signed,
``100 * (predicted / measured - 1)``; the headline is the median over runs of the absolute
error of each run's mean TTFT, TPOT and E2E, as the sim-to-real studies of serving
simulators report it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from simulator.engine.frontend import frontend_for
from simulator.inputs.errors import SpecsimError
from simulator.sim2real.measured_run import METRICS, STATS, MeasuredRun, latency_metrics

HEADLINE = ("ttft_mean_ms", "tpot_mean_ms", "e2e_mean_ms")


def run_scenario(run: MeasuredRun, profile: str | None):
    """The scenario that replays ``run`` (its workload is passed to ``simulate`` apart)."""
    from simulator.scenario import scenario_from_dict
    from simulator.vllm_config import resolve_model

    hardware = run.hardware or profile
    if hardware is None:
        raise SpecsimError(f"run {run.name!r} does not say its GPU", field="--profile",
                           fix="give the hardware profile it ran on, e.g. --profile h100-sxm")
    target, _ = resolve_model(run.model, method=None, base_dir=".", source=run.source,
                              field="model")
    return scenario_from_dict({
        "name": run.name, "hardware": hardware, "target": target,
        "parallelism": {"tensor_parallel": run.tensor_parallel},
        "policy": {"name": "none"}, "batching": dict(run.batching),
        **({"execution": {"async_scheduling": True}} if run.async_scheduling else {}),
        "workload": {"trace": "default"}}, source=run.source)


def predict(run: MeasuredRun, profile: str | None,
            cost_factor: float = 1.0) -> tuple[dict[str, float], bool]:
    """Predicted statistics of ``run`` and whether the simulator saturated on it
    (``cost_factor``: every step that many times longer, simulator/uncertainty)."""
    import dataclasses

    from simulator.simulate import simulate

    scenario = dataclasses.replace(run_scenario(run, profile), cost_factor=cost_factor)
    res = simulate(scenario, workload=run.workload)
    req = res.requests
    if (req["status"] != "finished").any():
        raise SpecsimError(f"run {run.name!r}: {int((req['status'] != 'finished').sum())} "
                           "requests were not served in the simulation", field="model",
                           fix="check max_model_len and the memory of the profile")
    wl = run.workload
    ttft, e2e = req["ttft_s"].to_numpy(), req["e2e_s"].to_numpy()
    if run.measured_at == "client":
        ttft, e2e = frontend_for(run.engine).client_view(ttft, e2e, wl.prompt_tokens,
                                                         wl.arrival_s)
    metrics = latency_metrics(wl.arrival_s, wl.output_tokens, ttft, e2e)
    summary = res.summary()
    for stat in ("mean", "p50", "p90", "p99"):  # every token gap, from the recorder
        metrics[f"itl_{stat}_ms"] = float(summary[f"{stat}_itl_s"]) * 1e3
    return metrics, bool(summary.get("saturated", False))


def compare_run(run: MeasuredRun, profile: str | None) -> pd.DataFrame:
    """One row per metric the run measured: measured, predicted, signed error (%)."""
    measured = run.measured()
    predicted, saturated = predict(run, profile)
    rows = []
    for key, value in measured.items():
        if key not in predicted or not np.isfinite(value):
            continue
        err = 100.0 * (predicted[key] / value - 1.0) if value else float("nan")
        rows.append({"run": run.name, "metric": key, "measured": value,
                     "predicted": predicted[key], "error_%": err,
                     "saturated": saturated})
    return pd.DataFrame(rows)


def compare_runs(runs: Sequence[MeasuredRun], profile: str | None) -> pd.DataFrame:
    return pd.concat([compare_run(r, profile) for r in runs], ignore_index=True)


def median_ape(table: pd.DataFrame) -> dict[str, float]:
    """Median over runs of |error| of each run's mean TTFT, TPOT and E2E (percent)."""
    out = {}
    for key in HEADLINE:
        errs = table.loc[table["metric"] == key, "error_%"].abs()
        out[key.split("_")[0]] = float(errs.median()) if len(errs) else float("nan")
    return out


def headline(table: pd.DataFrame, runs: int | None = None) -> str:
    """The last line: median APE over the runs; ``runs`` counts them where two may share a
    name (default: the table's distinct run names)."""
    m = median_ape(table)
    runs = table["run"].nunique() if runs is None else runs
    return (f"median APE: TTFT {m['ttft']:.1f}% TPOT {m['tpot']:.1f}% E2E {m['e2e']:.1f}% "
            f"over {runs} runs")


__all__ = ["METRICS", "STATS", "compare_runs", "headline", "median_ape", "run_scenario"]
