"""``specsim compare-measured RESULT.json --scenario S.yaml``: replay a measured
``vllm bench serve --save-result`` run through the scenario and print predicted against
measured, metric by metric, with the relative error.

The replayed workload is the result's own: its requests in the order vLLM sent them, each
with its measured prompt length (``input_lens``) and output length (``output_lens``),
arriving as ``vllm bench serve`` sends them (``request_rate`` requests/s with gamma gaps of
shape ``burstiness``, Poisson at 1; every request at once when the rate is ``inf``), drawn
from the scenario's seed.  Requests that failed in the measurement (an output length of 0,
or an error) are left out and counted.  ``max_concurrency`` (vLLM's client-side cap on
requests in flight) is not modelled: specsim's arrivals are open loop, and the output says
so when the result used one.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from simulator.inputs import json_text
from simulator.inputs.errors import SpecsimError

MAX_REQUESTS = 1_000_000         # requests a result may hold (README "Limits")
MAX_RESULT_BYTES = 512 * 2 ** 20  # a result file larger than this is refused before reading
COMPARED = ("duration", "completed", "request_throughput", "output_throughput",
            "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
            "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms",
            "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")
FIELD = "RESULT"


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    p.add_argument("result", metavar="RESULT.json",
                   help="a file written by 'vllm bench serve --save-result'")
    p.add_argument("--scenario", required=True,
                   help="scenario YAML of the deployment that was measured (its workload is "
                        "replaced by the result's)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a scenario field, e.g. --set seed=3")
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


def result_workload(data: dict, rng: np.random.Generator):
    """The measured run's requests as a specsim Workload, and how many were left out."""
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
    if math.isinf(rate):
        arrivals = np.zeros(n)
    else:
        arrivals = GammaArrivals(rate, 1.0 / math.sqrt(burst)).sample(n, rng)
    wl = Workload(name="vllm bench serve result", arrival_s=arrivals[ok],
                  prompt_tokens=prompts[ok], output_tokens=outputs[ok])
    return wl, int((~ok).sum())


def comparison_rows(measured: dict, predicted: dict[str, Any]) -> list[dict]:
    """One row per metric both sides have: measured, predicted, relative error."""
    rows = []
    for key in COMPARED:
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
    workload, dropped = result_workload(data, seed_streams(scenario.seed)[0])
    results = simulate(scenario, workload=workload)
    rows = comparison_rows(data, bench_serve_metrics(results))
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
    if data.get("max_concurrency"):
        print(wrap_text(f"note: the measurement capped requests in flight at "
                        f"{data['max_concurrency']} (max_concurrency); specsim replays "
                        f"open-loop arrivals, so queueing under that cap is not reproduced"))
    shown = frame.copy()
    shown["error"] = [f"{e:+.1%}" if e == e else "n/a" for e in shown["error"]]
    print(render(shown, "table"))
    return 0
