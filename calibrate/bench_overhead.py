"""Overhead micro-benchmarks: per-kernel launch, a tiny model's forward step, and sampling.

A tiny model (widths of 64, a vocabulary of 512) moves almost no data, so its step time is
all overhead: timing it at several layer counts separates the per-layer cost (kernels) from
the fixed per-step cost (embedding, final norm, LM head, sampling, the host's loop).  Two
tiny architectures are timed, OPT-like (LayerNorm, biases, ReLU, learned positions) and
LLaMA-like (RMSNorm, gated SiLU MLP), because their kernel counts differ slightly.
"""
from __future__ import annotations

import numpy as np
import torch

from calibrate.model_torch import TorchDecoder, greedy
from calibrate.timing import Timing, measure
from simulator.models.spec import ModelSpec

LAUNCHES_PER_REP = 100
TINY_ARCHES = ("opt", "llama")
TINY_CONTEXT = 16


def tiny_spec(arch: str, layers: int, dtype: str) -> ModelSpec:
    """A tiny decoder of the given family whose step time is overhead, not data movement."""
    opt = arch == "opt"
    return ModelSpec(name=f"tiny-{arch}-{layers}l", family="tiny", kind="decoder",
                     num_layers=layers, hidden_size=64, num_heads=2, num_kv_heads=2,
                     head_dim=32, ffn_size=256, gated_mlp=not opt, vocab_size=512,
                     tied_embeddings=opt, dtype=dtype, max_context=64,
                     norm="layernorm" if opt else "rmsnorm", bias=opt,
                     learned_position_embeddings=66 if opt else 0)


def run_launch(*, device: torch.device, warmup: int, reps: int) -> Timing:
    """Seconds per launch of a one-element add, from a burst of back-to-back launches."""
    x = torch.zeros(1, device=device)

    def burst(_i: int) -> None:
        for _ in range(LAUNCHES_PER_REP):
            x.add_(1.0)

    t = measure(burst, device, warmup=warmup, reps=reps)
    return Timing(t.median_s / LAUNCHES_PER_REP, t.min_s / LAUNCHES_PER_REP, t.reps)


def run_tiny_forward(arch: str, layers: int, *, dtype: torch.dtype, dtype_name: str,
                     device: torch.device, rng: np.random.Generator, warmup: int,
                     reps: int) -> Timing:
    """One greedy decode step (forward + argmax) of a tiny model at batch 1."""
    model = TorchDecoder(tiny_spec(arch, layers, dtype_name), device=device, dtype=dtype,
                         rng=rng)
    cache = model.new_cache(1, TINY_CONTEXT + 1)
    tokens = torch.zeros(1, 1, dtype=torch.long, device=device)
    return measure(lambda _i: greedy(model.forward(tokens, cache, TINY_CONTEXT)), device,
                   warmup=warmup, reps=reps)


def run_sampling(batch: int, vocab: int, *, dtype: torch.dtype, device: torch.device,
                 gen: torch.Generator, warmup: int, reps: int) -> Timing:
    """Greedy sampling (argmax) of a [batch, vocab] block of logits."""
    logits = torch.empty(batch, vocab, device=device, dtype=dtype).uniform_(-1, 1,
                                                                           generator=gen)
    return measure(lambda _i: greedy(logits), device, warmup=warmup, reps=reps)
