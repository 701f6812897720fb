"""Published kernel measurements (Vidur's CSV layout): read them, predict them, compare.

No torch here: ``specsim calibrate --from-measurements`` and ``specsim validate
--measurements`` run on any machine.  A folder such as ``../shared/measured/vidur/compute/a100``
holds ``<org>/<model>/mlp.csv`` (token-level operators by ``num_tokens`` and tensor parallel
degree) and, for some models, ``attention*.csv`` (FlashAttention by batch, KV length and
prefill chunk).  Each row's median (or min, mean) is one measured kernel.

Memory-bound kernels are charged the bytes their loads and stores request, read off the
engines' kernel sources (a scalar-access kernel is bound by what it requests, cached or not).
Every kernel is predicted from its shape columns through hardware/roofline.py's kernel methods
only (``gemm_time``, ``transfer_time``, ``attention_time``), the very calls the cost model
makes, so validation and simulation share one formula.  The shapes (per device, tensor
parallel degree ``t``, head dim ``d = n_embd / n_head``, fp16):

======================== ============================================================
attn_pre_proj            GEMM m=T, n=(n_head + 2 n_kv_head) d / t, k=n_embd   (QKV)
attn_post_proj           GEMM m=T, n=n_embd, k=n_head d / t                    (O)
mlp_up_proj              GEMM m=T, n=(2 if gated else 1) n_expanded_embd / t, k=n_embd
mlp_down_proj            GEMM m=T, n=n_embd, k=n_expanded_embd / t
emb                      transfer T n_embd (2 b + 8) ("embedding": torch's index_select kernel
                         loads, per output element, its int64 row index and the element, and
                         stores it; aten/src/ATen/native/cuda/Indexing.cu)
*_layernorm              transfer (3 T n_embd + n_embd) b ("norm": vLLM's rms_norm_kernel reads
                         its row twice, sum of squares then scaling, writes it once, and
                         reads the weight; csrc/layernorm_kernels.cu)
attn_rope                transfer 3 T (n_head + n_kv_head) d / t b ("rope": per rotated pair,
                         vLLM's kernel loads x, y, cos and sin and stores x and y;
                         csrc/pos_encoding_kernels.cu)
mlp_act                  transfer 3 T f b gated (vLLM's SiLU-and-multiply reads gate and up,
                         writes: "activation"), else 2 T f b (torch's GELU: "elementwise"),
                         with f = n_expanded_embd / t
add                      transfer 3 T n_embd b ("elementwise": torch's vectorised add); a
                         model without a post-attention norm adds three tensors: two kernels
attn_prefill             attention_time, one request: F = 4 q new (ctx + new), B = (ctx + new)
                         2 kv b + 2 new q b, with q = n_q_head d / t, kv = n_kv_head d / t
attn_decode              attention_time, batch_size requests of one query: F = 4 q (ctx + 1),
                         B = (ctx + 1) 2 kv b + 2 q b each
======================== ============================================================

The norm, activation and rope kernels are one thread block per token: ``transfer_time`` gets
``rows = T`` for them.  The prefill FLOPs count every key of the chunk's own block (``ctx +
new``, no causal halving): the measured kernel's time grows so (its cost per pair matches the
cached part's), and the cost model is to pass the same count to ``attention_time``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hardware.roofline import Roofline
from simulator.inputs.csv_rows import check_csv_rows
from simulator.inputs.errors import SpecsimError

STATISTICS = ("median", "min", "mean")
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
TRANSFER_OPS = {"emb": "embedding", "input_layernorm": "norm", "post_attention_layernorm": "norm",
                "attn_rope": "rope", "mlp_act": "activation", "add": "elementwise"}
# vLLM's kernels give each token's row to one thread block (grid = num_tokens)
ROW_KINDS = ("norm", "activation", "rope")
MLP_OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
           "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
ATTENTION_OPS = ("attn_prefill", "attn_decode")
MLP_SHAPES = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp",
              "num_tokens", "num_tensor_parallel_workers")
ATTENTION_SHAPES = ("n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers",
                    "batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill")
DTYPE = "fp16"          # Vidur profiles every operator in float16
DTYPE_BYTES = 2
INDEX_BYTES = 8         # int64 token ids
MAX_FILES = 10_000
# rows of one kernel CSV, counted before it is parsed: the largest published file (Vidur's
# Llama-2-70b attention_tp2.csv on A100) has 14,658; a 1,000,000-row file took 500 s and
# 3.5 GB in pandas before this limit
MAX_MEASUREMENT_ROWS = 200_000
# columns of the long table, one row per measured kernel
COLUMNS = ("kind", "dtype", "model", "op", "tp", "tokens", "batch", "context", "chunk",
           "n_head", "n_kv_head", "n_embd", "n_expanded_embd", "gated", "count", "measured_s")


@dataclass(frozen=True)
class Measurements:
    """The kernels read from one folder: the long table and where it came from."""

    kernels: pd.DataFrame
    root: str
    files: tuple[str, ...]
    statistic: str

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.kernels["model"])))


def _files(root: Path, field: str) -> list[tuple[str, Path]]:
    if not root.is_dir():
        raise SpecsimError(f"{str(root)[:200]!r} is not a folder", field=field,
                           fix="name the folder that holds <org>/<model>/mlp.csv files, e.g. "
                               "../shared/measured/vidur/compute/a100")
    found = sorted(p for p in root.rglob("*.csv")
                   if p.name == "mlp.csv" or p.name.startswith("attention"))
    if not found:
        raise SpecsimError(f"no mlp.csv or attention*.csv under {str(root)[:200]!r}", field=field,
                           fix="name a folder of Vidur-format kernel CSVs")
    if len(found) > MAX_FILES:
        raise SpecsimError(f"{len(found)} CSV files under {str(root)[:200]!r}", field=field,
                           fix=f"name a narrower folder (at most {MAX_FILES} files)")
    # Vidur's layout is <device>/<org>/<model>/mlp.csv: the last two folders are the HF id
    return [(f"{p.parent.parent.name}/{p.parent.name}", p) for p in found]


def _need(frame: pd.DataFrame, columns, path: Path, field: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise SpecsimError(f"{path.name} of {path.parent.name} lacks column {missing[0]!r}",
                           source=str(path), field=field,
                           fix="give Vidur-format CSVs (see ../shared/measured/README.md)")


def _whole_numbers(frame: pd.DataFrame, columns, path: Path, field: str) -> None:
    """Shape columns must be positive whole numbers: one message naming file and column."""
    for col in columns:
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = ~(values.notna() & (values >= 1) & (values == values.round()))
        if bad.any():
            raise SpecsimError(f"{path.name} of {path.parent.name}: column {col!r} row "
                               f"{int(bad.to_numpy().argmax())} is "
                               f"{str(frame[col].iloc[int(bad.to_numpy().argmax())])[:40]!r}, "
                               "not a whole number >= 1", source=str(path), field=field,
                               fix="give Vidur-format CSVs (see ../shared/measured/README.md)")


def _mlp_rows(frame: pd.DataFrame, model: str, stat: str, path: Path, field: str) -> pd.DataFrame:
    _need(frame, MLP_SHAPES, path, field)
    _whole_numbers(frame, [c for c in MLP_SHAPES if c not in ("use_gated_mlp",)], path, field)
    three_way_add = f"time_stats.post_attention_layernorm.{stat}" not in frame.columns
    gated = bool(frame["use_gated_mlp"].astype(str).str.lower().isin(("true", "1")).all())
    parts = []
    for op in MLP_OPS:
        col = f"time_stats.{op}.{stat}"
        if col not in frame.columns:
            continue
        kind = "gemm" if op in GEMM_OPS else TRANSFER_OPS[op]
        if op == "mlp_act" and not gated:
            kind = "elementwise"   # torch's GELU, not vLLM's SiLU-and-multiply
        part = pd.DataFrame({
            "kind": kind, "dtype": DTYPE, "model": model, "op": op,
            "tp": frame["num_tensor_parallel_workers"].astype(int),
            "tokens": frame["num_tokens"].astype(int), "batch": 1, "context": 0, "chunk": 0,
            "n_head": frame["n_head"].astype(int), "n_kv_head": frame["n_kv_head"].astype(int),
            "n_embd": frame["n_embd"].astype(int),
            "n_expanded_embd": frame["n_expanded_embd"].astype(int),
            "gated": frame["use_gated_mlp"].astype(str).str.lower().isin(("true", "1")),
            "count": 2 if (op == "add" and three_way_add) else 1,
            "measured_s": pd.to_numeric(frame[col], errors="coerce") * 1e-3})
        parts.append(part)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def _attention_rows(frame: pd.DataFrame, model: str, stat: str, path: Path,
                    field: str) -> pd.DataFrame:
    _need(frame, ATTENTION_SHAPES, path, field)
    prefill = frame["is_prefill"].astype(str).str.lower().isin(("true", "1"))
    parts = []
    for op, rows in (("attn_prefill", frame[prefill]), ("attn_decode", frame[~prefill])):
        col = f"time_stats.{op}.{stat}"
        if col not in frame.columns or rows.empty:
            continue
        parts.append(pd.DataFrame({
            "kind": "attention_" + op.split("_")[1], "dtype": DTYPE, "model": model, "op": op,
            "tp": rows["num_tensor_parallel_workers"].astype(int),
            "tokens": np.where(op == "attn_prefill", rows["prefill_chunk_size"],
                               rows["batch_size"]).astype(int),
            "batch": rows["batch_size"].astype(int), "context": rows["kv_cache_size"].astype(int),
            "chunk": rows["prefill_chunk_size"].astype(int),
            "n_head": rows["n_q_head"].astype(int), "n_kv_head": rows["n_kv_head"].astype(int),
            "n_embd": rows["n_embd"].astype(int), "n_expanded_embd": 0, "gated": False,
            "count": 1, "measured_s": pd.to_numeric(rows[col], errors="coerce") * 1e-3}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def load_measurements(root: str | Path, *, statistic: str = "median", models=None,
                      exclude=(), field: str = "--measurements") -> Measurements:
    """Read every kernel CSV under ``root``; ``models`` keeps only those Hugging Face ids,
    ``exclude`` drops some.  A model named but absent is an error listing the ones found."""
    if statistic not in STATISTICS:
        raise SpecsimError(f"unknown statistic {statistic!r}", field="--statistic",
                           fix="use one of: " + ", ".join(STATISTICS))
    root = Path(root).expanduser()
    files = _files(root, field)
    known = sorted({m for m, _ in files})
    for flag, names in (("--models", models or ()), ("--exclude-model", exclude)):
        for name in names:
            if name not in known:
                raise SpecsimError(f"unknown model {name!r} under {str(root)[:120]!r}",
                                   field=flag, fix="use one of: " + ", ".join(known))
    keep = [(m, p) for m, p in files if (not models or m in models) and m not in set(exclude)]
    if not keep:
        raise SpecsimError("every model is excluded", field="--exclude-model",
                           fix="leave at least one model in")
    for _, path in keep:  # every file counted before any is parsed
        check_csv_rows(path, MAX_MEASUREMENT_ROWS, what="one kernel CSV", field=field,
                       fix="give Vidur-format kernel CSVs, or split the file")
    parts = []
    for model, path in keep:
        try:
            frame = pd.read_csv(path)
        except (OSError, ValueError, pd.errors.ParserError) as exc:
            raise SpecsimError(f"cannot read {path.name}: {str(exc)[:120]}", source=str(path),
                               field=field, fix="give Vidur-format CSVs") from None
        reader = _mlp_rows if path.name == "mlp.csv" else _attention_rows
        parts.append(reader(frame, model, statistic, path, field))
    table = pd.concat(parts, ignore_index=True)
    table = table[np.isfinite(table["measured_s"]) & (table["measured_s"] > 0)]
    if table.empty:
        raise SpecsimError(f"no timed kernel under {str(root)[:200]!r}", field=field,
                           fix="give Vidur-format CSVs with time_stats columns")
    return Measurements(table.reset_index(drop=True), str(root),
                        tuple(str(p) for _, p in keep), statistic)


# ------------------------------------------------------------------ shapes and prediction
def gemm_shape(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(m, n, k) per device of the GEMM rows of ``df`` (the table in the module docstring)."""
    t = df["tp"].to_numpy(float)
    e = df["n_embd"].to_numpy(float)
    d = e / df["n_head"].to_numpy(float)
    qkv = (df["n_head"].to_numpy(float) + 2 * df["n_kv_head"].to_numpy(float)) * d / t
    up = np.where(df["gated"].to_numpy(bool), 2.0, 1.0) * df["n_expanded_embd"].to_numpy(float) / t
    op = df["op"].to_numpy()
    n = np.select([op == "attn_pre_proj", op == "mlp_up_proj"], [qkv, up], e)
    k = np.select([op == "attn_post_proj", op == "mlp_down_proj"],
                  [df["n_head"].to_numpy(float) * d / t,
                   df["n_expanded_embd"].to_numpy(float) / t], e)
    return df["tokens"].to_numpy(float), n, k


def transfer_bytes(df: pd.DataFrame) -> np.ndarray:
    """Bytes of one kernel of each memory-bound row of ``df`` (the module docstring)."""
    tok = df["tokens"].to_numpy(float)
    e = df["n_embd"].to_numpy(float)
    t = df["tp"].to_numpy(float)
    d = e / df["n_head"].to_numpy(float)
    f = df["n_expanded_embd"].to_numpy(float) / t
    op = df["op"].to_numpy()
    qk = (df["n_head"].to_numpy(float) + df["n_kv_head"].to_numpy(float)) * d / t
    act = np.where(df["gated"].to_numpy(bool), 3.0, 2.0) * tok * f
    elems = np.select([op == "emb", np.char.endswith(op.astype(str), "layernorm"),
                       op == "attn_rope", op == "mlp_act"],
                      [tok * e * (2 + INDEX_BYTES / DTYPE_BYTES), 3 * tok * e + e, 3 * tok * qk,
                       act], 3 * tok * e)
    return elems * DTYPE_BYTES


def attention_terms(row) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-request (FLOPs, bytes, query tokens) of one attention row (the module docstring)."""
    t = float(row.tp)
    d = row.n_embd / row.n_head
    q = row.n_head * d / t
    kv = row.n_kv_head * d / t
    new = float(row.chunk) if row.op == "attn_prefill" else 1.0
    requests = 1 if row.op == "attn_prefill" else int(row.batch)
    ctx = float(row.context)
    flops = 4.0 * q * new * (ctx + new)
    nbytes = (ctx + new) * 2.0 * kv * DTYPE_BYTES + 2.0 * new * q * DTYPE_BYTES
    return (np.full(requests, flops), np.full(requests, nbytes), np.full(requests, new))


def predict(kernels: pd.DataFrame, roof: Roofline) -> np.ndarray:
    """Predicted seconds of every row of ``kernels`` (a ``Measurements.kernels`` table)."""
    out = np.zeros(len(kernels))
    kind = kernels["kind"].to_numpy()
    gemm = kind == "gemm"
    if gemm.any():
        out[gemm] = roof.gemm_time(*gemm_shape(kernels[gemm]))
    for k in set(kind) - {"gemm", "attention_prefill", "attention_decode"}:
        rows = kind == k
        sub = kernels[rows]
        per_row = sub["tokens"].to_numpy(float) if k in ROW_KINDS else None
        out[rows] = sub["count"].to_numpy(float) * roof.transfer_time(transfer_bytes(sub), k,
                                                                      rows=per_row)
    attention = np.flatnonzero(np.char.startswith(kind.astype(str), "attention"))
    for i, row in zip(attention, kernels.iloc[attention].itertuples(index=False)):
        out[i] = roof.attention_time(*attention_terms(row))
    return out


def compare(kernels: pd.DataFrame, predicted: np.ndarray) -> tuple[pd.DataFrame, float]:
    """Per-operator table (op, count, MAPE, worst, bias) and the MAPE over every kernel."""
    err = predicted / kernels["measured_s"].to_numpy(float) - 1.0
    frame = pd.DataFrame({"op": kernels["op"].to_numpy(), "err": err})
    order = {op: i for i, op in enumerate(MLP_OPS + ATTENTION_OPS)}
    rows = []
    for op, g in sorted(frame.groupby("op"), key=lambda kv: order.get(kv[0], 99)):
        e = g["err"].to_numpy()
        rows.append({"op": op, "count": len(e), "mape_%": 100 * np.abs(e).mean(),
                     "worst_%": 100 * e[np.argmax(np.abs(e))], "bias_%": 100 * e.mean()})
    return pd.DataFrame(rows), float(np.abs(err).mean())
