"""Acceptance that depends on the request alone (``ContextFree``), declared by subclassing.

A chain stretch (simulator/engine/chain_stretch.py) draws many iterations' uniforms at once,
before it knows the contexts they will run at; it can only do so where ``sample_chain``'s
acceptance of a request is the same whatever its context and tokens: ``iid`` and
``per_request``.  Such a model says so by subclassing ``ContextFree``; ``context_free``
finds it (None for any other model).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable

import numpy as np


class ContextFree(ABC):
    """An acceptance model whose chain acceptance is a per-request alpha, context-free."""

    @abstractmethod
    def chain_alphas(self, request_ids: np.ndarray) -> np.ndarray:
        """The per-request alphas ``sample_chain`` draws with."""

    def chain_counter(self, gamma: int) -> Callable[[np.ndarray, np.ndarray],
                                                   np.ndarray] | None:
        """``sample_chain``'s accepted counts of requests drafting ``gamma`` given its
        uniforms, as ``counts(draws, request_ids)``; None: ``geometric_counts`` over
        ``chain_alphas`` gives them."""
        return None


def context_free(model) -> ContextFree | None:
    """``model`` where its chain acceptance is context-free, else None."""
    return model if isinstance(model, ContextFree) else None
