"""Render DataFrames for the terminal: an aligned table, CSV or JSON (used by the CLI only).

A table fits ``TABLE_WIDTH`` (120) columns unless ``SPECSIM_TABLE_WIDTH`` says otherwise:
when it does not fit whole, text cells longer than ``MAX_TEXT`` become a numbered mark with
a legend line below the table, and the columns that still do not fit continue in a block
below, the key columns (policy, candidate, ...) repeated.  Headers carry their unit (ms,
tok/s, req/s, GB/s); CSV and JSON keep the full field names.
"""
from __future__ import annotations

import json
import math
import os
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas only names a type; numpy loads in _jsonable: `run --help` is fast
    import pandas as pd

FORMATS = ("table", "csv", "json")
TABLE_WIDTH = 120
WIDTH_ENV = "SPECSIM_TABLE_WIDTH"
WIDTH_HELP = (f"Tables fit {TABLE_WIDTH} columns: long labels are shortened to a numbered "
              "mark explained below the table, and columns that do not fit continue in a "
              f"block below. {WIDTH_ENV}=N fits them to N columns, {WIDTH_ENV}=0 prints "
              "them whole.")
MIN_WIDTH = 40       # narrower than this, no table stays readable
MAX_TEXT = 24        # longest text cell of a table that does not fit whole
GAP = "  "
MISSING = "-"
# the text columns that name a row: repeated at the left of every block of a split table
KEY_NAMES = ("policy", "candidate", "name", "field", "metric", "label", "kernel", "hardware",
             "target", "draft")
# a field's name on screen, its unit in it (the CSV and JSON keep the field names); plan's
# max_rate_per_s and min_replicas_for_target keep theirs: its notes below the table name them
HEADERS = {"memory_gib": "memory_GiB", "bandwidth_gb_per_s": "bandwidth_GB/s",
           "fp16_tflops": "fp16_TFLOP/s", "bf16_tflops": "bf16_TFLOP/s", "params_b": "params_B",
           "active_b": "active_B", "cost_per_million_tokens": "usd_per_Mtok",
           "cost_per_million_tokens_at_target": "usd_per_Mtok_at_target"}
SUFFIXES = (("tokens_per_s", "tok/s"), ("requests_per_s", "req/s"))


def table_width() -> float:
    """Columns a table may use: ``TABLE_WIDTH``, or ``SPECSIM_TABLE_WIDTH`` (0: no limit)."""
    text = os.environ.get(WIDTH_ENV, "").strip()
    if not text:
        return TABLE_WIDTH
    value = int(text) if text.isdigit() else -1
    if value == 0:
        return math.inf
    if value < MIN_WIDTH:
        from simulator.inputs.errors import SpecsimError
        raise SpecsimError(f"must be 0 (no limit) or a whole number of columns >= "
                           f"{MIN_WIDTH}, got {text[:40]!r}", field=WIDTH_ENV,
                           fix=f"unset it (tables fit {TABLE_WIDTH} columns), or set e.g. "
                               f"{WIDTH_ENV}=200")
    return value


def header(name: str) -> str:
    """A column's header: its field name with the unit spelled as on a datasheet."""
    name = str(name)
    if name in HEADERS:
        return HEADERS[name]
    for suffix, unit in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)] + unit
    return name


def wrap_text(text: str, width: float | None = None, indent: str = "  ") -> str:
    """A line of prose wrapped to the table width, continuation lines indented."""
    width = table_width() if width is None else width
    if not math.isfinite(width) or len(text) <= width:
        return text
    return textwrap.fill(text, width=int(width), subsequent_indent=indent,
                         break_on_hyphens=False)


def _fmt_float(x: float) -> str:
    """One number alone, four significant digits (a cell of an object column)."""
    if not math.isfinite(x):
        return MISSING if x != x else str(x)
    if x == 0 or float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    if abs(x) >= 1e7 or abs(x) < 1e-4:
        return f"{x:.4g}"
    return f"{x:.{max(0, 3 - math.floor(math.log10(abs(x))))}f}"


def _float_cells(values: list[float]) -> list[str]:
    """A float column with one number of decimals: four significant digits at its median
    magnitude (whole numbers without decimals, very large or small ones in e-notation)."""
    finite = [v for v in values if math.isfinite(v)]
    sizes = sorted(abs(v) for v in finite if v != 0)
    if not sizes or all(v.is_integer() and abs(v) < 1e15 for v in finite):
        decimals = 0
    else:
        typical = sizes[len(sizes) // 2]
        if typical >= 1e7 or typical < 1e-4:
            return [_fmt_float(v) for v in values]
        decimals = min(4, max(0, 3 - math.floor(math.log10(typical))))
        # numbers already rounded (a percentage to 0.1) keep no trailing zeros
        decimals = next(d for d in range(decimals + 1)
                        if d == decimals or all(abs(round(v, d) - v) <= 1e-9 * max(1, abs(v))
                                                for v in finite))
    return [f"{v:.{decimals}f}" if math.isfinite(v) else _fmt_float(v) for v in values]


def _cells(series) -> tuple[list[str], bool]:
    """A column's cells as text, and whether they are numbers (right-aligned)."""
    return _cells_of(series.tolist(), dtype_kind(series.dtype))


def dtype_kind(dtype) -> str:
    """A pandas dtype as the kind ``render_columns`` takes: b, i, f, or O for the rest."""
    from pandas.api import types

    return "b" if types.is_bool_dtype(dtype) else "i" if types.is_integer_dtype(dtype) else \
        "f" if types.is_float_dtype(dtype) else "O"


def _cells_of(values: list, kind: str) -> tuple[list[str], bool]:
    """Cells of a column of Python values whose dtype kind is ``kind`` (b, i, f, O)."""
    if kind == "b":
        return [str(bool(v)) for v in values], False
    if kind == "i":
        return [str(int(v)) for v in values], True
    if kind == "f":
        return _float_cells([math.nan if v is None else float(v) for v in values]), True
    numeric = all(_is_number(v) or _is_missing(v) for v in values)
    return [MISSING if _is_missing(v) else _fmt_float(float(v)) if _is_number(v) else str(v)
            for v in values], numeric and any(_is_number(v) for v in values)


def _is_number(v) -> bool:
    import numbers

    return isinstance(v, numbers.Real) and not isinstance(v, bool) and v == v


def _is_missing(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def _shorten(cells: list[str], legend: dict[str, int], cap: int = MAX_TEXT) -> list[str]:
    """Cells over ``cap`` characters as their start and a numbered mark."""
    out = []
    for text in cells:
        if len(text) <= cap:
            out.append(text)
            continue
        mark = f"..[{legend.setdefault(text, len(legend) + 1)}]"
        out.append(text[: cap - len(mark)] + mark)
    return out


def legend_lines(legend: dict[str, int], width: float | None = None) -> list[str]:
    """``[n] full text`` for every shortened cell, wrapped to the width."""
    return [wrap_text(f"[{n}] {text}", width, indent="    ") for text, n in legend.items()]


def _roles(df: pd.DataFrame, keys) -> tuple[list[int], list[int]]:
    """Which columns name a row (repeated in every block) and which hold one value in every
    row (printed once, above the table), for a table too wide to print whole.

    ``keys`` if given (nothing factored out); else the leading columns up to the first
    float column that varies or text column not in ``KEY_NAMES``: those that vary are the
    keys (at most four; none found: the first column), the others before the last key are
    factored out (a sweep's fixed fields).
    """
    from pandas.api import types

    columns = [str(c) for c in df.columns]
    if keys is not None:
        return [columns.index(k) for k in keys if k in columns], []
    key_idx, const = [], []
    for i, name in enumerate(columns):
        series = df.iloc[:, i]
        varying = series.astype(str).nunique() > 1
        is_text = not (types.is_numeric_dtype(series.dtype) or types.is_bool_dtype(series.dtype))
        if (types.is_float_dtype(series.dtype) and varying) or \
                (is_text and name.rsplit(".", 1)[-1] not in KEY_NAMES) or len(key_idx) == 4:
            break
        (key_idx if varying or len(df) < 2 else const).append(i)
    const = [i for i in const if key_idx and i < key_idx[-1]]  # fields before the last key
    if not key_idx:
        key_idx = [next((i for i in range(len(columns)) if i not in const), 0)]
    return key_idx, const


def _blocks(widths: list[int], keys: list[int], width: float, groups) -> list[list[int]]:
    """Column indices per block: the keys, then as many columns as fit in ``width``."""
    key_width = sum(widths[k] + len(GAP) for k in keys)
    blocks = []
    for group in groups:
        current, used = [], key_width
        for i in group:
            if current and used + widths[i] > width:
                blocks.append(current)
                current, used = [], key_width
            current.append(i)
            used += widths[i] + len(GAP)
        if current:
            blocks.append(current)
    return [keys + b for b in blocks]


def _fit(cells, widths, heads, numeric, key_idx, groups, width, legend) -> None:
    """Shorten text cells in place: another column's to ``MAX_TEXT``, a key column's to what
    the widest of the caller's ``groups`` leaves it (``MAX_TEXT`` at least)."""
    def shorten(i: int, cap: int) -> None:
        cells[i] = _shorten(cells[i], legend, cap)
        widths[i] = max([len(heads[i])] + [len(c) for c in cells[i]])
    for i in range(len(cells)):
        if not numeric[i] and i not in key_idx:
            shorten(i, MAX_TEXT)
    need = max((sum(widths[i] + len(GAP) for i in g) for g in groups or ()), default=width)
    for i in key_idx:
        if not numeric[i]:
            others = sum(widths[k] + len(GAP) for k in key_idx if k != i)
            shorten(i, max(MAX_TEXT, int(width - need - others - len(GAP))))


def render_table(df: pd.DataFrame, *, width: float | None = None, keys=None, groups=None,
                 legend: dict[str, int] | None = None) -> str:
    """``df`` as an aligned table that fits ``width`` (default: ``table_width()``).

    ``keys``: the columns repeated in every block; ``groups``: lists of the other columns
    that go in blocks of their own (split further if one does not fit).  A table printed
    whole ignores both.  ``legend``: a dict the shortened cells are numbered in, for a
    caller that prints the legend itself; without it the legend follows the table.
    """
    columns = [str(c) for c in df.columns]
    return _render(columns, [_cells(df.iloc[:, i]) for i in range(len(columns))], len(df),
                   lambda: _roles(df, keys), width=width, groups=groups, legend=legend)


def render_columns(columns: list[tuple[str, list, str]], *, keys: list[str],
                   width: float | None = None, groups=None,
                   legend: dict[str, int] | None = None) -> str:
    """``render_table`` of plain columns, (name, Python values, pandas' dtype kind: b, i,
    f or O) each, without a DataFrame (`specsim run` imports no pandas); ``keys`` given."""
    names = [name for name, _, _ in columns]
    rows = len(columns[0][1]) if columns else 0
    return _render(names, [_cells_of(values, kind) for _, values, kind in columns], rows,
                   lambda: ([names.index(k) for k in keys if k in names], []), width=width,
                   groups=groups, legend=legend)


def _render(columns: list[str], column_cells: list, rows: int, roles, *, width, groups,
            legend) -> str:
    """The table of ``render_table``: ``column_cells`` (cells, numeric) per column, ``roles``
    the key and constant columns (``_roles``) when the table must be split."""
    width = table_width() if width is None else (width or math.inf)
    heads = [header(c) for c in columns]
    cells, numeric = zip(*column_cells) if columns else ((), ())
    cells = list(cells)
    widths = [max([len(h)] + [len(c) for c in col]) for h, col in zip(heads, cells)]
    own_legend = legend is None
    legend = {} if own_legend else legend
    lines: list[str] = []
    if sum(widths) + len(GAP) * (len(widths) - 1) <= width and groups is None:
        blocks = [list(range(len(columns)))]
    elif not math.isfinite(width):
        blocks = [list(range(len(columns)))]
    else:
        key_idx, const = roles()
        rest = [[columns.index(c) for c in g if c in columns] for g in groups] if groups \
            else [[i for i in range(len(columns)) if i not in key_idx + const]]
        rest = [g for g in rest if g]
        _fit(cells, widths, heads, numeric, key_idx, rest if groups else None, width, legend)
        blocks = _blocks(widths, key_idx, width, rest) or [key_idx]
        if const:
            lines.append(wrap_text("every row: " + ", ".join(
                f"{heads[i]} {cells[i][0]}" for i in const), width))
    for n, b in enumerate(blocks):
        if n:
            lines.append("")
        for row in [[heads[i] for i in b]] + [[cells[i][r] for i in b] for r in range(rows)]:
            lines.append(GAP.join(t.rjust(widths[i]) if numeric[i] else t.ljust(widths[i])
                                  for t, i in zip(row, b)).rstrip())
    if own_legend:
        lines += legend_lines(legend, width)
    return "\n".join(lines)


def render_fields(title: str, rows, *, sources: bool = False,
                  width: float | None = None) -> str:
    """A key/value block: ``title``, then one line per ``(key, value, source)`` row, keys
    padded to the widest key and long values wrapped under themselves; with ``sources``,
    each row's source (where it has one) wrapped below it."""
    width = table_width() if width is None else (width or math.inf)
    rows = list(rows)
    key_width = max((len(k) for k, _, _ in rows), default=0)
    indent = " " * (2 + key_width + 2)
    lines = [wrap_text(title, width)]
    for key, value, source in rows:
        lines.append(_hanging(f"  {key.ljust(key_width)}  {value}", indent, width))
        if sources and source:
            lines.append(_hanging(f"{indent}source: {source}", indent + "  ", width))
    return "\n".join(lines)


def _hanging(text: str, indent: str, width: float) -> str:
    if not math.isfinite(width) or len(text) <= width:
        return text
    head = len(text) - len(text.lstrip(" "))
    return textwrap.fill(text.lstrip(" "), width=int(width), initial_indent=" " * head,
                         subsequent_indent=indent, break_on_hyphens=False)


def _jsonable(value):
    import numpy as np

    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def frame_records(df: pd.DataFrame) -> list[dict]:
    """Rows as plain JSON-ready dicts (numpy scalars converted, NaN -> null)."""
    return [{k: _jsonable(v) for k, v in row.items()} for row in df.to_dict(orient="records")]


def render(df: pd.DataFrame, fmt: str = "table", **table) -> str:
    """Render ``df`` as a table (``render_table``'s options), CSV or a JSON list of rows."""
    if fmt == "csv":
        return df.to_csv(index=False).rstrip("\n")
    if fmt == "json":
        return json.dumps(frame_records(df), indent=2)
    return render_table(df, **table)
