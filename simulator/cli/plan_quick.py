"""``specsim plan --target M --hardware G --gpus N (--isl I --osl O | --trace F) (--rate R |
--concurrency C) --ttft-ms T --tpot-ms P [--methods ...]``: a capacity question in one line.

Prints a ranked table of deployments (parallelism, replicas, method, draft length), one
sentence of verdict, and writes the winner as ``vllm serve`` config and command, SGLang
flags, and the scenario that re-checks it (simulator/planning/quick_deploy.py).  ``--disagg``
adds prefill/decode disaggregated deployments; ``--pareto CSV`` asks for the Pareto frontier
over a ladder of concurrencies instead (simulator/cli/plan_pareto.py).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulator.cli.args import MAX_GAMMA, bounded_float, bounded_int, parse_number_list
from simulator.cli.output import render, wrap_text
from simulator.inputs.errors import SpecsimError
from simulator.planning.capacity import MAX_RATE_PER_S, MIN_RATE_PER_S
from simulator.planning.quick_plan import (
    DEFAULT_GAMMAS,
    DEFAULT_PARETO_CONCURRENCY,
    DEFAULT_REQUESTS,
    MAX_QUICK_GPUS,
    MAX_QUICK_REQUESTS,
    QUICK_METHODS,
    Question,
    parse_methods,
)

DEFAULT_DEPLOY_OUT = "specsim-plan"
SHOWN = ("rank", "candidate", "holds", "p99_ttft_ms", "p99_tpot_ms", "output_tok/s",
         "max_rate_per_s", "headroom_%", "violated")
MAX_SLO_MS = 1e7
MAX_SHOWN = 15  # table rows printed (every row with --out or --format csv)
MAX_LENGTH = 10_000_000


def add_quick_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of the one-line question."""
    g = p.add_argument_group("a question in flags (instead of a plan YAML)")
    g.add_argument("--target", help="model: a catalog name or its Hugging Face id, or your "
                                    "own model file (.yaml: specsim models from-hf)")
    g.add_argument("--hardware", help="GPU profile (specsim hardware list), or your own "
                                      "profile YAML")
    g.add_argument("--gpus", type=bounded_int(MAX_QUICK_GPUS), help="GPUs to deploy on")
    g.add_argument("--isl", type=bounded_int(MAX_LENGTH), help="input tokens per request")
    g.add_argument("--osl", type=bounded_int(MAX_LENGTH), help="output tokens per request")
    g.add_argument("--trace", help="a trace file (or 'default', the shipped one) instead of "
                                   "--isl/--osl")
    g.add_argument("--rate", type=bounded_float(MAX_RATE_PER_S, MIN_RATE_PER_S),
                   help="requests/s, open loop (Poisson arrivals for --isl/--osl)")
    g.add_argument("--concurrency", type=bounded_int(MAX_QUICK_REQUESTS),
                   help="requests in flight, closed loop (vllm bench serve --max-concurrency)")
    g.add_argument("--ttft-ms", type=bounded_float(MAX_SLO_MS, strict=True),
                   help="p99 time to first token limit")
    g.add_argument("--tpot-ms", type=bounded_float(MAX_SLO_MS, strict=True),
                   help="p99 time per output token limit")
    g.add_argument("--methods", default=None,
                   help=f"methods to try, of {','.join(QUICK_METHODS)} (default: none and "
                        "every method the catalog has a drafter for)")
    g.add_argument("--gammas", default="1-5", help="draft lengths to try (default 1-5)")
    g.add_argument("--requests", type=bounded_int(MAX_QUICK_REQUESTS), default=None,
                   help=f"requests simulated per point (default {DEFAULT_REQUESTS})")
    g.add_argument("--seed", type=bounded_int(2**32 - 1, minimum=0), default=0)
    g.add_argument("--deploy-out", default=DEFAULT_DEPLOY_OUT,
                   help=f"folder for the winner's files (default {DEFAULT_DEPLOY_OUT})")
    g.add_argument("--disagg", action="store_true",
                   help="also try prefill/decode disaggregated deployments (xPyD: P:D GPU "
                        "ratios 1:1, 1:2, 1:3, 2:1)")
    g.add_argument("--pareto", default=None, metavar="CSV",
                   help="instead of ranking at one load: run every deployment closed loop at "
                        "1, 2, 4, ... --concurrency requests in flight (default "
                        f"{DEFAULT_PARETO_CONCURRENCY}) and write the points and their "
                        "Pareto frontier (tokens/s/GPU against tokens/s/user) to this CSV; "
                        "--report draws them")


def question(args: argparse.Namespace) -> Question:
    """The flags, checked together: one error naming what is missing or clashes."""
    missing = [f for f, v in (("--hardware", args.hardware), ("--gpus", args.gpus),
                              ("--ttft-ms", args.ttft_ms), ("--tpot-ms", args.tpot_ms))
               if v is None]
    if missing:
        raise SpecsimError(f"{', '.join(missing)} missing", field=missing[0],
                           fix="a question needs --target, --hardware, --gpus, --isl/--osl "
                               "or --trace, --rate or --concurrency, --ttft-ms and --tpot-ms")
    lengths = args.isl is not None or args.osl is not None
    if lengths == (args.trace is not None) or (lengths and None in (args.isl, args.osl)):
        raise SpecsimError("give --isl and --osl, or --trace", field="--isl",
                           fix="e.g. --isl 2000 --osl 500, or --trace default")
    concurrency = _load(args)
    for flag, given in (("--report", args.report and args.pareto is None),
                        ("--drop-over-context", args.drop_over_context),
                        ("--truncate-over-context", args.truncate_over_context)):
        if given:
            raise SpecsimError(f"{flag} works with a plan YAML (or --pareto)"
                               if flag == "--report" else f"{flag} works with a plan YAML",
                               field=flag, fix="remove it")
    return Question(target=_target(args.target), hardware=_hardware(args.hardware),
                    gpus=args.gpus, ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms, isl=args.isl,
                    osl=args.osl, trace=args.trace, rate=args.rate,
                    concurrency=concurrency, methods=None if args.methods is None
                    else parse_methods(args.methods),
                    gammas=tuple(parse_number_list(args.gammas, field="--gammas", minimum=1,
                                                   maximum=MAX_GAMMA, max_count=16)),
                    requests=args.requests or DEFAULT_REQUESTS, seed=args.seed,
                    disagg=args.disagg)


def _load(args: argparse.Namespace) -> int | None:
    """The question's concurrency: one of --rate and --concurrency; with --pareto, the top
    of the ladder (closed loop only: no --rate, nor --out, the points going to --pareto)."""
    if args.pareto is None:
        if (args.rate is None) == (args.concurrency is None):
            raise SpecsimError("give one of --rate and --concurrency", field="--rate",
                               fix="--rate 4 (requests/s) or --concurrency 64 (in flight)")
        return args.concurrency
    from simulator.planning.pareto_search import ladder
    for flag, given in (("--rate", args.rate), ("--out", args.out)):
        if given is not None:
            raise SpecsimError(f"{flag} with --pareto", field=flag,
                               fix="remove it: --pareto runs closed loop at 1, 2, 4, ... "
                                   "--concurrency in flight and writes its points to its CSV")
    top = args.concurrency or DEFAULT_PARETO_CONCURRENCY
    ladder(top)  # its limit, checked before any simulation
    return top


def _target(name: str) -> str:
    from simulator.vllm_config import resolve_model
    return resolve_model(name, method=None, base_dir=".", source="specsim plan",
                         field="--target")[0]


def _hardware(name: str) -> str:
    """A profile's name, or the absolute path of the user's own profile YAML (checked)."""
    from hardware.profile import list_profiles, load_profile
    if name.endswith((".yaml", ".yml")):
        try:
            load_profile(name)
        except SpecsimError as exc:
            raise exc.relocated(field="--hardware" + (f": {exc.field}" if exc.field else "")
                                ) from None
        return str(Path(name).resolve())
    if name not in list_profiles():
        raise SpecsimError(f"unknown hardware {name!r}", field="--hardware",
                           fix=f"use one of: {', '.join(list_profiles())}; or a profile "
                           "YAML of your own (my-gpu.yaml)")
    return name


def main_quick(args: argparse.Namespace) -> int:
    """Check every flag and path, search, print, write the winner's files."""
    from simulator.input_clash import check_outputs_not_inputs
    from simulator.output_paths import check_file_target, check_results_target
    from simulator.planning.quick_deploy import MARK
    q = question(args)
    if args.pareto is not None:
        from simulator.cli.plan_pareto import main_pareto
        return main_pareto(args, q, _header(q))
    trace = None if q.trace in (None, "default") else q.trace
    check_outputs_not_inputs([("--out", args.out), ("--deploy-out", args.deploy_out)],
                             [trace], folders=("--deploy-out",))
    if args.out:
        check_file_target(args.out, "--out", marks=(b"rank,candidate,",),
                          overwrite=args.overwrite, what="plan table")
    check_results_target(args.deploy_out, "--deploy-out", overwrite=args.overwrite)
    from simulator.cli.progress import Progress
    from simulator.planning.quick_search import answer_question
    with Progress("plan", 0, unit="simulations", enabled=not args.no_progress) as bar:
        done = [0]

        def tick() -> None:
            done[0] += 1
            bar.set(done[0], done[0])
        ans = answer_question(q, executor=args.executor, workers=args.workers, progress=tick)
    header = _header(q)
    if args.out:
        from simulator.output_paths import write_text_file
        write_text_file(args.out, ans.table.to_csv(index=False), "--out",
                        marks=(b"rank,candidate,",), overwrite=args.overwrite,
                        what="plan table")
    written, names = _write_deploy(args, q, ans, header) if ans.winner is not None \
        else (None, [])
    if args.format != "table":
        print(render(ans.table, args.format))
    else:
        _print(q, ans, header)
    stream = sys.stdout if args.format == "table" else sys.stderr
    if written is not None:
        print(f"wrote {written}/: {', '.join(names)} ({MARK[2:]})", file=stream)
    else:
        print(f"nothing written to {args.deploy_out}: no deployment holds the load",
              file=stream)
    return 0


def _header(q: Question) -> str:
    load = f"--concurrency {q.concurrency}" if q.closed_loop else f"--rate {q.rate:g}"
    work = f"--trace {q.trace}" if q.trace is not None else f"--isl {q.isl} --osl {q.osl}"
    extra = "".join([f" --methods {','.join(q.methods)}" if q.methods else "",
                     f" --gammas {','.join(map(str, q.gammas))}"
                     if q.gammas != DEFAULT_GAMMAS else "",
                     f" --requests {q.requests}" if q.requests != DEFAULT_REQUESTS else "",
                     f" --seed {q.seed}" if q.seed else "", " --disagg" if q.disagg else ""])
    return (f"--target {q.target} --hardware {q.hardware} --gpus {q.gpus} {work} {load} "
            f"--ttft-ms {q.ttft_ms:g} --tpot-ms {q.tpot_ms:g}{extra}")


def _write_deploy(args: argparse.Namespace, q: Question, ans,
                  header: str) -> tuple[str, list[str]]:
    from simulator.output_paths import ResultsFolderWriter
    from simulator.planning.quick_deploy import files
    texts = files(q, ans.winner, header, ans.verdict)
    with ResultsFolderWriter(args.deploy_out, "--deploy-out", overwrite=args.overwrite,
                             names=list(texts)) as w:
        for name, text in texts.items():
            (w.path / name).write_text(text, encoding="utf-8")
        w.commit({"command": "plan", "question": header})
    return str(args.deploy_out), list(texts)


def _print(q: Question, ans, header: str) -> None:
    print(f"plan {header}")
    table = ans.table.assign(**{"headroom_%": ans.table["headroom"] * 100}) \
        if "headroom" in ans.table else ans.table
    shown = table[[c for c in SHOWN if c in table]]
    print(render(shown.head(MAX_SHOWN), "table"))
    if len(shown) > MAX_SHOWN:
        print(f"... {len(shown) - MAX_SHOWN} more (every row: --out plan.csv or --format csv)")
    print()
    print(wrap_text(ans.verdict))
    for note in ans.notes:
        print(wrap_text(f"  {note}", indent="    "))
    for method, line in ans.acceptance.items():
        print(wrap_text(f"  acceptance of {method}: {line}", indent="    "))
    unsourced = [m for m, line in ans.acceptance.items() if line.startswith("no source")]
    if unsourced:
        print(wrap_text(f"warning: the acceptance of {', '.join(unsourced)} is an assumption, "
                        "not a measurement: the ranking of the methods rests on it (give a "
                        "measured acceptance in a plan YAML's candidates)"), file=sys.stderr)
