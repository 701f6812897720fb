"""``eagle`` and ``eagle2``: feature-level drafting (Li et al., EAGLE, ICML 2024; EAGLE-2, 2024).

EAGLE's draft is one decoder layer (plus an fc fusing the feature and the next token's
embedding) that runs autoregressively on the target's second-to-top-layer features and
reuses the target's embedding and LM head, so a draft forward costs about one layer plus
the LM head (the ``eagle-*`` model files; the scenario's ``draft`` if it is one, else
``eagle-<target>``).  Each iteration the layer first re-reads the tokens the target accepted
last time (their features come from the target's verification), then drafts one level per
forward.  It keeps its own one-layer KV cache, which the memory plan holds.

- ``eagle``: a chain of ``num_speculative_tokens`` (as vLLM runs EAGLE), or a static tree
  given as an expansion ``tree: [k1, ...]`` or as Medusa/EAGLE ``choices``.
- ``eagle2``: EAGLE-2's context-aware dynamic tree with SGLang's knobs: for
  ``speculative_num_steps`` forwards, expand the ``speculative_eagle_topk`` nodes of highest
  path probability (each gets its top-k children), then rerank all candidates and verify
  the best ``speculative_num_draft_tokens - 1`` of them with the root.  EAGLE-2 reads path
  probability from its well-calibrated draft confidence; here it is the acceptance model's
  per-node probability (tree_topk, medusa or sequoia: depth and rank only).

Simplified: because those models do not vary per request, the dynamic tree is the same for
every request (the best tree for the average context); EAGLE-2's per-context adaptation
beyond that is not modelled.  Defaults (5 steps; top-4; 16 draft tokens) are ours.
"""
from __future__ import annotations

import numpy as np

from simulator.cost.drafting import OperatorPrices, forward_tokens, level_draft_time
from simulator.engine.plan import BatchView, DraftPlan
from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param, given
from simulator.models.spec import attached_model
from simulator.policies.base import PolicyBase, PolicyContext, side_cost
from simulator.policies.tree_acceptance import (
    check_acceptance_param,
    exclusive_table,
    model_width,
    resolve_acceptance,
)
from simulator.speculation.token_tree import TokenTree
from simulator.speculation.tree_shapes import (
    chain_tree,
    check_expansion_size,
    check_tree_size,
    dynamic_tree,
    tree_from_choices,
)

_MODEL = Param("str", default=None, help="EAGLE draft layer file (default eagle-<target>)")
_ACCEPTANCE = Param("any", default=None, help="this policy's own acceptance model (a mapping)")


class _EagleDraft(PolicyBase):
    """The EAGLE layer: its cost model, prefill, and the tokens it re-reads each iteration."""

    @classmethod
    def memory_models(cls, params: dict, draft, target):
        """The EAGLE layer's weights and its one-layer KV cache."""
        spec = attached_model("eagle", params["model"], draft, target, field="policy.model")
        return [spec], [spec]

    def _setup(self, params: dict, ctx: PolicyContext) -> None:
        self.spec = attached_model("eagle", params["model"], ctx.draft_model, ctx.target_model,
                                   field="policy.model")
        self.cost = side_cost(ctx, self.spec)
        self.prices = OperatorPrices(self.cost)
        self._emitted = np.ones(len(ctx.workload) if ctx.workload is not None else 0)

    def _fc_s(self, tokens: float) -> float:
        """The fc fusing [feature, embedding] (2h -> h): two square linears' worth."""
        return 2.0 * self.prices.square_linear_s(int(tokens))

    def draft_time(self, context: np.ndarray, reread: np.ndarray | None = None) -> float:
        """The EAGLE layer's forwards for one iteration (``reread``: tokens accepted last time)."""
        n = context.size
        if n == 0:
            return 0.0
        first = np.ones(n) if reread is None else np.maximum(reread, 1.0)
        total = level_draft_time(self.cost, context, self.levels, logits=self.logits,
                                 first_tokens=first)
        fc_tokens = [first.sum()] + [n * t for t in self.levels[1:]]
        return total + sum(self._fc_s(t) for t in fc_tokens)

    def _reread(self, request_ids: np.ndarray) -> np.ndarray:
        if request_ids.size and int(request_ids.max()) >= self._emitted.size:
            grown = np.ones(int(request_ids.max()) + 1)
            grown[:self._emitted.size] = self._emitted
            self._emitted = grown
        return self._emitted[request_ids]

    def expected_accepted(self) -> float | None:
        """Expected accepted tokens per iteration (bonus excluded), where a closed form exists."""
        return self.acceptance.expected(self.tree)

    # ---------------------------------------------------------------- policy interface
    @property
    def max_verify_tokens(self) -> int:
        return self.tree.num_nodes + 1

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        k = np.full(len(batch), self.tree.num_nodes, dtype=np.int64)
        ctx = batch.context.astype(np.float64)
        return DraftPlan(num_draft=k, verify_tokens=k + 1,
                         draft_time_s=self.draft_time(ctx, self._reread(batch.request_ids)),
                         payload=self.tree)

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        return self.acceptance.sample(self.tree, batch, plan.num_draft, rng)

    def observe(self, plan, batch, accepted, step_time_s) -> None:
        self._reread(batch.request_ids)
        self._emitted[batch.request_ids] = np.asarray(accepted) + 1.0

    def prefill_time(self, new_tokens: np.ndarray, context: np.ndarray) -> float:
        if not new_tokens.size:
            return 0.0
        return self.cost.step_time(new_tokens, context, np.zeros(new_tokens.size)) \
            + self._fc_s(float(new_tokens.sum()))


class EagleSpeculation(_EagleDraft):
    """EAGLE-1: the feature-level draft proposes a chain or a static tree."""

    name = "eagle"
    PARAMS = {
        "model": _MODEL,
        "num_speculative_tokens": Param("int", default=5, minimum=1, maximum=64,
                                        aliases=("gamma", "speculative_num_steps"),
                                        help="chain length"),
        "tree": Param("int_list", default=None, minimum=1, maximum=64,
                      help="static tree: children per node at each depth"),
        "choices": Param("any", default=None, help="static tree as paths of child ranks"),
        "acceptance": _ACCEPTANCE,
    }

    @classmethod
    def check_params(cls, out: dict, *, raw, source: str, prefix: str) -> None:
        if out["tree"] is not None:
            check_expansion_size(out["tree"], source=source, field=prefix + "tree")
        if out["choices"] is not None:
            tree_from_choices(out["choices"], field=prefix + "choices")
        check_acceptance_param(out, source, prefix)
        shapes = [g for g in (given(raw, cls.PARAMS, k)
                              for k in ("num_speculative_tokens", "tree", "choices")) if g]
        if len(shapes) > 1:
            raise SpecsimError(f"give one tree shape, not {' and '.join(shapes)}",
                               source=source, field=prefix + shapes[0],
                               fix="num_speculative_tokens (a chain), tree: [k1, ...] or choices")

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        self._setup(params, ctx)
        if params["choices"] is not None:
            self.tree = tree_from_choices(params["choices"], field="policy.choices")
        elif params["tree"] is not None:
            self.tree = TokenTree.from_config(params["tree"])
        else:
            self.tree = chain_tree(params["num_speculative_tokens"])
        self.levels = forward_tokens(self.tree)
        self.logits = self.levels
        self.acceptance = resolve_acceptance(params, ctx, self.tree, policy=self.name)


class Eagle2Speculation(_EagleDraft):
    """EAGLE-2: a dynamic draft tree, expanded by top-k and reranked to a node budget."""

    name = "eagle2"
    PARAMS = {
        "model": _MODEL,
        "speculative_num_steps": Param("int", default=5, minimum=1, maximum=32,
                                       aliases=("num_steps",), help="draft forwards (depth)"),
        "speculative_eagle_topk": Param("int", default=4, minimum=1, maximum=16,
                                        aliases=("topk",), help="nodes expanded per step"),
        "speculative_num_draft_tokens": Param("int", default=16, minimum=2, maximum=257,
                                              aliases=("num_draft_tokens",),
                                              help="tokens verified per request (root + nodes)"),
        "acceptance": _ACCEPTANCE,
    }

    @classmethod
    def check_params(cls, out: dict, *, raw, source: str, prefix: str) -> None:
        steps, topk = out["speculative_num_steps"], out["speculative_eagle_topk"]
        nodes = out["speculative_num_draft_tokens"] - 1
        most = topk + (steps - 1) * topk * topk
        field = prefix + "speculative_num_draft_tokens"
        if nodes < steps:
            raise SpecsimError(f"{nodes + 1} draft tokens (the root and {nodes} nodes) cannot "
                               f"reach depth {steps}", source=source, field=field,
                               fix=f"use >= {steps + 1}, or fewer speculative_num_steps")
        if nodes > most:
            raise SpecsimError(f"{steps} steps of top-{topk} give only {most} candidate nodes, "
                               f"fewer than {nodes}", source=source, field=field,
                               fix=f"use <= {most + 1}, or more steps / a larger topk")
        check_acceptance_param(out, source, prefix)

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        self._setup(params, ctx)
        steps = params["speculative_num_steps"]
        topk = params["speculative_eagle_topk"]
        probe = TokenTree.from_config([2] + [1] * (steps - 1))
        self.acceptance = resolve_acceptance(params, ctx, probe, policy=self.name,
                                             conditionals=True)
        width = model_width(self.acceptance.model, topk)
        if width < topk:
            raise SpecsimError(f"the acceptance model lists {width} child ranks, fewer than "
                               f"topk {topk}", field="policy.speculative_eagle_topk",
                               fix=f"use speculative_eagle_topk <= {width}, or list more ranks")
        table = exclusive_table(self.acceptance.model, steps, topk,
                                field="policy.acceptance")
        self.tree = check_tree_size(
            dynamic_tree(table, steps, topk, params["speculative_num_draft_tokens"] - 1),
            "policy.speculative_num_draft_tokens")
        self.acceptance.check_fits(self.tree)
        self.levels = np.array([1] + [topk] * (steps - 1), np.int64)
        self.logits = self.levels
