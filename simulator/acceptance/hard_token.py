"""Hard tokens that recur: acceptance correlated along the text (seed 000, section 3.3).

Each text position is *easy* or *hard*, a two-state Markov chain along the sequence
(``p_easy_to_hard``, ``p_hard_to_hard``); a draft at an easy position is accepted with
``alpha_easy``, at a hard one with ``alpha_hard``.  Hard positions come in runs, so a draft
that reaches one tends to stop there, and after the correction the next positions are
likely hard again: long accepted runs are rarer than the i.i.d. formula fed with the same
measured alpha predicts.

State is carried per request in a *bound* copy: ``sample_chain`` records the hidden state of
the last emitted position (the correction or bonus token) and the next call for that request
continues the chain from it.  The unbound model starts every iteration from the stationary
distribution.  ``position_rates``/``expected_accepted`` are exact for either: the bound one
uses the long-run distribution of the state at iteration boundaries for that gamma.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Mapping

import numpy as np

from simulator.acceptance.fields import model_config, probability
from simulator.acceptance.sampling import check_batch, sample_chain_tree, sample_leading
from simulator.inputs.errors import SpecsimError

KEYS = ("alpha_easy", "alpha_hard", "p_easy_to_hard", "p_hard_to_hard")


@dataclass(frozen=True)
class HardTokenAcceptance:
    """Two-state (easy/hard) Markov chain over positions with per-state acceptance."""

    alpha_easy: float
    alpha_hard: float
    p_easy_to_hard: float
    p_hard_to_hard: float
    state: np.ndarray | None = field(default=None, compare=False, repr=False)
    name: ClassVar[str] = "hard_token"

    def __post_init__(self) -> None:
        for key in KEYS:
            value = getattr(self, key)
            if not 0.0 <= value <= 1.0:
                raise SpecsimError(f"must be in [0, 1], got {value!r}", field=key)
        if self.p_easy_to_hard == 0.0 and self.p_hard_to_hard == 1.0:
            raise SpecsimError("the chain never changes state, so it has no single stationary "
                               "mix", field="p_easy_to_hard",
                               fix="make p_easy_to_hard > 0 or p_hard_to_hard < 1")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], *, source: str) -> "HardTokenAcceptance":
        cfg = model_config(cfg, allowed=KEYS, required=KEYS, source=source)
        return cls(*(probability(cfg[k], source=source, field=k) for k in KEYS))

    # ---- the chain ----
    @property
    def transition(self) -> np.ndarray:
        """Rows from (easy, hard) to (easy, hard)."""
        return np.array([[1 - self.p_easy_to_hard, self.p_easy_to_hard],
                         [1 - self.p_hard_to_hard, self.p_hard_to_hard]])

    @property
    def stationary(self) -> np.ndarray:
        """Long-run (easy, hard) fractions of text positions."""
        out = self.p_easy_to_hard + (1.0 - self.p_hard_to_hard)
        return np.array([1.0 - self.p_easy_to_hard / out, self.p_easy_to_hard / out])

    @property
    def mean_alpha(self) -> float:
        """Acceptance averaged over text positions (not over drafted ones)."""
        return float(self.stationary @ [self.alpha_easy, self.alpha_hard])

    def boundary_distribution(self, gamma: int) -> np.ndarray:
        """Long-run distribution of the emitted position's state between iterations."""
        trans, acc = self.transition, np.diag([self.alpha_easy, self.alpha_hard])
        step = trans @ acc
        move = np.linalg.matrix_power(step, int(gamma)) @ trans          # all accepted: bonus
        for k in range(int(gamma)):
            move = move + np.linalg.matrix_power(step, k) @ trans @ (np.eye(2) - acc)
        vals, vecs = np.linalg.eig(move.T)
        mu = np.real(vecs[:, np.argmin(np.abs(vals - 1.0))])
        return mu / mu.sum()

    # ---- interface ----
    def bind(self, num_requests: int, rng: np.random.Generator,
             tasks: np.ndarray | None = None) -> "HardTokenAcceptance":
        """A copy with per-request state; -1 means 'not started' (stationary start)."""
        return replace(self, state=np.full(int(num_requests), -1, dtype=np.int8))

    def sample_chain(self, gammas, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        g, _, r = check_batch(gammas, contexts, request_ids)
        batch, top = g.size, int(g.max(initial=0))
        if batch == 0:
            return np.zeros(0, dtype=np.int64)
        u = rng.random((batch, top + 1))
        hard = np.empty((batch, top + 1), dtype=bool)           # positions 1..top+1
        known = self.state[r] if self.state is not None else np.full(batch, -1)
        first_hard_prob = np.where(known < 0, self.stationary[1],
                                   np.where(known == 1, self.p_hard_to_hard,
                                            self.p_easy_to_hard))
        hard[:, 0] = u[:, 0] < first_hard_prob
        for i in range(1, top + 1):
            hard[:, i] = u[:, i] < np.where(hard[:, i - 1], self.p_hard_to_hard,
                                            self.p_easy_to_hard)
        acc_prob = np.where(hard[:, :top], self.alpha_hard, self.alpha_easy)
        acc_prob = np.where(np.arange(top) < g[:, None], acc_prob, 0.0)
        accepted = sample_leading(acc_prob, g, rng)
        if self.state is not None:
            # The emitted token sits at position accepted+1 (correction or bonus).
            self.state[r] = hard[np.arange(batch), accepted]
        return accepted

    def sample_tree(self, tree, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        return sample_chain_tree(self, tree, contexts, request_ids, rng)

    def position_rates(self, gamma: int, context: int = 0) -> np.ndarray:
        """P(first k accepted) = mu (P D)^k 1 from the iteration's start distribution mu."""
        gamma = int(gamma)
        start = self.stationary if self.state is None else \
            self.boundary_distribution(gamma) @ self.transition
        step = self.transition @ np.diag([self.alpha_easy, self.alpha_hard])
        # The first draft's state is already distributed as `start`: apply D, then P D ...
        vec = start * [self.alpha_easy, self.alpha_hard]
        out = []
        for _ in range(gamma):
            out.append(vec.sum())
            vec = vec @ step
        return np.array(out)

    def expected_accepted(self, gamma: int, context: int = 0) -> float | None:
        return float(self.position_rates(gamma).sum())
