"""The README's commands as a new user runs them: default flags, no TTY, stdin closed.

simpy 4.1.2 turned the old progress loop (``while env.peek() != inf: env.run(until=...)``)
into a hang that no test saw, because every test passed ``--no-progress``.  These tests run
the README's main command verbatim (progress on, output not a terminal) under a timeout,
check that ``.ci/run`` runs both README commands verbatim, and pin the event loop's
independence from SimPy's queue internals.
"""
import re
import subprocess

import numpy as np
import pandas as pd
import pytest
import simpy

from simulator.scenario import load_scenario
from simulator.simulate import simulate
from tests.helpers import REPO, specsim_command

TIMEOUT_S = 300  # the default scenario takes a few seconds; a hang is caught, not waited out


def readme_commands() -> list[str]:
    """The two commands at the top of README.md (the first two ```bash blocks)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)
    return [b.strip() for b in blocks[:2]]


NOT_RUN = "<!-- not run:"  # the marker of a README block no test and no CI job runs


def bash_blocks() -> list[tuple[bool, str]]:
    """(marked not run, body) of every ```bash block of README.md, in order."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return [(bool(marker), body.strip()) for marker, body in
            re.findall(r"(<!-- not run:[^\n]*-->\n)?```bash\n(.*?)\n```", text, flags=re.S)]


def ci_commands() -> list[str]:
    """The commands ``.ci/run`` runs, as written inside its ``bash -c "..."`` wrappers."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    return re.findall(r'bash -c "(.*?)" < /dev/null', ci)


def specsim_part(command: str) -> list[str]:
    """The ``specsim ...`` command after the install steps, as argv."""
    import shlex
    tail = command.split("&&")[-1].strip()
    argv = shlex.split(tail)
    assert argv[0] == "specsim", command
    return argv


def run_quiet(argv, cwd, timeout=TIMEOUT_S, **kw):
    exe = specsim_command()
    return subprocess.run(exe + argv[1:], cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout, **kw)


def test_readme_has_the_two_commands_and_ci_runs_them_verbatim():
    install_run, install_test = readme_commands()
    assert install_run.startswith("python3 -m venv .venv") and "specsim run" in install_run
    assert "pytest" in install_test
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    ci_lines = [line.strip() for line in ci.splitlines()]
    # each README command appears in .ci/run as written (inside a timeout wrapper)
    for cmd in (install_test, install_run):
        assert any(cmd in line for line in ci_lines), f".ci/run does not run {cmd!r} verbatim"
    # tests first, then the main job; both bounded in time, standard input closed
    assert ci.index(install_test) < ci.index(install_run)
    assert ci.count("timeout ") >= 2 and "< /dev/null" in ci


def test_ci_runs_exactly_the_readme_commands_and_parses():
    """.ci/run's two wrapped commands are, string for string, README commands 2 and 1 (the
    first two bash blocks, neither marked not run), and the script is valid bash."""
    install_run, install_test = readme_commands()
    assert ci_commands() == [install_test, install_run]
    assert [marked for marked, _ in bash_blocks()[:2]] == [False, False]
    check = subprocess.run(["bash", "-n", str(REPO / ".ci" / "run")], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stderr


def test_the_third_block_is_the_question_and_every_later_one_is_marked_not_run():
    """The first two blocks are run by .ci/run and the tests above, the third (the one-line
    question) by the test below; any later one says that nothing runs it."""
    blocks = bash_blocks()
    marked, question = blocks[2]
    assert not marked and question.startswith("specsim plan --target ")
    assert all(marked for marked, _ in blocks[3:]), blocks[3:]


def test_readme_question_runs_verbatim(tmp_path):
    """README command 3, verbatim (progress on, no terminal): a verdict, and the winner's
    files written where it says."""
    import shlex
    argv = shlex.split(bash_blocks()[2][1])
    out = run_quiet(argv, tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    # the verdict sentence: what the best deployment holds at the asked rate
    assert re.search(r"8 x h100-sxm as \d+ x TP\d+ with .* hold 4 req/s at p99 TTFT",
                     out.stdout.replace("\n  ", " ")), out.stdout
    assert {p.name for p in (tmp_path / "specsim-plan").iterdir()} >= {
        "vllm-serve.yaml", "serve.sh", "scenario.yaml"}


def test_readme_main_command_finishes_with_default_flags(tmp_path):
    """README command 1's specsim part, verbatim: progress on, no terminal, stdin closed."""
    argv = specsim_part(readme_commands()[0])
    assert "--no-progress" not in argv
    out = run_quiet(argv, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["policy", "finished"])
    assert "p50_ttft_ms" in header and "speedup_vs_none" in header
    rows = {line.split()[0] for line in lines[lines.index(header) + 1:] if line.strip()}
    assert {"none", "chain"} <= rows
    report = tmp_path / "specsim-out" / "report.html"
    assert report.stat().st_size > 100_000
    assert b'<meta name="generator" content="specsim">' in report.read_bytes()[:4096]
    assert (tmp_path / "specsim-out" / "summary.csv").exists()
    # a second run replaces its own folder whole and keeps the report it writes again
    again = run_quiet(argv, tmp_path)
    assert again.returncode == 0, again.stderr
    assert report.exists() and not list(tmp_path.glob(".specsim-*"))


@pytest.mark.parametrize("scenario", ["specinfer.yaml", "eagle2.yaml"])
def test_tree_scenario_finishes_with_default_flags(tmp_path, scenario):
    argv = ["specsim", "run", str(REPO / "workloads" / "scenarios" / scenario)]
    out = run_quiet(argv, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert "mean_acceptance_length" in out.stdout
    summary = pd.read_csv(tmp_path / "specsim-out" / "summary.csv")
    assert (summary["finished"] > 0).all()


def test_progress_run_is_event_driven_and_identical(monkeypatch):
    """With a progress callback the run must end when SimPy's queue empties, whatever
    ``peek()`` says after ``run(until=...)``: forbid both and the run still completes."""
    sc = load_scenario(None, ["workload.max_requests=40"])
    plain = simulate(sc)
    calls = []

    def forbidden(*a, **k):
        raise AssertionError("the event loop must not poll SimPy's queue")
    monkeypatch.setattr(simpy.Environment, "peek", forbidden)
    real_run = simpy.Environment.run

    def run_without_until(self, until=None):
        assert until is None, "run(until=...) leaves SimPy-version-dependent events queued"
        return real_run(self)
    monkeypatch.setattr(simpy.Environment, "run", run_without_until)
    tracked = simulate(sc, progress=lambda done, total: calls.append((done, total)))
    pd.testing.assert_frame_equal(plain.requests, tracked.requests)
    pd.testing.assert_frame_equal(plain.steps, tracked.steps)
    done = np.array([c[0] for c in calls])
    assert all(c[1] == 40 for c in calls)
    assert np.all(np.diff(done) >= 0) and done[-1] == 40
    assert len(calls) >= 2  # ticked as requests finished, not only at the end


def test_on_a_terminal_the_run_shows_a_bar_and_finishes(tmp_path):
    """stderr on a pseudo-terminal: tqdm draws its bar, and the run still ends."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import termios
    import time
    master, slave = pty.openpty()
    # a real terminal's size (a bare pty is 0 columns wide, and tqdm draws nothing there)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    exe = specsim_command()
    proc = subprocess.Popen(exe + ["run"], cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    stdout = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0, seen.decode(errors="replace")
    assert "requests" in seen.decode(errors="replace")  # the bar's unit
    assert "speedup_vs_none" in stdout
