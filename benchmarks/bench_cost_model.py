"""How many steps per second the cost model prices: one batch of 256 requests, mixed contexts.

Run: python benchmarks/bench_cost_model.py
The engine prices one step per iteration; the target is well over 10,000 steps/s on one core.
Two figures: distinct batches (every call misses the per-token-total cache) and the engine's
typical pattern (token totals repeat, attention still vectorised per request).
"""
from __future__ import annotations

import time

import numpy as np

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.models.spec import load_model


def bench(cm: CostModel, batches: list, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        for new, ctx in batches:
            cm.step_time(new, ctx)
    return repeat * len(batches) / (time.perf_counter() - start)


def main() -> None:
    rng = np.random.default_rng(0)
    hw, model = load_profile("a100-40gb"), load_model("opt-13b")
    # distinct token totals: decodes (1), chain verifications (5) and a few prefill chunks
    distinct = []
    for i in range(2000):
        new = rng.choice([1, 5, 9], size=256).astype(float)
        new[: i % 4] = rng.integers(16, 512, size=i % 4)
        distinct.append((new, rng.integers(16, 4096, size=256).astype(float)))
    cold = bench(CostModel(hw, model), distinct, 1)
    same_total = [(np.full(256, 5.0), rng.integers(16, 4096, size=256).astype(float))
                  for _ in range(200)]
    warm = bench(CostModel(hw, model), same_total, 50)
    print("cost model, batch 256, mixed contexts, one core:")
    print(f"  distinct token totals : {cold:10,.0f} steps/s")
    print(f"  repeated token totals : {warm:10,.0f} steps/s")
    print(f"  ratio to the 10,000 steps/s target: {cold / 1e4:.1f}x (cold), {warm / 1e4:.1f}x (warm)")


if __name__ == "__main__":
    main()
