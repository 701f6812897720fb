"""Trace readers: the public samples read in place, exact timestamps, every bad-trace error."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from tests.helpers import SHARED
from tests.workloads.read_compare import read_both, same
from workloads.traces import (
    detect_format,
    read_azure,
    read_mooncake,
    read_specsim,
    read_trace,
    read_vidur,
    write_specsim_csv,
)
from workloads.workload import Workload

TRACES = SHARED / "traces"


def shared(name: str) -> Path:
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{name} is not present in ../shared/traces")
    return path


def test_azure_conversation_trace():
    w = read_trace(shared("AzureLLMInferenceTrace_conv.csv"))
    assert len(w) == 19_366 and w.name == "AzureLLMInferenceTrace_conv"
    # First rows, by hand: 18:15:46.6805900 (374, 44), 18:15:50.9951690 (396, 109),
    # 18:15:51.2224670 (879, 55); last row 19:14:08.4025270 (197, 183).
    assert w.prompt_tokens[:3].tolist() == [374, 396, 879]
    assert w.output_tokens[:3].tolist() == [44, 109, 55]
    assert w.arrival_s[0] == 0.0
    # 50.9951690 - 46.6805900 = 4.3145790 s, and an integer-nanosecond parse divided by 1e9
    # is the double nearest 4.314579, so the comparison is exact.
    assert w.arrival_s[1] == 4.314579
    assert w.arrival_s[2] == 4.541877
    # 19:14:08.4025270 - 18:15:46.6805900 = 58 min 21.7219370 s.
    assert w.arrival_s[-1] == 3501.721937
    assert (w.prompt_tokens[-1], w.output_tokens[-1]) == (197, 183)


def test_azure_code_trace():
    w = read_azure(shared("AzureLLMInferenceTrace_code.csv"))
    assert len(w) == 8_819
    # 18:17:03.9799600 (4808, 10), 18:17:04.0319600 (3180, 8); last 19:14:19.9280160 (549, 173).
    assert (w.prompt_tokens[0], w.output_tokens[0]) == (4808, 10)
    assert w.arrival_s[1] == 0.052
    assert w.arrival_s[-1] == 3435.948056  # 57 min 15.9480560 s
    assert (w.prompt_tokens[-1], w.output_tokens[-1]) == (549, 173)


def test_mooncake_conversation_trace():
    w = read_trace(shared("conversation_trace.jsonl"))
    assert len(w) == 12_031
    # The first ten lines share timestamp 0; line 11 is at 3000 ms (13544 in, 71 out);
    # the last line is at 3536999 ms (20774 in, 508 out).
    assert np.count_nonzero(w.arrival_s == 0.0) == 10
    assert (w.prompt_tokens[0], w.output_tokens[0]) == (6758, 500)
    assert (w.arrival_s[10], w.prompt_tokens[10], w.output_tokens[10]) == (3.0, 13544, 71)
    assert (w.arrival_s[-1], w.prompt_tokens[-1], w.output_tokens[-1]) == (3536.999, 20774, 508)


def test_format_detection_on_the_shared_samples():
    assert detect_format(shared("AzureLLMInferenceTrace_conv.csv")) == "azure"
    assert detect_format(shared("conversation_trace.jsonl")) == "mooncake"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_azure_fraction_is_parsed_to_the_nanosecond(tmp_path):
    # Epoch seconds as one float64 (~1.7e9 s) resolve only ~2.4e-7 s, so a float parse
    # cannot see a 100 ns step; the exact parse must.
    path = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.0000001,5,6\n2023-11-16 18:15:46.0000002,5,6\n"
                 "2023-11-16 18:15:47,5,6\n2023-11-16 18:15:47.5,5,6\n")
    w = read_azure(path)
    assert w.arrival_s.tolist() == [0.0, 1e-7, 0.9999999, 1.4999999]


def test_vidur_and_specsim_and_auto_detection(tmp_path):
    vidur = write(tmp_path, "v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens,extra\n"
                  "0.5,100,10,x\n1.25,200.0,20,y\n")
    w = read_trace(vidur)
    assert detect_format(vidur) == "vidur"
    assert w.arrival_s.tolist() == [0.5, 1.25] and w.prompt_tokens.tolist() == [100, 200]
    spec = write(tmp_path, "s.csv", "arrival_s,prompt_tokens,output_tokens,task\n"
                 "0,3,4,chat\n2,5,6,code\n\n\n")
    w = read_trace(spec)
    assert detect_format(spec) == "specsim"
    assert w.task.tolist() == ["chat", "code"] and w.output_tokens.tolist() == [4, 6]


def test_specsim_round_trip(tmp_path):
    w = Workload("rt", np.array([0.0, 0.1234564, 7.5]), np.array([1, 2, 3]), np.array([4, 5, 6]),
                 task=np.array(["a,b", "c", "d"], dtype=object))
    path = tmp_path / "rt.csv"
    write_specsim_csv(w, path)
    back = read_specsim(path)
    assert back.prompt_tokens.tolist() == [1, 2, 3] and back.task.tolist() == ["a,b", "c", "d"]
    np.testing.assert_allclose(back.arrival_s, w.arrival_s, atol=5e-7, rtol=0)


AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD_AZURE_ROW = "2023-11-16 18:15:46.6805900,374,44\n"


@pytest.mark.parametrize("reader, text, field, phrase", [
    (read_azure, "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,1\n", "GeneratedTokens", "missing"),
    (read_azure, "", None, "empty"),
    (read_azure, AZURE_HEAD, None, "no requests"),
    (read_azure, AZURE_HEAD + GOOD_AZURE_ROW + "2023-11-16 18:15:47,,44\n", "ContextTokens",
     "line 3"),
    (read_azure, AZURE_HEAD + GOOD_AZURE_ROW + "2023-11-16 18:15:47,10,0\n", "GeneratedTokens",
     "line 3"),
    (read_azure, AZURE_HEAD + GOOD_AZURE_ROW + "2023-11-16 18:15:47,-3,1\n", "ContextTokens",
     "line 3"),
    (read_azure, AZURE_HEAD + GOOD_AZURE_ROW + "2023-11-16 18:15:47,nan,1\n", "ContextTokens",
     "line 3"),
    (read_azure, AZURE_HEAD + GOOD_AZURE_ROW + "2023-11-16 18:15:47,2.5,1\n", "ContextTokens",
     "line 3"),
    (read_azure, AZURE_HEAD + GOOD_AZURE_ROW + "2023-13-16 18:15:47,2,1\n", "TIMESTAMP",
     "line 3"),
    (read_azure, AZURE_HEAD + GOOD_AZURE_ROW + "2023-11-16 18:15:47.12x,2,1\n", "TIMESTAMP",
     "line 3"),
    (read_azure, AZURE_HEAD + GOOD_AZURE_ROW + "2023-11-16 18:15:46.6805899,2,1\n", "TIMESTAMP",
     "sort"),
    (read_vidur, "arrived_at,num_prefill_tokens,num_decode_tokens\n1,2,3\n-1,2,3\n", "arrived_at",
     "line 3"),
    (read_vidur, "arrived_at,num_prefill_tokens,num_decode_tokens\n2,2,3\n1,2,3\n", "arrived_at",
     "sort"),
    (read_vidur, "arrived_at,num_prefill_tokens,num_decode_tokens\n1,2,3\n\n2,2,3\n", "arrived_at",
     "line 3"),
    (read_specsim, "arrival_s,prompt_tokens,output_tokens,tsak\n0,1,1,a\n", "tsak", "unknown"),
    (read_specsim, "arrival_s,prompt_tokens,output_tokens,task\n0,1,1,a\n1,1,1,\n", "task",
     "line 3"),
    (read_mooncake, "", None, "empty"),
    (read_mooncake, '{"timestamp": 0, "input_length": 5, "output_length": 5}\n{"timestamp": 1,',
     None, "line 2"),
    (read_mooncake, '{"timestamp": 0, "input_length": 5}\n', "output_length", "missing"),
    (read_mooncake, '{"timestamp": 0, "input_length": "5", "output_length": 5}\n', "input_length",
     "not a number"),
    (read_mooncake, '{"timestamp": 0, "input_length": 5, "output_length": 5}\n'
     '{"timestamp": 3, "input_length": 5, "output_length": 0}\n', "output_length", "line 2"),
    (read_mooncake, '{"timestamp": 9, "input_length": 5, "output_length": 5}\n\n'
     '{"timestamp": 3, "input_length": 5, "output_length": 5}\n', "timestamp", "line 3"),
    (read_mooncake, '[1, 2]\n', None, "not a JSON object"),
    # a block id is below 2**40 (workloads.workload.MAX_BLOCK_ID): 2**40 and 2**70 are
    # refused (2**70 was an OverflowError), naming the line, the entry and the range
    (read_mooncake, '{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": '
     f'[{2**70}]}}\n', "hash_ids", f"line 1: hash_ids[0] is {2**70}, outside the allowed "
     "range 0 to 1,099,511,627,775"),
    (read_mooncake, '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": '
     f'[1, {2**40}]}}\n', "hash_ids", "hash_ids[1]"),
])
def test_bad_traces_name_file_column_and_row(tmp_path, reader, text, field, phrase):
    path = write(tmp_path, "bad_trace.csv", text)
    with pytest.raises(SpecsimError) as info:
        reader(path)
    assert info.value.source == str(path)
    assert info.value.field == field
    assert phrase in str(info.value)


def test_out_of_order_is_rejected_with_a_fix(tmp_path):
    path = write(tmp_path, "v.csv",
                 "arrived_at,num_prefill_tokens,num_decode_tokens\n2,2,3\n1,2,3\n")
    with pytest.raises(SpecsimError, match="sort the file by arrived_at"):
        read_vidur(path)


def test_missing_file_unknown_format_and_undetectable_header(tmp_path):
    with pytest.raises(SpecsimError, match="not found"):
        read_trace(tmp_path / "nope.csv", "azure")
    with pytest.raises(SpecsimError, match="not found"):
        read_trace(tmp_path / "nope.csv")
    path = write(tmp_path, "x.csv", "a,b,c\n1,2,3\n")
    with pytest.raises(SpecsimError, match="unknown trace format") as info:
        read_trace(path, "splitwise")
    assert info.value.field == "format"
    with pytest.raises(SpecsimError, match="cannot tell the trace format"):
        read_trace(path)


def test_the_fast_parse_is_pandas_parse_on_the_conversation_trace(monkeypatch):
    from workloads import traces
    path = shared("AzureLLMInferenceTrace_conv.csv")
    fast, general = read_both(monkeypatch, read_azure, path)
    same(fast, general)
    frame = traces._read_csv(path, traces.AZURE_COLUMNS)  # and it is the fast path that ran
    assert traces._azure_ns_fast(frame["TIMESTAMP"].to_numpy()) is not None
    assert traces._digit_counts(frame["ContextTokens"].to_numpy()) is not None


@pytest.mark.parametrize("digits", [0, 1, 3, 7, 9])  # fraction digits (0: none, no point)
def test_the_fast_timestamp_parse_is_pandas_on_random_dates(tmp_path, monkeypatch, digits):
    # leap days, month ends, year and century edges, fractions of every width: the fast
    # path (numpy's calendar behind a layout check) gives pandas' integer nanoseconds
    from workloads import traces
    rng = np.random.default_rng(digits)
    n = 400
    start = np.datetime64("1970-01-01T00:00:00", "s").astype(np.int64)
    stop = np.datetime64("2200-12-31T23:59:59", "s").astype(np.int64)
    edges = np.array(["2000-02-29T23:59:59", "2024-02-29T00:00:00", "2100-02-28T12:00:00",
                      "1999-12-31T23:59:59", "2000-01-01T00:00:00"], "datetime64[s]")
    secs = np.sort(np.concatenate((rng.integers(start, stop, n), edges.astype(np.int64))))
    stamps = [str(np.datetime64(int(s), "s")).replace("T", " ") for s in secs]
    if digits:
        stamps = [f"{s}.{int(rng.integers(0, 10 ** digits)):0{digits}d}" for s in stamps]
    path = write(tmp_path, "dates.csv", AZURE_HEAD + "".join(f"{s},5,6\n" for s in stamps))
    assert traces._azure_ns_fast(np.array(stamps, dtype=object)) is not None
    fast, general = read_both(monkeypatch, read_azure, path)
    same(fast, general)


@pytest.mark.parametrize("stamp", [
    " 2023-11-16 18:15:47.1234567", "2023-11-16 18:15:47.1234567 ", "2023-11-16T18:15:47.1234567",
    "2023-02-29 18:15:47.1234567", "2023-04-31 18:15:47.1234567", "2023-11-16 24:00:00.1234567",
    "2023-11-16 18:60:47.1234567", "2023-11-16 18:15:60.1234567", "1969-12-31 23:59:59.1234567",
    "2300-01-01 00:00:00.1234567", "2023-11-16 18:15:47.123456789", "2023-11-16 18:15:47.",
    "2023-11-16 18:15:47,1234567", "2023-11-16 18:15:4７.1234567", "2023-1-16 18:15:47.12345678",
    "2023-11-16 18:15:47.1234567Z"])
def test_the_fast_timestamp_parse_declines_what_it_does_not_cover(tmp_path, monkeypatch,
                                                                   stamp):
    # spaces, another separator, an impossible date or time, years out of its range, other
    # widths (a row unlike the others), a comma, a non-ASCII digit, a zone: the general
    # parser reads (or rejects, naming the row) exactly as it would alone
    from workloads import traces
    stamps = ["2023-11-16 18:15:46.6805900", stamp]
    assert traces._azure_ns_fast(np.array([stamp], dtype=object)) is None or len(stamp) == 29
    path = write(tmp_path, "odd.csv", AZURE_HEAD + "".join(f'"{s}",5,6\n' for s in stamps))
    fast, general = read_both(monkeypatch, read_azure, path)
    same(fast, general)


@pytest.mark.parametrize("counts", [["12", "7", "1000"], ["012", "7", "3"], ["12", " 7", "3"],
                                    ["12", "+7", "3"], ["12", "7.0", "3"], ["12", "1e3", "3"],
                                    ["12", "0", "3"], ["12", "", "3"], ["12", "٣", "3"],
                                    ["12", "1234567890123456", "3"], ["12", "7_0", "3"],
                                    ["12", "-7", "3"], ["12", "2000001", "3"]])
def test_the_fast_count_parse_is_pandas_or_declines(tmp_path, monkeypatch, counts):
    # plain digits (leading zeros too) by the fast path; a space, a sign, a point, an
    # exponent, an empty or non-ASCII cell, 16 digits, an underscore: pandas as before,
    # errors included (zero, too many tokens)
    from workloads import traces
    plain = all(c.isascii() and c.isdigit() and len(c) <= 15 for c in counts)
    assert (traces._digit_counts(np.array(counts, dtype=object)) is not None) == plain
    rows = "".join(f"2023-11-16 18:15:4{i}.0000000,{c},5\n" for i, c in enumerate(counts))
    path = write(tmp_path, "counts.csv", AZURE_HEAD + rows)
    fast, general = read_both(monkeypatch, read_azure, path)
    same(fast, general)


def test_the_fast_parses_decline_cells_that_are_not_strings():
    # pandas gives strings here ("" for a missing field); anything else goes to the
    # general parser rather than raising from the fast one
    from workloads import traces
    for cells in (["12", None], ["12", float("nan")], [b"12", "7"]):
        assert traces._digit_counts(np.array(cells, dtype=object)) is None
    stamp = "2023-11-16 18:15:46.6805900"
    assert traces._azure_ns_fast(np.array([stamp, None], dtype=object)) is None
    assert traces._azure_ns_fast(np.array([stamp, stamp], dtype=object)) is not None


def test_the_largest_block_id_is_kept(tmp_path):
    path = write(tmp_path, "t.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 5, '
                 f'"hash_ids": [0, {2**40 - 1}]}}\n')
    assert read_mooncake(path).prefix_hashes[0].tolist() == [0, 2**40 - 1]


@pytest.mark.parametrize("rows", ["0,10,5,7\n1,10,5,7\n", "0,10,5,7\n1,10,5\n"])
def test_rows_longer_than_the_header_are_refused_not_shifted(tmp_path, rows):
    """pandas takes a first column as the index when the rows have one field more than the
    header (arrival 0 would become the index and 10 the arrival): refused instead."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + rows)
    with pytest.raises(SpecsimError, match="more fields than the header"):
        read_specsim(path)


def test_a_header_short_of_a_format_names_its_missing_columns(tmp_path):
    path = write(tmp_path, "x.csv", "arrival_s,prompt_tokens\n0,100\n")
    with pytest.raises(SpecsimError, match="missing column.s. output_tokens of the specsim "
                                           "format") as info:
        read_trace(path)
    assert info.value.field == "output_tokens"
    assert info.value.fix == "the header must name: arrival_s, prompt_tokens, output_tokens"


def test_a_header_of_no_format_lists_every_formats_columns(tmp_path):
    path = write(tmp_path, "x.csv", "prompt_len,output_len\n512,128\n")  # bench-style lengths
    with pytest.raises(SpecsimError, match="cannot tell the trace format") as info:
        read_trace(path)
    for columns in ("TIMESTAMP,ContextTokens,GeneratedTokens", "arrival_s,prompt_tokens,"
                    "output_tokens", "arrived_at,num_prefill_tokens,num_decode_tokens"):
        assert columns in info.value.fix


def test_dates_as_arrival_seconds_say_where_dates_go(tmp_path):
    path = write(tmp_path, "x.csv", "arrival_s,prompt_tokens,output_tokens\n"
                                    "2024-01-01T00:00:00,100,20\n")
    with pytest.raises(SpecsimError, match="line 2 has '2024-01-01T00:00:00'") as info:
        read_trace(path)
    assert info.value.field == "arrival_s" and "TIMESTAMP column" in info.value.fix
    path = write(tmp_path, "y.csv", "arrival_s,prompt_tokens,output_tokens\n-1,100,20\n")
    with pytest.raises(SpecsimError, match="line 2 has '-1'") as info:
        read_trace(path)
    assert info.value.fix == "fix or drop that row"   # a negative number is not a date


def test_a_csv_with_a_byte_order_mark_is_detected(tmp_path):
    """Excel's "CSV UTF-8" starts with a BOM: the header's first name was '\\ufeffarrival_s'
    and no format matched."""
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbfarrival_s,prompt_tokens,output_tokens\r\n0,100,20\r\n"
                     b"0.5,200,30\r\n")
    assert detect_format(path) == "specsim"
    assert read_trace(path).prompt_tokens.tolist() == [100, 200]


def test_a_jsonl_trace_with_a_byte_order_mark_is_read(tmp_path):
    """A BOM'd Mooncake trace was detected (utf-8-sig) and then refused by its reader:
    'line 1: not valid JSON (Unexpected UTF-8 BOM)'."""
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"timestamp": 0, "input_length": 5, "output_length": 7}\n'
                     b'{"timestamp": 1000, "input_length": 9, "output_length": 3}\n')
    assert detect_format(path) == "mooncake"
    assert read_trace(path).prompt_tokens.tolist() == [5, 9]


def test_spaces_after_the_header_commas_are_not_part_of_the_names(tmp_path):
    """'arrival_s, prompt_tokens, output_tokens' was detected as specsim's and then refused:
    'missing column(s) prompt_tokens, output_tokens; the header has arrival_s,
    prompt_tokens, output_tokens'."""
    path = write(tmp_path, "x.csv", "arrival_s, prompt_tokens, output_tokens\n"
                                    "0, 100, 20\n0.5, 200, 30\n")
    got = read_trace(path)
    assert got.prompt_tokens.tolist() == [100, 200]
    assert got.output_tokens.tolist() == [20, 30] and got.arrival_s.tolist() == [0, 0.5]


def test_an_extra_column_of_a_specsim_trace_says_which_formats_keep_it(tmp_path):
    path = write(tmp_path, "x.csv", "arrival_s,prompt_tokens,output_tokens,user_id\n"
                                    "0,100,20,a\n")
    with pytest.raises(SpecsimError, match="unknown column 'user_id'") as info:
        read_trace(path)
    assert info.value.fix.startswith("drop it") and "vidur's (arrived_at" in info.value.fix
    vidur = write(tmp_path, "v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens,"
                                     "user_id\n0,100,20,a\n")
    assert read_trace(vidur).prompt_tokens.tolist() == [100]   # the rest ignored, as said


def test_azure_timestamps_in_iso_8601_with_a_t(tmp_path):
    """Python's isoformat writes a T between date and time: the same instants as a space."""
    rows = ("2023-11-16 18:15:46.5,10,5\n", "2023-11-16 18:15:47.25,10,5\n")
    spaced = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(rows))
    iso = write(tmp_path, "b.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                + "".join(r.replace(" ", "T", 1) for r in rows))
    assert read_trace(iso).arrival_s.tolist() == read_trace(spaced).arrival_s.tolist() \
        == [0.0, 0.75]


def test_a_bench_serve_result_given_as_a_trace_points_at_compare_measured(tmp_path):
    result = {"backend": "vllm", "num_prompts": 2, "input_lens": [512, 128],
              "output_lens": [64, 32], "ttfts": [0.1, 0.2]}  # vllm bench serve --save-result
    path = write(tmp_path, "result.json", json.dumps(result))
    with pytest.raises(SpecsimError, match="vllm bench serve --save-result") as info:
        read_trace(path)
    assert info.value.fix.startswith("replay it with specsim compare-measured result.json")
    path = write(tmp_path, "pretty.json", json.dumps(result, indent=2))
    with pytest.raises(SpecsimError, match="vllm bench serve --save-result"):
        read_trace(path)
