"""Client-side minus server-side latency of vLLM requests, request by request.

inference-sim's ground truth (github.com/inference-sim/inference-sim, commit
e7a4aa3715982f089bddd0441e85e0a7d1690ec2, ``eval/ground_truth/<run>/``; Apache-2.0) holds,
for ``jan20-prefill-llama7b-tp1-1`` and ``jan20-codellama-prefill-1``, both what the client
measured (guidellm 0.6, ``guidellm-results.json``: per request ``info.timings``
``request_start`` and ``first_token_iteration``/``last_token_iteration``, and the server's
``response_id``) and what vLLM 0.11.0 measured (``traces.json``: OpenTelemetry
``llm_request`` spans, ``gen_ai.request.id`` = ``<response_id>-0``, started at the request's
``arrival_time``, ``gen_ai.latency.time_to_first_token`` and ``gen_ai.latency.e2e``).  The
difference of the two durations needs no clock alignment; the split into the part before the
span starts (``pre``) and after the server saw the first token (``post``) does, and is only
shown (both machines' clocks agree to a millisecond here: every ``post`` is 1-8 ms > 0).

``python -m simulator.cli.frontend_gap GUIDELLM_JSON SPAN_FOLDER [...]`` (pairs) prints the
gap by load (running requests at the request's arrival, from the spans) and the
least-squares line of the idle (synchronous) requests' gap against their prompt tokens, and
the gap's growth per running request outside bursts (``load_slope``), the figures
``simulator/engine/frontend.py`` cites.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.sim2real.otel import SPANS

BINS = ((0, 0), (1, 4), (5, 14), (15, 29), (30, 10_000))


def _value(attr: dict):
    value = attr.get("value") or {}
    return next(iter(value.values()), None)


def span_table(folder: Path) -> pd.DataFrame:
    """One row per ``llm_request`` span: its id without vLLM's ``-0`` suffix, start, TTFT,
    E2E (s) and prompt tokens."""
    rows = []
    for line in (folder / SPANS).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        for rs in json.loads(line)["resourceSpans"]:
            for s in (s for ss in rs["scopeSpans"] for s in ss["spans"]
                      if s.get("name") == "llm_request"):
                a = {x["key"]: _value(x) for x in s["attributes"]}
                rid = str(a["gen_ai.request.id"]).removesuffix("-0")
                rows.append({"id": rid, "start": int(s["startTimeUnixNano"]) / 1e9,
                             "ttft": float(a["gen_ai.latency.time_to_first_token"]),
                             "e2e": float(a["gen_ai.latency.e2e"]),
                             "prompt": int(a["gen_ai.usage.prompt_tokens"])})
    return pd.DataFrame(rows)


def gap_table(guidellm: Path, folder: Path) -> pd.DataFrame:
    """Per request matched in both: the benchmark's strategy, prompt tokens, running
    requests when it arrived, and the client-minus-server TTFT and E2E gaps (ms)."""
    table = span_table(folder)
    if table.empty:
        raise ValueError(f"{folder / SPANS}: no llm_request span")
    start = table["start"].to_numpy()
    end = start + table["e2e"].to_numpy()  # every span counts as running
    spans = table.drop_duplicates("id", keep=False).set_index("id")  # an id twice: ambiguous
    rows, seen = [], set()
    for bench in json.loads(guidellm.read_text(encoding="utf-8"))["benchmarks"]:
        strategy = bench["config"]["strategy"]["type_"]
        for r in bench["requests"]["successful"]:
            if r["response_id"] not in spans.index or r["response_id"] in seen:
                continue
            seen.add(r["response_id"])
            s, t = spans.loc[r["response_id"]], r["info"]["timings"]
            running = int(((start <= s["start"]) & (end > s["start"])).sum()) - 1
            rows.append({
                "run": folder.name, "strategy": strategy, "prompt": int(s["prompt"]),
                "running": running,
                "d_ttft_ms": 1e3 * (t["first_token_iteration"] - t["request_start"] - s["ttft"]),
                "d_e2e_ms": 1e3 * (t["last_token_iteration"] - t["request_start"] - s["e2e"]),
                "pre_ms": 1e3 * (s["start"] - t["request_start"]),
                "post_ms": 1e3 * (t["first_token_iteration"] - s["start"] - s["ttft"])})
    return pd.DataFrame(rows)


def by_load(gaps: pd.DataFrame) -> pd.DataFrame:
    """Median gaps per bin of running requests at arrival."""
    out = []
    for lo, hi in BINS:
        part = gaps[(gaps["running"] >= lo) & (gaps["running"] <= hi)]
        if len(part):
            out.append({"running": f"{lo}-{hi}" if hi < 10_000 else f">={lo}",
                        "requests": len(part),
                        **{c: float(part[c].median())
                           for c in ("d_ttft_ms", "d_e2e_ms", "pre_ms", "post_ms")}})
    return pd.DataFrame(out)


def idle_fit(gaps: pd.DataFrame) -> tuple[float, float]:
    """(ms, ms per prompt token): least squares of the synchronous requests' TTFT gap
    against their prompt tokens (one request in flight: no load part)."""
    idle = gaps[gaps["strategy"] == "synchronous"] if len(gaps) else gaps
    if len(idle) < 2 or idle["prompt"].nunique() < 2:
        raise ValueError(f"{len(idle)} synchronous requests matched, of "
                         f"{idle['prompt'].nunique() if len(idle) else 0} prompt lengths: "
                         "a line needs two lengths at least")
    slope, icpt = np.polyfit(idle["prompt"].to_numpy(float), idle["d_ttft_ms"].to_numpy(), 1)
    return float(icpt), float(slope)


def load_slope(gaps: pd.DataFrame) -> float:
    """ms per running request: least squares of the TTFT gap on an offset per run, the prompt
    tokens and the running requests at arrival, over the requests not sent in a burst
    (guidellm's ``throughput`` benchmark sends them at once: their tokenising queues, a
    different cost).  The output handler's per-step work over the running requests'
    outputs, which the first-token event waits for (frontend.py)."""
    part = gaps[gaps["strategy"] != "throughput"] if len(gaps) else gaps
    if len(part) < 2 or part["running"].nunique() < 2:
        raise ValueError(f"{len(part)} requests outside a burst, of "
                         f"{part['running'].nunique() if len(part) else 0} running counts: "
                         "a slope needs two counts at least")
    runs = sorted(part["run"].unique())
    x = np.column_stack([(part["run"] == r).to_numpy(float) for r in runs]
                        + [part["prompt"].to_numpy(float), part["running"].to_numpy(float)])
    coef = np.linalg.lstsq(x, part["d_ttft_ms"].to_numpy(float), rcond=None)[0]
    return float(coef[-1])


def read_pairs(argv: list[str]) -> pd.DataFrame:
    """The gap table of (GUIDELLM_JSON, SPAN_FOLDER) pairs given in turn."""
    return pd.concat([gap_table(Path(g), Path(f)) for g, f in zip(argv[::2], argv[1::2])],
                     ignore_index=True)


def report(gaps: pd.DataFrame) -> str:
    """The gap by load per run and over all runs, the idle line (``idle_fit``), and the load
    slope (``load_slope``) where the requests outside bursts saw two running counts at least
    (a synchronous run alone sees one: no load line)."""
    icpt, slope = idle_fit(gaps)
    fmt = lambda v: f"{v:.1f}"  # noqa: E731
    lines = []
    for run, part in gaps.groupby("run", sort=False):
        lines += [f"{run}:", by_load(part).to_string(index=False, float_format=fmt)]
    lines += ["all runs:", by_load(gaps).to_string(index=False, float_format=fmt),
              f"idle (synchronous, {int((gaps['strategy'] == 'synchronous').sum())} "
              f"requests): gap = {icpt:.2f} ms + {slope * 1e3:.3f} ms per 1,000 prompt tokens"]
    if gaps.loc[gaps["strategy"] != "throughput", "running"].nunique() >= 2:
        lines.append(f"load (outside bursts): + {load_slope(gaps) * 1e3:.1f} us per running "
                     "request")
    return "\n".join(lines)
