"""`specsim run`'s results without pandas: the summary rows (simulator/summary_rows.py)
against the DataFrame they replace, the Parquet columns (simulator/results_arrow.py)
against pyarrow's conversion of the frame, and a run that imports no pandas."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from simulator.cli.output import dtype_kind, render_columns, render_table
from simulator.results_arrow import _array, write_columns, write_requests
from simulator.results_columns import RequestColumns
from simulator.scenario import load_scenario
from simulator.simulate import simulate
from simulator.summary_rows import SummaryRows
from tests.helpers import REPO

ROWS = [  # every type a summary holds, and the mixes pandas turns into floats
    [{"policy": "none", "n": 3, "x": 0.1, "big": 1e16, "tiny": 1e-5, "nan": math.nan,
      "inf": math.inf, "flag": True, "g": None, "i_none": 4, "all_none": None,
      "mix": 2, "text": 'a,b "c"'},
     {"policy": "chain:gamma=4", "n": 5, "x": 1 / 3, "big": 123456789012345678.0,
      "tiny": 2.5e-300, "nan": 1.0, "inf": -0.0, "flag": False, "g": 0.25, "i_none": None,
      "all_none": None, "mix": 2.5, "text": "é"}],
    [{"policy": "only", "v": 1.0}],
]


@pytest.mark.parametrize("rows", ROWS)
def test_summary_csv_is_pandas_to_csv_byte_for_byte(tmp_path, rows):
    ours, theirs = tmp_path / "ours.csv", tmp_path / "theirs.csv"
    table = SummaryRows([dict(r) for r in rows])
    assert table.csv_cells() is not None  # written by our writer, not pandas'
    table.write_csv(ours)
    pd.DataFrame(rows).to_csv(theirs, index=False)
    assert ours.read_bytes() == theirs.read_bytes()
    frame = pd.DataFrame(rows)
    assert table.kinds() == {c: dtype_kind(frame[c].dtype) for c in frame.columns}
    pd.testing.assert_frame_equal(table.frame(), frame)


def test_an_unknown_mix_goes_to_pandas(tmp_path):
    rows = [{"p": "a", "m": True}, {"p": "b", "m": None}]  # a bool beside a missing value
    table = SummaryRows(rows)
    assert table.kinds() is None and table.csv_cells() is None
    table.write_csv(tmp_path / "s.csv")
    pd.DataFrame(rows).to_csv(tmp_path / "p.csv", index=False)
    assert (tmp_path / "s.csv").read_bytes() == (tmp_path / "p.csv").read_bytes()


def test_plain_columns_print_as_the_frame_prints():
    frame = pd.DataFrame(ROWS[0])
    columns = [(c, frame[c].tolist(), dtype_kind(frame[c].dtype)) for c in frame.columns]
    for width in (60, 1000):
        groups = [["n", "x", "big"], ["tiny", "flag", "text"]]
        assert render_columns(columns, keys=["policy"], width=width, groups=groups) == \
            render_table(frame, keys=["policy"], width=width, groups=groups)


@pytest.mark.parametrize("values", [
    np.array([1.5, np.nan, -0.0, np.inf]), np.arange(5), np.arange(5, dtype=np.int32),
    np.array([True, False, True] * 5), np.array(["", "a", "été"], dtype=object),
    np.zeros(0), np.array([1.0, 2.0])[::2]])
def test_a_column_converts_as_pyarrow_converts_pandas_values(values):
    ours = _array(pa, values)
    kind = values.dtype.kind
    theirs = pa.array(values, type=pa.large_string() if kind == "O" else None,
                      from_pandas=True)  # a NaN a null, as pandas' conversion
    assert ours.type == theirs.type and ours.equals(theirs)
    assert ours.null_count == theirs.null_count


def test_a_runs_tables_read_back_as_the_frames_pandas_writes(tmp_path):
    sc = load_scenario(None, ["workload.max_requests=30", "engine.steps_table=all"])
    res = simulate(sc)
    req, steps = res.unread_columns()
    assert req is not None and steps is not None  # no frame built yet
    write_requests(tmp_path / "r.parquet", req)
    write_columns(tmp_path / "s.parquet", steps, ["replica"])
    res.requests.to_parquet(tmp_path / "rp.parquet", index=False)
    res.steps.to_parquet(tmp_path / "sp.parquet", index=False)
    for ours, theirs in (("r", "rp"), ("s", "sp")):
        a, b = (pq.read_table(tmp_path / f"{n}.parquet") for n in (ours, theirs))
        assert a.equals(b)
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / f"{ours}.parquet"),
                                      pd.read_parquet(tmp_path / f"{theirs}.parquet"))
    pd.testing.assert_frame_equal(RequestColumns.of_frame(res.requests).frame(), res.requests)


def test_a_plain_run_imports_no_pandas(tmp_path):
    """The default `specsim run` (a trace of the usual form, Parquet, the table) imports no
    pandas: about 0.24 s of CPU of every such process (issue 36)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,30,8\n0.25,12,20\n1,50,5\n")
    code = ("import sys; from simulator.cli import main; "
            f"rc = main(['run', '--no-progress', '--out', {str(tmp_path / 'o')!r}, "
            f"'--set', 'workload={{trace: {trace}, format: specsim}}']); "
            "print(rc, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "0 False"
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["policies"][0]["rows"]["requests"] == 3
