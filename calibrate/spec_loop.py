"""A real speculative decoding loop (random-weight draft + target) with pinned acceptance.

Each iteration runs gamma sequential draft forwards, one target forward over the gamma + 1
candidate positions, greedy target tokens, and then accepts each draft token with a fixed
conditional probability alpha, the way vLLM's synthetic rejection sampler pins acceptance for
benchmarking (vllm-project/vllm PRs #38045 and #41035: the draft and target work is all done,
only the accept decision is replaced by ``u < rate``).  A request emits its accepted tokens
plus the target's correction (or bonus) token; rejected positions' KV is rolled back by
moving the request's length, as a static cache allows.  Random weights make the tokens
meaningless, so pinning is what makes the acceptance rate a chosen quantity.

The measured speedup per gamma (tokens per second over plain target decoding, gamma = 0)
is compared with the cost model's ``E(alpha, gamma) * T_target / (gamma * T_draft +
T_verify)``.  The draft's KV for a fully accepted draft's last token is not recomputed
(the next iteration starts from the correction token), which changes no timing that
matters.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from calibrate.model_torch import TorchDecoder, greedy, scaled_spec, torch_dtype
from calibrate.timing import resolve_device, synchronize
from hardware.profile import HardwareProfile
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import eager
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.speculation.closed_forms import expected_tokens


@dataclass(frozen=True)
class SpecLoopConfig:
    """Target and draft (catalog name, layers or None) and the loop's knobs."""

    device: str
    dtype: str
    target: tuple[str, int | None]
    draft: tuple[str, int | None]
    gammas: tuple[int, ...] = (0, 1, 2, 4)
    alpha: float = 0.8
    batch: int = 1
    prompt_tokens: int = 64
    new_tokens: int = 32

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise SpecsimError(f"must be in [0, 1], got {self.alpha}", field="alpha")
        if 0 not in self.gammas:
            raise SpecsimError("gamma 0 (plain decoding) is the baseline and must be listed",
                               field="gammas", fix="add 0 to the list")
        if any(g < 0 for g in self.gammas) or self.batch < 1 or self.new_tokens < 1:
            raise SpecsimError("gammas must be >= 0, batch and new_tokens >= 1",
                               field="gammas")


def pinned_accepts(rng: np.random.Generator, batch: int, gamma: int, alpha: float) -> np.ndarray:
    """Accepted draft tokens per request: each accepted with probability alpha until a reject."""
    accept = rng.random((batch, gamma)) < alpha
    return np.cumprod(accept, axis=1).sum(axis=1)


def _models(cfg: SpecLoopConfig):
    target = scaled_spec(load_model(cfg.target[0]), num_layers=cfg.target[1], dtype=cfg.dtype)
    draft = scaled_spec(load_model(cfg.draft[0]), num_layers=cfg.draft[1], dtype=cfg.dtype)
    if draft.vocab_size > target.vocab_size:
        raise SpecsimError(f"draft vocabulary {draft.vocab_size} exceeds the target's "
                           f"{target.vocab_size}", field="draft",
                           fix="pick a draft of the target's family")
    return target, draft


def _generate(target: TorchDecoder, draft: TorchDecoder | None, gamma: int,
              cfg: SpecLoopConfig, rng: np.random.Generator, dev: torch.device) -> dict:
    """Run one generation of ``new_tokens`` per request; wall time and token counts."""
    b, p = cfg.batch, cfg.prompt_tokens
    # a request that accepts everything while another lags can run ahead: N (gamma + 1)
    max_len = p + (cfg.new_tokens + 1) * (gamma + 1) + 1
    tcache = target.new_cache(b, max_len)
    dcache = draft.new_cache(b, max_len) if draft is not None else None
    vocab = draft.spec.vocab_size if draft else target.spec.vocab_size
    prompt = torch.from_numpy(rng.integers(0, vocab, (b, p))).to(dev)
    last = greedy(target.forward(prompt, tcache, 0, last_only=True))[:, -1:]
    if draft is not None:
        draft.forward(prompt, dcache, 0, last_only=True)
    length = torch.full((b,), p, dtype=torch.long, device=dev)
    emitted = np.zeros(b, dtype=np.int64)
    iterations = 0
    synchronize(dev)
    t0 = time.perf_counter()
    while emitted.min() < cfg.new_tokens:
        iterations += 1
        if gamma == 0:
            last = greedy(target.forward(last, tcache, length))
            length += 1
            emitted += 1
            continue
        tokens, dlen = [last], length.clone()
        first = last.clamp(max=draft.spec.vocab_size - 1)
        for j in range(gamma):
            tokens.append(greedy(draft.forward(first if j == 0 else tokens[-1], dcache, dlen)))
            dlen += 1
        candidates = torch.cat(tokens, dim=1)                    # [b, gamma + 1]
        verified = greedy(target.forward(candidates, tcache, length))
        k = pinned_accepts(rng, b, gamma, cfg.alpha)
        k_t = torch.from_numpy(k).to(dev)
        last = verified.gather(1, k_t[:, None])                  # correction or bonus token
        length += k_t + 1
        emitted += k + 1
    synchronize(dev)
    return {"time_s": time.perf_counter() - t0, "tokens": int(emitted.sum()),
            "iterations": iterations}


def run_spec_loop(cfg: SpecLoopConfig, *, rng: np.random.Generator) -> pd.DataFrame:
    """Measured tokens/s and speedup per gamma of a real draft + target loop."""
    dev = resolve_device(cfg.device)
    dtype = torch_dtype(cfg.dtype)
    tspec, dspec = _models(cfg)
    target = TorchDecoder(tspec, device=dev, dtype=dtype, rng=rng)
    draft = TorchDecoder(dspec, device=dev, dtype=dtype, rng=rng)
    rows = []
    for gamma in cfg.gammas:
        warm = dataclasses.replace(cfg, new_tokens=2 * (gamma + 1))
        _generate(target, draft if gamma else None, gamma, warm, rng, dev)
        run = _generate(target, draft if gamma else None, gamma, cfg, rng, dev)
        rows.append({"gamma": gamma, **run,
                     "tokens_per_s": run["tokens"] / run["time_s"],
                     "tokens_per_iteration": run["tokens"] / (run["iterations"] * cfg.batch)})
    table = pd.DataFrame(rows)
    base = table.loc[table["gamma"] == 0, "tokens_per_s"].iloc[0]
    table["measured_speedup"] = table["tokens_per_s"] / base
    return table


def predict_speedup(cfg: SpecLoopConfig, profile: HardwareProfile, gammas=None) -> np.ndarray:
    """The cost model's speedup per gamma: ``E * T_target / (gamma T_draft + T_verify)``."""
    tspec, dspec = _models(cfg)
    # the torch loop runs every forward eagerly from Python, drafts included (each with its
    # own host time: they are separate calls, not a captured draft loop)
    tcm, dcm = (CostModel(profile, spec, execution=eager(profile)) for spec in (tspec, dspec))
    ctx = cfg.prompt_tokens + cfg.new_tokens / 2.0
    decode = tcm.decode_time(cfg.batch, ctx)
    out = []
    for gamma in (cfg.gammas if gammas is None else gammas):
        if gamma == 0:
            out.append(1.0)
            continue
        cost = gamma * dcm.decode_time(cfg.batch, ctx) + tcm.verify_time(cfg.batch, ctx,
                                                                          gamma + 1)
        out.append(expected_tokens(cfg.alpha, gamma) * decode / cost)
    return np.array(out)
