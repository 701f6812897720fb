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

from simulator.cost.drafting import OperatorPrices, forward_tokens
from simulator.engine.plan import BatchDraws
from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param, given
from simulator.models.spec import attached_model
from simulator.policies.base import PolicyContext, side_cost
from simulator.policies.feature_draft import (
    FeatureDraft,
    check_dynamic_tree,
    dynamic_draft_tree,
)
from simulator.policies.tree_acceptance import check_acceptance_param, resolve_acceptance
from simulator.speculation.token_tree import TokenTree
from simulator.speculation.tree_shapes import chain_tree, check_expansion_size, tree_from_choices

_MODEL = Param("str", default=None, help="EAGLE draft layer file (default eagle-<target>)")
_ACCEPTANCE = Param("any", default=None, help="this policy's own acceptance model (a mapping)")


class _EagleDraft(FeatureDraft):
    """The EAGLE layer: its cost model, and the fc that fuses [feature, embedding]."""

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
        self._start(ctx)

    def _fc_s(self, tokens: float) -> float:
        """The fc fusing [feature, embedding] (2h -> h): two square linears' worth."""
        return 2.0 * self.prices.square_linear_s(int(tokens))

    def _extra_s(self, first_tokens: float, later_tokens: list[float]) -> float:
        """EAGLE-1 fuses [feature, embedding] with its fc in every forward."""
        return sum(self._fc_s(t) for t in [first_tokens] + later_tokens)


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
    reranks = True
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
        check_dynamic_tree(out["speculative_num_steps"], out["speculative_eagle_topk"],
                           out["speculative_num_draft_tokens"], source=source, prefix=prefix)
        check_acceptance_param(out, source, prefix)

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        self._setup(params, ctx)
        steps = params["speculative_num_steps"]
        topk = params["speculative_eagle_topk"]
        self.acceptance, self.tree = dynamic_draft_tree(
            params, ctx, steps, topk, params["speculative_num_draft_tokens"], policy=self.name)
        self.levels = np.array([1] + [topk] * (steps - 1), np.int64)
        self.logits = self.levels

    def batch_draws(self, n: int) -> BatchDraws | None:
        """``draw_accepted``'s walk where it takes one, bound to the batch size."""
        return self.acceptance.batch_draws(self.tree, n)

    def draw_accepted(self, rng: np.random.Generator, request_ids: np.ndarray,
                      context: np.ndarray) -> np.ndarray:
        """The acceptance's tree walk itself where it has one (lengths in [0, depth]: the
        clamp changes nothing), else ``FeatureDraft``'s draw."""
        walk = self.acceptance.tree_walk(self.tree)
        if walk is None:
            return super().draw_accepted(rng, request_ids, context)
        return walk(rng, request_ids.size)
