"""Executors: retry once then report, never drop; the same sweep on serial, local pool and Ray."""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pandas as pd
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.planning.executors import (
    Failure,
    LocalExecutor,
    SerialExecutor,
    make_executor,
    run_items,
)
from simulator.planning.sweep import SweepSpec, expand_grid, run_sweep


def flaky(marker_dir: str, item: int) -> int:
    """Fail the first attempt of every odd item (a marker file remembers across processes)."""
    marker = Path(marker_dir) / f"{item}"
    if item % 2 and not marker.exists():
        marker.touch()
        raise RuntimeError(f"transient failure of {item}")
    return item * item


def always_fails_on_three(item: int) -> int:
    if item == 3:
        raise ValueError("three is bad")
    return item + 100


def dies_once(marker_dir: str, item: int) -> int:
    """Kill the worker process the first time item 2 runs (a crashed worker, not an error)."""
    marker = Path(marker_dir) / "died"
    if item == 2 and not marker.exists():
        marker.touch()
        os._exit(1)
    return -item


@pytest.fixture(scope="module")
def pool():
    """One local pool for the module: starting spawn workers is the slow part."""
    with LocalExecutor(2) as ex:
        yield ex


@pytest.mark.parametrize("kind", ["serial", "local"])
def test_a_transient_failure_is_retried_once_and_succeeds(tmp_path, kind, request):
    seen = []
    ex = SerialExecutor() if kind == "serial" else request.getfixturevalue("pool")
    out = run_items(functools.partial(flaky, str(tmp_path)), list(range(7)), ex,
                    chunk_size=2, on_result=lambda i, v: seen.append(i))
    assert out == [i * i for i in range(7)]
    assert sorted(seen) == list(range(7))  # every item settled exactly once


def test_a_persistent_failure_is_reported_not_dropped():
    ticks = []
    with SerialExecutor() as ex:
        out = run_items(always_fails_on_three, list(range(6)), ex,
                        progress=lambda done, total: ticks.append((done, total)))
    assert out[:3] == [100, 101, 102] and out[4:] == [104, 105]
    assert isinstance(out[3], Failure) and "three is bad" in out[3].error
    assert "ValueError" in out[3].error
    assert ticks == [(i, 6) for i in range(1, 7)]  # every item settles once, failed or not


def test_a_dead_worker_breaks_the_pool_and_its_items_are_retried(tmp_path, pool):
    out = run_items(functools.partial(dies_once, str(tmp_path)), list(range(5)), pool,
                    chunk_size=1)
    assert out == [0, -1, -2, -3, -4]


def test_executor_choices_are_checked(monkeypatch):
    with pytest.raises(SpecsimError, match="unknown executor"):
        make_executor("gpu-farm")
    with pytest.raises(SpecsimError, match="--executor ray"):
        make_executor("local", address="ray://head:10001")
    with pytest.raises(SpecsimError, match=">= 1"):
        make_executor("local", workers=0)
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(SpecsimError, match=r"pip install 'specsim\[ray\]'"):
        make_executor("ray")


def _grid():
    return SweepSpec.analytic(expand_grid({"batch": [1, 16, 64], "context": [128, 4096],
                                           "gamma": [0, 2, 5]}), fixed={"alpha": 0.7})


def test_the_same_grid_gives_the_same_frame_serially_and_on_the_local_pool(pool):
    spec = _grid()
    serial = run_sweep(spec, executor="serial")
    local = run_sweep(spec, executor=pool, chunk_size=3)
    pd.testing.assert_frame_equal(serial, local)
    assert serial["error"].isna().all() and len(serial) == 18


def test_the_same_grid_gives_the_same_frame_on_ray():
    ray = pytest.importorskip("ray")
    spec = _grid()
    serial = run_sweep(spec, executor="serial")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with make_executor("ray") as ex:
            on_ray = run_sweep(spec, executor=ex, chunk_size=4)
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(serial, on_ray)


def sleeps(item: int) -> int:
    import time
    time.sleep(item)
    return item


def test_abort_stops_the_pools_running_workers_and_leaves_older_children_alone(tmp_path):
    """Ctrl-C's path: a point still running is terminated, not waited for; a child process
    this process had before the pool (not the pool's) keeps running."""
    import multiprocessing
    import threading
    import time
    older = multiprocessing.get_context("spawn").Process(target=sleeps, args=(60,))
    older.start()
    try:
        before = set(multiprocessing.active_children())  # older, and other tests' pools
        ex = LocalExecutor(1)
        got: list = []
        driver = threading.Thread(target=lambda: got.extend(ex.map_chunks(sleeps, [[(0, 60)]])),
                                  daemon=True)  # the driver waits on the running point
        driver.start()
        workers = []
        deadline = time.monotonic() + 60
        while not workers and time.monotonic() < deadline:  # the worker boots inside submit
            workers = [p for p in multiprocessing.active_children() if p not in before]
            time.sleep(0.05)
        assert workers, "the pool started no worker"
        started = time.monotonic()
        ex.abort()
        assert time.monotonic() - started < 30  # not the 60 s the running point would take
        assert not any(p.is_alive() for p in workers)
        assert older.is_alive()
        driver.join(30)
        assert not driver.is_alive()  # the driver is released, and with no result
        assert [type(value).__name__ for _, value in got] == ["BrokenProcessPool"]
    finally:
        older.terminate()
        older.join(5)
