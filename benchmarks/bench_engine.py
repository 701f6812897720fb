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
  workload Vidur was measured on.  Run with fast-forward on and off; the ratio is what
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
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AZURE = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
# AzureLLMInferenceTrace_conv.csv (19,366 rows): ContextTokens mean 1154.7, median 1020, max
# 14,050; GeneratedTokens mean 211.1, median 129, max 1,000.  The stand-in when it is absent.
LOGNORMAL_PROMPT = "{dist: lognormal, mean_tokens: 1154.7, median_tokens: 1020, max_tokens: 14050}"
LOGNORMAL_OUTPUT = "{dist: lognormal, mean_tokens: 211.1, median_tokens: 129, max_tokens: 1000}"
AZURE_REQUESTS = 19_366
VIDUR = ["target=llama-2-70b", "hardware=a100-80gb", "parallelism.tensor_parallel=2",
         "batching.max_num_seqs=128", "batching.max_num_batched_tokens=512",
         "batching.enable_chunked_prefill=true", "replicas=4", "router=round_robin",
         "draft=null", "policy={name: none}", "seed=0"]
CHAIN = ["target=llama-3.1-8b", "draft=llama-3.2-1b", "hardware=a100-80gb",
         "batching.max_num_seqs=256", "batching.max_num_batched_tokens=8192",
         "policy={name: chain, num_speculative_tokens: 4}", "seed=0"]
TARGETS = {"vidur10k_s": 2.0, "azure_chain_s": 3.0, "1m_s": 120.0, "flat": 0.15,
           "rss_1m_bytes": 2e9}


def vidur_overrides(n: int, trace: Path | None, fast_forward: bool) -> list[str]:
    """Scenario overrides of the vidur workload with ``n`` requests."""
    if trace is None:
        prompt, output = LOGNORMAL_PROMPT, LOGNORMAL_OUTPUT
    else:  # json.dumps: a YAML double-quoted string, whatever the path holds
        prompt = output = f"{{dist: empirical, trace: {json.dumps(str(trace))}, format: azure}}"
    workload = (f"workload={{synthetic: {{num_requests: {n}, arrival: {{process: poisson, "
                f"rate_per_s: 4}}, prompt: {prompt}, output: {output}}}}}")
    return [workload, *VIDUR, f"engine={{fast_forward: {str(fast_forward).lower()}}}"]


def azure_overrides(max_requests: int | None, fast_forward: bool) -> list[str]:
    """Scenario overrides of the full Azure conversation trace with chain speculation."""
    cap = "" if max_requests is None else f", max_requests: {max_requests}"
    return [f"workload={{trace: {json.dumps(str(AZURE))}, format: azure{cap}}}", *CHAIN,
            f"engine={{fast_forward: {str(fast_forward).lower()}}}"]


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


def spawn(job: dict, timeout_s: float) -> dict:
    """Run ``job`` in a fresh interpreter on one core; a failure is a row with ``error``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [
                   os.environ.get("PYTHONPATH")])]))
    cmd = [*pin(), sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(job)]
    row = {"label": job["label"], "fast_forward": job["fast_forward"]}
    try:
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False,
                             timeout=timeout_s, stdin=subprocess.DEVNULL)
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
    return {**best, "peak_rss_bytes": max(r["peak_rss_bytes"] for r in good)}


def show(r: dict) -> None:
    mode = "ff on " if r["fast_forward"] else "ff off"
    if "error" in r:
        print(f"  {r['label']:<16} {mode}  failed: {r['error']}")
        return
    n, wall = r["requests"], r["wall_s"]
    print(f"  {r['label']:<16} {mode} {n:>9,} requests ({r['rejected']:,} rejected): "
          f"{wall:8.2f} s wall, {r['iterations'] / wall:9,.0f} iterations/s "
          f"({r['iterations']:,}), {wall / n * 1e6:7.1f} us/request, peak RSS "
          f"{r['peak_rss_bytes'] / 1e9:.2f} GB")


def jobs(args: argparse.Namespace, trace: Path | None) -> list[dict]:
    """Every case of this run, in order."""
    def count(n: int) -> int:
        return max(1, round(n * args.scale))

    out = [{"label": "vidur10k", "n": count(10_000), "fast_forward": ff,
            "overrides": vidur_overrides(count(10_000), trace, ff)} for ff in (True, False)]
    out.append({"label": "vidur10k-eager", "n": count(10_000), "fast_forward": True,
                "lazy": False, "overrides": vidur_overrides(count(10_000), trace, True)})
    out.append({"label": "vidur10k-unfused", "n": count(10_000), "fast_forward": True,
                "fused": False, "overrides": vidur_overrides(count(10_000), trace, True)})
    if AZURE.exists():
        cap = None if args.scale == 1 else count(AZURE_REQUESTS)
        out += [{"label": "azure-chain", "n": count(AZURE_REQUESTS), "fast_forward": ff,
                 "overrides": azure_overrides(cap, ff)} for ff in (True, False)[:1 + args.full]]
    for n in (100_000,) if args.quick else (100_000, 1_000_000):
        out.append({"label": f"vidur{n // 1000}k" if n < 10**6 else "vidur1m", "n": count(n),
                    "fast_forward": True, "overrides": vidur_overrides(count(n), trace, True)})
    return out


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
    if base is not None:
        unit = base["wall_s"] / base["requests"]
        print("  us/request relative to vidur10k: " + ", ".join(
            f"{r['requests']:,}: {r['wall_s'] / r['requests'] / unit:.2f}x"
            for r in ok.values() if r["label"].startswith("vidur") and r["fast_forward"]
            and r["label"] not in ("vidur10k-eager", "vidur10k-unfused")))
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
                   help="comma-separated cases to run (vidur10k, vidur10k-eager, "
                        "vidur10k-unfused, azure-chain, vidur100k, vidur1m)")
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
    cases = [job for job in jobs(args, trace) if only is None or job["label"] in only]
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
    report(rows, scaled=args.scale != 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
