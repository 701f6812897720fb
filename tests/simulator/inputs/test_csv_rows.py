"""simulator/inputs/csv_rows.py: the line count that guards every CSV read, checked against
exact enumeration; each reader refuses one row above its limit before parsing."""
from __future__ import annotations

import pytest

from simulator.inputs.csv_rows import BLOCK_BYTES, check_csv_rows, count_data_lines
from simulator.inputs.errors import SpecsimError


@pytest.mark.parametrize("text, rows", [
    ("", 0), ("h\n", 0), ("h", 0), ("h\n1\n2\n", 2), ("h\n1\n2", 2), ("h\n\n\n", 2),
])
def test_counts_the_lines_after_the_header(tmp_path, text, rows):
    path = tmp_path / "t.csv"
    path.write_text(text)
    assert count_data_lines(path, 100) == rows


def test_counts_across_blocks_and_stops_past_the_limit(tmp_path):
    path = tmp_path / "t.csv"
    row = "x" * 99 + "\n"                       # 100 bytes: blocks split rows
    path.write_text("h\n" + row * (3 * BLOCK_BYTES // 100))
    total = 3 * BLOCK_BYTES // 100
    assert count_data_lines(path, total) == total
    assert total // 3 < count_data_lines(path, 10) <= total   # stopped after a block


def test_one_row_above_the_limit_is_refused_and_the_limit_passes(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("h\n" + "1\n" * 5)
    check_csv_rows(path, 5, what="a table", fix="f")
    with pytest.raises(SpecsimError, match="more than 4 rows; the limit of a table is 4"):
        check_csv_rows(path, 4, what="a table", fix="f")
    check_csv_rows(tmp_path / "missing.csv", 1, what="a table", fix="f")  # the reader says


def test_the_readers_count_before_parsing(tmp_path, monkeypatch):
    """Each reader with its limit lowered to 2 refuses a 3-row file it would otherwise read."""
    import calibrate.measured as measured
    import simulator.results_dir as results_dir
    import workloads.csv_fast as csv_fast
    import workloads.traces as traces
    monkeypatch.setattr(traces, "MAX_REQUESTS", 2)
    monkeypatch.setattr(csv_fast, "MAX_REQUESTS", 2)  # the usual form's reader
    monkeypatch.setattr(results_dir, "MAX_RESULTS_ROWS", 2)
    monkeypatch.setattr(measured, "MAX_MEASUREMENT_ROWS", 2)
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,1,1\n2,1,1\n")
    with pytest.raises(SpecsimError, match="more than 2 rows"):
        traces.read_specsim(trace)  # the usual form's reader counts first
    quoted = tmp_path / "q.csv"  # a quoted header: pandas' path, which counts on its own
    quoted.write_text('"arrival_s",prompt_tokens,output_tokens\n0,1,1\n1,1,1\n2,1,1\n')
    monkeypatch.setattr(csv_fast, "MAX_REQUESTS", 3)
    with pytest.raises(SpecsimError, match="more than 2 rows"):
        traces.read_specsim(quoted)
    with pytest.raises(SpecsimError, match="more than 2 rows"):
        results_dir.read_table(trace, "csv")
    (tmp_path / "m" / "org" / "model").mkdir(parents=True)
    (tmp_path / "m" / "org" / "model" / "mlp.csv").write_text("a\n1\n2\n3\n")
    with pytest.raises(SpecsimError, match="more than 2 rows"):
        measured.load_measurements(tmp_path / "m")
    moon = tmp_path / "t.jsonl"
    moon.write_text('{"timestamp": 0, "input_length": 1, "output_length": 1}\n' * 3)
    with pytest.raises(SpecsimError, match="line 3: more than 2 requests"):
        traces.read_mooncake(moon)
    monkeypatch.setattr(traces, "MAX_REQUESTS", 3)
    assert len(traces.read_specsim(trace)) == 3 and len(traces.read_mooncake(moon)) == 3
    assert len(traces.read_specsim(quoted)) == 3
