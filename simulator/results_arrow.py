"""A results table written as Parquet by pyarrow straight from its NumPy columns.

What ``DataFrame.to_parquet(path, index=False, use_dictionary=...)`` writes, without the
DataFrame: pandas converts each column with ``pa.array(values, from_pandas=True)`` (a float
NaN becomes a null), a categorical as a dictionary array of its codes and categories, and
hands the table to ``pyarrow.parquet.write_table`` with snappy compression
(pandas/io/parquet.py, ``PyArrowImpl.write``; pyarrow/pandas_compat.py,
``dataframe_to_arrays``).  The one difference is the schema's ``pandas`` metadata (the
frame's index and dtypes), which this leaves out: read back, the columns are the same
(``pyarrow.Table.equals``) and ``pandas.read_parquet`` gives an equal frame (a
``RangeIndex``, the dictionary column as a categorical).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from simulator.results_columns import CATEGORIES, RequestColumns


def dictionary_names(columns: dict[str, Any]) -> list[str]:
    """The columns to dictionary-encode: all but the floating-point ones (the rule and its
    measurement: ``results_dir.dictionary_columns``)."""
    return [name for name, values in columns.items() if np.asarray(values).dtype.kind != "f"]


def write_columns(path: Path, columns: dict[str, Any], dictionary: list[str]) -> None:
    """``columns`` (name -> values, or a ready pyarrow array) as one Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    arrays = [values if isinstance(values, pa.Array) else _array(pa, values)
              for values in columns.values()]
    table = pa.Table.from_arrays(arrays, names=list(columns))
    pq.write_table(table, path, compression="snappy", use_dictionary=dictionary)


def _array(pa, values):
    """One column as pandas converts it (``pa.array(values, from_pandas=True)``: a float NaN
    a null), text as ``large_string``, the type pandas 3's ``str`` columns convert to
    (pandas 2's object columns went to ``string``: the same Parquet bytes, read back as the
    same text).  Built from the column's buffers: ``pa.array`` imports pandas (pyarrow's
    pandas shim asks whether the values are a pandas categorical), which this module is
    here to avoid; a column of another type goes through ``pa.array`` all the same."""
    arr = np.asarray(values)
    n, kind = arr.size, arr.dtype.kind
    if kind in "OU" and all(isinstance(v, str) for v in arr.tolist()):
        data = [v.encode("utf-8") for v in arr.tolist()]
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum([len(b) for b in data], out=offsets[1:])
        return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets),
                                                            pa.py_buffer(b"".join(data))])
    if kind == "b":
        bits = np.packbits(arr, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bits)])
    if arr.dtype == np.float64 or kind in "iu":
        arr = np.ascontiguousarray(arr)
        nulls = np.isnan(arr) if kind == "f" else np.zeros(0, bool)
        valid = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None
        return pa.Array.from_buffers(pa.from_numpy_dtype(arr.dtype), n,
                                     [valid, pa.py_buffer(arr)],
                                     null_count=int(np.count_nonzero(nulls)))
    text = kind in "OU"
    return pa.array(values, type=pa.large_string() if text else None, from_pandas=True)


def write_requests(path: Path, req: RequestColumns) -> None:
    """The requests table, its status a dictionary (categorical) column as pandas writes."""
    import pyarrow as pa
    codes = np.ascontiguousarray(req.status, dtype=np.int8)
    words = "".join(CATEGORIES).encode("utf-8")
    ends = np.cumsum([0] + [len(c.encode("utf-8")) for c in CATEGORIES], dtype=np.int32)
    status = pa.DictionaryArray.from_arrays(  # pandas' categorical: codes and categories
        pa.Array.from_buffers(pa.int8(), codes.size, [None, pa.py_buffer(codes)]),
        pa.Array.from_buffers(pa.string(), len(CATEGORIES), [None, pa.py_buffer(ends),
                                                              pa.py_buffer(words)]))
    columns = {name: status if name == "status" else req.columns[name]
               for name in req.order()}
    write_columns(path, columns, ["status"] + dictionary_names(req.columns))
