"""``saturated``: a backlog that grows through the trace, told apart from a single burst.

A D/D/1 queue with a constant-time step: one request at a time (max_num_seqs 1), every step
takes 10 ms and each request needs 10 steps (a one-chunk prefill that emits the first token,
then 9 decodes), so the service time is exactly 0.1 s.  Arrivals every 0.05 s outpace it by
2x: at time t the backlog is arrived(t) - served(t) = t/0.05 - t/0.1, so at the last arrival
half the trace is in the system and the backlog doubled since mid-trace.
"""
import numpy as np
import pytest

from engine_helpers import ConstantCost, scenario, workload
from simulator.results import SATURATED_GROWTH, SATURATED_IN_FLIGHT, backlog_summary
from simulator.simulate import simulate

N = 200
SERVICE_S = 0.1


def run(gap_s: float):
    sc = scenario("none", batching={"max_num_seqs": 1})
    wl = workload(np.arange(N) * gap_s, [16] * N, [10] * N)
    return simulate(sc, workload=wl, target_cost=ConstantCost(0.01))


def test_service_time_is_what_the_closed_form_assumes():
    res = run(1.0)  # far apart: every request is served alone
    e2e = res.requests["e2e_s"].to_numpy()
    assert np.allclose(e2e, SERVICE_S)


def test_arrivals_twice_the_service_rate_are_saturated():
    s = run(SERVICE_S / 2).summary()
    last = (N - 1) * SERVICE_S / 2
    expected_last = N - int(np.floor(last / SERVICE_S + 1e-9))  # arrived all, served t/0.1
    assert abs(s["backlog_last"] - expected_last) <= 1
    assert s["in_flight_at_last_arrival"] == pytest.approx(0.5, abs=0.01)
    assert s["backlog_last"] >= SATURATED_GROWTH * s["backlog_mid"] * 0.99
    assert s["saturated"] is True


def test_arrivals_below_the_service_rate_are_not_saturated():
    s = run(SERVICE_S * 1.25).summary()
    assert s["backlog_last"] <= 1
    assert s["saturated"] is False


def test_a_single_burst_is_not_saturation():
    s = run(0.0).summary()  # every request at t = 0: a backlog, but not a growing one
    assert s["in_flight_at_last_arrival"] == 1.0 > SATURATED_IN_FLIGHT
    assert s["saturated"] is False


def test_backlog_summary_counts_unfinished_and_ignores_rejected():
    import pandas as pd
    req = pd.DataFrame({"status": ["finished", "finished", "rejected", "running"],
                        "arrival_s": [0.0, 1.0, 1.5, 2.0],
                        "finish_s": [0.5, np.nan, np.nan, np.nan]})
    b = backlog_summary(req)
    assert b["backlog_mid"] == 1 and b["backlog_last"] == 2  # t=1: request 1; t=2: 1 and 3
    assert b["in_flight_at_last_arrival"] == pytest.approx(2 / 3)


def test_run_table_marks_a_saturated_policy_and_explains_it(tmp_path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "simulator.cli", "run", "--no-progress",
                          "--compare", "none", "--set", "workload.rate_per_s=20"],
                         cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert "none (saturated)" in out.stdout
    assert "mostly queueing" in out.stdout and "specsim plan" in out.stdout
    calm = subprocess.run([sys.executable, "-m", "simulator.cli", "run", "--no-progress",
                           "--compare", "none", "--out", "calm"], cwd=tmp_path,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    assert calm.returncode == 0 and "saturated" not in calm.stdout
