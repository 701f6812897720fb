"""Render DataFrames for the terminal: an aligned table, CSV or JSON (used by the CLI only)."""
from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas only names a type; numpy loads in _jsonable: `run --help` is fast
    import pandas as pd

FORMATS = ("table", "csv", "json")


def _fmt_float(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        return f"{x:.4g}"
    return f"{x:.4f}".rstrip("0").rstrip(".") if abs(x) < 100 else f"{x:.2f}"


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


def render(df: pd.DataFrame, fmt: str = "table") -> str:
    """Render ``df`` as a table, CSV or a JSON list of rows."""
    if fmt == "csv":
        return df.to_csv(index=False).rstrip("\n")
    if fmt == "json":
        return json.dumps(frame_records(df), indent=2)
    return df.to_string(index=False, float_format=_fmt_float)
