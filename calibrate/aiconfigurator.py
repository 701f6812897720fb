"""Fits of profile entries to ai-dynamo/aiconfigurator's measured tables (Apache-2.0).

aiconfigurator (github.com/ai-dynamo/aiconfigurator) ships, per GPU and engine version, the
kernels and collectives its collectors timed, as parquet files under
``aic-core/src/aiconfigurator_core/systems/data/<system>/<op>/<engine>/<version>/``.  Nothing
of it is copied here: the entries of hardware/profiles/*.yaml that cite a table are
re-derived from a checkout of that repository by the functions below, which the tests call
when ``SPECSIM_AICONFIGURATOR_DIR`` names such a checkout (and skip when it does not).

- :func:`graph_all_reduce` / :func:`fit_all_reduce`: vLLM's tensor-parallel
  all-reduce timed inside a CUDA graph (``comm/vllm/<version>/custom_allreduce_perf.parquet``,
  backend ``vllm_graph``), one curve a world by :func:`hardware.collectives.fit_pieces`, the
  fit ``custom_all_reduce`` of h100-sxm and h200 is.
- :func:`nccl_rows` / :func:`never_cheaper` / :func:`fit_all_reduce`: nccl-tests'
  ``all_reduce_perf`` (and its all_gather, reduce_scatter, alltoall) as
  ``comm/nccl/<version>/nccl_perf.parquet`` holds it (collector/network/collect_nccl.py),
  lifted so that a larger world is never cheaper (:func:`cap_last_slopes` past the table),
  the fit h200's NCCL ``all_reduce`` is, and (``op="all_gather"``, ``all_gather_factor``)
  its ``all_gather``.
- :func:`decode_attention` / :func:`fit_decode_attention`: vLLM's decode attention call
  (``attention/vllm/<version>/generation_attention_perf.parquet``, kernel_source
  ``vllm_flash_attn``), the memory efficiency and fixed time of ``kernels.attention_decode``.

The tables are read with pandas and pyarrow (core dependencies).
"""
from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from hardware.collectives import all_reduce_factor, fit_pieces, joined

ENV = "SPECSIM_AICONFIGURATOR_DIR"
DATA = Path("aic-core/src/aiconfigurator_core/systems/data")
# the rows the h100-sxm fit used: BF16 tensors of 128 x 2^i elements, 256 B to 4 MiB
ALL_REDUCE_ELEMENTS = tuple(128 * 2**i for i in range(15))
# the decode-attention rows the h100-sxm fit used: (query heads, KV heads) x batch x context
DECODE_HEADS = ((32, 4), (16, 2), (64, 8), (8, 1))
DECODE_BATCHES = (1, 8, 32, 128)
DECODE_CONTEXTS = (127, 511, 2047, 8191)   # the table's ``step``: KV tokens a request attends
HEAD_DIM, BF16 = 128, 2.0
NCCL_ELEMENT_BYTES = {"half": 2.0, "int8": 1.0}   # collect_nccl.py bytes_per_element


def data_root() -> Path | None:
    """The tables' folder of the checkout ``SPECSIM_AICONFIGURATOR_DIR`` names, or None when
    the variable is unset or names no such checkout."""
    root = os.environ.get(ENV, "")
    if not root:
        return None
    data = Path(root).expanduser() / DATA
    return data if data.is_dir() else None


def table(system: str, op: str, engine: str, version: str, name: str) -> pd.DataFrame:
    """One measured table, e.g. ``table("h200_sxm", "comm", "vllm", "0.14.0",
    "custom_allreduce_perf")``; a KeyError when no checkout is named."""
    root = data_root()
    if root is None:
        raise KeyError(f"{ENV} names no aiconfigurator checkout")
    return pd.read_parquet(root / system / op / engine / version / f"{name}.parquet")


def graph_all_reduce(frame: pd.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``{world: (bytes, seconds)}`` of the CUDA-graph rows (backend ``vllm_graph``) at
    ``ALL_REDUCE_ELEMENTS``: the median a (world, size), BF16 so bytes = 2 x elements; the
    table's latency column is in milliseconds."""
    rows = frame[(frame["backend"] == "vllm_graph")
                 & frame["message_size"].isin(ALL_REDUCE_ELEMENTS)]
    out = {}
    for world, part in rows.groupby("num_gpus"):
        med = part.groupby("message_size")["latency"].median()
        out[int(world)] = (2.0 * med.index.to_numpy(float), med.to_numpy(float) * 1e-3)
    return out


def nccl_rows(frame: pd.DataFrame, op: str = "all_reduce", dtype: str = "half"
              ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``{world: (bytes, seconds)}`` of nccl-tests' ``op`` rows at ``dtype``, every size the
    table has: the median a (world, size).  collect_nccl.py runs the binary at ``size`` bytes
    and logs ``message_size = size // bytes_per_element`` (2 for half, 1 for int8), so bytes =
    element size x message_size; ``latency`` is the out-of-place time in milliseconds."""
    rows = frame[(frame["op_name"] == op) & (frame["nccl_dtype"] == dtype)]
    width = NCCL_ELEMENT_BYTES[dtype]
    out = {}
    for world, part in rows.groupby("num_gpus"):
        med = part.groupby("message_size")["latency"].median()
        out[int(world)] = (width * med.index.to_numpy(float), med.to_numpy(float) * 1e-3)
    return out


def never_cheaper(rows: dict[int, tuple[np.ndarray, np.ndarray]]
                  ) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], dict[int, int]]:
    """The rows with each size's time at world p raised to the largest measured at p or a
    smaller world (the model prices a larger world never cheaper: tests/hardware/
    test_collectives.py; b200.yaml's NCCL curves were fitted so), and how many sizes each
    world had lifted.  Every world must hold the same sizes."""
    out, lifted, floor = {}, {}, None
    for w, (b, t) in sorted(rows.items()):
        if floor is not None and not np.array_equal(b, floor[0]):
            raise ValueError(f"world {w}'s sizes are not the smaller worlds'")
        up = t if floor is None else np.maximum(t, floor[1])
        out[w], lifted[w], floor = (b, up), int(np.count_nonzero(up > t)), (b, up)
    return out, lifted


def fit_all_reduce(rows: dict[int, tuple[np.ndarray, np.ndarray]],
                   factor: Callable[[int], float] = all_reduce_factor
                   ) -> dict[int, tuple[list[dict], dict]]:
    """Each world's pieces and fit errors: fit_pieces (3 pieces, min_points 2), as h100-sxm's
    ``all_reduce`` and ``custom_all_reduce`` were fitted; ``factor`` the collective's bytes
    a link carries per byte (``all_gather_factor`` for h200's ``all_gather``)."""
    return {w: fit_pieces(b, t, factor(w), max_pieces=3, min_points=2)
            for w, (b, t) in sorted(rows.items())}


def cap_last_slopes(pieces: dict[int, list[dict]],
                    factor: Callable[[int], float] = all_reduce_factor
                    ) -> tuple[dict[int, list[dict]], dict]:
    """Each world's last bus bandwidth capped at the smaller world's x factor(w) / factor(smaller)
    (4 digits), so that past the table's largest size a larger world's time grows no slower and
    the curves do not cross (b200.yaml's all_gather was capped so), that piece's latency
    re-joined to the one before (hardware.collectives.joined); and ``{world: fitted busbw}`` of
    the worlds capped.  ``factor`` as :func:`fit_all_reduce`'s."""
    out, capped, before = {}, {}, None
    for w, ps in sorted(pieces.items()):
        ps = [dict(p) for p in ps]
        if before is not None:
            cap = float(f"{before[1] * factor(w) / factor(before[0]):.4g}")
            if ps[-1]["busbw_gb_per_s"] > cap:
                capped[w], ps[-1]["busbw_gb_per_s"] = ps[-1]["busbw_gb_per_s"], cap
                curve = joined(w, factor(w), [p["from_kib"] * 1024.0 for p in ps],
                               ps[0]["latency_us"] * 1e-6, [p["busbw_gb_per_s"] * 1e9
                                                             for p in ps])
                ps[-1]["latency_us"] = round(curve.latencies[-1] * 1e6, 3)
        out[w], before = ps, (w, ps[-1]["busbw_gb_per_s"])
    return out, capped


def decode_attention(frame: pd.DataFrame) -> pd.DataFrame:
    """The BF16-KV FlashAttention decode calls of ``DECODE_HEADS`` x ``DECODE_BATCHES`` x
    ``DECODE_CONTEXTS`` (head dim 128): columns heads, kv_heads, batch, context, seconds."""
    f = frame[(frame["kernel_source"] == "vllm_flash_attn") & (frame["head_dim"] == HEAD_DIM)
              & (frame["kv_cache_dtype"] == "bfloat16") & (frame["attn_dtype"] == "bfloat16")
              & frame["batch_size"].isin(DECODE_BATCHES) & frame["step"].isin(DECODE_CONTEXTS)]
    f = f[[(h, k) in DECODE_HEADS for h, k in zip(f["num_heads"], f["num_key_value_heads"])]]
    keys = ["num_heads", "num_key_value_heads", "batch_size", "step"]
    med = f.groupby(keys)["latency"].median().reset_index()
    return pd.DataFrame({"heads": med["num_heads"], "kv_heads": med["num_key_value_heads"],
                         "batch": med["batch_size"], "context": med["step"],
                         "seconds": med["latency"] * 1e-3})


def decode_kv_bytes(kv_heads, batch, context) -> np.ndarray:
    """Bytes of K and V (BF16, head dim 128) one call reads."""
    return np.asarray(batch, float) * context * kv_heads * HEAD_DIM * 2 * BF16


def fit_decode_attention(calls: pd.DataFrame, peak_bytes_per_s: float
                         ) -> tuple[float, float, float]:
    """(memory efficiency, latency us, MAPE) minimising the MAPE of ``kv bytes / (eff x
    peak) + latency`` over ``calls``: efficiency 0.60-1.00 step 0.01, latency 0-30 us step
    0.1, ties to the smaller pair (the h100-sxm ``attention_decode`` fit)."""
    nbytes = decode_kv_bytes(calls["kv_heads"], calls["batch"], calls["context"])
    measured = calls["seconds"].to_numpy(float)
    effs = np.round(np.arange(0.60, 1.0001, 0.01), 2)
    lats = np.round(np.arange(0.0, 30.0001, 0.1), 1)
    best = (np.inf, 0.0, 0.0)
    for eff, lat in itertools.product(effs, lats):
        mape = float(np.mean(np.abs((nbytes / (eff * peak_bytes_per_s) + lat * 1e-6)
                                    / measured - 1)))
        best = min(best, (mape, float(eff), float(lat)))
    return best[1], best[2], best[0]
