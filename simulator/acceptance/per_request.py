"""Per-request and per-task alpha: each request keeps one i.i.d. alpha for its whole life.

``alpha_i ~ Beta(m * kappa, (1 - m) * kappa)`` with mean ``m`` (the request's task mean, or
``mean``) and concentration ``kappa``; without ``concentration`` every request of a task
gets exactly its task's mean.  ``bind`` draws the alphas; sampling before ``bind`` is an
error because the model has no per-request state yet.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Mapping

import numpy as np

from simulator.acceptance.context_free import ContextFree
from simulator.acceptance.fields import model_config, probability
from simulator.acceptance.sampling import check_batch, sample_chain_tree, sample_geometric
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number, require_mapping


def beta_moments(mean: float, concentration: float | None, k_max: int) -> np.ndarray:
    """E[alpha^k], k = 1..k_max, for alpha ~ Beta(mean*kappa, (1-mean)*kappa)."""
    k = np.arange(k_max)
    if concentration is None or mean in (0.0, 1.0):
        return mean ** (k + 1.0)
    a = mean * concentration
    return np.cumprod((a + k) / (concentration + k))


@dataclass(frozen=True)
class PerRequestAcceptance(ContextFree):
    """alpha drawn per request (Beta around a mean) or set per task."""

    mean: float | None = None
    concentration: float | None = None
    tasks: tuple[tuple[str, float], ...] = ()
    alphas: np.ndarray | None = field(default=None, compare=False, repr=False)
    name: ClassVar[str] = "per_request"

    def __post_init__(self) -> None:
        if self.mean is None and not self.tasks:
            raise SpecsimError("give 'mean', 'tasks' or both", field="mean",
                               fix="mean: 0.75 (and/or tasks: {code: 0.85, chat: 0.7})")
        if self.concentration is not None and not self.concentration > 0:
            raise SpecsimError("must be > 0", field="concentration")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], *, source: str) -> "PerRequestAcceptance":
        cfg = model_config(cfg, allowed=("mean", "concentration", "tasks"), source=source)
        mean = probability(cfg["mean"], source=source, field="mean") if "mean" in cfg else None
        conc = None
        if "concentration" in cfg:
            conc = float(as_number(cfg["concentration"], source=source, field="concentration",
                                   strictly_positive=True))
        tasks: tuple[tuple[str, float], ...] = ()
        if "tasks" in cfg:
            tmap = require_mapping(cfg["tasks"], source=source, field="tasks")
            if not tmap:
                raise SpecsimError("is empty", source=source, field="tasks")
            tasks = tuple((k, probability(v, source=source, field=f"tasks.{k}"))
                          for k, v in tmap.items())
        if mean is None and not tasks:
            raise SpecsimError("give 'mean', 'tasks' or both", source=source, field="mean",
                               fix="mean: 0.75 (and/or tasks: {code: 0.85, chat: 0.7})")
        return cls(mean, conc, tasks)

    def _means(self, num_requests: int, tasks) -> np.ndarray:
        if tasks is None or not self.tasks:
            if self.mean is None:
                raise SpecsimError("per-task alpha needs the workload's task labels",
                                   field="tasks", fix="give the workload a task column or "
                                   "set 'mean' for requests without one")
            return np.full(num_requests, self.mean)
        labels = np.asarray(tasks, dtype=object)
        if labels.shape != (num_requests,):
            raise SpecsimError(f"has {labels.size} labels for {num_requests} requests",
                               field="tasks")
        table = dict(self.tasks)
        unknown = sorted({str(t) for t in labels if t not in table})
        if unknown and self.mean is None:
            raise SpecsimError(f"no alpha for task(s) {unknown}", field="tasks",
                               fix="add them to 'tasks' or set 'mean' as the default; known: "
                               + ", ".join(table))
        return np.array([table.get(t, self.mean) for t in labels], dtype=float)

    def bind(self, num_requests: int, rng: np.random.Generator,
             tasks: np.ndarray | None = None) -> "PerRequestAcceptance":
        means = self._means(int(num_requests), tasks)
        alphas = means
        if self.concentration is not None:
            inner = (means > 0) & (means < 1)
            draws = rng.beta(np.where(inner, means, 0.5) * self.concentration,
                             np.where(inner, 1 - means, 0.5) * self.concentration)
            alphas = np.where(inner, draws, means)
        alphas = np.asarray(alphas, dtype=float)
        alphas.setflags(write=False)
        return replace(self, alphas=alphas)

    def _alphas(self, request_ids: np.ndarray) -> np.ndarray:
        if self.alphas is None:
            raise SpecsimError("the per_request model has no per-request alphas yet",
                               field="request_ids", fix="call bind(num_requests, rng) first")
        return self.alphas[request_ids]

    def sample_chain(self, gammas, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        g, _, r = check_batch(gammas, contexts, request_ids)
        return sample_geometric(self._alphas(r), g, rng)

    def chain_alphas(self, request_ids: np.ndarray) -> np.ndarray:
        """The per-request alphas ``sample_chain`` draws with (context-free: a chain
        stretch may draw many iterations at once, simulator/engine/chain_stretch.py)."""
        return self._alphas(request_ids)

    def sample_tree(self, tree, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        return sample_chain_tree(self, tree, contexts, request_ids, rng)

    def position_rates(self, gamma: int, context: int = 0) -> np.ndarray:
        """Population average of alpha^(i+1): over the bound requests, else over the prior."""
        gamma = int(gamma)
        if self.alphas is not None:
            return np.mean(self.alphas[:, None] ** np.arange(1, gamma + 1), axis=0) \
                if self.alphas.size else np.zeros(gamma)
        if self.tasks:
            raise SpecsimError("the task mix is unknown until bind", field="tasks",
                               fix="call bind(num_requests, rng, tasks) first")
        return beta_moments(float(self.mean), self.concentration, gamma)

    def expected_accepted(self, gamma: int, context: int = 0) -> float | None:
        """sum_k E[alpha^k] (Beta moments, or the average over the bound requests)."""
        return float(self.position_rates(gamma).sum())
