"""A run's tables as NumPy columns, before (or without) a DataFrame.

``specsim run`` needs from a run its summary and its results files, not DataFrames: the
requests table, the steps table and the acceptance table are kept here as columns (the
order and the values the frames have), the summary is computed from them, and Parquet is
written from them by pyarrow (``simulator/results_arrow.py``).  ``Results.requests`` and
``Results.steps`` build their DataFrames from these on first use, so a process that asks
for none never imports pandas (about 0.24 s of CPU of a 1.7 s `specsim run`, issue 36).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.engine.requests import FINISHED, REJECTED, STATUS_NAMES, RequestTable

if TYPE_CHECKING:
    import pandas as pd

CATEGORIES = [STATUS_NAMES[i] for i in range(len(STATUS_NAMES))]


@dataclass(frozen=True)
class RequestColumns:
    """The requests table: ``columns`` in the frame's order, ``status`` as codes into
    ``CATEGORIES`` (the frame's categorical) and not among ``columns``."""

    columns: dict[str, Any]
    status: np.ndarray

    @classmethod
    def of_run(cls, table: RequestTable, task) -> "RequestColumns":
        """The columns ``Results.from_run`` has always built its frame from."""
        cols: dict[str, Any] = {
            "request_id": np.arange(table.arrival_s.size),
            "replica": table.replica.astype(np.int64),
            "reject_reason": table.reject_reason,  # object array sharing one "" string
            "arrival_s": table.arrival_s,
            "first_scheduled_s": table.first_scheduled_s,
            "first_token_s": table.first_token_s,
            "finish_s": table.finish_s,
            "prompt_tokens": table.prompt_len.astype(np.int64),
            "output_tokens": table.output_len.astype(np.int64),
            "emitted_tokens": table.generated.astype(np.int64),
            "preemptions": table.preemptions.astype(np.int64),
            "num_drafts": table.num_drafts.astype(np.int64),
            "num_draft_tokens": table.num_draft_tokens.astype(np.int64),
            "num_accepted_tokens": table.num_accepted.astype(np.int64),
            "cached_tokens": table.cached_tokens.astype(np.int64),
        }
        if task is not None:
            cols["task"] = task
        arrival = cols["arrival_s"]
        cols["queueing_s"] = cols["first_scheduled_s"] - arrival
        cols["ttft_s"] = cols["first_token_s"] - arrival
        cols["e2e_s"] = cols["finish_s"] - arrival
        out = cols["output_tokens"]
        # pandas' (output - 1).where(output > 1): a float column, NaN for one-token outputs
        denom = np.where(out > 1, out - 1, 0).astype(np.float64)
        denom[out <= 1] = np.nan
        cols["tpot_s"] = (cols["e2e_s"] - cols["ttft_s"]) / denom
        return cls(cols, table.status.astype(np.int8))

    @classmethod
    def of_frame(cls, df: pd.DataFrame) -> "RequestColumns":
        """A requests frame (built, or read back from a results folder) as columns."""
        names = np.asarray(df["status"].astype(str), dtype=object)
        status = np.full(len(df), -1, np.int8)
        for code, name in STATUS_NAMES.items():
            status[names == name] = code
        return cls({str(c): df[c].to_numpy() for c in df.columns if c != "status"}, status)

    def __len__(self) -> int:
        return int(self.status.size)

    def order(self) -> list[str]:
        """The frame's column names in order (status second, as it has always been)."""
        names = list(self.columns)
        return names[:2] + ["status"] + names[2:]

    def frame(self) -> pd.DataFrame:
        """The requests DataFrame (``Results.requests``)."""
        import pandas as pd
        status = pd.Categorical.from_codes(self.status, categories=CATEGORIES)
        return pd.DataFrame({c: status if c == "status" else self.columns[c]
                             for c in self.order()})

    def finished(self) -> np.ndarray:
        return self.status == FINISHED

    def rejected(self) -> np.ndarray:
        return self.status == REJECTED


def steps_frame(columns: dict) -> pd.DataFrame:
    """The steps DataFrame of the recorder's columns (``Recorder.steps_frame``)."""
    import pandas as pd
    return pd.DataFrame(columns, copy=False)


def acceptance_columns(accepted_hist: np.ndarray, drafted_hist: np.ndarray,
                       rates: np.ndarray) -> dict[str, np.ndarray]:
    """The acceptance table: accepted- and draft-length counts, per-position rates."""
    k = int(np.flatnonzero(drafted_hist).max()) if drafted_hist.any() else 0
    return {"length": np.arange(k + 1), "accepted_count": accepted_hist[:k + 1],
            "drafted_count": drafted_hist[:k + 1],
            "position_rate": np.concatenate(([np.nan], rates))}
