"""Issue 37: a report was rendered from a results folder whose requests.csv had been cut
mid-row, without a word.  The manifest now lists each table's rows; a table cut mid-row
or holding another count is one error naming the file, and no report is written."""
from __future__ import annotations

import json
import shutil

import pytest

from simulator.cli import main

# CSV tables: the cuts below are a CSV's (rows, a last line); a cut Parquet file is below
FAST = ["--no-progress", "--set", "workload.max_requests=20", "--results-format", "csv"]
REQUESTS = "00-none.requests.csv"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    assert main(["run", *FAST, "--out", str(root / "r")]) == 0
    return root / "r"


@pytest.fixture
def folder(results, tmp_path):
    shutil.copytree(results, tmp_path / "r")
    return tmp_path / "r"


def _report(folder, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["report", str(folder), "-o", str(folder.parent / "page.html")])
    return code, capsys.readouterr().err.strip().splitlines()


def _cut(path, keep_bytes: int) -> None:
    path.write_bytes(path.read_bytes()[:keep_bytes])


def test_the_manifest_lists_every_tables_rows(results):
    manifest = json.loads((results / "manifest.json").read_text())
    rows = manifest["policies"][0]["rows"]
    assert rows["requests"] == 20    # the trace's first 20 requests, one row each
    lines = (results / REQUESTS).read_text().splitlines()
    assert len(lines) - 1 == rows["requests"]


def test_a_table_cut_mid_row_is_refused_naming_it(folder, capsys):
    data = (folder / REQUESTS).read_bytes()
    _cut(folder / REQUESTS, len(data) // 2 + 3)
    code, err = _report(folder, capsys)
    assert code == 2 and len(err) == 1, err
    assert REQUESTS in err[0] and "the last row is cut off" in err[0]
    assert not (folder.parent / "page.html").exists()


def test_a_table_cut_between_rows_is_refused_by_its_count(folder, capsys):
    data = (folder / REQUESTS).read_bytes()
    _cut(folder / REQUESTS, data.rfind(b"\n", 0, len(data) // 2) + 1)  # whole rows only
    code, err = _report(folder, capsys)
    assert code == 2 and len(err) == 1, err
    assert REQUESTS in err[0] and "where the manifest lists 20" in err[0]
    assert not (folder.parent / "page.html").exists()


def test_a_whole_folder_and_one_written_before_the_counts_still_report(folder, capsys):
    assert _report(folder, capsys)[0] == 0
    manifest = json.loads((folder / "manifest.json").read_text())
    for entry in manifest["policies"]:
        del entry["rows"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert _report(folder, capsys)[0] == 0
    manifest["policies"][0]["rows"] = {"requests": "20"}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    code, err = _report(folder, capsys)
    assert code == 2 and "'rows' must map table names to row counts" in err[0]


def test_a_cut_parquet_table_is_refused_naming_it(tmp_path, capsys):
    """The default format: a Parquet table cut short loses its footer and is refused."""
    out = tmp_path / "r"
    assert main(["run", "--no-progress", "--set", "workload.max_requests=20", "--out",
                 str(out)]) == 0
    table = out / "00-none.requests.parquet"
    _cut(table, table.stat().st_size // 2)
    code, err = _report(out, capsys)
    assert code == 2 and len(err) == 1, err
    assert "00-none.requests.parquet" in err[0]
    assert not (tmp_path / "page.html").exists()

