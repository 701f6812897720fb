"""Start-up time of the command line: `specsim --help` and two light commands.

    python benchmarks/bench_startup.py [--runs 15] [--against PATH]

Each command runs ``--runs`` times in a fresh interpreter (``python -m simulator.cli ...``
with this checkout first on ``PYTHONPATH``); the table gives the minimum and the median
wall time, and the ratio of the minimum to a bare ``python -c pass`` measured in the same
run.  ``--against PATH`` times another checkout of specsim (e.g. an older commit, from
``git worktree add /tmp/old <rev>``) in the same run, interleaved run by run, and prints
this checkout's time over that one's.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "--help": ["--help"],
    "gamma": ["gamma", "--alpha", "0.8", "--c", "0.05"],
    "hardware list": ["hardware", "list"],
}


def once(tree: Path | None, argv: list[str]) -> float:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    cmd = [sys.executable, "-m", "simulator.cli", *argv] if tree is not None \
        else [sys.executable, "-c", "pass"]
    start = time.perf_counter()
    subprocess.run(cmd, cwd=tree or ROOT, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=tree is None)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--against", type=Path, default=None,
                        help="another specsim checkout to time in the same run")
    args = parser.parse_args()
    trees = {"this": ROOT}
    if args.against is not None:
        trees["against"] = args.against.resolve()
    bare = min(once(None, []) for _ in range(args.runs))
    print(f"bare interpreter (python -c pass): {bare * 1e3:.0f} ms")
    print(f"{'command':<16}{'tree':<9}{'min ms':>8}{'median ms':>11}{'x bare':>8}")
    for name, argv in COMMANDS.items():
        times: dict[str, list[float]] = {t: [] for t in trees}
        for _ in range(args.runs):  # interleaved: a busy moment hits both trees alike
            for t, path in trees.items():
                times[t].append(once(path, argv))
        for t, samples in times.items():
            print(f"{name:<16}{t:<9}{min(samples) * 1e3:>8.0f}"
                  f"{statistics.median(samples) * 1e3:>11.0f}{min(samples) / bare:>8.1f}")
        if "against" in times:
            print(f"{'':<16}this / against (min): {min(times['this']) / min(times['against']):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
