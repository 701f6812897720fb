"""Sweeps' output files: interrupted and resumed exactly, restarts that never remove what
specsim did not write (split from test_output_paths.py, whose helpers these use)."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd

from tests.helpers import REPO
from tests.simulator.test_output_paths import EXE, cli, one_error_line, snapshot

SWEEP = """\
name: resumable
mode: simulated
scenario: default
fixed: {workload.max_requests: 30}
points:
  - {policy: none}
  - {policy: {name: chain, num_speculative_tokens: 2}}
grid:
  workload.rate_per_s: [1, 2, 3, 4, 5, 6]
"""


def test_sweep_interrupted_then_resumed_is_exact(tmp_path):
    (tmp_path / "s.yaml").write_text(SWEEP)
    ref = cli("sweep", "s.yaml", "--executor", "serial", "--no-progress", "--out", "ref.csv",
              "--format", "csv", cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr
    proc = subprocess.Popen(EXE + ["sweep", "s.yaml", "--executor", "serial", "--no-progress",
                                   "--out", "part.csv"], cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    t0 = time.monotonic()
    while _lines(tmp_path / "part.csv") < 2 and time.monotonic() - t0 < 120 \
            and proc.poll() is None:  # a header and at least one point written
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err
    if proc.returncode == 130:  # the last line says so; before it only acceptance warnings
        lines = err.strip().splitlines()
        assert lines[-1] == "specsim: interrupted; nothing was left half-written"
        assert all(line.startswith(("warning: ", "    ")) for line in lines[:-1]), lines
    rows = pd.read_csv(tmp_path / "part.csv")
    assert 0 < len(rows) <= 12
    resumed = cli("sweep", "s.yaml", "--executor", "serial", "--no-progress", "--out",
                  "part.csv", "--format", "csv", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    a = pd.read_csv(tmp_path / "ref.csv").drop(columns=["point"])
    b = pd.read_csv(tmp_path / "part.csv").drop_duplicates("key", keep="last")
    b = b.set_index("key").loc[a["key"]].reset_index().drop(columns=["point"])
    pd.testing.assert_frame_equal(a[sorted(a.columns)], b[sorted(b.columns)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part.csv", "ref.csv", "s.yaml"]


def test_local_pool_sweep_interrupted_leaves_no_traceback(tmp_path):
    (tmp_path / "s.yaml").write_text(SWEEP)
    proc = subprocess.Popen(EXE + ["sweep", "s.yaml", "--executor", "local", "--workers", "2",
                                   "--no-progress", "--out", "pool.csv"], cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    t0 = time.monotonic()  # wait until the pool's workers exist, then a little longer
    while not _children(proc.pid) and time.monotonic() - t0 < 120 and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.2)  # workers may be booting: a Ctrl-C then must not print their tracebacks
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert proc.returncode in (0, 130), err
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".specsim-")]
    assert leftovers == []


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


# --------------------------------------------------------------------------- sweep and plan files
def test_sweep_refuses_an_unrelated_csv_even_with_restart(tmp_path):
    (tmp_path / "s.yaml").write_text(SWEEP)
    (tmp_path / "mydata.csv").write_text("name,value\nalice,1\n")
    before = snapshot(tmp_path)
    for extra in ([], ["--restart"]):
        out = cli("sweep", "s.yaml", "--no-progress", "--out", "mydata.csv", *extra,
                  cwd=tmp_path)
        one_error_line(out, "not a specsim sweep file")
        assert snapshot(tmp_path) == before


def test_sweep_restart_checks_the_suffix_before_removing(tmp_path):
    (tmp_path / "s.yaml").write_text(SWEEP)
    (tmp_path / "mydata").mkdir()
    (tmp_path / "mydata" / "keep.txt").write_text("keep")
    before = snapshot(tmp_path)
    one_error_line(cli("sweep", "s.yaml", "--out", "mydata", "--restart", cwd=tmp_path),
                   "cannot tell the format")
    (tmp_path / "mydata.parquet").mkdir()
    (tmp_path / "mydata.parquet" / "notes.txt").write_text("keep")
    before = snapshot(tmp_path)
    one_error_line(cli("sweep", "s.yaml", "--out", "mydata.parquet", "--restart",
                       cwd=tmp_path), "files a sweep did not write")
    assert snapshot(tmp_path) == before


def test_sweep_restart_discards_its_own_file(tmp_path):
    (tmp_path / "k.yaml").write_text((REPO / "workloads/scenarios/sweep_kstar.yaml").read_text())
    first = cli("sweep", "k.yaml", "--out", "k.csv", "--no-progress", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    with open(tmp_path / "k.csv", "a") as fh:  # a row of a point no longer in the sweep
        fh.write("999,deadbeef" + "," * (len(pd.read_csv(tmp_path / "k.csv").columns) - 2) + "\n")
    again = cli("sweep", "k.yaml", "--out", "k.csv", "--no-progress", "--restart", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "deadbeef" not in (tmp_path / "k.csv").read_text()
