"""``sigma_note`` (simulator/uncertainty/coverage.py) counts the runs of a coverage by their
``run_key`` (resolved path and name), as ``coverage`` tells them apart: two runs that share
a folder name in different folders are two, one folder by two spellings is one."""
import dataclasses

import numpy as np

from simulator.sim2real.measured_run import MeasuredRun
from simulator.uncertainty.coverage import run_key, sigma_note
from simulator.uncertainty.spec import COST_SIGMA, COST_SOURCE
from workloads.workload import Workload


def _run(folder) -> MeasuredRun:
    """A one-request run read from ``folder``, named as the readers name it: its folder's
    name (simulator/sim2real/otel.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    wl = Workload("w", np.zeros(1), np.full(1, 8), np.full(1, 4))
    return MeasuredRun(name=folder.name, model="llama-2-7b", hardware=None,
                       tensor_parallel=1, batching={}, engine="vllm-v0.9", workload=wl,
                       source=str(folder))


def test_two_runs_sharing_a_folder_name_count_as_two(tmp_path):
    a, b = _run(tmp_path / "x" / "run-1"), _run(tmp_path / "y" / "run-1")
    assert a.name == b.name and run_key(a) != run_key(b)
    note = sigma_note([a, b])
    assert note == (f"cost sigma {COST_SIGMA:.4f} on all 2 run(s), calibrated on a set "
                    "disjoint from them: " + COST_SOURCE)


def test_one_folder_by_two_spellings_counts_once(tmp_path):
    a = _run(tmp_path / "x" / "run-1")
    again = dataclasses.replace(a, source=str(tmp_path / "x" / ".." / "x" / "run-1"))
    assert run_key(a) == run_key(again)
    assert "on all 1 run(s)" in sigma_note([a, again])
    assert "on all 3 run(s)" in sigma_note([a, _run(tmp_path / "y" / "run-1"),
                                           _run(tmp_path / "y" / "run-2")])
