"""Trace readers (Azure, Mooncake, Vidur-style, specsim CSV) and the specsim CSV writer.

Every reader returns a :class:`Workload` or raises one :class:`SpecsimError` naming the
file, the column and the first bad row: missing columns, empty files, unparsable
timestamps, NaN, negative or zero lengths (a zero-length output is an error too: every
request emits at least one token).  Rows are numbered by their line in the file (the CSV
header is line 1).

Out-of-order timestamps are *rejected*, not sorted: a trace that goes backwards in time
is more often a concatenation or a clock bug than an intended order, and silently sorting
it would hide that.  The error says which line goes backwards and asks the user to sort
the file.

Azure arrivals are made relative to the first row (its timestamps are wall-clock dates);
the other formats already carry offsets and keep them.

The usual file is read without pandas' string operations: token counts written as plain
digits (``_digit_counts``) and Azure timestamps all in one fixed layout
(``_azure_ns_fast``: numpy's calendar behind a byte-layout check) are parsed on arrays, twice
as fast on the conversation trace; any other spelling, valid or not, goes to the general
parser, which decides as it would alone (tests compare the two).
"""
from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simulator.inputs.csv_rows import check_csv_rows
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import clip, short
from workloads.csv_columns import azure_ns_fast as _azure_ns_fast
from workloads.csv_columns import digit_counts as _digit_counts
from workloads.csv_fast import read_usual as _usual
from workloads.jsonl import json_lines
from workloads.token_trace import looks_like_token_trace, read_token_trace
from workloads.trace_rows import bad_row as _bad_row
from workloads.trace_rows import check_order as _check_order
from workloads.trace_rows import checked_seconds as _checked_seconds
from workloads.trace_rows import counts as _counts
from workloads.trace_rows import too_late as _late
from workloads.workload import (
    MAX_ARRIVAL_S,
    MAX_BLOCK_ID,
    MAX_REQUESTS,
    Workload,
)

if TYPE_CHECKING:  # pandas reads a trace of any other than the usual form (csv_fast.py)
    import pandas as pd

DEFAULT_TRACE_PATH = Path(__file__).resolve().parent / "data" / "default_trace.csv"

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
# tokens per ``hash_ids`` block in the Mooncake traces: every one of the 12,031 lines of the
# FAST'25 conversation_trace.jsonl has exactly ceil(input_length / 512) ids, and an id always
# follows the same id at the same position (ids are prefix hashes, as vLLM's block hashes)
MOONCAKE_HASH_BLOCK = 512
VIDUR_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
SPECSIM_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
SPECSIM_OPTIONAL = ("task",)


def _read_csv(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    """Read a CSV as strings (conversion and its errors are ours); require the columns."""
    import pandas as pd
    check_csv_rows(path, MAX_REQUESTS, what="a trace's requests (its lines)",
                   fix=f"cut the trace to at most {MAX_REQUESTS:,} requests (head -n "
                       f"{MAX_REQUESTS + 1} keeps the header and that many)")
    try:
        # Blank lines are kept so that row index + 2 is the line number in the file; never
        # an index column (rows one field longer than the header would shift into one),
        # and pandas' warning that a row is longer than the header is an error
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(path, dtype=str, keep_default_na=False,
                                skip_blank_lines=False, index_col=False)
    except pd.errors.ParserWarning:
        raise SpecsimError("a row has more fields than the header", source=str(path),
                           fix="give every row as many comma-separated fields as the "
                               "header names") from None
    except FileNotFoundError:
        raise SpecsimError("file not found", source=str(path), fix="check the path") from None
    except pd.errors.EmptyDataError:
        raise SpecsimError("the file is empty", source=str(path),
                           fix="a trace needs a header line and at least one request") from None
    except (ValueError, UnicodeDecodeError, OSError, csv.Error) as exc:  # ParserError too
        raise SpecsimError(f"cannot read as CSV: {clip(str(exc).strip(), 200)}",
                           source=str(path)) from None
    names = [str(c).strip() for c in frame.columns]  # "arrival_s, prompt_tokens, ..."
    if len(set(names)) == len(names):
        frame.columns = names
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise SpecsimError(f"missing column(s) {', '.join(missing)}; the header has "
                           f"{clip(', '.join(map(str, frame.columns)), 200)}", source=str(path),
                           field=missing[0], fix="the header must name: " + ", ".join(required))
    blank = (frame[list(required)] == "").all(axis=1).to_numpy()
    end = len(frame)
    while end and blank[end - 1]:
        end -= 1
    if end == 0:
        raise SpecsimError("the file has a header but no requests", source=str(path),
                           fix="add at least one request")
    return frame.iloc[:end]


def _seconds(frame: pd.DataFrame, column: str, lines: np.ndarray, path: Path,
             scale: float = 1.0) -> np.ndarray:
    import pandas as pd
    values = pd.to_numeric(frame[column].str.strip(), errors="coerce").to_numpy(np.float64)
    return _checked_seconds(values, frame[column].to_numpy(), lines, path, column, scale)


def _csv_counts(frame: pd.DataFrame, column: str, lines: np.ndarray, path: Path) -> np.ndarray:
    import pandas as pd
    raw = frame[column].to_numpy()
    values = _digit_counts(raw)  # the usual file; anything else parsed by pandas below
    if values is None:
        values = pd.to_numeric(frame[column].str.strip(), errors="coerce").to_numpy(np.float64)
    return _counts(values, raw, lines, path, column)


def _azure_times_s(text: pd.Series, lines: np.ndarray, path: Path) -> np.ndarray:
    """Parse ``2023-11-16 18:15:46.6805900`` exactly: integer nanoseconds, then seconds from row 1.

    Epoch seconds as a float64 (about 1.7e9) keep only ~0.2 microsecond resolution, so
    the date and the fraction are parsed separately and combined as integers.
    """
    raw = text.to_numpy()
    fast = _azure_ns_fast(raw)  # the usual file, without pandas' string ops
    import pandas as pd
    if fast is not None:
        _check_order(fast, raw, lines, path, "TIMESTAMP")
        return (fast - fast[0]) / 1e9
    # ISO 8601's "T" between the date and the time (Python's isoformat) read as the space
    parts = text.str.strip().str.replace(r"^(\d{4}-\d\d-\d\d)T", r"\1 ", regex=True) \
        .str.partition(".")
    whole, dot, fraction = parts[0], parts[1], parts[2]
    base = pd.to_datetime(whole, format="%Y-%m-%d %H:%M:%S", errors="coerce")
    fraction_ok = (dot == "") & (fraction == "") | (dot == ".") & fraction.str.fullmatch(r"\d{1,9}")
    bad = (base.isna() | ~fraction_ok.astype(bool)).to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise _bad_row(path, "TIMESTAMP", int(lines[i]), text.iloc[i],
                       "not a timestamp of the form YYYY-MM-DD HH:MM:SS[.fffffff] (or "
                       "with a T for the space)",
                       "fix or drop that row")
    fraction_ns = fraction.str.ljust(9, "0").astype(np.int64).to_numpy()
    ns = base.to_numpy(dtype="datetime64[ns]").astype(np.int64) + fraction_ns
    _check_order(ns, text.to_numpy(), lines, path, "TIMESTAMP")
    return (ns - ns[0]) / 1e9


def read_azure(path: str | Path) -> Workload:
    """Read an Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``)."""
    path = Path(path)
    usual = _usual(path, AZURE_COLUMNS, azure=True)
    if usual is not None:
        return usual
    frame = _read_csv(path, AZURE_COLUMNS)
    lines = np.arange(len(frame)) + 2
    return Workload(name=path.stem, arrival_s=_azure_times_s(frame["TIMESTAMP"], lines, path),
                    prompt_tokens=_csv_counts(frame, "ContextTokens", lines, path),
                    output_tokens=_csv_counts(frame, "GeneratedTokens", lines, path))


def read_vidur(path: str | Path) -> Workload:
    """Read a Vidur-style CSV: ``arrived_at`` (s), ``num_prefill_tokens``, ``num_decode_tokens``."""
    path = Path(path)
    usual = _usual(path, VIDUR_COLUMNS)
    if usual is not None:
        return usual
    frame = _read_csv(path, VIDUR_COLUMNS)
    lines = np.arange(len(frame)) + 2
    return Workload(name=path.stem, arrival_s=_seconds(frame, "arrived_at", lines, path),
                    prompt_tokens=_csv_counts(frame, "num_prefill_tokens", lines, path),
                    output_tokens=_csv_counts(frame, "num_decode_tokens", lines, path))


def read_specsim(path: str | Path) -> Workload:
    """Read a specsim CSV (``arrival_s,prompt_tokens,output_tokens[,task]``); no other columns."""
    path = Path(path)
    usual = _usual(path, SPECSIM_COLUMNS, only=True)  # a task column: pandas reads it
    if usual is not None:
        return usual
    frame = _read_csv(path, SPECSIM_COLUMNS)
    allowed = SPECSIM_COLUMNS + SPECSIM_OPTIONAL
    extra = [c for c in frame.columns if c not in allowed]
    if extra:
        raise SpecsimError(f"unknown column {short(extra[0])}", source=str(path),
                           field=clip(extra[0]),
                           fix="drop it: a specsim trace has only " + ", ".join(allowed)
                               + " (so that a misspelt task is not ignored); or keep your "
                               "columns and name the three azure's (TIMESTAMP, "
                               "ContextTokens, GeneratedTokens) or vidur's (arrived_at, "
                               "num_prefill_tokens, num_decode_tokens), whose readers ignore "
                               "the rest")
    lines = np.arange(len(frame)) + 2
    task = None
    if "task" in frame.columns:
        task = frame["task"].str.strip().to_numpy(dtype=object)
        empty = task == ""
        if empty.any():
            i = int(np.flatnonzero(empty)[0])
            raise _bad_row(path, "task", int(lines[i]), "", "task labels must be non-empty",
                           "fill in the label or drop the task column")
    return Workload(name=path.stem, arrival_s=_seconds(frame, "arrival_s", lines, path),
                    prompt_tokens=_csv_counts(frame, "prompt_tokens", lines, path),
                    output_tokens=_csv_counts(frame, "output_tokens", lines, path), task=task)


def read_mooncake(path: str | Path) -> Workload:
    """Read a Mooncake JSONL trace (``timestamp`` in ms, ``input_length``, ``output_length``).

    ``hash_ids`` (optional; the prefix-cache block ids, one per ``MOONCAKE_HASH_BLOCK``
    prompt tokens, each naming the whole prefix up to its block's end) become the
    Workload's ``prefix_hashes``; many requests may share one timestamp.
    """
    path = Path(path)
    rows: dict[str, list] = {key: [] for key in MOONCAKE_KEYS}
    hashes: list = []
    lines: list[int] = []
    for number, record in json_lines(path):
        if not isinstance(record, dict):
            raise SpecsimError(f"line {number} is not a JSON object", source=str(path),
                               fix="one JSON object per line")
        if len(lines) == MAX_REQUESTS:  # refused as it streams, before it is all held
            raise SpecsimError(f"line {number}: more than {MAX_REQUESTS:,} requests",
                               source=str(path), fix=f"cut the trace to at most "
                               f"{MAX_REQUESTS:,} lines")
        for key in MOONCAKE_KEYS:
            value = record.get(key)
            if type(value) not in (int, float):
                why = "is missing" if key not in record else \
                    f"is {short(value)}, not a number"
                raise SpecsimError(f"line {number}: {key} {why}", source=str(path),
                                   field=key, fix="every line needs numeric "
                                   + ", ".join(MOONCAKE_KEYS))
            rows[key].append(value)
        hashes.append(_hash_ids(record, number, path))
        lines.append(number)
    if not lines:
        raise SpecsimError("the file is empty", source=str(path),
                           fix="a trace needs at least one request")
    line_numbers = np.asarray(lines)
    stamps_ms = np.asarray(rows["timestamp"], dtype=np.float64)
    bad = ~np.isfinite(stamps_ms) | (stamps_ms < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise _bad_row(path, "timestamp", int(line_numbers[i]), rows["timestamp"][i],
                       "timestamps must be finite numbers >= 0 (milliseconds)",
                       "fix or drop that line")
    late = stamps_ms / 1e3 > MAX_ARRIVAL_S
    if late.any():
        i = int(np.flatnonzero(late)[0])
        raise _late(path, "timestamp", int(line_numbers[i]), rows["timestamp"][i], "ms")
    _check_order(stamps_ms, rows["timestamp"], line_numbers, path, "timestamp")
    counts = {key: _counts(np.asarray(rows[key], dtype=np.float64), rows[key], line_numbers,
                           path, key) for key in MOONCAKE_KEYS[1:]}
    given = [h is not None for h in hashes]
    if any(given) and not all(given):
        i = given.index(False) if given[0] else given.index(True)
        raise SpecsimError(f"line {int(line_numbers[i])}: hash_ids given on some lines only",
                           source=str(path), field="hash_ids",
                           fix="give hash_ids on every line or on none")
    return Workload(name=path.stem, arrival_s=stamps_ms / 1e3,
                    prompt_tokens=counts["input_length"], output_tokens=counts["output_length"],
                    prefix_hashes=tuple(hashes) if all(given) else None,
                    hash_block_tokens=MOONCAKE_HASH_BLOCK)


def _hash_ids(record: dict, number: int, path: Path):
    """A Mooncake line's ``hash_ids`` as an int64 array (None when absent)."""
    value = record.get("hash_ids")
    if value is None:
        return None
    if not isinstance(value, list) or any(type(v) is not int for v in value):
        raise SpecsimError(f"line {number}: hash_ids is {short(value)}, not a list of whole "
                           "numbers", source=str(path), field="hash_ids",
                           fix="one block id per 512 prompt tokens, or drop the key")
    bad = next((k for k, v in enumerate(value) if not 0 <= v <= MAX_BLOCK_ID), None)
    if bad is not None:  # checked before int64 conversion: 2**70 was an OverflowError
        raise SpecsimError(f"line {number}: hash_ids[{bad}] is {short(value[bad])}, outside "
                           f"the allowed range 0 to {MAX_BLOCK_ID:,} (2**40 - 1)",
                           source=str(path), field="hash_ids",
                           fix=f"give block ids from 0 to {MAX_BLOCK_ID:,}, or drop the key")
    return np.asarray(value, np.int64)


TRACE_READERS = {
    "azure": read_azure,
    "mooncake": read_mooncake,
    "vidur": read_vidur,
    "specsim": read_specsim,
    "token_ids": read_token_trace,
}
_CSV_SIGNATURES = {"azure": AZURE_COLUMNS, "vidur": VIDUR_COLUMNS, "specsim": SPECSIM_COLUMNS}


def detect_format(path: str | Path) -> str:
    """Name the trace format from the file's first non-blank line (JSON object or CSV header)."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8-sig") as handle:  # a BOM (Excel's CSV UTF-8) too
            first = next((line for line in handle if line.strip()), "")
    except FileNotFoundError:
        raise SpecsimError("file not found", source=str(path), fix="check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecsimError(f"cannot read file: {exc}", source=str(path)) from None
    if not first:
        raise SpecsimError("the file is empty", source=str(path),
                           fix="a trace needs a header line and at least one request")
    if first.lstrip().startswith("{"):
        if _bench_result(path):
            raise SpecsimError("a 'vllm bench serve --save-result' file, not a trace",
                               source=str(path), field="format",
                               fix=f"replay it with specsim compare-measured {path.name} "
                                   "--scenario my.yaml (its lengths, arrivals and rate)")
        return "token_ids" if looks_like_token_trace(first) else "mooncake"
    try:
        header = {name.strip() for name in next(csv.reader([first]))}
    except csv.Error:  # e.g. a field above csv's size limit: no known header
        header = set()
    for name, columns in _CSV_SIGNATURES.items():
        if set(columns) <= header:
            return name
    raise _unknown_header(header, first, path)


def _unknown_header(header: set[str], first: str, path: Path) -> SpecsimError:
    """The error of a CSV header that is no format's: the missing columns of the format it
    shares most names with, or (sharing none) every format's columns."""
    name, columns = max(_CSV_SIGNATURES.items(), key=lambda item: len(header & set(item[1])))
    if header & set(columns):
        missing = [c for c in columns if c not in header]
        return SpecsimError(f"missing column(s) {', '.join(missing)} of the {name} format; the "
                            f"header has {clip(', '.join(sorted(header)), 200)}",
                            source=str(path), field=missing[0],
                            fix="the header must name: " + ", ".join(columns))
    return SpecsimError("cannot tell the trace format from its first line " + repr(first[:80]),
                        source=str(path), field="format",
                        fix="name one format's columns in the header: " + "; ".join(
                            f"{n}: {','.join(c)}" for n, c in _CSV_SIGNATURES.items())
                        + " (docs/workloads.md); or set format to one of: "
                        + ", ".join(TRACE_READERS))


def _bench_result(path: Path) -> bool:
    """Whether the JSON at ``path`` is a ``vllm bench serve`` result: its first MiB names
    ``input_lens`` and ``output_lens`` (vLLM's benchmark writes them before the per-request
    texts), which no trace line has."""
    with path.open("rb") as handle:
        head = handle.read(2**20)
    return b'"input_lens"' in head and b'"output_lens"' in head


def read_trace(path: str | Path, format: str = "auto") -> Workload:
    """Read a trace in the named format, or detect it with ``format='auto'``."""
    if format == "auto":
        format = detect_format(path)
    if format not in TRACE_READERS:
        raise SpecsimError(f"unknown trace format {format!r}", field="format",
                           fix="choose one of: auto, " + ", ".join(TRACE_READERS))
    return TRACE_READERS[format](path)


def write_specsim_csv(workload: Workload, path: str | Path) -> None:
    """Write ``arrival_s,prompt_tokens,output_tokens[,task]`` with microsecond arrival times.

    The text is a pure function of the arrays (fixed ``%.6f`` formatting, ``\\n`` line
    ends), so the same workload always gives the same bytes.
    """
    header = list(SPECSIM_COLUMNS) + (["task"] if workload.task is not None else [])
    with Path(path).open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        for i in range(len(workload)):
            row = [f"{workload.arrival_s[i]:.6f}", int(workload.prompt_tokens[i]),
                   int(workload.output_tokens[i])]
            if workload.task is not None:
                row.append(workload.task[i])
            writer.writerow(row)
