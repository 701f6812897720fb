"""``specsim compare-measured RESULT.json --scenario S.yaml``: replay a measured
``vllm bench serve --save-result`` run through the scenario and print predicted against
measured, metric by metric, with the relative error.

The replayed workload is the result's own: its requests in the order vLLM sent them, each
with its measured prompt length (``input_lens``) and output length (``output_lens``),
arriving at the measured ``start_times`` where the result has them, else as ``vllm bench
serve`` sends them (``request_rate`` requests/s with gamma gaps of shape ``burstiness``,
Poisson at 1; every request at once when the rate is ``inf``), drawn from the scenario's
seed; under the result's ``max_concurrency`` (vLLM's client-side cap on requests in flight)
the client is closed loop, as vLLM's is (simulator/engine/closed_loop.py).  Requests that
failed in the measurement (an output length of 0, or an error) are left out and counted.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path
from typing import Any

from simulator.inputs import json_text
from simulator.inputs.errors import SpecsimError
from simulator.sim2real.bench_acceptance import (
    SPEC_METRICS,
    measured_acceptance,
    predicted_spec_metrics,
)
from simulator.sim2real.bench_result import FIELD, result_workload

MAX_RESULT_BYTES = 512 * 2 ** 20  # a result file larger than this is refused before reading
COMPARED = ("duration", "completed", "request_throughput", "output_throughput",
            "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
            "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms",
            "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    p.add_argument("result", metavar="RESULT.json",
                   help="a file written by 'vllm bench serve --save-result'")
    p.add_argument("--scenario", required=True,
                   help="scenario YAML of the deployment that was measured (its workload is "
                        "replaced by the result's)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a scenario field, e.g. --set seed=3")
    p.add_argument("--acceptance-from-result", action="store_true",
                   help="use the result's measured acceptance (its per-position rates, else "
                        "its mean acceptance length) as the acceptance model")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")


def _read_result(path_text: str) -> dict:
    path = Path(path_text).expanduser()
    try:
        if not path.is_file():
            raise SpecsimError(f"{path_text!r} is not a file", field=FIELD,
                               fix="give the JSON file 'vllm bench serve --save-result' wrote")
        if path.stat().st_size > MAX_RESULT_BYTES:
            raise SpecsimError(f"{path_text!r} is larger than {MAX_RESULT_BYTES >> 20} MiB",
                               field=FIELD, fix="give a vllm bench serve result file")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecsimError(f"cannot read {path_text!r}: {exc.strerror or exc}",
                           field=FIELD) from None
    except UnicodeDecodeError:
        raise SpecsimError(f"{path_text!r} is not UTF-8 text", field=FIELD,
                           fix="give the JSON file 'vllm bench serve --save-result' wrote")
    try:
        data = json_text.loads(text, source=path_text, field=FIELD,
                               fix="give the JSON file 'vllm bench serve --save-result' wrote")
    except SpecsimError:
        raise
    except ValueError as exc:
        raise SpecsimError(f"{path_text!r} is not JSON ({exc})", field=FIELD,
                           fix="give the JSON file 'vllm bench serve --save-result' wrote") \
            from None
    if not isinstance(data, dict):
        raise SpecsimError("expected a JSON object", field=FIELD,
                           fix="give the JSON file 'vllm bench serve --save-result' wrote")
    return data


def comparison_rows(measured: dict, predicted: dict[str, Any]) -> list[dict]:
    """One row per metric both sides have: measured, predicted, relative error."""
    rows = []
    for key in COMPARED + SPEC_METRICS:
        m, p = measured.get(key), predicted.get(key)
        if isinstance(m, bool) or not isinstance(m, (int, float)) or p is None:
            continue
        m, p = float(m), float(p)
        err = (p - m) / m if m and math.isfinite(m) and math.isfinite(p) else float("nan")
        rows.append({"metric": key, "measured": m, "predicted": p, "error": err})
    return rows


def main(args: argparse.Namespace) -> int:
    import pandas as pd

    from simulator.cli.output import render, wrap_text
    from simulator.scenario import load_scenario
    from simulator.simulate import seed_streams, simulate
    from simulator.vllm_metrics import bench_serve_metrics

    data = _read_result(args.result)
    scenario = load_scenario(args.scenario, args.overrides)
    if args.acceptance_from_result:
        scenario = dataclasses.replace(scenario, acceptance=measured_acceptance(
            data, int(scenario.policy.params.get("num_speculative_tokens", 1) or 1)))
    workload, dropped = result_workload(data, seed_streams(scenario.seed)[0])
    results = simulate(scenario, workload=workload)
    rows = comparison_rows(data, {**bench_serve_metrics(results),
                                  **predicted_spec_metrics(results.summary())})
    if not rows:
        raise SpecsimError("the result holds none of the compared metrics", field=FIELD,
                           fix="compared: " + ", ".join(COMPARED))
    frame = pd.DataFrame(rows)
    if args.format != "table":
        print(render(frame, args.format))
        return 0
    print(wrap_text(f"{scenario.name}: {scenario.target} on {scenario.hardware} "
                    f"x{scenario.parallelism.devices}, policy {results.label}; replayed "
                    f"{len(workload):,} requests of {args.result}"
                    + (f" ({dropped:,} failed in the measurement, left out)"
                       if dropped else "")))
    if workload.max_concurrency is not None:
        print(wrap_text(f"closed loop: at most {workload.max_concurrency} requests in flight "
                        f"(the result's max_concurrency), each sent when its arrival came and "
                        f"a slot was free"))
    shown = frame.copy()
    shown["error"] = [f"{e:+.1%}" if e == e else "n/a" for e in shown["error"]]
    print(render(shown, "table"))
    return 0
