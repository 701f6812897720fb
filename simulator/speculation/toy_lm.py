"""Toy order-2 language models whose every probability is known (seed 000, section 0.4).

The next-token distribution depends only on the last two tokens; a context shorter than two
is padded with a begin-of-sequence symbol (id ``vocab_size``).  The target ``p`` is a fixed
random table; a draft is ``q = softmax(log p + noise)``, optionally with *hard* contexts
whose noise is larger (the positions a drafter keeps missing, seed 000 section 3.3).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.inputs.errors import SpecsimError


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax."""
    z = np.asarray(logits, dtype=float)
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def _check_positive(value, name: str, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise SpecsimError(f"must be a finite number {bound}, got {value!r}", field=name)
    return float(value)


@dataclass(frozen=True)
class ToyLM:
    """An order-2 model: ``table[a, b]`` is the next-token distribution after tokens a, b."""

    table: np.ndarray
    hard: np.ndarray | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        t = np.asarray(self.table, dtype=float)
        v = t.shape[-1] if t.ndim else 0
        if t.ndim != 3 or t.shape != (v + 1, v + 1, v) or v < 2:
            raise SpecsimError(f"table has shape {t.shape}, expected (V+1, V+1, V) with V >= 2",
                               field="table")
        if np.any(t < 0) or np.max(np.abs(t.sum(axis=-1) - 1.0)) > 1e-9:
            raise SpecsimError("every table row must be a probability distribution",
                               field="table")
        t = t.copy()
        t.setflags(write=False)
        object.__setattr__(self, "table", t)

    @property
    def vocab_size(self) -> int:
        return int(self.table.shape[-1])

    @property
    def bos(self) -> int:
        return self.vocab_size

    @classmethod
    def random_target(cls, vocab_size: int, rng: np.random.Generator,
                      sharpness: float = 1.5) -> "ToyLM":
        """A target with ``softmax(sharpness * N(0, 1))`` rows: larger is peakier."""
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) \
                or vocab_size < 2:
            raise SpecsimError(f"must be a whole number >= 2, got {vocab_size!r}",
                               field="vocab_size")
        sharpness = _check_positive(sharpness, "sharpness", allow_zero=True)
        v = int(vocab_size)
        return cls(softmax(sharpness * rng.standard_normal((v + 1, v + 1, v))))

    def noisy_draft(self, rng: np.random.Generator, noise: float = 1.0,
                    hard_fraction: float = 0.0, hard_noise: float = 4.0) -> "ToyLM":
        """A draft ``q = softmax(log p + noise_scale * N(0, 1))``.

        A ``hard_fraction`` of the contexts (chosen at random) get ``hard_noise`` instead:
        there the draft barely resembles the target.
        """
        noise = _check_positive(noise, "noise", allow_zero=True)
        hard_noise = _check_positive(hard_noise, "hard_noise", allow_zero=True)
        hard_fraction = _check_positive(hard_fraction, "hard_fraction", allow_zero=True)
        if hard_fraction > 1:
            raise SpecsimError(f"must be at most 1, got {hard_fraction}", field="hard_fraction")
        shape = self.table.shape[:2]
        hard = rng.random(shape) < hard_fraction
        scale = np.where(hard, hard_noise, noise)[..., None]
        with np.errstate(divide="ignore"):
            logp = np.log(self.table)
        return ToyLM(softmax(logp + scale * rng.standard_normal(self.table.shape)), hard=hard)

    def with_temperature(self, temperature: float) -> "ToyLM":
        """Return ``softmax(log p / T)``; T = 0 is the one-hot argmax (greedy) limit."""
        t = _check_positive(temperature, "temperature", allow_zero=True)
        if t == 0:
            best = self.table.argmax(axis=-1)
            return ToyLM((np.arange(self.vocab_size) == best[..., None]).astype(float),
                         hard=self.hard)
        with np.errstate(divide="ignore"):
            return ToyLM(softmax(np.log(self.table) / t), hard=self.hard)

    # ---- lookups ----
    def state(self, context) -> tuple[int, int]:
        """The (second-last, last) symbols of ``context``, BOS-padded."""
        ctx = [self.bos, self.bos] + [int(t) for t in context]
        return ctx[-2], ctx[-1]

    def probs(self, context) -> np.ndarray:
        """Next-token distribution after ``context`` (a sequence of token ids)."""
        a, b = self.state(context)
        return self.table[a, b]

    def probs_at(self, prev2: np.ndarray, prev1: np.ndarray) -> np.ndarray:
        """Vectorised lookup: distributions for arrays of (second-last, last) symbols."""
        return self.table[prev2, prev1]

    def greedy_decode(self, context, num_tokens: int) -> list[int]:
        """The target's own greedy continuation of ``context``."""
        ctx = list(context)
        out = []
        for _ in range(num_tokens):
            tok = int(self.probs(ctx).argmax())
            out.append(tok)
            ctx.append(tok)
        return out

    def sequence_distribution(self, num_tokens: int, context=()) -> np.ndarray:
        """Exact distribution of the next ``num_tokens`` tokens, flattened base-V codes."""
        v = self.vocab_size
        dist = np.ones(1)
        prev2 = np.full(1, self.state(context)[0])
        prev1 = np.full(1, self.state(context)[1])
        for _ in range(num_tokens):
            step = self.table[prev2, prev1]                     # (S, V)
            dist = (dist[:, None] * step).reshape(-1)
            prev2 = np.repeat(prev1, v)
            prev1 = np.tile(np.arange(v), prev1.size)
        return dist

    def stationary_states(self) -> np.ndarray:
        """Stationary distribution of the (second-last, last) token pair, shape (V, V)."""
        v = self.vocab_size
        trans = np.zeros((v * v, v * v))
        for a in range(v):
            for b in range(v):
                trans[a * v + b, b * v + np.arange(v)] = self.table[a, b]
        pi = np.full(v * v, 1.0 / (v * v))
        for _ in range(5000):
            nxt = pi @ trans
            if np.max(np.abs(nxt - pi)) < 1e-15:
                return (nxt / nxt.sum()).reshape(v, v)
            pi = nxt
        # Periodic (e.g. greedy, one-hot) chains never settle: use the long-run average.
        avg = np.zeros_like(pi)
        for _ in range(20000):
            pi = pi @ trans
            avg += pi
        return (avg / avg.sum()).reshape(v, v)
