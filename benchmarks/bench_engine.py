"""Speed and memory of the engine on issue 14's workloads, each case in a fresh one-core process.

Run: python benchmarks/bench_engine.py               (every case; 1M takes the longest)
     python benchmarks/bench_engine.py --quick       (no 1M)
     python benchmarks/bench_engine.py --full        (azure-chain with fast-forward off too)
     python benchmarks/bench_engine.py --scale 0.1   (every request count / 10; targets not judged)
     python benchmarks/bench_engine.py --only vidur10k,azure-chain   (those cases only)

Cases (each child pinned to CPU 0 with ``taskset`` when there is one, BLAS threads 1):

- ``vidur10k``: 10,000 requests, prompt and output lengths resampled (independently) from the
  Azure LLM inference conversation trace, Poisson arrivals at 4 req/s, Llama-2-70B TP2 on
  A100-80GB, chunked prefill 512, batch cap 128, 4 replicas round robin, no speculation: the
  workload Vidur was measured on.  As Vidur does with a trace longer than the model's
  context (``TraceRequestLengthGenerator``, microsoft/vidur
  vidur/request_generator/trace_request_length_generator.py), a request whose prompt +
  output exceed the target's ``max_context`` (4,096) is clipped to it, not rejected: the
  excess is taken from both in proportion (each share rounded up, each kept >= 1).  The
  clipped trace is drawn once, written as a specsim CSV trace into a temporary folder, and
  every vidur case replays that file.  Run with fast-forward on and off; the ratio is what
  fast-forward alone buys.  ``vidur10k-eager``: fast-forward on without the lazy form
  (simulator/engine/lazy_decode.py; ``Replica.lazy_decodes`` patched in the child, there is
  no option for it): the fused plain-decode iteration (plain_step.py) and fast_forward.py's
  stretches, every decode's state updated every iteration; the ratio to ``vidur10k`` is what
  the lazy form buys.  ``vidur10k-unfused``: that, with the fused iteration off too, so every
  iteration a stretch does not cover goes through the ordinary ``_schedule``/``_complete``,
  the one that crosses an arrival included; its ratio to ``vidur10k-eager`` is what the fused
  iteration buys.  Without ../shared/traces the lengths are lognormal with the
  trace's means and medians (a fixed seed), and the output says so.
- ``azure-chain``: the whole conversation trace (19,366 requests) replayed with chain
  speculation, Llama-3.1-8B with a Llama-3.2-1B draft (same tokenizer), gamma 4, A100-80GB.
  Skipped without ../shared.
- ``vidur10k-cli``: ``specsim run`` as a user types it, a whole process timed from outside
  (interpreter start, imports, trace, simulation, the results folder with its default
  Parquet tables and summary.csv, the printed table) on the vidur10k scenario given as
  ``--set`` overrides; its ratio to ``vidur10k``'s ``simulate()`` in the same run is the
  whole-process overhead (issue 36's target: within 1.5x).
- scaling: the vidur10k workload at 100,000 and 1,000,000 requests, same arrival rate (the
  run gets longer, the load per replica stays the same); us/request relative to 10k.

Wall time is that of ``simulate(scenario)`` (trace reading included, imports not); iterations
are engine steps over all replicas (``info["engine"]["iterations"]``: every step, also when
the steps table is sampled); peak RSS is the child's ``ru_maxrss``.  With ``--repeat R`` the
cases run in R rounds, every case once a round, and each shows its fastest run.  A missed
target, a failed or timed-out case is reported, never raised: the exit status is 0.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_workloads import (  # beside this file: the script's folder is on sys.path
    AZURE,
    AZURE_REQUESTS,
    ROOT,
    azure_overrides,
    vidur_overrides,
    write_scenario,
    write_vidur_trace,
)

TARGETS = {"vidur10k_s": 2.0, "azure_chain_s": 3.0, "1m_s": 120.0, "flat": 0.15,
           "rss_1m_bytes": 2e9, "cli_ratio": 1.5}


def measure(job: dict) -> dict:
    """Simulate ``job`` in this process and return its figures (runs in the child)."""
    import hashlib
    import resource

    import pandas as pd

    from simulator.scenario import load_scenario
    from simulator.simulate import simulate

    from simulator.engine.replica import Replica
    if not job.get("lazy", True):  # the fused iteration and stretches, not the lazy form
        Replica.lazy_decodes = False
    if not job.get("fused", True):  # the ordinary path for every iteration
        Replica.lazy_decodes = False
        init = Replica.__init__

        def ordinary(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.plain = False  # no fused iteration, no crossing step from a stretch

        Replica.__init__ = ordinary
    sc = load_scenario(None, job["overrides"])
    # imports are not timed: what simulate() imports on first use (the workload modules, and
    # the modules pandas' CSV reader loads on its first call: about 0.1 s) is loaded first
    import io

    import workloads.config  # noqa: F401
    pd.read_csv(io.StringIO("a\n1\n"), dtype=str)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    res = simulate(sc)
    wall = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    req = res.requests
    rejected = req["status"] == "rejected"
    digest = hashlib.sha256()
    for frame in (req, res.steps):
        digest.update(pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes())
    return {"requests": len(req), "finished": int((req["status"] == "finished").sum()),
            "rejected": int(rejected.sum()),
            "reject_reasons": {str(k): int(v) for k, v in
                               req.loc[rejected, "reject_reason"].value_counts().items()},
            "wall_s": wall, "iterations": int(res.info["engine"]["iterations"]),
            "steps_rows": len(res.steps), "peak_rss_bytes": rss,
            "rss_before_bytes": rss_before, "digest": digest.hexdigest()[:16]}


def pin() -> list[str]:
    """The prefix that pins a child to CPU 0, or none where taskset or CPU 0 is missing."""
    try:
        ok = 0 in os.sched_getaffinity(0)
    except (AttributeError, OSError):
        ok = False
    return ["taskset", "-c", "0"] if ok and shutil.which("taskset") else []


def child_env() -> dict:
    """One BLAS thread, and this checkout's packages first (before any installed copy)."""
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [
                    os.environ.get("PYTHONPATH")])]))


def specsim_command() -> list[str]:
    """What a user types: the ``specsim`` script beside this Python (it imports this
    checkout, first on PYTHONPATH), else ``python -m simulator.cli``."""
    script = Path(sys.executable).parent / "specsim"
    return [str(script)] if script.exists() else [sys.executable, "-m", "simulator.cli"]


def spawn_cli(job: dict, timeout_s: float) -> dict:
    """Time ``specsim run SCENARIO.yaml`` as one whole process, in a fresh folder (its
    results go to the default specsim-out there); the counts come from its summary.csv."""
    row = {"label": job["label"], "fast_forward": job["fast_forward"], "cli": True}
    cmd = [*pin(), *specsim_command(), "run", job["scenario"]]
    # as an install leaves it: the project's modules compiled to bytecode once (untimed), not
    # compiled again by every process (PYTHONDONTWRITEBYTECODE, if set here, would: +0.3 s)
    env = {k: v for k, v in child_env().items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(ROOT / pkg) for pkg in (
        "simulator", "hardware", "workloads", "calibrate", "reports", "specsim"))], env=env,
        check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as folder:
        start = time.perf_counter()
        try:
            out = subprocess.run(cmd, cwd=folder, env=env, capture_output=True,
                                 text=True, check=False, timeout=timeout_s,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return {**row, "error": f"timed out after {timeout_s:g} s"}
        wall = time.perf_counter() - start
        if out.returncode != 0:
            tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
            return {**row, "error": f"exit {out.returncode}: {tail[:300]}"}
        with open(Path(folder) / "specsim-out" / "summary.csv", encoding="utf-8") as fh:
            summary = next(csv.DictReader(fh))
    return {**row, "wall_s": wall, "requests": int(summary["requests"]),
            "finished": int(summary["finished"]), "rejected": int(summary["rejected"])}


def spawn(job: dict, timeout_s: float) -> dict:
    """Run ``job`` in a fresh interpreter on one core; a failure is a row with ``error``."""
    if job.get("cli"):
        return spawn_cli(job, timeout_s)
    return run_child(Path(__file__), job, {"label": job["label"],
                                           "fast_forward": job["fast_forward"]}, timeout_s)


def run_child(script: Path, job: dict, row: dict, timeout_s: float) -> dict:
    """``script --child JOB`` in a fresh interpreter pinned to one core: ``row`` with the
    child's last stdout line (a JSON object) merged in, or with ``error`` saying why not."""
    cmd = [*pin(), sys.executable, str(script.resolve()), "--child", json.dumps(job)]
    try:
        out = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True,
                             check=False, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {**row, "error": f"timed out after {timeout_s:g} s"}
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {**row, "error": f"exit {out.returncode}: {tail[:300]}"}
    return {**row, **json.loads(lines[-1])}


def best_of(rows: list[dict]) -> dict:
    """The fastest of a case's runs (peak RSS: the largest); the first if every one failed."""
    good = [r for r in rows if "error" not in r]
    if not good:
        return rows[0]
    best = min(good, key=lambda r: r["wall_s"])
    if best.get("cli"):  # timed from outside: no RSS of its own
        return best
    return {**best, "peak_rss_bytes": max(r["peak_rss_bytes"] for r in good)}


def show(r: dict) -> None:
    mode = "ff on " if r["fast_forward"] else "ff off"
    if "error" in r:
        print(f"  {r['label']:<16} {mode}  failed: {r['error']}")
        return
    n, wall = r["requests"], r["wall_s"]
    if r.get("cli"):
        print(f"  {r['label']:<16} {mode} {n:>9,} requests ({r['rejected']:,} rejected): "
              f"{wall:8.2f} s wall, the whole `specsim run` process as typed")
        return
    print(f"  {r['label']:<16} {mode} {n:>9,} requests ({r['rejected']:,} rejected): "
          f"{wall:8.2f} s wall, {r['iterations'] / wall:9,.0f} iterations/s "
          f"({r['iterations']:,}), {wall / n * 1e6:7.1f} us/request, peak RSS "
          f"{r['peak_rss_bytes'] / 1e9:.2f} GB")


def jobs(args: argparse.Namespace, trace: Path | None, folder: Path,
         only: set[str] | None) -> list[dict]:
    """Every case of this run, in order (the clipped traces they replay written into
    ``folder``: only those the selected cases use)."""
    def count(n: int) -> int:
        return max(1, round(n * args.scale))

    traces: dict[int, Path] = {}

    def vidur(n: int, ff: bool) -> list[str]:
        if n not in traces:
            traces[n] = write_vidur_trace(n, trace, folder)
        return vidur_overrides(traces[n], ff)

    def wanted(label: str) -> bool:
        return only is None or label in only

    ten = count(10_000)
    out = [{"label": "vidur10k", "n": ten, "fast_forward": ff, "overrides": vidur(ten, ff)}
           for ff in (True, False) if wanted("vidur10k")]
    if wanted("vidur10k-cli"):
        out.append({"label": "vidur10k-cli", "n": ten, "fast_forward": True, "cli": True,
                    "scenario": str(write_scenario(vidur(ten, True), folder / "vidur10k.yaml"))})
    if wanted("vidur10k-eager"):
        out.append({"label": "vidur10k-eager", "n": ten, "fast_forward": True,
                    "lazy": False, "overrides": vidur(ten, True)})
    if wanted("vidur10k-unfused"):
        out.append({"label": "vidur10k-unfused", "n": ten, "fast_forward": True,
                    "fused": False, "overrides": vidur(ten, True)})
    if AZURE.exists():
        cap = None if args.scale == 1 else count(AZURE_REQUESTS)
        out += [{"label": "azure-chain", "n": count(AZURE_REQUESTS), "fast_forward": ff,
                 "overrides": azure_overrides(cap, ff)} for ff in (True, False)[:1 + args.full]]
    for n in (100_000,) if args.quick else (100_000, 1_000_000):
        label = f"vidur{n // 1000}k" if n < 10**6 else "vidur1m"
        if wanted(label):
            out.append({"label": label, "n": count(n), "fast_forward": True,
                        "overrides": vidur(count(n), True)})
    return [job for job in out if wanted(job["label"])]


def verdicts(rows: list[dict], scaled: bool) -> list[tuple[str, str, str]]:
    """(target, measured, pass/fail) for each target the rows can judge."""
    by = {(r["label"], r["fast_forward"]): r for r in rows}
    ok = {k: r for k, r in by.items() if "error" not in r}

    def judge(name: str, key, measured, good) -> tuple[str, str, str]:
        if key not in by:
            return name, "not run", "n/a"
        if key not in ok:  # the case's own line above says why
            return name, by[key]["error"].split(" after")[0].split(":")[0], "fail"
        return name, measured(ok[key]), "n/a (scaled)" if scaled else \
            ("pass" if good(ok[key]) else "fail")

    out = [judge(f"vidur10k wall, fast-forward on < {TARGETS['vidur10k_s']:g} s",
                 ("vidur10k", True), lambda r: f"{r['wall_s']:.2f} s",
                 lambda r: r["wall_s"] < TARGETS["vidur10k_s"]),
           judge(f"azure-chain wall, fast-forward on < {TARGETS['azure_chain_s']:g} s",
                 ("azure-chain", True), lambda r: f"{r['wall_s']:.2f} s",
                 lambda r: r["wall_s"] < TARGETS["azure_chain_s"]),
           judge(f"1M requests wall < {TARGETS['1m_s']:g} s", ("vidur1m", True),
                 lambda r: f"{r['wall_s']:.1f} s", lambda r: r["wall_s"] < TARGETS["1m_s"]),
           judge(f"1M requests peak RSS < {TARGETS['rss_1m_bytes'] / 1e9:g} GB",
                 ("vidur1m", True), lambda r: f"{r['peak_rss_bytes'] / 1e9:.2f} GB",
                 lambda r: r["peak_rss_bytes"] < TARGETS["rss_1m_bytes"])]
    base = ok.get(("vidur10k", True))
    cli = ok.get(("vidur10k-cli", True))
    if base is not None and cli is not None:
        ratio = cli["wall_s"] / base["wall_s"]
        out.append((f"vidur10k `specsim run` process / simulate() < {TARGETS['cli_ratio']:g}x",
                    f"{ratio:.2f}x", "n/a (scaled)" if scaled else
                    ("pass" if ratio < TARGETS["cli_ratio"] else "fail")))
    big = [r for r in ok.values() if r["label"] in ("vidur100k", "vidur1m")]
    if base is not None and big:
        unit = base["wall_s"] / base["requests"]
        ratios = [r["wall_s"] / r["requests"] / unit for r in big]
        worst = max(ratios, key=lambda x: abs(x - 1))
        out.append((f"us/request flat from 10k within {TARGETS['flat']:.0%}",
                    f"worst {worst:.2f}x", "n/a (scaled)" if scaled else
                    ("pass" if abs(worst - 1) <= TARGETS["flat"] else "fail")))
    return out


def report(rows: list[dict], scaled: bool) -> None:
    """The ratios and the targets block."""
    ok = {(r["label"], r["fast_forward"]): r for r in rows if "error" not in r}
    # (faster case, slower case, what the ratio is): each measured in this run
    for fast, slow, what in ((("vidur10k", True), ("vidur10k", False),
                              "vidur10k: fast-forward alone"),
                             (("azure-chain", True), ("azure-chain", False),
                              "azure-chain: fast-forward alone"),
                             (("vidur10k", True), ("vidur10k-eager", True),
                              "vidur10k: the lazy form alone"),
                             (("vidur10k-eager", True), ("vidur10k-unfused", True),
                              "vidur10k: the fused plain-decode iteration alone")):
        a, b = ok.get(fast), ok.get(slow)
        if a and b:
            names = ("on", "off") if fast[0] == slow[0] else (fast[0], slow[0])
            same = "identical" if a["digest"] == b["digest"] else "DIFFERENT"
            print(f"  {what}: {b['wall_s'] / a['wall_s']:.2f}x ({names[1]} {b['wall_s']:.2f} s"
                  f" / {names[0]} {a['wall_s']:.2f} s); requests and steps tables {same}")
    base = ok.get(("vidur10k", True))
    cli = ok.get(("vidur10k-cli", True))
    if base is not None and cli is not None:
        same = "the same" if (cli["finished"], cli["rejected"]) == (
            base["finished"], base["rejected"]) else "DIFFERENT"
        print(f"  vidur10k: whole `specsim run` process / simulate(): "
              f"{cli['wall_s'] / base['wall_s']:.2f}x (process {cli['wall_s']:.2f} s / "
              f"simulate() {base['wall_s']:.2f} s); {same} finished and rejected counts")
    if base is not None:
        unit = base["wall_s"] / base["requests"]
        print("  us/request relative to vidur10k: " + ", ".join(
            f"{r['requests']:,}: {r['wall_s'] / r['requests'] / unit:.2f}x"
            for r in ok.values() if r["label"].startswith("vidur") and r["fast_forward"]
            and r["label"] not in ("vidur10k-eager", "vidur10k-unfused", "vidur10k-cli")))
    if base is not None and base["rejected"]:
        print(f"  vidur10k: {base['rejected']:,} of {base['requests']:,} requests rejected "
              f"({base['reject_reasons']})")
    print("targets:")
    for name, measured, verdict in verdicts(rows, scaled):
        print(f"  {name:<48} {measured:>14}  {verdict}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="skip the 1M-request case")
    p.add_argument("--full", action="store_true", help="azure-chain with fast-forward off too")
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiply every request count by this (targets are not judged)")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per case, in rounds (each case once a round); the fastest is shown")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per child run")
    p.add_argument("--only", default=None, metavar="LABELS",
                   help="comma-separated cases to run (vidur10k, vidur10k-cli, "
                        "vidur10k-eager, vidur10k-unfused, azure-chain, vidur100k, vidur1m)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(measure(json.loads(args.child))))
        return 0
    if not args.scale > 0 or args.repeat < 1:
        p.error("--scale must be > 0 and --repeat >= 1")
    trace = AZURE if AZURE.exists() else None
    where = "CPU 0 (taskset)" if pin() else "one process (no taskset: not pinned)"
    print(f"engine benchmark, each case in a fresh child on {where}, BLAS threads 1"
          + (f", request counts x{args.scale:g}" if args.scale != 1 else ""))
    if trace is None:
        print(f"  {AZURE} not found: vidur lengths are lognormal with the trace's means and "
              "medians (seed 0); azure-chain skipped")
    only = None if args.only is None else set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="bench-traces-") as folder:
        cases = jobs(args, trace, Path(folder), only)
        rows = run_rounds(cases, args)
    report(rows, scaled=args.scale != 1)
    return 0


def run_rounds(cases: list[dict], args: argparse.Namespace) -> list[dict]:
    """Every case ``--repeat`` times; each case's fastest run, shown as it is known."""
    runs: list[list[dict]] = [[] for _ in cases]
    rows = []
    # round by round (every case once a round): a slow spell of this machine, which drifts
    # by tens of percent within minutes, then falls on every case alike, not on one case's
    # repeats, and the ratios between cases (flatness included) stay comparable
    for last in [False] * (args.repeat - 1) + [True]:
        for job, mine in zip(cases, runs):
            mine.append(spawn(job, args.timeout))
            if last:
                rows.append(best_of(mine))
                show(rows[-1])
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
