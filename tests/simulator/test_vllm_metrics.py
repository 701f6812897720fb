"""vLLM ``bench serve`` result keys (vllm/benchmarks/serve.py ``calculate_metrics``: TPOT
per request over its output tokens after the first, ITL pooled over chunks, np.percentile,
np.median, population np.std, throughputs over the benchmark's duration) and
``specsim compare-measured``."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from simulator.cli import main as cli_main
from simulator.cli.compare_measured import COMPARED, result_workload
from simulator.results_columns import RequestColumns
from simulator.scenario import load_scenario, parse_compare
from simulator.simulate import simulate
from simulator.vllm_metrics import bench_serve_metrics
from workloads.workload import Workload

DEFAULT = str(Path(__file__).resolve().parents[2] / "workloads" / "scenarios" / "default.yaml")


@pytest.fixture(scope="module")
def run():
    sc = load_scenario(None, ["workload.max_requests=40"])
    return simulate(sc.with_policy(parse_compare("chain")[0]))


def test_keys_follow_vllms_definitions(run):
    m = bench_serve_metrics(run)
    done = run.requests[run.requests["status"] == "finished"]
    s = run.summary()
    assert m["completed"] == len(done) == s["finished"] and m["failed"] == 0
    assert m["duration"] == s["duration_s"]
    assert m["request_throughput"] == pytest.approx(len(done) / s["duration_s"], rel=1e-12)
    out, inp = done["output_tokens"].sum(), done["prompt_tokens"].sum()
    assert m["total_output_tokens"] == out and m["total_input_tokens"] == inp
    assert m["output_throughput"] == pytest.approx(out / s["duration_s"], rel=1e-12)
    assert m["total_token_throughput"] == pytest.approx((inp + out) / s["duration_s"], rel=1e-12)
    # TTFT: specsim's own summary, in ms; the p99 by linear interpolation (np.percentile)
    assert m["mean_ttft_ms"] == pytest.approx(s["mean_ttft_s"] * 1e3, rel=1e-12)
    assert m["p99_ttft_ms"] == pytest.approx(s["p99_ttft_s"] * 1e3, rel=1e-12)
    assert m["median_ttft_ms"] == pytest.approx(s["p50_ttft_s"] * 1e3, rel=1e-12)
    # TPOT from its definition, on one request picked by hand
    r = done.iloc[3]
    tpot = (r["e2e_s"] - r["ttft_s"]) / (r["output_tokens"] - 1)
    assert tpot == pytest.approx(r["tpot_s"], rel=1e-9)
    itl = np.asarray(run.itl_s) * 1e3
    assert m["mean_itl_ms"] == pytest.approx(itl.mean(), rel=1e-12)
    assert m["std_itl_ms"] == pytest.approx(np.sqrt(np.mean((itl - itl.mean()) ** 2)), rel=1e-9)
    assert m["p99_e2el_ms"] == pytest.approx(np.percentile(done["e2e_s"] * 1e3, 99), rel=1e-12)


def test_a_sketched_itl_reports_its_quantiles_and_no_std():
    base = {"request_id": [0], "status": ["finished"], "prompt_tokens": [10],
            "output_tokens": [3], "ttft_s": [0.1], "e2e_s": [0.3]}
    q = {0.5: 0.02, 0.99: 0.05}
    frame = pd.DataFrame(base)
    fake = SimpleNamespace(requests=frame, itl_sketch=object(),
                           request_columns=lambda: RequestColumns.of_frame(frame),
                           itl_quantiles=lambda qs: np.array([q[x] for x in qs]),
                           itl_mean=lambda: 0.025, summary=lambda: {"duration_s": 1.0})
    m = bench_serve_metrics(fake)
    assert m["median_itl_ms"] == pytest.approx(20.0) and m["p99_itl_ms"] == pytest.approx(50.0)
    assert m["mean_itl_ms"] == pytest.approx(25.0) and m["std_itl_ms"] is None
    assert m["mean_tpot_ms"] == pytest.approx(100.0)  # (0.3 - 0.1) / (3 - 1)


def test_run_json_carries_vllm_keys_next_to_specsims(tmp_path, capsys):
    assert cli_main(["run", "--no-progress", "--set", "workload.max_requests=10", "--out",
                     str(tmp_path / "o"), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"p99_tpot_ms", "median_ttft_ms", "request_throughput", "p99_tpot_s"} <= set(rows[0])
    saved = pd.read_csv(tmp_path / "o" / "summary.csv")
    assert "mean_itl_ms" in saved.columns


def _write(path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_replaying_a_result_reproduces_its_own_numbers(tmp_path, capsys):
    """A 'measurement' that is this model's own prediction for the same workload (every
    request at once: rate inf, so no arrival draws) is replayed to zero error: the replay
    takes the result's lengths, order and arrivals, and nothing else."""
    scenario = load_scenario(None, [])
    lens_in, lens_out = [120, 300, 80, 210, 95], [40, 12, 64, 30, 7]
    wl = Workload(name="w", arrival_s=np.zeros(5), prompt_tokens=np.array(lens_in),
                  output_tokens=np.array(lens_out))
    measured = bench_serve_metrics(simulate(scenario, workload=wl))
    result = _write(tmp_path / "r.json", {"request_rate": "inf", "burstiness": 1.0,
                                          "input_lens": lens_in, "output_lens": lens_out,
                                          **measured})
    assert cli_main(["compare-measured", result, "--scenario", DEFAULT, "--format",
                     "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["metric"] for r in rows} == set(COMPARED)
    assert all(r["error"] == 0.0 for r in rows), rows


def test_a_closed_loop_result_replays_with_zero_error(tmp_path, capsys):
    """``--request-rate inf --max-concurrency 3`` (the commonest bench shape): a result
    written from this model's own closed-loop run of the same requests is replayed closed
    loop, to zero error on every metric (open loop, all 12 requests at once, it was not)."""
    scenario = load_scenario(None, [])
    rng = np.random.default_rng(2)
    lens_in, lens_out = rng.integers(50, 400, 12).tolist(), rng.integers(5, 60, 12).tolist()
    wl = Workload(name="w", arrival_s=np.zeros(12), prompt_tokens=np.array(lens_in),
                  output_tokens=np.array(lens_out), max_concurrency=3)
    measured = bench_serve_metrics(simulate(scenario, workload=wl))
    result = _write(tmp_path / "r.json", {"request_rate": "inf", "max_concurrency": 3,
                                          "input_lens": lens_in, "output_lens": lens_out,
                                          **measured})
    assert cli_main(["compare-measured", result, "--scenario", DEFAULT, "--format",
                     "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(r["error"] == 0.0 for r in rows), rows
    open_loop = bench_serve_metrics(simulate(scenario, workload=dataclasses.replace(
        wl, max_concurrency=None)))
    assert open_loop["mean_ttft_ms"] > 1.5 * measured["mean_ttft_ms"]


def test_measured_start_times_are_the_arrivals():
    data = {"request_rate": 1.0, "input_lens": [10, 20, 30], "output_lens": [5, 5, 5],
            "start_times": [1000.5, 1000.0, 1003.0]}
    wl, _ = result_workload(data, np.random.default_rng(0))
    assert wl.arrival_s.tolist() == [0.0, 0.5, 3.0]
    assert wl.prompt_tokens.tolist() == [20, 10, 30]  # sorted by the time each was sent


def test_result_arrivals_follow_vllms_rate_and_burstiness():
    data = {"request_rate": 4.0, "burstiness": 0.25, "input_lens": [10] * 4001,
            "output_lens": [5] * 4001}
    wl, dropped = result_workload(data, np.random.default_rng(0))
    gaps = np.diff(wl.arrival_s)
    # vLLM: gamma gaps of shape burstiness and mean 1/rate (CV 1/sqrt(burstiness) = 2)
    assert dropped == 0 and gaps.mean() == pytest.approx(0.25, rel=0.1)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.15)


@pytest.mark.parametrize("data, field", [
    ({"output_lens": [1]}, "RESULT.input_lens"),
    ({"input_lens": [1, 2], "output_lens": [3]}, "RESULT.output_lens"),
    ({"input_lens": [1], "output_lens": [2], "request_rate": -1}, "RESULT.request_rate"),
    ({"input_lens": [1], "output_lens": [2], "request_rate": "fast"}, "RESULT.request_rate"),
    ({"input_lens": [1], "output_lens": [2], "burstiness": 0}, "RESULT.burstiness"),
    ({"input_lens": [1.5], "output_lens": [2]}, "RESULT.input_lens"),
    ({"input_lens": [1], "output_lens": [0]}, "RESULT.output_lens"),
    ({"input_lens": [1], "output_lens": [2], "max_concurrency": 0}, "RESULT.max_concurrency"),
    ({"input_lens": [1], "output_lens": [2], "start_times": [0, 1]}, "RESULT.start_times"),
    ([1, 2], "RESULT"),
])
def test_bad_results_are_one_line_naming_the_field(tmp_path, capsys, data, field):
    path = _write(tmp_path / "bad.json", data)
    rc = cli_main(["compare-measured", path, "--scenario", DEFAULT])
    err = capsys.readouterr().err
    assert rc == 2 and f"{field}:" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_file_that_is_not_json_is_refused(tmp_path, capsys):
    path = tmp_path / "x.json"
    path.write_text("{not json")
    assert cli_main(["compare-measured", str(path), "--scenario", DEFAULT]) == 2
    assert "not JSON" in capsys.readouterr().err
