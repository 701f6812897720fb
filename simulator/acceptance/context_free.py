"""Acceptance that depends on the request alone, declared by subclassing.

A chain stretch (simulator/engine/chain_stretch.py) draws many iterations' uniforms at once,
before it knows the contexts they will run at; it can only do so where ``sample_chain``'s
acceptance of a request is the same whatever its context and tokens, drawn from one uniform
per request.  Such a model says so by subclassing ``ChainCounts`` (its ``chain_counter``
turns the uniforms into counts: ``positional``, ``curve``, ``tree_topk``), or ``ContextFree``
where the counts are geometric in a per-request alpha (``iid``, ``per_request``);
``chain_counts`` finds the counter (None for any other model), ``context_free`` the alphas.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable

import numpy as np

from simulator.acceptance.sampling import geometric_counts


class ChainCounts(ABC):
    """An acceptance model whose chain acceptance is context-free, one uniform a request."""

    @abstractmethod
    def chain_counter(self, gamma: int) -> Callable[[np.ndarray, np.ndarray],
                                                   np.ndarray] | None:
        """``sample_chain``'s accepted counts of requests drafting ``gamma`` given its
        uniforms (shape (n,), or (K, n) for K iterations), as ``counts(draws,
        request_ids)``; None where it has none."""


class ContextFree(ChainCounts):
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
    """``model`` where its chain acceptance is a context-free alpha, else None."""
    return model if isinstance(model, ContextFree) else None


def chain_counts(model, gamma: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """``model``'s ``sample_chain`` counts of requests drafting ``gamma`` as a function of
    its uniforms and the request ids (a ``ChainCounts``' counter; for a ``ContextFree``
    without one, ``geometric_counts`` over its alphas); None where acceptance is not
    context-free."""
    if isinstance(model, ContextFree):
        alphas = model.chain_alphas
        return model.chain_counter(gamma) or (
            lambda draws, ids: geometric_counts(draws, alphas(ids), gamma))
    return model.chain_counter(gamma) if isinstance(model, ChainCounts) else None
