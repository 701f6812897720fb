"""Hostile cases of the one-line question ``specsim plan --target ...`` (issue 37, part 1):
bad numbers and lists, a request longer than the model's context, a trace that is not
there, and output folders that are not specsim's or that are an input."""
from __future__ import annotations

from tests.hostile_cases import Case

ASK = ("plan", "--target", "opt-13b", "--hardware", "a100-40gb", "--ttft-ms", "1000",
       "--tpot-ms", "60", "--no-progress")
SMALL = ("--gpus", "1", "--isl", "100", "--osl", "20", "--rate", "1", "--requests", "10")
PARETO_SMALL = ("--gpus", "1", "--isl", "100", "--osl", "20", "--requests", "10")


def _ask(*extra: str, small: tuple[str, ...] = SMALL) -> tuple[str, ...]:
    return ASK + small + extra


PLAN_CASES: list[Case] = [
    Case("plan-q-gpus-zero", _ask(small=("--gpus", "0", "--isl", "1", "--osl", "1",
                                         "--rate", "1")), "--gpus"),
    Case("plan-q-gpus-huge", _ask(small=("--gpus", "1e9", "--isl", "1", "--osl", "1",
                                         "--rate", "1")), "--gpus"),
    Case("plan-q-gammas-zero", _ask("--gammas", "0"), "--gammas"),
    Case("plan-q-gammas-huge-range", _ask("--gammas", "1-100000000"), "--gammas"),
    Case("plan-q-rate-nan", _ask(small=("--gpus", "1", "--isl", "1", "--osl", "1",
                                        "--rate", "nan")), "--rate"),
    Case("plan-q-rate-and-concurrency", _ask("--concurrency", "4"), "--rate"),
    Case("plan-q-over-context", _ask(small=("--gpus", "1", "--isl", "100000", "--osl", "10",
                                            "--rate", "1")), "--isl"),
    Case("plan-q-unknown-target", ("plan", "--target", "gpt-9", "--hardware", "a100-40gb",
                                   "--ttft-ms", "1", "--tpot-ms", "1") + SMALL, "--target"),
    Case("plan-q-unknown-method", _ask("--methods", "none,telepathy"), "--methods"),
    Case("plan-q-trace-missing", _ask(small=("--gpus", "1", "--trace", "gone.csv", "--rate",
                                             "1")), "trace"),
    Case("plan-q-deploy-out-foreign", _ask("--deploy-out", "mine"), "--deploy-out",
         {"mine/": "", "mine/notes.txt": "keep me"}),
    Case("plan-q-deploy-out-is-the-trace", _ask(
        "--deploy-out", "t.csv", small=("--gpus", "1", "--trace", "t.csv", "--rate", "1")),
        "--deploy-out", {"t.csv": "prompt_tokens,output_tokens\n10,5\n"}),
    # --pareto (issue 38, part 3): closed loop only, a bounded ladder, its own files
    Case("plan-q-pareto-with-rate", _ask("--pareto", "p.csv"), "--rate"),
    Case("plan-q-pareto-ladder-too-high", _ask("--pareto", "p.csv", small=PARETO_SMALL + (
        "--concurrency", "5000")), "--concurrency"),
    Case("plan-q-pareto-csv-foreign", _ask("--pareto", "p.csv", small=PARETO_SMALL),
         "--pareto", {"p.csv": "my notes\n"}),
    Case("plan-q-pareto-report-foreign", _ask("--pareto", "p.csv", "--report", "r.html",
                                              small=PARETO_SMALL), "--report",
         {"r.html": "<html>mine</html>\n"}),
    Case("plan-q-pareto-is-the-trace", _ask("--pareto", "t.csv", small=(
        "--gpus", "1", "--trace", "t.csv", "--concurrency", "2")), "--pareto",
        {"t.csv": "prompt_tokens,output_tokens\n10,5\n"}),
]
