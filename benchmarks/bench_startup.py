"""Start-up time: `specsim --help`, `run --help`, two light commands, the engine, `import specsim`.

    python benchmarks/bench_startup.py [--runs 5] [--against PATH]

Each command runs ``--runs`` times in a fresh interpreter (``python -m simulator.cli ...``, or
``python -c "import simulator.simulate"`` for the engine and ``import specsim`` for the public
API, with this checkout first on ``PYTHONPATH``); the table gives the minimum and the median wall time, and the ratio of the
minimum to a bare ``python -c pass`` measured in the same run.  ``--against PATH`` times
another checkout of specsim (e.g. an older commit, from ``git worktree add /tmp/old <rev>``)
in the same run, interleaved run by run, and prints this checkout's time over that one's.
The last block judges issue 14's cold-start target (``run --help`` and the engine import
under 1 s, minimum of the runs); a miss is reported, the exit status stays 0.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = ["-m", "simulator.cli"]
COMMANDS = {  # name -> interpreter arguments
    "--help": [*CLI, "--help"],
    "run --help": [*CLI, "run", "--help"],
    "gamma": [*CLI, "gamma", "--alpha", "0.8", "--c", "0.05"],
    "hardware list": [*CLI, "hardware", "list"],
    "import engine": ["-c", "import simulator.simulate"],
    "import specsim": ["-c", "import specsim"],  # the facade: the engine, no pandas
}
COLD_START_S = 1.0  # issue 14: `specsim run --help` and importing the engine
COLD_START = ("run --help", "import engine")


def once(tree: Path | None, argv: list[str]) -> float:
    """Wall time of one fresh interpreter; NaN when the command fails (a broken import
    would otherwise look fast)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    cmd = [sys.executable, *argv] if tree is not None else [sys.executable, "-c", "pass"]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=tree or ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=tree is None)
    wall = time.perf_counter() - start
    return wall if done.returncode == 0 else math.nan


def low(samples: list[float]) -> float:
    """The minimum, NaN if any run failed."""
    return math.nan if any(math.isnan(x) for x in samples) else min(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", type=Path, default=None,
                        help="another specsim checkout to time in the same run")
    args = parser.parse_args()
    trees = {"this": ROOT}
    if args.against is not None:
        trees["against"] = args.against.resolve()
    bare = min(once(None, []) for _ in range(args.runs))
    print(f"bare interpreter (python -c pass): {bare * 1e3:.0f} ms")
    print(f"{'command':<16}{'tree':<9}{'min ms':>8}{'median ms':>11}{'x bare':>8}")
    best = {}
    for name, argv in COMMANDS.items():
        times: dict[str, list[float]] = {t: [] for t in trees}
        for _ in range(args.runs):  # interleaved: a busy moment hits both trees alike
            for t, path in trees.items():
                times[t].append(once(path, argv))
        for t, samples in times.items():
            print(f"{name:<16}{t:<9}{low(samples) * 1e3:>8.0f}"
                  f"{statistics.median(samples) * 1e3:>11.0f}{low(samples) / bare:>8.1f}"
                  + ("  (failed)" if math.isnan(low(samples)) else ""))
        if "against" in times:
            print(f"{'':<16}this / against (min): {low(times['this']) / low(times['against']):.2f}")
        best[name] = low(times["this"])
    print("targets:")
    for name in COLD_START:
        verdict = "pass" if best[name] < COLD_START_S else "fail"  # NaN (failed): fail
        print(f"  {name + f' < {COLD_START_S:g} s':<28}{best[name] * 1e3:>8.0f} ms  {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
