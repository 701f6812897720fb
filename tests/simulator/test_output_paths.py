"""Output folders and files: never lose a byte specsim did not write.

A foreign folder, ``.``, a symlink and a file given as ``--out`` are refused with every file
intact; a specsim results folder is replaced whole; two writers of one folder never mix;
Ctrl-C and SIGTERM leave no temporaries and no traceback; sweeps refuse foreign files, and an
interrupted sweep resumes to exactly the uninterrupted result.
"""
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from simulator.inputs.errors import SpecsimError
from simulator.output_paths import (
    OutputLock,
    ResultsFolderWriter,
    check_file_target,
    check_results_target,
)
from tests.helpers import REPO, specsim_command

EXE = specsim_command()
FAST = ["--no-progress", "--set", "workload.max_requests=20"]


def cli(*args, cwd, timeout=240):
    return subprocess.run(EXE + list(args), cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def snapshot(root: Path) -> dict:
    """Every entry under ``root`` (links not followed) with a digest of each file."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link->" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


def one_error_line(out, needle: str) -> str:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: error:"), out.stderr
    assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def user_files(tmp_path):
    """A user's folder: files, a sub-folder, a folder outside reached by a link."""
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.csv").write_text("x,y\n1,2\n")
    outside = tmp_path.parent / (tmp_path.name + "-outside")
    outside.mkdir()
    (outside / "precious.txt").write_text("do not delete\n")
    (tmp_path / "link").symlink_to(outside, target_is_directory=True)
    (tmp_path / "empty").mkdir()
    yield tmp_path
    assert (outside / "precious.txt").read_text() == "do not delete\n"


@pytest.mark.parametrize("out, needle", [
    (".", "current folder"),
    ("data", "not an empty folder or a specsim results folder (it holds a.csv)"),
    ("link", "symbolic link"),
    ("notes.txt", "not a folder"),
    ("missing/deeper/out", "does not exist"),
    ("/proc/specsim-out", "cannot write"),
])
def test_foreign_out_is_refused_with_every_file_intact(user_files, out, needle):
    before = snapshot(user_files)
    one_error_line(cli("run", *FAST, "--out", out, cwd=user_files), needle)
    assert snapshot(user_files) == before


def test_refusals_happen_before_any_simulation(user_files, monkeypatch, capsys):
    """Every output path is checked before the first request is simulated."""
    import simulator.cli.run as cli_run
    from simulator.cli import main

    def no_simulation(*a, **k):
        raise AssertionError("simulated before checking the output paths")
    monkeypatch.setattr(cli_run, "simulate", no_simulation)
    monkeypatch.chdir(user_files)
    for argv in (["--out", "data"], ["--out", "res", "--report", "notes.txt"],
                 ["--out", "res", "--report", "res"], ["--report", "specsim-out/a.csv"]):
        assert main(["run", "--no-progress", *argv]) == 2, argv
        assert "specsim: error:" in capsys.readouterr().err


@pytest.mark.parametrize("report, needle", [
    ("notes.txt", "was not written by specsim"),
    ("data", "is a folder"),
    ("link", "symbolic link"),
    ("missing/r.html", "does not exist"),
    ("/proc/r.html", "cannot"),
    ("res/sub/r.html", "sub-folder of the results folder"),
])
def test_foreign_report_path_is_refused(user_files, report, needle):
    before = snapshot(user_files)
    out = cli("run", *FAST, "--out", "res", "--report", report, cwd=user_files)
    one_error_line(out, needle)
    assert snapshot(user_files) == before


def test_results_folder_is_replaced_whole_with_its_old_report(tmp_path):
    """A folder of old results goes whole, its report (of those results) with it;
    rerunning the README's command rewrites the report (test_readme_commands)."""
    first = cli("run", *FAST, "--compare", "none,chain,chain:gamma=2", "--report",
                "specsim-out/report.html", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    old = set(os.listdir(tmp_path / "specsim-out"))
    assert "02-chain_gamma_2.requests.parquet" in old and "report.html" in old
    assert "report.html" in json.loads((tmp_path / "specsim-out" / "manifest.json")
                                       .read_text())["files"]
    second = cli("run", *FAST, "--compare", "none", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    new = set(os.listdir(tmp_path / "specsim-out"))
    manifest = json.loads((tmp_path / "specsim-out" / "manifest.json").read_text())
    assert new == set(manifest["files"]) | {"manifest.json"}  # whole: nothing stale, nothing mixed
    assert not any(n.startswith("01-") or n.startswith("02-") for n in new)
    assert sorted(os.listdir(tmp_path)) == ["specsim-out"]  # no temporaries, no lock left


def test_a_file_added_to_a_results_folder_makes_it_foreign(tmp_path):
    assert cli("run", *FAST, "--compare", "none", cwd=tmp_path).returncode == 0
    (tmp_path / "specsim-out" / "my-analysis.ipynb").write_text("{}")
    before = snapshot(tmp_path)
    one_error_line(cli("run", *FAST, "--compare", "none", cwd=tmp_path), "my-analysis.ipynb")
    assert snapshot(tmp_path) == before


def test_overwrite_writes_into_a_foreign_folder_and_touches_nothing_else(user_files):
    out = cli("run", *FAST, "--compare", "none", "--out", "data", "--overwrite", cwd=user_files)
    assert out.returncode == 0, out.stderr
    assert (user_files / "data" / "a.csv").read_text() == "x,y\n1,2\n"
    assert (user_files / "data" / "summary.csv").exists()
    # a second run with other policies removes only the files the first one listed
    out = cli("run", *FAST, "--compare", "chain", "--out", "data", "--overwrite", cwd=user_files)
    assert out.returncode == 0, out.stderr
    names = set(os.listdir(user_files / "data"))
    assert "a.csv" in names and "00-chain.requests.parquet" in names
    assert "00-none.requests.parquet" not in names


def test_empty_folder_is_used(user_files):
    out = cli("run", *FAST, "--compare", "none", "--out", "empty", cwd=user_files)
    assert out.returncode == 0, out.stderr
    assert (user_files / "empty" / "manifest.json").exists()


def test_a_held_lock_makes_a_second_writer_exit_2(tmp_path):
    with OutputLock((tmp_path / "specsim-out").absolute(), "--out"):
        one_error_line(cli("run", *FAST, cwd=tmp_path), "another specsim command is writing")
    assert not (tmp_path / "specsim-out").exists()
    assert cli("run", *FAST, cwd=tmp_path).returncode == 0  # released: the next one runs


def test_two_concurrent_writers_one_wins_whole(tmp_path):
    procs = [subprocess.Popen(EXE + ["run", "--no-progress", "--compare", pol],
                              cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for pol in ("none", "chain")]
    outs = [p.communicate(timeout=240) for p in procs]
    codes = [p.returncode for p in procs]
    assert 0 in codes and set(codes) <= {0, 2}, (codes, outs)
    for p, (_, err) in zip(procs, outs):
        assert "Traceback" not in err
        if p.returncode == 2:
            assert "another specsim command is writing" in err
    files = set(os.listdir(tmp_path / "specsim-out"))
    manifest = json.loads((tmp_path / "specsim-out" / "manifest.json").read_text())
    assert files == set(manifest["files"]) | {"manifest.json"}
    assert len(manifest["policies"]) == 1  # one run's folder, not a mix of two
    assert sorted(os.listdir(tmp_path)) == ["specsim-out"]


# --------------------------------------------------------------------------- signals
LONG_SCENARIO = """\
name: long
target: opt-13b
draft: opt-125m
policy: {name: chain, num_speculative_tokens: 4}
workload:
  synthetic:
    num_requests: 20000
    arrival: {process: poisson, rate_per_s: 2}
    prompt: {dist: fixed, tokens: 256}
    output: {dist: fixed, tokens: 128}
"""


@pytest.fixture
def long_run(tmp_path):
    """A run that takes a minute or more, and a work folder holding an earlier result."""
    inputs, work = tmp_path / "in", tmp_path / "work"
    inputs.mkdir()
    work.mkdir()
    (inputs / "long.yaml").write_text(LONG_SCENARIO)
    assert cli("run", *FAST, "--compare", "none", cwd=work).returncode == 0
    return inputs / "long.yaml", work


def _wait_for_temp(folder: Path, proc, timeout_s: float = 120.0) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s and proc.poll() is None:
        if any(p.name.startswith(".specsim-specsim-out-") for p in folder.iterdir()):
            return True
        time.sleep(0.05)
    return False


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig, code, delay_s", [
    (signal.SIGINT, 130, 0.0),     # while importing and loading (1 s after the start)
    (signal.SIGINT, 130, None),    # while simulating (the temporary folder exists)
    (signal.SIGINT, 130, 2.0),     # later in the simulation
    (signal.SIGTERM, 143, None),
])
def test_signal_leaves_no_temporaries_and_no_traceback(long_run, sig, code, delay_s):
    scenario, work = long_run
    before = snapshot(work)
    # Ctrl-C's default handling in the child, as in a terminal: a shell starts a background
    # job (a test run launched with `&`) with SIGINT ignored, and children inherit that
    proc = subprocess.Popen(EXE + ["run", str(scenario)], cwd=work, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)
    try:
        if delay_s is None or delay_s > 0:
            assert _wait_for_temp(work, proc), proc.communicate(timeout=10)
            time.sleep(delay_s or 0.2)
        else:  # past the interpreter's start-up, where any Python program prints a traceback
            time.sleep(1.0)
        os.killpg(proc.pid, sig)  # as a terminal does: the whole process group
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err
    if delay_s == 0.0 and proc.returncode == -sig:
        pass  # killed before Python installed its handlers: nothing was written yet
    else:
        assert proc.returncode == code, err
        assert len(err.strip().splitlines()) == 1, err
    assert snapshot(work) == before  # the earlier result intact, no .specsim-* left


def test_plan_out_refuses_a_foreign_file(tmp_path):
    (tmp_path / "table.csv").write_text("my,own\n1,2\n")
    before = snapshot(tmp_path)
    plan = REPO / "workloads" / "scenarios" / "plan_default.yaml"
    one_error_line(cli("plan", str(plan), "--out", "table.csv", cwd=tmp_path),
                   "was not written by specsim")
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- the library
def test_writer_removes_its_temporary_when_the_block_fails(tmp_path):
    out = tmp_path / "res"
    with pytest.raises(KeyboardInterrupt):
        with ResultsFolderWriter(out) as w:
            (w.path / "summary.csv").write_text("x\n")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []


def test_specsim_folder_check_rejects_a_forged_or_legacy_manifest(tmp_path):
    res = tmp_path / "res"
    res.mkdir()
    (res / "manifest.json").write_text(json.dumps({"policies": [{"label": "none"}]}))
    with pytest.raises(SpecsimError, match="not an empty folder or a specsim results folder"):
        check_results_target(res)
    (res / "manifest.json").write_text(json.dumps({"kind": "specsim-results",
                                                   "files": ["summary.csv"]}))
    (res / "summary.csv").mkdir()  # listed, but a folder: not ours to delete
    with pytest.raises(SpecsimError, match="summary.csv"):
        check_results_target(res)


def test_file_target_rules(tmp_path):
    (tmp_path / "r.html").write_text('<html><meta name="generator" content="specsim">')
    assert check_file_target(tmp_path / "r.html", "--report",
                             marks=(b'content="specsim"',)) == tmp_path / "r.html"
    (tmp_path / "x.html").write_text("<html>someone else's</html>")
    with pytest.raises(SpecsimError, match="add --overwrite"):
        check_file_target(tmp_path / "x.html", "--report", marks=(b'content="specsim"',))
    assert check_file_target(tmp_path / "x.html", "--report", overwrite=True)


def test_sweep_restart_with_a_bad_executor_argument_keeps_the_file(tmp_path):
    (tmp_path / "k.yaml").write_text((REPO / "workloads/scenarios/sweep_kstar.yaml").read_text())
    assert cli("sweep", "k.yaml", "--out", "k.csv", "--no-progress", cwd=tmp_path).returncode == 0
    before = snapshot(tmp_path)
    one_error_line(cli("sweep", "k.yaml", "--out", "k.csv", "--restart", "--executor", "local",
                       "--address", "127.0.0.1:6379", cwd=tmp_path), "--address")
    assert snapshot(tmp_path) == before


def test_overwrite_never_replaces_a_foreign_file_of_a_specsim_name(user_files):
    (user_files / "data" / "scenario.yaml").write_text("my scenario\n")
    before = snapshot(user_files)
    one_error_line(cli("run", *FAST, "--out", "data", "--overwrite", cwd=user_files),
                   "scenario.yaml, which specsim did not write")
    assert snapshot(user_files) == before


def test_overwrite_into_a_folder_never_replaces_a_foreign_report_there(user_files):
    (user_files / "data" / "report.html").write_text("<html>my page</html>")
    before = snapshot(user_files)
    one_error_line(cli("run", *FAST, "--out", "data", "--overwrite", "--report",
                       "data/report.html", cwd=user_files),
                   "holds report.html, which specsim did not write")
    assert snapshot(user_files) == before
