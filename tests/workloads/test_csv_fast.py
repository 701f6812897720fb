"""The usual trace CSV read without pandas (workloads/csv_fast.py): the same workload, or
the same error, as pandas' reading alone; any other form declined to pandas."""
from __future__ import annotations

import numpy as np
import pytest

from tests.workloads.read_compare import read_both, same
from workloads import traces
from workloads.csv_fast import decimal_values, read_usual, usual_columns

SPECSIM_HEAD = "arrival_s,prompt_tokens,output_tokens\n"
VIDUR_HEAD = "arrived_at,num_prefill_tokens,num_decode_tokens\n"


def test_random_decimal_times_parse_as_pandas_parses_them(tmp_path, monkeypatch):
    # 1 to 15 digits, 0 to 14 decimals: an exact integer over an exact power of ten, one
    # correctly rounded division (pandas' precise_xstrtod, and Python's float)
    rng = np.random.default_rng(7)
    cells = []
    for digits in rng.integers(1, 16, 3000):
        decimals = int(rng.integers(0, digits))
        text = "".join(str(d) for d in rng.integers(0, 10, int(digits)))
        cells.append(text[:len(text) - decimals] + ("." + text[-decimals:] if decimals else ""))
    cells = sorted(cells, key=float)
    rows = "".join(f"{c},{i % 97 + 1},{i % 13 + 1}\n" for i, c in enumerate(cells))
    path = tmp_path / "t.csv"
    path.write_text(SPECSIM_HEAD + rows)
    assert decimal_values(np.array(cells, dtype=object)) is not None  # the fast path ran
    same(*read_both(monkeypatch, traces.read_specsim, path))


@pytest.mark.parametrize("reader,head", [(traces.read_specsim, SPECSIM_HEAD),
                                         (traces.read_vidur, VIDUR_HEAD)])
@pytest.mark.parametrize("rows", [
    "0,10,10\n1.5,20,3\n", "0.000001,1,1\n2,3,4",            # no newline at the end
    "5,10,10\n1,10,10\n",                                      # out of order: its error
    "0,0,10\n", "0,10,2000001\n", "1000000000.5,10,10\n",     # a zero, too many, too late
    "0,10,10\n1e3,10,10\n", "0, 10,10\n", "0,10,10\n\n", "-1,10,10\n", "1.,10,10\n",
    ".5,10,10\n", '"0",10,10\n', "0,10,10\r\n", "0,10,10,4\n", "0,10\n", "0,1.0,10\n",
    "1234567890123456,10,10\n", "0.1234567890123456,10,10\n", "nan,10,10\n", ""])
def test_a_trace_reads_as_pandas_reads_it(tmp_path, monkeypatch, reader, head, rows):
    # the usual rows by the fast path, errors included; a space, a sign, an exponent, a
    # blank line, a quote, a carriage return, a ragged row, 16 digits: pandas alone decides
    path = tmp_path / "t.csv"
    path.write_text(head + rows)
    same(*read_both(monkeypatch, reader, path))


@pytest.mark.parametrize("text", [
    "\ufeffarrival_s,prompt_tokens,output_tokens\n0,1,1\n",   # a byte-order mark
    "arrival_s,prompt_tokens,output_tokens,task\n0,1,1,chat\n",  # a column beside them
    "arrival_s,prompt_tokens,prompt_tokens\n0,1,1\n",         # a repeated name
    "arrival_s,prompt_tokens,output_tokens,\n0,1,1,\n",       # an empty name
    "arrival_s,prompt_tokens,output_tokens\n"])               # no row
def test_other_forms_are_declined_to_pandas(tmp_path, monkeypatch, text):
    path = tmp_path / "t.csv"
    path.write_bytes(text.encode("utf-8"))
    assert read_usual(path, traces.SPECSIM_COLUMNS, only=True) is None
    same(*read_both(monkeypatch, traces.read_specsim, path))


def test_the_columns_are_the_cells_pandas_reads(tmp_path):
    import pandas as pd
    path = tmp_path / "t.csv"
    path.write_text("a,b,c\n1, x ,3\n4,,6\n")
    cols = usual_columns(path, ("a", "b"))
    frame = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False)
    assert list(cols) == list(frame.columns)
    for name in cols:
        assert cols[name].tolist() == frame[name].tolist()
