"""The report's "Prefix caching" section: per policy, the hit rate, the prompt tokens never
prefilled, and the TTFT of requests that found a cached prefix against those that did not.

Drawn only when some run had prefix caching on and a workload that names its blocks
(Mooncake ``hash_ids`` or token ids); a run without either caches nothing."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from reports.html import Page, format_number
from reports.html import format_percent as _pct

COLUMNS = ("policy", "hit_rate", "cached_tokens", "cached_fraction", "requests_hit",
           "ttft_hit_ms", "ttft_miss_ms")


def prefix_cache_frame(results: Sequence) -> pd.DataFrame:
    """One row per policy whose run cached prefixes (empty when none did)."""
    rows = []
    for r in results:
        pc = r.info.get("prefix_cache") or {}
        if not pc.get("enabled") or not pc.get("keys") \
                or "cached_tokens" not in r.requests:
            continue
        s, req = r.summary(), r.requests
        done = req[req["status"] == "finished"]
        hit = done["cached_tokens"].to_numpy() > 0
        ttft = done["ttft_s"].to_numpy(float)
        rows.append({"policy": r.label, "hit_rate": s["prefix_cache_hit_rate"],
                     "cached_tokens": s["prefix_cached_tokens"],
                     "cached_fraction": s["prefix_cached_fraction"],
                     "requests_hit": int(hit.sum()),
                     "ttft_hit_ms": float(ttft[hit].mean()) * 1e3 if hit.any() else np.nan,
                     "ttft_miss_ms": float(ttft[~hit].mean()) * 1e3 if (~hit).any()
                     else np.nan})
    return pd.DataFrame(rows, columns=list(COLUMNS))


TABLE = {"policy": ("policy", str), "hit_rate": ("hit rate (tokens)", _pct),
         "cached_tokens": ("prompt tokens from cache", format_number),
         "cached_fraction": ("of all prompt tokens", _pct),
         "requests_hit": ("requests with a hit", format_number),
         "ttft_hit_ms": ("mean TTFT, hit (ms)", format_number),
         "ttft_miss_ms": ("mean TTFT, miss (ms)", format_number)}


def prefix_cache_section(page: Page, results: Sequence) -> None:
    """Add the section when some run cached prefixes."""
    frame = prefix_cache_frame(results)
    if not len(frame):
        return
    keys = next(r.info["prefix_cache"]["keys"] for r in results
                if (r.info.get("prefix_cache") or {}).get("keys"))
    page.section("Prefix caching")
    page.text(f"Automatic prefix caching as vLLM V1 does it, on the workload's {keys}: a "
              "request admitted after another computed the same leading prompt blocks "
              "reuses them and prefills only the rest. The hit rate is prompt tokens found "
              "over tokens looked up at admissions. Requests that hit usually differ from "
              "those that miss (longer shared histories), so the two TTFT columns show the "
              "effect only roughly: run again with batching.enable_prefix_caching=false for "
              "the difference on the same requests.")
    page.table(frame, TABLE)
