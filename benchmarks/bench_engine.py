"""Speed and memory of the engine itself.

Run: python benchmarks/bench_engine.py            (Azure replay + 10k/100k/1M scaling)
     python benchmarks/bench_engine.py --quick    (Azure replay + 10k/100k only)

1. Replays the full Azure LLM inference conversation trace (19,366 requests, read in place
   from ../shared/traces/; skipped when absent) with the chain policy on one core
   (Llama-3.1-8B with a Llama-3.2-1B draft, same tokenizer, on an A100-80GB; OPT-13B's 2k context cannot hold the
   trace's long prompts). Target: under 20 s.
2. Synthetic Poisson traces of growing size, each in a fresh process: wall time per request
   should stay flat (linear growth) and the peak resident memory under 2 GB at 1,000,000.
Prints simulated requests per second and engine iterations per second.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AZURE = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"


def run_one(kind: str, n: int) -> dict:
    """Simulate in this process and return timings (called in a child process)."""
    import resource

    from simulator.scenario import load_scenario
    from simulator.simulate import simulate

    if kind == "azure":
        overrides = [f"workload={{trace: {AZURE}, format: azure}}"]
    else:
        # ~24 req/s Poisson with short outputs so a long trace stays within one replica
        overrides = ["workload={synthetic: {num_requests: %d, arrival: {process: poisson, "
                     "rate_per_s: 24}, prompt: {dist: uniform, min_tokens: 32, max_tokens: 512}, "
                     "output: {dist: uniform, min_tokens: 8, max_tokens: 64}}}" % n]
    overrides += ["target=llama-3.1-8b", "draft=llama-3.2-1b", "hardware=a100-80gb",
                  "batching.max_num_seqs=256", "batching.max_num_batched_tokens=8192",
                  "policy={name: chain, num_speculative_tokens: 4}"]
    sc = load_scenario(None, overrides)
    start = time.perf_counter()
    res = simulate(sc)
    wall = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"kind": kind, "requests": len(res.requests), "wall_s": wall,
            "iterations": len(res.steps), "peak_rss_bytes": rss,
            "finished": int((res.requests["status"] == "finished").sum())}


def child(kind: str, n: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(n)], cwd=ROOT,
                         capture_output=True, text=True, check=True,
                         env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                              "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                              "PYTHONPATH": str(ROOT)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def show(r: dict) -> None:
    print(f"  {r['kind']:>9} {r['requests']:>9,} requests: {r['wall_s']:7.1f} s wall, "
          f"{r['requests'] / r['wall_s']:9,.0f} req/s, {r['iterations'] / r['wall_s']:8,.0f} "
          f"iterations/s, {r['wall_s'] / r['requests'] * 1e6:6.1f} us/request, peak RSS "
          f"{r['peak_rss_bytes'] / 2**30:.2f} GiB")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--child", nargs=2)
    args = p.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child[0], int(args.child[1]))))
        return
    print("engine benchmark (chain policy, gamma 4, one core):")
    if AZURE.exists():
        show(child("azure", 0))
    else:
        print(f"  azure trace not found at {AZURE}: skipped")
    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    rows = [child("synthetic", n) for n in sizes]
    for r in rows:
        show(r)
    base = rows[0]["wall_s"] / rows[0]["requests"]
    print("  wall time per request relative to 10k: " + ", ".join(
        f"{r['requests']:,}: {r['wall_s'] / r['requests'] / base:.2f}x" for r in rows))


if __name__ == "__main__":
    main()
