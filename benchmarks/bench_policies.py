"""CPU per policy: each shipped policy's scenario simulated with its policy and with ``none``.

Run: python benchmarks/bench_policies.py                      (every case, 300 requests each)
     python benchmarks/bench_policies.py --only mtp,eagle --requests 500 --repeat 3
     python benchmarks/bench_policies.py --baseline ../other-checkout   (interleaved)
     python benchmarks/bench_policies.py --instructions --only staged   (valgrind counts)

Each case is a shipped scenario (workloads/scenarios/) with its request count set to
``--requests``; ``none`` runs the same scenario (same trace, hardware, target, batching and
seed) with ``policy={name: none}`` and no draft model, so the ratio is what the policy costs the
simulator on that workload.  Every run is a fresh interpreter (pinned to CPU 0 where
``taskset`` is, one BLAS thread) that loads the scenario, simulates a 3-request copy of it
untimed (imports and the catalog's caches), then times ``simulate()`` in CPU seconds
(``time.process_time``).  ``stretch`` is the fraction of the engine's iterations it advanced
in fast-forward stretches (``info["engine"]["vectorised"] / ["iterations"]``).

A case is a scenario file, or (file, overrides): ``adaptive_base`` is ``adaptive.yaml``'s
wrapped chain alone (``adaptive_schedule_base``: ``adaptive_schedule.yaml``'s), to compare
the wrapper with its base on the same workload; ``adaptive_fixed`` is the same wrapper with
the ``fixed`` controller, so that ``adaptive`` against it is the goodput search's share.

``--baseline DIR`` runs every case again on another checkout of the project (its packages
first on the child's path) in the same rounds, alternating with this one, so a change is
judged against the code before it on the same machine state; ``digest`` (a hash of the
requests and steps tables) says whether the two produce identical results.  With
``--repeat R`` every run is made R times and the least CPU is shown.  Figures are ratios
measured in one run, for that reason: the machine's speed drifts between runs.

``--instructions`` counts instructions instead of timing, which no load on the machine
moves: each run goes under ``valgrind --tool=cachegrind --cache-sim=no`` twice, as above and
stopped before the timed ``simulate()``, and the difference (billions, the ``cpu s`` column's
place) is what ``simulate()`` executed.  About 50x slower than timing; valgrind must be on
the path.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench_engine import pin  # beside this file: the script's folder is on sys.path

ROOT = Path(__file__).resolve().parent.parent
# label -> shipped scenario (each the policy's own, with its models and acceptance)
CASES = {"chain": "default.yaml", "staged": "staged.yaml", "eagle": "eagle.yaml",
         "eagle2": "eagle2.yaml", "eagle3": "eagle3_moe.yaml", "mtp": "mtp_moe.yaml",
         "medusa": "medusa.yaml", "specinfer": "specinfer.yaml",
         "lookahead": "lookahead.yaml", "prompt_lookup": "prompt_lookup.yaml",
         "suffix": "suffix.yaml", "adaptive": "adaptive.yaml",
         "adaptive_schedule": "adaptive_schedule.yaml",
         # adaptive.yaml's wrapped policy alone (the target: adaptive at most 2x it)
         "adaptive_base": ("adaptive.yaml", ["policy={name: chain, num_speculative_tokens: 6}"]),
         "adaptive_schedule_base": ("adaptive_schedule.yaml",
                                    ["policy={name: chain, num_speculative_tokens: 4}"]),
         # adaptive.yaml's wrapper with the fixed controller (gamma 6 every iteration, its
         # iterations one by one on arrays): what the wrapper costs without the goodput search
         "adaptive_fixed": ("adaptive.yaml", ["policy={name: adaptive, controller: fixed, "
                                              "base: {name: chain, num_speculative_tokens: 6}}"])}
NONE = ["policy={name: none}", "draft=null"]


def measure(job: dict) -> dict:
    """Simulate ``job`` in this process (the child) and return its figures."""
    import hashlib

    import pandas as pd

    import simulator
    from simulator.scenario import load_scenario
    from simulator.simulate import simulate

    path = str(Path(job["root"]) / "workloads" / "scenarios" / job["scenario"])
    warm = load_scenario(path, [*job["overrides"], "workload.max_requests=3"])
    simulate(warm)
    sc = load_scenario(path, [*job["overrides"], f"workload.max_requests={job['requests']}"])
    if job.get("skip"):  # --instructions' second run: everything but the simulation
        return {"cpu_s": 0.0, "wall_s": 0.0, "requests": 0, "iterations": 0, "vectorised": 0,
                "digest": "", "imported": str(Path(simulator.__file__).parent)}
    cpu, wall = time.process_time(), time.perf_counter()
    res = simulate(sc)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    digest = hashlib.sha256()
    for frame in (res.requests, res.steps):
        digest.update(pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes())
    engine = res.info["engine"]
    return {"cpu_s": cpu, "wall_s": wall, "requests": len(res.requests),
            "iterations": int(engine["iterations"]), "vectorised": int(engine["vectorised"]),
            "digest": digest.hexdigest()[:12], "imported": str(Path(simulator.__file__).parent)}


VALGRIND = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]


def counted(job: dict, timeout_s: float) -> dict:
    """``job``'s row with ``cpu_s`` replaced by the billions of instructions its
    ``simulate()`` executed: a counted run less the same run stopped before it."""
    row = spawn(job, timeout_s, VALGRIND)
    if "error" in row:
        return row
    skip = spawn({**job, "skip": True}, timeout_s, VALGRIND)
    if "error" in skip:
        return skip
    return {**row, "cpu_s": (row["instructions"] - skip["instructions"]) / 1e9}


def spawn(job: dict, timeout_s: float, under: list[str] | None = None) -> dict:
    """Run ``job`` in a fresh interpreter on ``job['root']``'s packages (``under``: a
    valgrind prefix, its instruction count in the row); a failure is a row with ``error``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([job["root"], *filter(None, [
                   os.environ.get("PYTHONPATH")])]))
    cmd = [*pin(), *(under or []), sys.executable, str(Path(__file__).resolve()), "--child",
           json.dumps(job)]
    try:
        out = subprocess.run(cmd, cwd=job["root"], env=env, capture_output=True, text=True,
                             check=False, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:g} s"}
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {out.returncode}: {tail[:300]}"}
    row = json.loads(lines[-1])
    if under:
        refs = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
        if refs is None:
            return {"error": "valgrind printed no instruction count"}
        row["instructions"] = int(refs.group(1).replace(",", ""))
    if Path(row["imported"]).resolve() != (Path(job["root"]) / "simulator").resolve():
        return {"error": f"imported {row['imported']}, not {job['root']}'s packages"}
    return row


def best(rows: list[dict]) -> dict:
    """The run with the least CPU (the first failure if every run failed)."""
    good = [r for r in rows if "error" not in r]
    return min(good, key=lambda r: r["cpu_s"]) if good else rows[0]


def run_all(labels: list[str], roots: list[str], args) -> dict:
    """Every (label, policy or none, checkout) run ``args.repeat`` times, interleaved:
    each round runs every case once, checkouts alternating."""
    runs: dict[tuple, list[dict]] = {}
    for _ in range(args.repeat):
        for label in labels:
            for which in ("policy", "none"):
                for root in roots:
                    case = CASES[label]
                    scenario, extra = case if isinstance(case, tuple) else (case, [])
                    job = {"root": root, "scenario": scenario, "requests": args.requests,
                           "overrides": NONE if which == "none" else extra}
                    run = counted if args.instructions else spawn
                    runs.setdefault((label, which, root), []).append(run(job, args.timeout))
    return {key: best(rows) for key, rows in runs.items()}


def line(label: str, pol: dict, none: dict) -> str:
    """One checkout's figures for a case."""
    if "error" in pol or "error" in none:
        return f"{label:<22} failed: {pol.get('error') or none.get('error')}"
    ratio = pol["cpu_s"] / none["cpu_s"]
    share = pol["vectorised"] / max(pol["iterations"], 1)
    return (f"{label:<22} {pol['requests']:>6} {none['cpu_s']:8.3f} {pol['cpu_s']:8.3f} "
            f"{ratio:7.1f}x {share:8.1%} {pol['iterations']:>8} {pol['digest']}")


def report(labels: list[str], roots: list[str], got: dict, unit: str = "s") -> None:
    """The table per checkout (``unit``: "s" CPU seconds, "Gi" billions of instructions)."""
    head = (f"{'policy':<22} {'reqs':>6} {'none ' + unit:>8} {'cpu ' + unit:>8} {'ratio':>8} "
            f"{'stretch':>8} {'iters':>8} digest")
    for root in roots:
        print(f"\n{'this checkout' if root == str(ROOT) else 'baseline'}: {root}")
        print(head)
        for label in labels:
            print(line(label, got[(label, "policy", root)], got[(label, "none", root)]))
    if len(roots) < 2:
        return
    less = "less CPU" if unit == "s" else "fewer instructions"
    print(f"\nthis checkout against the baseline ({less} in the policy's run; ratios to none)")
    for label in labels:
        new, old = got[(label, "policy", roots[0])], got[(label, "policy", roots[1])]
        if "error" in new or "error" in old:
            continue
        n_new, n_old = got[(label, "none", roots[0])], got[(label, "none", roots[1])]
        same = "identical" if new["digest"] == old["digest"] else "DIFFERENT results"
        print(f"{label:<22} {old['cpu_s'] / new['cpu_s']:6.2f}x {less}; ratio to none "
              f"{old['cpu_s'] / n_old['cpu_s']:.1f}x -> {new['cpu_s'] / n_new['cpu_s']:.1f}x; "
              f"{same}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated labels: " + ",".join(CASES))
    ap.add_argument("--requests", type=int, default=300, help="requests per run")
    ap.add_argument("--repeat", type=int, default=1, help="runs per case (least CPU shown)")
    ap.add_argument("--baseline", help="another checkout to run interleaved with this one")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--instructions", action="store_true",
                    help="count simulate()'s instructions under valgrind (billions) "
                         "instead of timing it")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(json.loads(args.child))))
        return 0
    labels = list(CASES) if not args.only else [s.strip() for s in args.only.split(",")]
    unknown = [s for s in labels if s not in CASES]
    if unknown:
        print(f"bench_policies: unknown case {', '.join(unknown)}; choose from "
              f"{', '.join(CASES)}", file=sys.stderr)
        return 2
    if args.instructions and shutil.which("valgrind") is None:
        print("bench_policies: --instructions needs valgrind on the path (e.g. apt install "
              "valgrind); or time without it", file=sys.stderr)
        return 2
    roots = [str(ROOT)] + ([str(Path(args.baseline).resolve())] if args.baseline else [])
    report(labels, roots, run_all(labels, roots, args), "Gi" if args.instructions else "s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
