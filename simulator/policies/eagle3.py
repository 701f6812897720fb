"""``eagle3``: EAGLE-3 drafting (Li et al., EAGLE-3, arXiv 2503.01840; vLLM ``method: eagle3``;
SGLang's ``--speculative-algorithm EAGLE3``).

EAGLE-3's draft (a kind-``eagle3`` model: ``eagle3-*`` files; the policy's ``model``, else
the scenario's ``draft`` if it is one, else the catalog's eagle3 model trained on the target)
is one decoder layer whose q/k/v read 2h ([embedding, hidden]), an fc fusing
``feature_layers`` of the target's hidden states (feature_layers x h -> h, no bias), and its
own LM head over ``draft_vocab_size`` tokens (mapped to the target's vocabulary), with the
target's embedding.  Each iteration its first forward fuses the target's features of the
tokens accepted last time with the fc (vLLM: ``combine_hidden_states`` once, before the first
pass, vllm/v1/spec_decode/eagle.py ``EagleProposer.propose``), later forwards feed the
layer's own output; every forward ends in the draft-vocabulary LM head.

Shapes of the proposal: a chain of ``num_speculative_tokens`` (vLLM's way; default 5, as
``eagle``), or, when ``speculative_eagle_topk`` > 1, EAGLE-2's dynamic tree with SGLang's
knobs (``num_speculative_tokens`` forwards -- SGLang's speculative_num_steps -- of top-k,
reranked to ``speculative_num_draft_tokens`` - 1 nodes; default 16 tokens, as ``eagle2``).

Cost: the layer and its LM head are priced by the cost model on a decoder view of the
draft (its layer, its draft-vocabulary head); the extra width of q/k/v (they read 2h, not
h: (q + 2 kv) / h square linears more per token) and the fc (feature_layers square linears
over the first forward's tokens, and over every prefill chunk's) are priced from the same
cost model's operators (``OperatorPrices``), as eagle.py prices its fc.  The engine's
host work for the reduced vocabulary's map after every forward and the fused features'
gathers is charged through ``SpecWork`` (``vocab_map``, ``feature_layers``: spec_work.py).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from simulator.cost.drafting import OperatorPrices
from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param
from simulator.models.spec import ModelSpec, attached_model, list_models, load_model
from simulator.policies.base import PolicyContext, side_cost
from simulator.policies.feature_draft import (
    FeatureDraft,
    check_dynamic_tree,
    dynamic_draft_tree,
)
from simulator.policies.tree_acceptance import check_acceptance_param, resolve_acceptance
from simulator.speculation.tree_shapes import chain_tree

EAGLE3_DEFAULT_DRAFT_TOKENS = 16  # as eagle2's default (ours, not a published number)


def eagle3_model(name: str | None, draft: ModelSpec | None, target: ModelSpec) -> ModelSpec:
    """The EAGLE-3 draft: ``name``; else the scenario's draft if it is one; else the
    catalog's ``eagle3-<target>``, or the one eagle3 file trained on the target."""
    if not name and not (draft is not None and draft.kind == "eagle3"):
        known = sorted(m for m in list_models() if m.startswith("eagle3-"))
        name = f"eagle3-{target.name}" if f"eagle3-{target.name}" in known else None
        for candidate in known if name is None else ():
            if load_model(candidate).base_model == target.name:
                name = candidate
                break
        if name is None:
            raise SpecsimError(f"no eagle3 model in the catalog for target {target.name}",
                               field="policy.model",
                               fix=f"name one ({', '.join(known) or 'none catalogued'}) or "
                                   f"use the target it was trained for")
    return attached_model("eagle3", name, draft, target, field="policy.model")


def eagle3_pass_model(spec: ModelSpec) -> ModelSpec:
    """The draft as the cost model prices a forward: its one layer and its LM head over the
    draft vocabulary (the 2h q/k/v input and the fc are priced on top)."""
    return dataclasses.replace(spec, kind="decoder", vocab_size=spec.draft_vocab_size
                               or spec.vocab_size, draft_vocab_size=0, feature_layers=0)


class Eagle3Speculation(FeatureDraft):
    """EAGLE-3: a chain, or EAGLE-2's dynamic tree, from the multi-layer-feature draft."""

    name = "eagle3"
    PARAMS = {
        "model": Param("str", default=None,
                       help="EAGLE-3 draft file (default: the eagle3 model of the target)"),
        "num_speculative_tokens": Param("int", default=5, minimum=1, maximum=64,
                                        aliases=("gamma", "speculative_num_steps"),
                                        help="chain length, or the tree's draft forwards"),
        "speculative_eagle_topk": Param("int", default=1, minimum=1, maximum=16,
                                        aliases=("topk",),
                                        help="nodes expanded per forward (1: a chain)"),
        "speculative_num_draft_tokens": Param("int", default=None, minimum=2, maximum=257,
                                              aliases=("num_draft_tokens",),
                                              help="tree: tokens verified per request"),
        "acceptance": Param("any", default=None,
                            help="this policy's own acceptance model (a mapping)"),
    }

    @classmethod
    def check_params(cls, out: dict, *, raw, source: str, prefix: str) -> None:
        k, topk = out["num_speculative_tokens"], out["speculative_eagle_topk"]
        tokens = out["speculative_num_draft_tokens"]
        if topk == 1 and tokens is not None and tokens != k + 1:
            raise SpecsimError(f"a chain of {k} verifies {k + 1} tokens, not {tokens}",
                               source=source, field=prefix + "speculative_num_draft_tokens",
                               fix=f"leave it out, give {k + 1}, or a topk > 1 for a tree")
        if topk > 1:
            check_dynamic_tree(k, topk, tokens or EAGLE3_DEFAULT_DRAFT_TOKENS, source=source,
                               prefix=prefix)
        check_acceptance_param(out, source, prefix)

    @classmethod
    def memory_models(cls, params: dict, draft, target):
        """The EAGLE-3 layer's weights (with its draft-vocabulary head) and its KV cache."""
        spec = eagle3_model(params["model"], draft, target)
        return [spec], [spec]

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        self.spec = eagle3_model(params["model"], ctx.draft_model, ctx.target_model)
        self.cost = side_cost(ctx, eagle3_pass_model(self.spec))
        self.prices = OperatorPrices(self.cost)
        s = self.spec
        self._qkv_extra = (s.q_size + 2 * s.kv_size) / s.hidden_size  # square linears
        steps, topk = params["num_speculative_tokens"], params["speculative_eagle_topk"]
        if topk == 1:
            self.tree = chain_tree(steps)
            self.acceptance = resolve_acceptance(params, ctx, self.tree, policy=self.name)
            self.levels = np.ones(steps, np.int64)
        else:
            tokens = params["speculative_num_draft_tokens"] or EAGLE3_DEFAULT_DRAFT_TOKENS
            self.acceptance, self.tree = dynamic_draft_tree(params, ctx, steps, topk, tokens,
                                                            policy=self.name)
            self.levels = np.array([1] + [topk] * (steps - 1), np.int64)
            self.reranks = True  # EAGLE-2's dynamic tree on EAGLE-3's layer
        self.logits = self.levels
        self._start(ctx)

    def fc_s(self, tokens: float) -> float:
        """The fc fusing feature_layers hidden states (feature_layers*h -> h)."""
        return self.spec.feature_layers * self.prices.square_linear_s(int(tokens))

    def qkv_extra_s(self, tokens: float) -> float:
        """q/k/v reading 2h instead of h: h x (q + 2 kv) more weights per forward."""
        return self._qkv_extra * self.prices.square_linear_s(int(tokens))

    def _extra_s(self, first_tokens: float, later_tokens: list[float]) -> float:
        """The fc on the first forward's tokens; the wider q/k/v on every forward."""
        return self.fc_s(first_tokens) + sum(self.qkv_extra_s(t)
                                             for t in [first_tokens] + later_tokens)
