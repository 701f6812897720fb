"""Hostile inputs: every bad input is one clear line on stderr, exit code 2, nothing written.

Each :class:`Case` runs ``python -m simulator.cli ARGV`` in a fresh temporary folder (its
``files`` written there first), with stdin closed, a wall-clock timeout and an
address-space limit (``RLIMIT_AS``), and must:

- exit with status 2, within the timeout and the memory limit;
- write exactly one non-empty line to stderr, starting ``specsim: error:``, containing the
  case's ``expect`` text (the field or flag it names), no longer than MAX_LINE characters;
- print no traceback on either stream;
- leave the folder as it found it (names, sizes and mtimes; no new files).

The table is data (tests/hostile_cases.py, tests/hostile_cases_commands.py,
tests/hostile_cases_io.py): append a
``Case`` there to add one.  The cases run in parallel
(one subprocess per core) the first time a test of this module needs a result.

Summary for a closing note (counts of cases, clean errors, tracebacks, hangs, files
changed)::

    python -m tests.test_hostile_inputs
"""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import pytest
import yaml

from tests.hostile_cases import REPO, SCENARIO_CASES, Case
from tests.hostile_cases_commands import COMMAND_CASES
from tests.hostile_cases_io import IO_CASES
from tests.hostile_cases_plan import PLAN_CASES
from tests.hostile_cases_sim2real import VALIDATE_CASES

CASES: list[Case] = SCENARIO_CASES + COMMAND_CASES + IO_CASES + VALIDATE_CASES + PLAN_CASES

GIB = 2**30
MAX_LINE = 2000             # an error line longer than this echoes too much



@dataclass
class Outcome:
    """What one case did."""

    case: Case
    returncode: int | None
    stdout: str
    stderr: str
    changed: list[str]
    hung: bool

    @property
    def lines(self) -> list[str]:
        return self.stderr.splitlines()

    @property
    def traceback(self) -> bool:
        return "Traceback" in self.stderr or "Traceback" in self.stdout

    def problems(self) -> list[str]:
        """Why this outcome is not a clean error (empty when it is)."""
        out = []
        if self.hung:
            out.append(f"no answer within {self.case.timeout_s:g} s")
        elif self.returncode != 2:
            out.append(f"exit code {self.returncode}, expected 2")
        if self.traceback:
            out.append("a traceback")
        if len(self.lines) != 1 or not self.lines[0].strip():
            out.append(f"{len(self.lines)} stderr lines, expected 1")
        elif not self.lines[0].startswith("specsim: error: "):
            out.append("the stderr line does not start with 'specsim: error: '")
        elif len(self.lines[0]) > MAX_LINE:
            out.append(f"the stderr line has {len(self.lines[0])} characters (> {MAX_LINE})")
        if self.lines and self.case.expect.lower() not in self.stderr.lower():
            out.append(f"stderr does not mention {self.case.expect!r}")
        if self.changed:
            out.append("files changed: " + ", ".join(self.changed[:5]))
        return out


# ---------------------------------------------------------------- running a case

def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def _write_files(root: Path, files: Mapping[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def run_case(case: Case, root: Path | None = None) -> Outcome:
    """Run one case in a fresh folder (under ``root``, else the system temp folder)."""
    work = Path(tempfile.mkdtemp(prefix=f"hostile-{case.id[:40]}-", dir=root))
    try:
        _write_files(work, case.files)
        before = _snapshot(work)
        limit = int(case.memory_gib * GIB)

        def preexec() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]]
                                                            if env.get("PYTHONPATH") else []))
        env.pop("PYTHONWARNINGS", None)
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"  # BLAS thread buffers would count against RLIMIT_AS on big hosts
        try:
            proc = subprocess.run([sys.executable, "-m", "simulator.cli", *case.argv],
                                  cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=case.timeout_s, preexec_fn=preexec, env=env)
            rc, out, err, hung = proc.returncode, proc.stdout, proc.stderr, False
        except subprocess.TimeoutExpired as exc:
            rc, out, err, hung = None, exc.stdout or b"", exc.stderr or b"", True
        after = _snapshot(work)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        return Outcome(case, rc, out.decode("utf-8", "replace"),
                       err.decode("utf-8", "replace"), changed, hung)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_cases(cases: list[Case], workers: int | None = None,
              root: Path | None = None) -> dict[str, Outcome]:
    """Run ``cases`` concurrently, one subprocess per core by default."""
    workers = workers or max(1, os.cpu_count() or 1)
    with ThreadPoolExecutor(workers) as pool:
        outcomes = list(pool.map(lambda c: run_case(c, root), cases))
    return {o.case.id: o for o in outcomes}


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    assert len(CASES) >= 90


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory) -> dict[str, Outcome]:
    """Every selected case's outcome, computed once, in parallel."""
    wanted = {item.callspec.id for item in request.session.items
              if getattr(item, "originalname", None) == "test_hostile_input"
              and hasattr(item, "callspec")}
    cases = [c for c in CASES if c.id in wanted] or CASES
    return run_cases(cases, root=tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input(case: Case, outcomes: dict[str, Outcome]):
    outcome = outcomes[case.id]
    problems = outcome.problems()
    assert not problems, f"{case.id}: {'; '.join(problems)}\nstderr: {outcome.stderr[-2000:]}"


def test_guards_keep_safe_load_semantics():
    """Valid documents (anchors, merge keys, timestamps, big lists) load as safe_load does."""
    from simulator.inputs.yaml_io import parse_yaml_text
    docs = ["base: &b {x: 1, y: [1, 2]}\nm:\n  <<: *b\n  x: 3\nl: [*b, *b]\n",
            "t: 2001-12-14\nf: 1.5e+3\ns: '1e9'\nn: null\nb: yes\n",
            "v: [" + ", ".join(str(i) for i in range(50_000)) + "]\n",
            "a: " + "[" * 60 + "]" * 60 + "\n",      # 61 levels: within MAX_YAML_DEPTH
            "'1': a\n1: b\n"]                          # a string and an int: two keys
    for text in docs:
        assert parse_yaml_text(text, source="t") == yaml.safe_load(text)


def test_allow_large_confirms_but_the_hard_limit_holds():
    from simulator.inputs.errors import SpecsimError
    from simulator.planning.sweep import CONFIRM_POINTS, MAX_POINTS, check_sweep_size
    for mode in ("analytic", "simulated"):
        check_sweep_size(CONFIRM_POINTS[mode], mode=mode)
        with pytest.raises(SpecsimError, match="--allow-large"):
            check_sweep_size(CONFIRM_POINTS[mode] + 1, mode=mode)
        check_sweep_size(MAX_POINTS[mode], mode=mode, allow_large=True)
        with pytest.raises(SpecsimError, match="even with --allow-large"):
            check_sweep_size(MAX_POINTS[mode] + 1, mode=mode, allow_large=True)


def test_number_lists_check_a_range_before_expanding_it():
    from simulator.cli.args import MAX_LIST_VALUES, parse_number_list
    from simulator.inputs.errors import SpecsimError
    assert parse_number_list("0-3,8", field="--gamma", maximum=64) == [0, 1, 2, 3, 8]
    assert len(parse_number_list(f"1-{MAX_LIST_VALUES}", field="--batch")) == MAX_LIST_VALUES
    with pytest.raises(SpecsimError, match="limit is 10,000"):
        parse_number_list("0-999999999999999999", field="--batch")  # no 10^18-item set
    with pytest.raises(SpecsimError, match="above the limit of 64"):
        parse_number_list("0-999999999", field="--gamma", maximum=64)


def summary(outcomes: dict[str, Outcome]) -> dict[str, int]:
    """Counts for a closing note."""
    values = list(outcomes.values())
    return {"cases": len(values),
            "clean errors": sum(not o.problems() for o in values),
            "tracebacks": sum(o.traceback for o in values),
            "hangs": sum(o.hung for o in values),
            "files changed": sum(bool(o.changed) for o in values)}


def main() -> int:
    import argparse
    import time
    parser = argparse.ArgumentParser(description="run the hostile-input cases, print counts")
    parser.add_argument("-k", default="", help="only the cases whose id contains this")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--show", action="store_true", help="print every case's error line")
    args = parser.parse_args()
    start = time.monotonic()
    results = run_cases([c for c in CASES if args.k in c.id], workers=args.workers)
    for outcome in results.values():
        problems = outcome.problems()
        if args.show:
            print(f"{outcome.case.id}: {outcome.stderr.strip()[:400]}")
        if problems:
            print(f"FAIL {outcome.case.id}: {'; '.join(problems)}")
            print("     " + (outcome.stderr.strip().splitlines() or [""])[-1][:300])
    counts = summary(results)
    print(", ".join(f"{k}: {v}" for k, v in counts.items())
          + f" ({time.monotonic() - start:.0f} s)")
    return 0 if counts["clean errors"] == counts["cases"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
