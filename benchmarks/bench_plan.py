"""Capacity-plan speed: a four-candidate plan, whole process and in-process.

    python benchmarks/bench_plan.py [--quick] [--requests N] [--plan FILE]
        [--only cli|inprocess|searches]

The plan: Llama-3.1-70B on h100-sxm at TP2 and TP4, each without speculation and with
EAGLE-3 (the catalog's head, 4 speculative tokens), on the first 1,000 requests of the
Azure conversation trace (``../shared/traces``), clipped to the model's context as
``--truncate-over-context`` does; SLO p99 TTFT 2,000 ms and p99 TPOT 100 ms.  The plan YAML
is written to a temporary folder and run twice: as a user types it (``specsim plan FILE
--truncate-over-context`` in a fresh process: interpreter, imports, trace, every search)
and in this process (``plan()``; the imports already paid).  Printed per run: wall time,
simulations per candidate (the ``evaluations`` column), their mean, and seconds per
simulation.  Then each candidate's rate search in this process without the warm start
(``max_sustainable_rate(warm_start=False)``: the search before it) and with it, one after
the other: simulations, seconds and the answers, compared in one run.  ``--quick`` replays
200 requests.  Skipped when the trace is absent.  ``--plan FILE`` measures another plan
YAML instead (``--plan workloads/scenarios/plan_default.yaml --only searches``).
"""
from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parent.parent
AZURE = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
sys.path.insert(0, str(ROOT))  # plan() from this checkout, not another install of it
EAGLE3 = {"name": "eagle3", "num_speculative_tokens": 4,
          "model": "eagle3-llama-3.1-70b-instruct"}


def plan_yaml(requests: int) -> dict:
    """The four-candidate plan (a mapping, as the YAML holds it)."""
    return {"name": "bench_plan_llama70b_h100",
            "scenario": {"hardware": "h100-sxm", "target": "llama-3.1-70b",
                         "workload": {"trace": str(AZURE), "format": "azure",
                                      "max_requests": requests}},
            "slo": {"p99_ttft_ms": 2000, "p99_tpot_ms": 100},
            "over_context": "truncate",
            "candidates": [{"name": f"TP{tp} {label}", "parallelism.tensor_parallel": tp,
                            "policy": policy}
                           for tp in (2, 4) for label, policy in (("none", "none"),
                                                                  ("eagle3", EAGLE3))]}


def run_cli(path: Path) -> tuple[float, pd.DataFrame]:
    """``specsim plan FILE --truncate-over-context`` in a fresh process: wall time, table."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "simulator.cli", "plan", str(path),
                          "--truncate-over-context", "--format", "csv"], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if out.returncode:
        raise SystemExit(f"specsim plan failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return elapsed, pd.read_csv(io.StringIO(out.stdout))


def run_inprocess(path: Path) -> tuple[float, pd.DataFrame]:
    """``plan(load_plan(FILE))`` on one process: wall time, table."""
    from simulator.planning.plan import load_plan, plan
    start = time.perf_counter()
    df = plan(load_plan(path), executor="serial")
    return time.perf_counter() - start, df


def run_searches(path: Path) -> None:
    """Each candidate's rate search in this process, without the warm start (the search
    before it: from the trace's rate by doublings) and with it, one after the other:
    simulations, seconds, and whether the answers agree."""
    from simulator.models.spec import load_model
    from simulator.planning.capacity import max_sustainable_rate
    from simulator.planning.plan import load_plan
    from simulator.planning.preflight import fit_context
    from simulator.scenario import scenario_from_dict
    from simulator.simulate import scenario_workload
    spec = load_plan(path)
    total = {False: [0, 0.0], True: [0, 0.0]}
    for label, raw in spec.candidates:
        sc = scenario_from_dict(raw, source=label, base_dir=spec.base_dir)
        wl = fit_context(scenario_workload(sc), int(load_model(sc.target).max_context),
                         spec.over_context)
        found = {}
        for warm in (False, True):
            start = time.perf_counter()
            found[warm] = max_sustainable_rate(sc, spec.slo, spec.search, workload=wl,
                                               warm_start=warm)
            total[warm][0] += found[warm]["evaluations"]
            total[warm][1] += time.perf_counter() - start
        before, after = found[False]["max_rate_per_s"], found[True]["max_rate_per_s"]
        print(f"  {label:<12} simulations {found[False]['evaluations']} -> "
              f"{found[True]['evaluations']}, max_rate_per_s {after:.4g} "
              f"({'same' if before == after else f'DIFFERENT: {before:.4g} before'})")
    n = len(spec.candidates)
    print(f"searches    without warm start {total[False][0]} simulations "
          f"({total[False][0] / n:.2f} per candidate) in {total[False][1]:.1f} s; with it "
          f"{total[True][0]} ({total[True][0] / n:.2f}) in {total[True][1]:.1f} s: "
          f"{total[False][1] / total[True][1]:.2f}x faster")


def report(how: str, seconds: float, df: pd.DataFrame) -> None:
    sims = df.set_index("candidate")["evaluations"].astype(int)
    total = int(sims.sum())
    print(f"{how:<11} {seconds:>8.1f} s  simulations {total:>3} "
          f"(mean {total / len(sims):.2f} per candidate; "
          + ", ".join(f"{c}: {n}" for c, n in sims.items())
          + f")  {seconds / max(total, 1):.2f} s/simulation")
    for c, r in df.set_index("candidate")["max_rate_per_s"].items():
        print(f"{'':<11} {c:<12} max_rate_per_s {r:.4g}")


def run(path: Path, only: str | None) -> None:
    if only in (None, "cli"):
        report("specsim", *run_cli(path))
    if only in (None, "inprocess"):
        report("plan()", *run_inprocess(path))
    if only in (None, "searches"):
        run_searches(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 requests")
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--only", choices=("cli", "inprocess", "searches"), default=None)
    parser.add_argument("--plan", type=Path, default=None,
                        help="measure this plan YAML instead (e.g. plan_default.yaml)")
    args = parser.parse_args()
    if args.plan is not None:
        print(f"{args.plan}")
        run(args.plan.resolve(), args.only)
        return
    if not AZURE.exists():
        print(f"skipped: {AZURE.name} not found under ../shared/traces")
        return
    requests = args.requests or (200 if args.quick else 1000)
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as folder:
        path = Path(folder) / "plan.yaml"
        path.write_text(yaml.safe_dump(plan_yaml(requests), sort_keys=False))
        print(f"four candidates, {requests:,} requests of {AZURE.name}")
        run(path, args.only)


if __name__ == "__main__":
    main()
