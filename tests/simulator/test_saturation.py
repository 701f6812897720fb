"""``saturated``: a waiting queue that grows through the trace, told apart from one burst.

A D/D/1 queue with a constant-time step: one request at a time (max_num_seqs 1), every step
takes 10 ms and each request needs 10 steps (a one-chunk prefill that emits the first token,
then 9 decodes), so the service time is exactly 0.1 s.  Arrivals every 0.05 s outpace it by
2x: at time t, arrived(t) = floor(t/0.05) + 1 and admitted(t) = floor(t/0.1) + 1 (the one in
service included), so the queue is arrived - admitted, half the trace at the last arrival,
and it doubles from mid-trace to the end.
"""
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from simulator.results import SATURATED_GROWTH, SATURATED_MIN_REQUESTS, backlog_summary
from simulator.simulate import simulate
from tests.helpers import ConstantCost, scenario, workload

N = 200
SERVICE_S = 0.1


def run(gap_s: float, n: int = N):
    sc = scenario("none", batching={"max_num_seqs": 1})
    wl = workload(np.arange(n) * gap_s, [16] * n, [10] * n)
    return simulate(sc, workload=wl, target_cost=ConstantCost(0.01))


def waiting_closed_form(t: float, gap_s: float, n: int = N) -> int:
    arrived = min(n, math.floor(t / gap_s + 1e-9) + 1)
    admitted = min(arrived, math.floor(t / SERVICE_S + 1e-9) + 1)
    return arrived - admitted


def test_service_time_is_what_the_closed_form_assumes():
    res = run(1.0)  # far apart: every request is served alone
    assert np.allclose(res.requests["e2e_s"].to_numpy(), SERVICE_S)


def test_arrivals_twice_the_service_rate_are_saturated():
    gap = SERVICE_S / 2
    s = run(gap).summary()
    last = (N - 1) * gap
    assert abs(s["waiting_last"] - waiting_closed_form(last, gap)) <= 1
    assert abs(s["waiting_mid"] - waiting_closed_form(last / 2, gap)) <= 1
    assert s["waiting_at_last_arrival"] == pytest.approx(0.5, abs=0.01)
    assert s["waiting_last"] >= SATURATED_GROWTH * s["waiting_mid"]
    assert s["saturated"] is True


def test_a_moderate_overload_is_saturated_too():
    """1.2x the service rate: the queue grows by 1/6 request per arrival, linearly."""
    gap, n = SERVICE_S / 1.2, 600
    s = run(gap, n).summary()
    last = (n - 1) * gap
    assert abs(s["waiting_last"] - waiting_closed_form(last, gap, n)) <= 1
    assert s["waiting_last"] == pytest.approx(n / 6, abs=2)
    assert s["saturated"] is True


def test_arrivals_below_the_service_rate_are_not_saturated():
    s = run(SERVICE_S * 1.25).summary()
    assert s["waiting_last"] == 0
    assert s["saturated"] is False


def test_a_single_burst_is_not_saturation():
    s = run(0.0).summary()  # every request at t = 0: a queue, but not a growing one
    assert s["waiting_at_last_arrival"] == pytest.approx((N - 1) / N)
    assert s["saturated"] is False


def test_too_few_requests_tell_no_trend():
    s = run(SERVICE_S / 2, n=SATURATED_MIN_REQUESTS - 1).summary()
    assert s["waiting_last"] >= SATURATED_GROWTH * s["waiting_mid"]  # the queue grows ...
    assert s["saturated"] is False                           # ... but 19 requests are no trend


def test_backlog_summary_counts_waiting_only_and_ignores_rejected():
    req = pd.DataFrame({"status": ["finished", "finished", "rejected", "running"],
                        "arrival_s": [0.0, 1.0, 1.5, 2.0],
                        "first_scheduled_s": [0.0, np.nan, np.nan, 2.0]})
    b = backlog_summary(req)
    assert b["waiting_mid"] == 1 and b["waiting_last"] == 1  # request 1, never admitted
    assert b["waiting_at_last_arrival"] == pytest.approx(1 / 3)


def test_run_table_marks_a_saturated_policy_and_explains_it(tmp_path):
    out = subprocess.run([sys.executable, "-m", "simulator.cli", "run", "--no-progress",
                          "--compare", "none", "--set", "workload.rate_per_s=20"],
                         cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert "none (saturated)" in out.stdout
    assert "mostly queueing" in out.stdout and "specsim plan" in out.stdout
    for n in (5, 10, 200):  # the built-in rate: short or whole traces are not saturated
        calm = subprocess.run([sys.executable, "-m", "simulator.cli", "run", "--no-progress",
                               "--compare", "none", "--out", f"calm{n}", "--set",
                               f"workload.max_requests={n}"], cwd=tmp_path,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=240)
        assert calm.returncode == 0 and "saturated" not in calm.stdout, (n, calm.stdout)
