"""Read a measured vLLM serving run as inference-sim publishes it (its eval/ground_truth):
``exp-config.yaml`` (the server's model, tensor parallelism and batching knobs),
``profile.yaml`` (the guidellm load: its ``data.prefix_tokens`` is a prefix every prompt
starts with), ``traces.json`` (vLLM's OpenTelemetry ``llm_request`` spans, one JSON document
per line: arrival, prompt and completion tokens, ``gen_ai.latency.time_to_first_token`` and
``gen_ai.latency.e2e``) and optionally ``vllm.log`` (the version line)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from simulator.inputs import json_text
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number, load_yaml_file, require_mapping
from simulator.sim2real.measured_run import VLLM_BATCHING, MeasuredRun
from workloads.workload import MAX_REQUESTS, Workload

SPANS = "traces.json"
MAX_SPAN_BYTES = 256 * 2 ** 20   # a traces.json larger than this is refused before reading
ATTRIBUTES = {"prompt": "gen_ai.usage.prompt_tokens",
              "output": "gen_ai.usage.completion_tokens",
              "ttft": "gen_ai.latency.time_to_first_token", "e2e": "gen_ai.latency.e2e"}
_VERSION = re.compile(r"vLLM API server version (\S+)")


def is_otel_run(path: Path) -> bool:
    return (path / SPANS).is_file() and (path / "exp-config.yaml").is_file()


def _value(attr: dict) -> Any:
    value = attr.get("value") or {}
    for key in ("intValue", "doubleValue", "stringValue"):
        if key in value:
            return value[key]
    return None


def _span_rows(path: Path) -> list[tuple[float, int, int, float, float]]:
    """(start s, prompt, output, ttft s, e2e s) of every ``llm_request`` span."""
    if path.stat().st_size > MAX_SPAN_BYTES:
        raise SpecsimError(f"larger than {MAX_SPAN_BYTES >> 20} MiB", source=str(path))
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                doc = json_text.loads(line, source=str(path), where=f"line {number}: ",
                                      fix="give vLLM's exported traces")
                spans = [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"]
                         for s in ss["spans"] if s.get("name") == "llm_request"]
                for s in spans:
                    a = {x["key"]: _value(x) for x in s["attributes"]}
                    rows.append((int(s["startTimeUnixNano"]) / 1e9,
                                 *(int(a[ATTRIBUTES[k]]) for k in ("prompt", "output")),
                                 *(float(a[ATTRIBUTES[k]]) for k in ("ttft", "e2e"))))
            except SpecsimError:
                raise
            except (ValueError, KeyError, TypeError) as exc:
                raise SpecsimError(f"line {number} is not an OpenTelemetry llm_request span "
                                   f"document ({type(exc).__name__}: {exc})"[:300],
                                   source=str(path), fix="give vLLM's exported traces") from None
            if len(rows) > MAX_REQUESTS:
                raise SpecsimError(f"more than {MAX_REQUESTS:,} spans", source=str(path))
    if not rows:
        raise SpecsimError("holds no llm_request span", source=str(path))
    return rows


def _config(folder: Path) -> tuple[dict, int]:
    cfg = require_mapping(load_yaml_file(folder / "exp-config.yaml"),
                          source=str(folder / "exp-config.yaml"))
    src = str(folder / "exp-config.yaml")
    if not isinstance(cfg.get("model"), str):
        raise SpecsimError("missing the model id", source=src, field="model")
    batching = dict(VLLM_BATCHING)
    for key in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        if key in cfg:
            batching[key] = as_number(cfg[key], source=src, field=key, minimum=1, integer=True)
    tp = as_number(cfg.get("tensor_parallelism", 1), source=src, field="tensor_parallelism",
                   minimum=1, integer=True)
    prefix = 0
    if (folder / "profile.yaml").is_file():
        profile = require_mapping(load_yaml_file(folder / "profile.yaml"),
                                  source=str(folder / "profile.yaml"))
        data = profile.get("data") or {}
        prefix = as_number(data.get("prefix_tokens", 0) if isinstance(data, dict) else 0,
                           source=str(folder / "profile.yaml"), field="data.prefix_tokens",
                           minimum=0, integer=True)
    return {"model": cfg["model"], "batching": batching, "tp": int(tp)}, int(prefix)


def _engine(folder: Path) -> str:
    log = folder / "vllm.log"
    if log.is_file() and log.stat().st_size < 64 * 2 ** 20:
        found = _VERSION.search(log.read_text(encoding="utf-8", errors="replace"))
        if found:
            return f"vLLM {found.group(1)}"
    return "vLLM"


def read_otel_run(folder: str | Path) -> MeasuredRun:
    """The run in ``folder``; requests that emitted nothing (failed) are left out."""
    folder = Path(folder)
    cfg, prefix = _config(folder)
    rows = np.array(_span_rows(folder / SPANS), dtype=np.float64)
    rows = rows[np.argsort(rows[:, 0], kind="stable")]
    rows = rows[rows[:, 2] > 0]
    prompt = rows[:, 1].astype(np.int64)
    notes = ("shared prefix of %d tokens (profile.yaml data.prefix_tokens)" % prefix,) \
        if prefix else ()
    wl = Workload(name=folder.name, arrival_s=rows[:, 0] - rows[0, 0], prompt_tokens=prompt,
                  output_tokens=rows[:, 2].astype(np.int64),
                  prefix_group=np.zeros(prompt.size, np.int64) if prefix else None,
                  shared_prefix_tokens=np.minimum(prompt, prefix) if prefix else None)
    return MeasuredRun(name=folder.name, model=cfg["model"], hardware=None,
                       tensor_parallel=cfg["tp"], batching=cfg["batching"],
                       engine=_engine(folder), workload=wl, ttft_s=rows[:, 3],
                       e2e_s=rows[:, 4], source=str(folder), notes=notes,
                       measured_at="server")
