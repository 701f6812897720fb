"""Cost of sampling acceptance per request per engine iteration, at batch 256.

Run: ``python benchmarks/bench_acceptance.py`` (prints a table; nothing is asserted).
Every model is bound to 10,000 requests, then ``sample_chain`` (gamma = 4) and, where the
model has tree semantics, ``sample_tree`` on the <2, 2, 1> expansion tree are timed over
the running batch, as the engine calls them.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from simulator.acceptance import ACCEPTANCE_MODELS, acceptance_from_config
from simulator.inputs.errors import SpecsimError
from simulator.speculation.token_tree import TokenTree

CONFIGS = {
    "iid": {"alpha": 0.8},
    "positional": {"rates": [0.9, 0.8, 0.7, 0.6]},
    "curve": {"lengths": {1: 1.79, 2: 2.27, 3: 2.49, 4: 2.54}},
    "medusa": {"size": "7b"},
    "per_request": {"mean": 0.7, "concentration": 8.0},
    "context_decay": {"alpha0": 0.9, "scale_tokens": 4000.0, "floor": 0.4},
    "hard_token": {"alpha_easy": 0.95, "alpha_hard": 0.2, "p_easy_to_hard": 0.1,
                   "p_hard_to_hard": 0.6},
    "token_level": {"vocab_size": 8},
    "tree_topk": {"coverage": [[0.6, 0.75, 0.8], [0.45, 0.6, 0.66]]},
    "sequoia": {"rates": [0.7, 0.3, 0.1]},
}


def per_request_us(call, batch: int, repeats: int) -> float:
    """Best-of-3 mean wall time of ``call`` divided by the batch, in microseconds."""
    call()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best / batch * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    ids = rng.choice(10_000, size=args.batch, replace=False)
    ctx = rng.integers(100, 4000, size=args.batch)
    gammas = np.full(args.batch, args.gamma)
    tree = TokenTree.from_config([2, 2, 1])
    print(f"batch {args.batch}, gamma {args.gamma}, tree <2,2,1>: microseconds per request "
          "per iteration")
    print(f"{'model':<15}{'chain':>10}{'tree':>10}")
    for name in ACCEPTANCE_MODELS:
        model = acceptance_from_config({"model": name, **CONFIGS[name]}).bind(10_000, rng)
        slow = name == "token_level"
        repeats = max(args.repeats // (20 if slow else 1), 5)
        chain = per_request_us(lambda: model.sample_chain(gammas, ctx, ids, rng),
                               args.batch, repeats)
        try:
            cost = per_request_us(lambda: model.sample_tree(tree, ctx, ids, rng),
                                  args.batch, repeats)
            tree_us = f"{cost:10.3f}"
        except SpecsimError:                      # chain-only model: no tree semantics
            tree_us = f"{'-':>10}"
        print(f"{name:<15}{chain:10.3f}{tree_us}")


if __name__ == "__main__":
    main()
