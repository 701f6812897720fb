"""How fast the cost model prices steps: the engine's hot path, with ratios measured in one run.

Run: python benchmarks/bench_cost_model.py
The engine prices one step per iteration; the target is well over 10,000 steps/s on one core.

1. One batch of 256 requests, mixed contexts (OPT-13B on A100-40GB): distinct batches (new
   token totals: the per-count tables of simulator/cost/token_terms.py against the scalar
   path, ``tables=False``, the "before") and the engine's typical pattern (token totals
   repeat, attention still per request).
2. A realistic mixed-batch sequence: n decodes (1..128) and one prefill chunk (1..512),
   random, tables against the scalar path.  Cold rows build a fresh model every pass, so the
   tables' first blocks are paid for in the figure.
3. The engine's workload (Llama-2-70B TP2 on A100-80GB, kernel shapes on): ``step_time`` on a
   uniform decode batch (the closed form in the sum of the contexts) against the general
   per-request path on the same batches; ``uniform_step_times`` per step over K forwards of a
   decode stretch (what fast-forward asks); a mixed batch (decodes and a prefill chunk, the
   general path) against ``breakdown``, and priced as the engine does under ``none``
   (``mixed_step_time``: the decodes' context sum, the chunk) against ``step_time``.  Each pair is timed interleaved, best of ``REPEAT``,
   so that the ratios hold on a busy machine.
"""
from __future__ import annotations

import time

import numpy as np

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.parallelism import Parallelism
from simulator.models.spec import load_model

REPEAT = 7


class GeneralPath(CostModel):
    """The cost model without the uniform closed form: every step priced per request."""

    def _uniform(self, n, u, logits):
        return None


def over(fn, args: list):
    """A loop calling ``fn(*a)`` for each ``a`` in ``args``."""
    return lambda: [fn(*a) for a in args]


def best_us(calls: dict, per_call: dict) -> dict:
    """Microseconds per priced step of each named loop, best of REPEAT, the loops interleaved."""
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(REPEAT):
        for name, loop in calls.items():
            start = time.perf_counter()
            loop()
            best[name] = min(best[name], (time.perf_counter() - start) / per_call[name])
    return {name: 1e6 * t for name, t in best.items()}


def cold(factory, batches: list):
    """A loop pricing ``batches`` with a fresh model from ``factory``: memos and tables cold."""
    def loop():
        cm = factory()
        for new, ctx in batches:
            cm.step_time(new, ctx)
    return loop


def steps_per_s(us: float) -> str:
    return f"{1e6 / us:10,.0f} steps/s"


def batch_256_rows() -> None:
    rng = np.random.default_rng(0)
    hw, model = load_profile("a100-40gb"), load_model("opt-13b")
    # distinct token totals: decodes (1), chain verifications (5) and a few prefill chunks
    distinct = []
    for i in range(2000):
        new = rng.choice([1, 5, 9], size=256).astype(float)
        new[: i % 4] = rng.integers(16, 512, size=i % 4)
        distinct.append((new, rng.integers(16, 4096, size=256).astype(float)))
    same_total = [(np.full(256, 5.0), rng.integers(16, 4096, size=256).astype(float))
                  for _ in range(2000)]
    warm = CostModel(hw, model)
    calls = {"tables": cold(lambda: CostModel(hw, model), distinct),
             "scalar": cold(lambda: CostModel(hw, model, tables=False), distinct),
             "warm": over(warm.step_time, same_total)}
    us = best_us(calls, dict.fromkeys(calls, 2000))
    print(f"cost model, batch 256, mixed contexts, one core (best of {REPEAT}, interleaved; "
          "a fresh model a pass):")
    print(f"  distinct token totals : {steps_per_s(us['tables'])} (per-count tables), "
          f"{steps_per_s(us['scalar'])} (scalar path, tables=False): "
          f"{us['scalar'] / us['tables']:.1f}x")
    print(f"  repeated token totals : {steps_per_s(us['warm'])}")
    print(f"  ratio to the 10,000 steps/s target: {100 / us['tables']:.1f}x (distinct), "
          f"{100 / us['scalar']:.1f}x (distinct, scalar), {100 / us['warm']:.1f}x (repeated)")


def mixed_sequence_rows() -> None:
    """The engine's steps with chunked prefill: n decodes (1..128, of 1 token, or of
    gamma + 1 = 5 under chain speculation) and one prefill chunk of 1..512 tokens, random:
    nearly every step a new token total."""
    hw, model = load_profile("a100-80gb"), load_model("llama-2-70b")
    par = Parallelism(tensor_parallel=2)
    print("realistic mixed batches: llama-2-70b TP2 on a100-80gb, 2,000 random steps, "
          "a fresh model a pass:")
    for u, label in ((1, "decodes"), (5, "chain gamma=4")):
        rng = np.random.default_rng(2 + u)
        steps = []
        for _ in range(2000):
            n = int(rng.integers(1, 129))
            new = np.append(np.full(n, float(u)), float(rng.integers(1, 513)))
            steps.append((new, rng.integers(16, 4096, n + 1).astype(float)))
        calls = {"tables": cold(lambda: CostModel(hw, model, par), steps),
                 "scalar": cold(lambda: CostModel(hw, model, par, tables=False), steps)}
        us = best_us(calls, dict.fromkeys(calls, len(steps)))
        print(f"  {label:<13} + chunk: {steps_per_s(us['tables'])} (tables), "
              f"{steps_per_s(us['scalar'])} (scalar): {us['scalar'] / us['tables']:.1f}x")


def engine_rows() -> None:
    rng = np.random.default_rng(1)
    hw, model = load_profile("a100-80gb"), load_model("llama-2-70b")
    par = Parallelism(tensor_parallel=2)
    fast, general = CostModel(hw, model, par), GeneralPath(hw, model, par)
    print("engine workload: llama-2-70b TP2 on a100-80gb, us per priced step "
          f"(best of {REPEAT}, interleaved):")
    for n in (16, 64):
        batches = [(np.ones(n), rng.integers(16, 4096, n).astype(float), np.ones(n))
                   for _ in range(500)]
        calls = {"closed": over(fast.step_time, batches),
                 "general": over(general.step_time, batches)}
        us = best_us(calls, {"closed": len(batches), "general": len(batches)})
        print(f"  step_time, uniform decode n={n:<3}: {us['closed']:7.2f} us, general path "
              f"{us['general']:7.2f} us: {us['general'] / us['closed']:5.1f}x")
    n = 64
    decode = [(np.ones(n), rng.integers(16, 4096, n).astype(float), np.ones(n))
              for _ in range(200)]
    for k in (16, 256):
        starts = [(n, 1, int(ctx.sum()) + n * np.arange(k, dtype=np.int64), n)
                  for _, ctx, _ in decode]
        calls = {"vector": over(fast.uniform_step_times, starts),
                 "general": over(general.step_time, decode)}
        us = best_us(calls, {"vector": len(starts) * k, "general": len(decode)})
        print(f"  uniform_step_times, n={n}, K={k:<3} : {us['vector']:7.3f} us a step, general "
              f"path {us['general']:7.2f} us: {us['general'] / us['vector']:6.1f}x")
    mixed = []
    for _ in range(500):
        ctx = np.append(rng.integers(16, 4096, 60), rng.integers(0, 2048)).astype(float)
        mixed.append((np.append(np.ones(60), 512.0), ctx, np.ones(61)))
    # the engine's form of the same batches under ``none``: the decodes' context sum, the chunk
    parts = [(60, float(ctx[:60].sum()), [512], [int(ctx[60])], 61.0) for _, ctx, _ in mixed]
    calls = {"step": over(fast.step_time, mixed), "breakdown": over(fast.breakdown, mixed),
             "parts": over(fast.mixed_step_time, parts)}
    us = best_us(calls, dict.fromkeys(calls, len(mixed)))
    print(f"  step_time, mixed 60 decodes + 512-token chunk: {us['step']:7.2f} us, breakdown "
          f"{us['breakdown']:7.2f} us: {us['breakdown'] / us['step']:5.1f}x")
    print(f"  mixed_step_time, the same batches          : {us['parts']:7.2f} us: "
          f"{us['step'] / us['parts']:5.1f}x step_time")


def main() -> None:
    batch_256_rows()
    mixed_sequence_rows()
    engine_rows()


if __name__ == "__main__":
    main()
