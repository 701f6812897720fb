"""A full disk (ENOSPC, simulated by patching the writer): one line naming the file and the
reason, exit 2, no traceback, nothing half-written left (issue 37: it printed "cannot read or
write: oSError", naming nothing)."""
from __future__ import annotations

import errno
import os

import pandas as pd
import pytest

from simulator.cli import main
from simulator.output_lock import describe_os_error

FAST = ["--no-progress", "--set", "workload.max_requests=20"]


def _half_then_full(suffix: str, error: OSError):
    """A DataFrame.to_csv that writes half of a file ending in ``suffix``, then fails."""
    real = pd.DataFrame.to_csv

    def to_csv(self, path=None, *args, **kwargs):
        if path is None or not str(path).endswith(suffix):
            return real(self, path, *args, **kwargs)
        text = real(self, None, *args, **kwargs)
        with open(path, kwargs.get("mode", "w")) as handle:
            handle.write(text[: len(text) // 2])
        raise error
    return to_csv


def _entries(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("error, reason", [
    (OSError(errno.ENOSPC, "No space left on device"), "no space left on device"),
    (OSError(), "OSError"),                      # no errno, no message: named by its type
])
def test_a_full_disk_while_writing_results_names_the_file(tmp_path, monkeypatch, capsys,
                                                          error, reason):
    monkeypatch.setattr(pd.DataFrame, "to_csv", _half_then_full("steps.csv", error))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["run", *FAST, "--results-format", "csv", "--out", "res"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("specsim: error: --out: cannot write 'res/00-none.steps.csv': "
                             f"{reason}"), err[0]
    assert _entries(tmp_path) == ["keep.txt"]    # no results folder, no temporary


def test_a_full_disk_while_writing_parquet_names_the_file(tmp_path, monkeypatch, capsys):
    """The default format: the Parquet writer fails half-way the same way (pyarrow's, which
    writes a run's tables from their columns: simulator/results_arrow.py)."""
    import pyarrow.parquet as pq
    real = pq.write_table

    def write_table(table, path, *args, **kwargs):
        if not str(path).endswith("steps.parquet"):
            return real(table, path, *args, **kwargs)
        with open(path, "wb") as handle:
            handle.write(b"PAR1 half a file")
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(pq, "write_table", write_table)
    monkeypatch.chdir(tmp_path)
    assert main(["run", *FAST, "--out", "res"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'res/00-none.steps.parquet': no space left on device" in err[0]
    assert _entries(tmp_path) == []


def test_a_full_disk_while_appending_to_a_sweep_keeps_the_rows_before(tmp_path, monkeypatch):
    from simulator.inputs.errors import SpecsimError
    from simulator.planning.result_sink import ResultSink
    out = tmp_path / "s.csv"
    sink = ResultSink(out)
    sink.add({"key": "a", "value": 1})
    sink.flush()
    before = out.read_bytes()
    monkeypatch.setattr(pd.DataFrame, "to_csv", _half_then_full(
        "s.csv", OSError(errno.ENOSPC, "No space left on device")))
    sink.add({"key": "b", "value": 2})
    with pytest.raises(SpecsimError, match=r"--out: cannot write '.*s\.csv': no space left"):
        sink.flush()
    assert out.read_bytes() == before            # the half row was cut off again
    assert [p.name for p in tmp_path.iterdir()] == ["s.csv"]


@pytest.mark.parametrize("exc, text", [
    (OSError(errno.ENOSPC, "No space left on device"), "no space left on device"),
    (OSError(errno.ENOSPC, ""), os.strerror(errno.ENOSPC).lower()),
    (OSError("disk quota hit"), "disk quota hit"),
    (OSError(), "OSError"),
])
def test_describe_os_error_always_gives_a_reason(exc, text):
    assert describe_os_error(exc) == text


def test_a_full_disk_while_writing_a_file_output_leaves_the_old_file(tmp_path):
    """tokenize, plan --out, report -o, --timeline: a temporary sibling renamed into place;
    a write cut short names the target and leaves the earlier file and no temporary."""
    from simulator.inputs.errors import SpecsimError
    from simulator.output_paths import write_file_atomic
    target = tmp_path / "table.csv"
    target.write_text("old,complete\n")

    def half_then_full(tmp):
        tmp.write_text("new,half")
        raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(SpecsimError, match=r"--out: cannot write '.*table\.csv': no space left"):
        write_file_atomic(target, half_then_full, "--out")
    assert target.read_text() == "old,complete\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]
