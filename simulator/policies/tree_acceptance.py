"""Kit: what a token tree of the model-based policies yields (what drafting one costs is
``simulator.cost.drafting``; the shapes are ``simulator.speculation.tree_shapes``).

An acceptance model with tree semantics gives, per node, the probability that it is
accepted given its parent was and its earlier siblings were not.  For the parametric ones
(tree_topk, medusa, sequoia) that depends on depth and rank only, so one (depth, rank) table
of *exclusive* probabilities ranks any candidate node by its path probability (the product
down its path, which is also its contribution to the expected accepted length).  Medusa
picks its candidate tree that way and EAGLE-2 reranks its draft tree that way.  A selected
node always comes with its parent and its earlier-ranked siblings, so the rank a node has in
the pruned tree is the rank the drafter gave it.
"""
from __future__ import annotations

import numpy as np

from simulator.acceptance.context_free import chain_counts
from simulator.acceptance.tree_kinds import NodeConditionals, TreeAlgorithm
from simulator.engine.plan import BatchDraws
from simulator.inputs.errors import SpecsimError
from simulator.speculation.token_tree import TokenTree

# up to this many requests walk from uniforms drawn ahead, request by request on Python
# numbers (a few times faster than a level at a time on arrays at 64, on a loaded 2-core
# machine); more walk a level at a time on arrays, keeping the chunks' lists small
_AHEAD_BATCH = 64


# ---------------------------------------------------------------- yield
def has_tree_semantics(model) -> bool:
    """Whether ``model`` can score branching trees (parametric or by running the algorithm)."""
    return isinstance(model, (NodeConditionals, TreeAlgorithm))


def model_width(model, fallback: int) -> int:
    """How many child ranks a parametric model lists (top-k coverage or Sequoia rates)."""
    return model.listed_ranks() if isinstance(model, NodeConditionals) else fallback


def exclusive_table(model, depth: int, width: int, *, field: str) -> np.ndarray:
    """Exclusive P(node accepted | parent reached) by (depth - 1, rank) from ``model``.

    Reads ``model.node_conditionals`` on a probe tree whose rank-0 spine has ``width``
    children at every depth; valid for models whose conditionals depend on depth and rank
    only (tree_topk, medusa, sequoia).
    """
    if not isinstance(model, NodeConditionals):
        raise SpecsimError(f"acceptance model {model.name!r} gives no "
                           "per-node acceptance to rank candidate nodes by", field=field,
                           fix="use tree_topk, medusa or sequoia acceptance")
    parents, cells = [], []

    def grow(parent: int, d: int) -> None:
        for r in range(width):
            parents.append(parent)
            cells.append((d - 1, r))
            if r == 0 and d < depth:
                grow(len(parents) - 1, d + 1)

    grow(-1, 1)
    cond = np.asarray(model.node_conditionals(TokenTree(np.array(parents, np.intp))), float)
    table = np.zeros((depth, width))
    rows, cols = np.array(cells).T
    table[rows, cols] = cond
    survive = np.cumprod(np.concatenate([np.ones((depth, 1)), 1.0 - table[:, :-1]], axis=1),
                         axis=1)
    return table * survive


class PolicyAcceptance:
    """The acceptance model a policy samples from; a policy's own model is bound on first use."""

    def __init__(self, model, source: str, *, bound: bool, num_requests: int = 0,
                 tasks=None) -> None:
        self.model = model
        self.source = source
        self._bound = bound
        self._n = num_requests
        self._tasks = tasks
        self._walked = None  # (tree, model, its walk): the last tree walked

    def sample(self, tree: TokenTree, batch, num_draft: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
        """Accepted path length per request; requests the engine trimmed to no draft get 0."""
        out = np.zeros(len(batch), np.int64)
        on = num_draft > 0
        if not on.any():
            return out
        out[on] = self.sample_all(tree, batch.context[on], batch.request_ids[on], rng)
        return out

    def chain_counter(self, gamma: int):
        """``sample_all``'s counts for a chain of ``gamma`` given its uniforms (one a
        request: simulator/acceptance/context_free.py's ``chain_counts``); None where the
        model is not context-free, or not bound yet (the policy's own model is bound on its
        first use, drawing from the run's generator)."""
        return chain_counts(self.model, gamma) if self._bound else None

    def sample_all(self, tree: TokenTree, context: np.ndarray, request_ids: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
        """``sample`` of requests that all drafted ``tree`` (the same draws, in order): the
        policy's own model bound first, on its first use."""
        if not self._bound:
            self.model = self.model.bind(self._n, rng, self._tasks)
            self._bound = True
        if tree.is_chain:
            return self.model.sample_chain(np.full(context.size, tree.num_nodes, np.int64),
                                           context, request_ids, rng)
        walk = self.tree_walk(tree)
        if walk is not None:
            return walk(rng, context.size)
        return self.model.sample_tree(tree, context, request_ids, rng)

    def tree_walk(self, tree: TokenTree):
        """``sample_all`` of the branching ``tree`` as (rng, batch) -> accepted path lengths
        (int64, each in [0, depth]) where it is the bound model's walk, every request alike
        (``NodeConditionals.tree_walk``); None for a chain, another model, or before the
        model is bound.  Kept for the last tree asked (a policy asks every iteration)."""
        walked = self._walked
        if walked is not None and walked[0] is tree and walked[1] is self.model:
            return walked[2]
        if not self._bound or tree.is_chain or not isinstance(self.model, NodeConditionals):
            return None  # (a chain is sampled as a chain: other draws)
        walk = self.model.tree_walk(tree)
        self._walked = (tree, self.model, walk)
        return walk

    def batch_draws(self, tree: TokenTree, n: int) -> BatchDraws | None:
        """``tree_walk``'s walk of ``n`` requests as ``CarriedDraft.batch_draws`` declares
        it (None where there is no such walk): from the generator, or from uniforms drawn
        ahead where a few requests walk on Python numbers."""
        walk = self.tree_walk(tree)
        if walk is None:
            return None
        ahead = walk.ahead(n) if n <= _AHEAD_BATCH else None
        return BatchDraws(lambda rng: walk(rng, n), walk.most(n), ahead)

    def check_fits(self, tree: TokenTree) -> "PolicyAcceptance":
        """Raise now (not mid-run) if the model cannot draft ``tree`` (token_level: a node
        with more children than the toy vocabulary has tokens)."""
        if isinstance(self.model, TreeAlgorithm):
            where = "policy.acceptance" if self.source == "policy.acceptance" else "acceptance"
            self.model.check_tree_width(tree, field=f"{where}.vocab_size")
        return self

    def expected(self, tree: TokenTree) -> float | None:
        """Closed-form expected accepted length of ``tree`` where the model has one."""
        if tree.is_chain:
            return self.model.expected_accepted(tree.num_nodes)
        if isinstance(self.model, NodeConditionals):
            return float(self.model.expected_tree_accepted(tree))
        return None


def check_acceptance_param(out: dict, source: str, prefix: str) -> None:
    """Validate a policy's own ``acceptance`` mapping at parse time."""
    from simulator.acceptance import acceptance_from_config
    if out.get("acceptance") is None:
        return
    try:
        acceptance_from_config(out["acceptance"], source=source)
    except SpecsimError as exc:
        raise exc.relocated(source=source,
                            prefix=prefix + "acceptance" + ("." if exc.field else "")) from None


def resolve_acceptance(params: dict, ctx, tree: TokenTree, *, policy: str,
                       conditionals: bool = False, default=None,
                       only: str | None = None) -> PolicyAcceptance:
    """The policy's ``acceptance`` if set; else the scenario's if it can score ``tree``
    (and is the ``only`` model named, when given); else ``default()``; else an error.

    ``conditionals``: the policy ranks nodes itself, so it needs per-node probabilities.
    """
    from simulator.acceptance import acceptance_from_config
    n = len(ctx.workload) if ctx.workload is not None else 0
    tasks = ctx.workload.task if ctx.workload is not None else None
    if params.get("acceptance") is not None:
        model = acceptance_from_config(params["acceptance"], source="policy.acceptance")
        return PolicyAcceptance(model, "policy.acceptance", bound=False, num_requests=n,
                                tasks=tasks).check_fits(tree)
    scen = ctx.acceptance
    if scen is not None:
        fits = isinstance(scen, NodeConditionals) if conditionals else \
            (tree.is_chain or has_tree_semantics(scen))
        fits = fits and (only is None or scen.name == only)
        if fits:
            return PolicyAcceptance(scen, "scenario", bound=True).check_fits(tree)
    if default is not None:
        model, label = default()
        return PolicyAcceptance(model, label, bound=False, num_requests=n,
                                tasks=tasks).check_fits(tree)
    name = scen.name if scen is not None else "none"
    need = "tree_topk, medusa or sequoia" if conditionals else \
        "tree_topk, medusa, sequoia or token_level"
    raise SpecsimError(f"policy {policy!r} drafts a branching tree, and acceptance model "
                       f"{name!r} describes chains only", field="acceptance.model",
                       fix=f"use {need} acceptance, or give the policy its own "
                           f"'acceptance:' mapping")
