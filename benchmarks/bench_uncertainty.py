"""Uncertainty's cost: each command with ``--uncertainty N`` against the same command
without it, as a user types them, interleaved in one run.

    python benchmarks/bench_uncertainty.py [--draws N] [--repeat R] [--only run,plan,sweep]

The issue's target (docs/uncertainty.md): N draws cost at most N/2 point runs of time on
two cores.  Each command runs in a fresh process (``python -m simulator.cli ...`` from this
checkout, progress off, output to a temporary folder), the point run and the uncertainty run
one after the other, ``--repeat`` rounds, the fastest of each kept; printed: both wall
times, their ratio (point runs per uncertainty run) and the target N/2.  A failed command
is reported, never raised: the exit status is 0.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "workloads" / "scenarios"
# label -> the command's arguments (the README's "how sure" row and the sweep example)
COMMANDS = {
    "run": ["run", str(SCENARIOS / "uncertainty.yaml"), "--compare", "none,eagle",
            "--out", "{out}/specsim-out"],
    "plan": ["plan", str(SCENARIOS / "plan_default.yaml"), "--out", "{out}/plan.csv"],
    "sweep": ["sweep", str(SCENARIOS / "sweep_policies.yaml"), "--out", "{out}/sweep.csv"],
}


def timed(args: list[str], timeout_s: float) -> float | None:
    """Wall seconds of ``specsim ARGS`` in a fresh process; None if it failed."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "simulator.cli",
               *[a.replace("{out}", out) for a in args], "--no-progress"]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        start = time.perf_counter()
        try:
            done = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True,
                                  timeout=timeout_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None
        wall = time.perf_counter() - start
        if done.returncode != 0:
            print(f"  failed: {' '.join(cmd[3:])}: {done.stderr.strip()[-300:]}")
            return None
        return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--draws", type=int, default=20, help="N (default 20)")
    p.add_argument("--repeat", type=int, default=1, help="rounds (fastest kept)")
    p.add_argument("--only", default=",".join(COMMANDS), help="comma-separated labels")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per command")
    a = p.parse_args()
    labels = [x for x in a.only.split(",") if x]
    best: dict[tuple[str, bool], float] = {}
    for _ in range(max(a.repeat, 1)):
        for label in labels:
            for drawn in (False, True):
                args = COMMANDS[label] + (["--uncertainty", str(a.draws)] if drawn else [])
                wall = timed(args, a.timeout)
                if wall is not None:
                    key = (label, drawn)
                    best[key] = min(best.get(key, wall), wall)
    print(f"{'command':8s} {'point s':>9s} {f'N={a.draws} s':>10s} {'ratio':>7s} "
          f"{'target':>7s}")
    for label in labels:
        point, drawn = best.get((label, False)), best.get((label, True))
        if point is None or drawn is None:
            print(f"{label:8s} (failed)")
            continue
        ratio = drawn / point
        print(f"{label:8s} {point:9.1f} {drawn:10.1f} {ratio:6.1f}x {a.draws / 2:6.1f}x"
              + ("" if ratio <= a.draws / 2 else "  (missed)"))


if __name__ == "__main__":
    main()
