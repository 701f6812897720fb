"""Sweep speed: points per second, analytic and simulated, on one process and the local pool.

    python benchmarks/bench_sweep.py [--workers N] [--sim-points 8] [--sim-requests 200]

The analytic map is 1,000 points (10 batch sizes x 10 context lengths x 10 gammas); the
simulated sweep runs the built-in scenario's first requests at several rates and gammas.
The local-pool figures include starting the worker processes.
"""
from __future__ import annotations

import argparse
import os
import time

from simulator.planning.sweep import SweepSpec, expand_grid, run_sweep


def analytic_spec() -> SweepSpec:
    grid = {"batch": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
            "context": [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
            "gamma": list(range(10))}
    return SweepSpec.analytic(expand_grid(grid), fixed={"alpha": 0.8})


def simulated_spec(points: int, requests: int) -> SweepSpec:
    rates = [1, 2, 4, 8]
    gammas = list(range(1, points // len(rates) + 2))
    grid = expand_grid({"gamma": gammas, "workload.rate_per_s": rates})[:points]
    return SweepSpec.simulated(grid, fixed={"workload.max_requests": requests})


def timed(spec: SweepSpec, executor: str, workers: int | None) -> float:
    start = time.perf_counter()
    df = run_sweep(spec, executor=executor, workers=workers)
    elapsed = time.perf_counter() - start
    assert df["error"].isna().all(), df["error"].dropna().iloc[0]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--sim-points", type=int, default=8)
    parser.add_argument("--sim-requests", type=int, default=200)
    args = parser.parse_args()
    specs = {"analytic": analytic_spec(),
             "simulated": simulated_spec(args.sim_points, args.sim_requests)}
    timed(SweepSpec.analytic([{"gamma": 1}]), "serial", None)  # imports, model files
    print(f"{'mode':<10} {'executor':<16} {'points':>7} {'seconds':>8} {'points/s':>9}")
    for mode, spec in specs.items():
        for executor, workers in (("serial", None), ("local", args.workers)):
            seconds = timed(spec, executor, workers)
            label = executor + (f" ({workers} proc)" if executor == "local" else "")
            print(f"{mode:<10} {label:<16} {len(spec):>7} {seconds:>8.2f} "
                  f"{len(spec) / seconds:>9.1f}")


if __name__ == "__main__":
    main()
