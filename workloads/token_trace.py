"""Token-id traces: JSONL, one request per line, with the real token ids of each request.

::

    {"specsim":"token_ids","tokenizer":"words","source":"chat.jsonl"}      <- optional header
    {"arrival_s":0.0,"prompt_ids":[12,7,99],"output_ids":[7,99,4],"task":"code_edit"}

``arrival_s`` (seconds, sorted), ``prompt_ids`` and ``output_ids`` (non-empty lists of whole
numbers in ``[0, MAX_TOKEN_ID]``) are required, ``task`` (a non-empty label) is optional and
no other key is allowed (a misspelt ``output_id`` would otherwise be lost silently).  The
prompt and output lengths are the lengths of the id lists.  A first line holding
``"specsim": "token_ids"`` is a header (provenance: which tokenizer made the ids, from what);
``specsim tokenize`` writes one, and its presence is how specsim knows that it wrote a file
it may replace.  These are the traces the model-free methods (prompt lookup, suffix
decoding, lookahead) need: their acceptance is whatever repetition the real ids contain.

The reader checks the running total of ids against ``MAX_TOKEN_IDS`` and the request count
against ``MAX_REQUESTS`` line by line, so an oversized file is refused before it is held.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import short
from workloads.jsonl import json_lines
from workloads.workload import MAX_ARRIVAL_S, MAX_REQUESTS, MAX_TOKEN_IDS, Workload

REQUIRED_KEYS = ("arrival_s", "prompt_ids", "output_ids")
OPTIONAL_KEYS = ("task",)
HEADER_KEY, HEADER_KIND = "specsim", "token_ids"
# the bytes the first line of a specsim-written trace carries (output_paths' ``marks``)
TOKEN_TRACE_MARK = b'{"specsim":"token_ids"'
# Largest token id: every tokenizer's ids fit int32 (vocabularies are ~32k-260k entries).
MAX_TOKEN_ID = 2**31 - 1
FORMAT_FIX = 'one JSON object per line: {"arrival_s": 0.0, "prompt_ids": [...], ' \
             '"output_ids": [...]}'


def _error(path: Path, number: int, message: str, field: str | None = None,
           fix: str = FORMAT_FIX) -> SpecsimError:
    return SpecsimError(f"line {number}: {message}", source=str(path), field=field, fix=fix)


def is_header(record: Any) -> bool:
    """Whether a parsed first line is a token-trace header rather than a request."""
    return isinstance(record, dict) and HEADER_KEY in record and "prompt_ids" not in record


def looks_like_token_trace(first_line: str) -> bool:
    """Whether a file's first non-blank line is a token-trace header or request (auto-detect)."""
    try:
        record = json.loads(first_line)
    except (ValueError, RecursionError):  # the reader names the bad line
        return False
    if not isinstance(record, dict):
        return False
    return record.get(HEADER_KEY) == HEADER_KIND or "prompt_ids" in record


def _ids(record: dict, key: str, number: int, path: Path) -> np.ndarray:
    value = record[key]
    if not isinstance(value, list):
        raise _error(path, number, f"{key} is {short(value)}, not a list of token ids", key)
    if not value:
        raise _error(path, number, f"{key} is empty; every request needs at least one "
                     "token", key, fix="drop the request, or give it at least one token")
    try:
        ids = np.array(value)
    except (ValueError, OverflowError):
        ids = np.array([], dtype=object)
    bad = ids.ndim != 1 or ids.dtype.kind not in "iu" or ids.size != len(value) \
        or any(type(v) is bool for v in value)
    if not bad and (ids.min() < 0 or ids.max() > MAX_TOKEN_ID):
        bad = True
    if bad:
        first = next((v for v in value if type(v) is not int or not 0 <= v <= MAX_TOKEN_ID),
                     value[0])
        raise _error(path, number, f"{key} holds {short(first)}; token ids are whole numbers "
                     f"from 0 to {MAX_TOKEN_ID:,}", key,
                     fix="write the tokenizer's integer ids (specsim tokenize makes them)")
    return ids.astype(np.int64)


def _arrival(record: dict, number: int, path: Path, previous: float) -> float:
    value = record["arrival_s"]
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise _error(path, number, f"arrival_s is {short(value)}; arrival times are finite "
                     "numbers of seconds >= 0", "arrival_s")
    if value > MAX_ARRIVAL_S:
        raise _error(path, number, f"arrival_s is {value:g}, above {MAX_ARRIVAL_S:g} s "
                     "(31.7 years)", "arrival_s", fix="give times relative to the first request")
    if value < previous:
        raise _error(path, number, f"arrival_s {value!r} is earlier than the previous line's "
                     f"{previous!r}; the trace must be in arrival order", "arrival_s",
                     fix="sort the file by arrival_s; specsim rejects out-of-order traces "
                         "rather than reorder them silently")
    return float(value)


def _request(record: Any, number: int, path: Path, previous: float):
    """One line's (arrival_s, prompt ids, output ids, task), every field checked."""
    if not isinstance(record, dict):
        raise _error(path, number, "is not a JSON object")
    missing = [key for key in REQUIRED_KEYS if key not in record]
    if missing:
        raise _error(path, number, f"{', '.join(missing)} missing", missing[0],
                     fix="every line needs " + ", ".join(REQUIRED_KEYS))
    extra = [key for key in record if key not in REQUIRED_KEYS + OPTIONAL_KEYS]
    if extra:
        raise _error(path, number, f"unknown key {short(extra[0])}", short(extra[0]),
                     fix="valid keys are: " + ", ".join(REQUIRED_KEYS + OPTIONAL_KEYS))
    task = record.get("task")
    if "task" in record and (not isinstance(task, str) or not task.strip()):
        raise _error(path, number, f"task is {short(task)}; task labels are non-empty "
                     "strings", "task", fix="fill in the label or drop the task key")
    return (_arrival(record, number, path, previous), _ids(record, "prompt_ids", number, path),
            _ids(record, "output_ids", number, path), task)


def _read_lines(path: Path) -> tuple[list, dict | None]:
    rows: list = []
    header = None
    total = 0
    previous = 0.0
    for number, record in json_lines(path, FORMAT_FIX):
        if not rows and header is None and is_header(record):
            if record[HEADER_KEY] != HEADER_KIND:
                raise _error(path, number, f"header names {short(record[HEADER_KEY])}, not "
                             f"{HEADER_KIND!r}", HEADER_KEY, fix="this reader takes token-id "
                             "traces; drop the header line or pick the trace's own format")
            header = record
            continue
        if len(rows) == MAX_REQUESTS:
            raise _error(path, number, f"more than {MAX_REQUESTS:,} requests",
                         fix="split the trace, or keep its first requests")
        row = _request(record, number, path, previous)
        total += row[1].size + row[2].size
        if total > MAX_TOKEN_IDS:
            raise _error(path, number, f"the trace holds more than {MAX_TOKEN_IDS:,} token "
                         "ids up to here", "output_ids",
                         fix="keep fewer or shorter requests (docs/limits.md)")
        previous = row[0]
        rows.append(row)
    return rows, header


def read_token_trace(path: str | Path) -> Workload:
    """Read a token-id JSONL trace (``arrival_s``, ``prompt_ids``, ``output_ids``[, ``task``])."""
    path = Path(path)
    rows, _ = _read_lines(path)
    if not rows:
        raise SpecsimError("the file holds no requests", source=str(path),
                           fix="a trace needs at least one request: " + FORMAT_FIX)
    tasks = [row[3] for row in rows]
    given = [t is not None for t in tasks]
    if any(given) and not all(given):
        raise SpecsimError(f"task given on some requests only (request {given.index(False)} "
                           "has none)", source=str(path), field="task",
                           fix="label every request or none")
    prompt_ids = tuple(row[1] for row in rows)
    output_ids = tuple(row[2] for row in rows)
    return Workload(name=path.stem, arrival_s=np.array([row[0] for row in rows]),
                    prompt_tokens=np.array([ids.size for ids in prompt_ids], np.int64),
                    output_tokens=np.array([ids.size for ids in output_ids], np.int64),
                    task=tasks if all(given) else None, prompt_ids=prompt_ids,
                    output_ids=output_ids)


def header_line(**provenance: Any) -> str:
    """The header line specsim writes first (``TOKEN_TRACE_MARK``, then ``provenance``)."""
    return json.dumps({HEADER_KEY: HEADER_KIND, **provenance}, separators=(",", ":"),
                      ensure_ascii=False)


def write_token_trace(workload: Workload, handle: IO[str], **provenance: Any) -> None:
    """Write ``workload`` as a token trace: the header, then one compact line per request.

    The text is a pure function of the workload and ``provenance`` (arrivals as ``%.6f``
    seconds, ``\\n`` line ends), so the same input always gives the same bytes.
    """
    if workload.prompt_ids is None or workload.output_ids is None:
        raise SpecsimError("the workload has no token ids", source=f"workload {workload.name!r}",
                           field="prompt_ids", fix="build it from a token-level source")
    handle.write(header_line(**provenance) + "\n")
    for i in range(len(workload)):
        record: dict[str, Any] = {"arrival_s": float(f"{workload.arrival_s[i]:.6f}"),
                                  "prompt_ids": workload.prompt_ids[i].tolist(),
                                  "output_ids": workload.output_ids[i].tolist()}
        if workload.task is not None:
            record["task"] = str(workload.task[i])
        handle.write(json.dumps(record, separators=(",", ":")) + "\n")
