"""Where a sweep's rows go: a CSV appended in place, or Parquet part files in a folder.

The sink resumes only an output a sweep wrote (its header or its part names say so), writes
whole files through a temporary sibling, and drops a half-written last line on resume.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.inputs.csv_rows import check_csv_rows
from simulator.inputs.errors import SpecsimError

# rows of a sweep's CSV, counted before it is read back: twice the largest sweep (2,000,000
# analytic points), room for a failed point's row and its rerun's
MAX_SINK_ROWS = 4_000_000


class ResultSink:
    """Rows streamed to ``path``: a CSV appended in place, or Parquet part files in a folder."""

    FLUSH_ROWS, FLUSH_S = 500, 2.0

    def __init__(self, path: str | Path, *, restart: bool = False) -> None:
        self.path = Path(path).expanduser()
        suffix = self.path.suffix.lower()
        if suffix not in (".csv", ".parquet", ".pq"):
            raise SpecsimError(f"cannot tell the format of {str(path)!r}", field="--out",
                               fix="end the name in .csv or .parquet")
        self.fmt = "csv" if suffix == ".csv" else "parquet"
        if self.fmt == "parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise SpecsimError("parquet output needs pyarrow, which is not installed",
                                   field="--out", fix="pip install 'pyarrow>=14,<27' (a "
                                   "dependency of specsim), or "
                                   "write .csv") from None
        self._check_target()  # before anything is read, truncated or removed
        if restart:
            self._discard()
        self._buffer: list[dict] = []
        self._last = time.monotonic()
        if self.fmt == "csv" and self.path.is_file():  # drop a half-written last line
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):
                self.path.write_bytes(data[:data.rfind(b"\n") + 1])

    def _check_target(self) -> None:
        """An existing ``--out`` must be a sweep output specsim wrote: a CSV whose header
        starts ``point,key`` and has an ``error`` column, or a folder of Parquet parts."""
        from simulator.output_paths import check_parent, os_error
        p, shown = self.path, repr(str(self.path))
        fix = "choose another --out (a sweep writes and resumes its own file)"
        try:
            if p.is_symlink():
                raise SpecsimError(f"{shown} is a symbolic link", field="--out",
                                   fix="give the real path, or " + fix)
            if not p.exists():
                check_parent(p.absolute(), "--out")
                return
            if self.fmt == "csv":
                if not p.is_file():
                    raise SpecsimError(f"{shown} is not a file", field="--out", fix=fix)
                with open(p, "rb") as fh:
                    head = fh.read(65536)
                if not head:
                    return
                header = head.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
                cols = [c.strip().strip('"') for c in header.split(",")]
                if cols[:2] != ["point", "key"] or "error" not in cols:
                    raise SpecsimError(f"{shown} exists and is not a specsim sweep file (its "
                                       "header does not start with point,key)",
                                       field="--out", fix=fix)
                return
            if not p.is_dir():
                raise SpecsimError(f"{shown} exists and is not a folder of Parquet parts",
                                   field="--out", fix=fix)
            foreign = [e.name for e in p.iterdir()
                       if not re.fullmatch(r"part-\d{5,}\.parquet|\.part-\d{5,}\.tmp", e.name)
                       or not e.is_file() or e.is_symlink()]
            if foreign:
                raise SpecsimError(f"{shown} holds files a sweep did not write "
                                   f"({', '.join(sorted(foreign)[:3])})", field="--out", fix=fix)
        except OSError as exc:
            raise os_error(exc, p, "--out", "use") from None

    def _discard(self) -> None:
        """``--restart``: remove the earlier points (only what ``_check_target`` accepted)."""
        if self.fmt == "csv":
            self.path.unlink(missing_ok=True)
            return
        if self.path.is_dir():
            for part in self.path.iterdir():
                part.unlink()
            self.path.rmdir()

    def read(self) -> pd.DataFrame:
        """Every row written so far (the last row per key wins)."""
        if self.fmt == "csv":
            if not self.path.exists() or self.path.stat().st_size == 0:
                return pd.DataFrame()
            check_csv_rows(self.path, MAX_SINK_ROWS, what="a sweep's results file",
                           field="--out", fix="give a new --out, or add --restart")
            df = pd.read_csv(self.path, dtype={"key": str})  # an all-digit hash is no number
        else:
            parts = sorted(self.path.glob("part-*.parquet")) if self.path.is_dir() else []
            if not parts:
                return pd.DataFrame()
            df = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
        return df.drop_duplicates("key", keep="last") if "key" in df else df

    def done_keys(self) -> set[str]:
        """Keys already evaluated without error."""
        df = self.read()
        if df.empty:
            return set()
        ok = df["error"].isna() if "error" in df else np.ones(len(df), bool)
        return set(df.loc[ok, "key"].astype(str))

    def add(self, row: dict) -> None:
        self._buffer.append(row)
        if len(self._buffer) >= self.FLUSH_ROWS or time.monotonic() - self._last >= self.FLUSH_S:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows; an OSError (a full disk) is one error naming the file,
        and an append cut short is undone (no half row left for the next resume)."""
        self._last = time.monotonic()
        if not self._buffer:
            return
        new = pd.DataFrame(self._buffer)
        self._buffer = []
        try:
            self._flush(new)
        except OSError as exc:
            from simulator.output_paths import os_error
            raise os_error(exc, self.path, "--out") from None

    def _flush(self, new: pd.DataFrame) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.fmt == "parquet":
            self.path.mkdir(exist_ok=True)
            n = 1 + max((int(p.stem[5:]) for p in self.path.glob("part-*.parquet")), default=-1)
            tmp = self.path / f".part-{n:05d}.tmp"
            try:
                new.to_parquet(tmp, index=False)
                os.replace(tmp, self.path / f"part-{n:05d}.parquet")
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            return
        if not self.path.exists() or self.path.stat().st_size == 0:
            self._write_whole(new)  # the file appears complete, header and rows
            return
        columns = list(pd.read_csv(self.path, nrows=0).columns)
        if set(new.columns) <= set(columns):
            size = self.path.stat().st_size
            try:
                new.reindex(columns=columns).to_csv(self.path, mode="a", header=False,
                                                    index=False)
            except BaseException:
                os.truncate(self.path, size)  # the rows before stay whole
                raise
            return
        old = pd.read_csv(self.path, dtype={"key": str})
        self._write_whole(pd.concat([old, new], ignore_index=True))  # new columns

    def _write_whole(self, df: pd.DataFrame) -> None:
        """Write ``df`` as the whole CSV: a temporary sibling renamed over the file."""
        tmp = self.path.with_name(f".specsim-{self.path.name}.tmp")
        try:
            df.to_csv(tmp, index=False)
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
