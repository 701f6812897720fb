"""``medusa``: decoding heads on the target's last hidden state (Cai et al., Medusa, 2024).

Head i predicts the token i+1 positions ahead from the hidden state of the last verified
token; each head's top-k are combined into a candidate tree verified in one tree-attention
forward.  The tree is the Cartesian product of the heads' top-k cut to the ``node_budget``
nodes of highest path probability (how Medusa builds its sparse tree from its heads' top-k
accuracies; default 63 nodes, the size of Medusa's ``mc_sim_7b_63``), or an explicit
``choices`` list in Medusa's format.  Acceptance: the policy's ``acceptance:`` if set, else
the scenario's if it is a ``medusa`` model (other scenario models describe some other
draft), else Medusa's published per-head top-k accuracies for the heads' Vicuna size.

Cost: the heads (ModelSpec kind medusa, ``simulator/models/medusa-*.yaml``; the scenario's
``draft`` if it is one, else ``medusa-<target>``) run on one token per request -- the last
accepted one, as vLLM's Medusa worker does -- each reading its ResBlock (h x h) and its own LM
head (h x vocab) once per step, priced with the cost model's operators of the same shapes;
the memory plan holds the head weights.

``typical_acceptance`` (Medusa section 2.3.1) is lossy: it accepts candidates the target
finds plausible, not only the tokens it would emit, so acceptance rises and the output no
longer follows the target's distribution.  Simplified here to a documented knob: each
node's conditional acceptance c becomes c + (1 - c) * ``typical_lift``, the share of
rejected candidates the typical test would pass (not a published number: calibrate it).
"""
from __future__ import annotations

import re

import numpy as np

from simulator.acceptance.medusa import MEDUSA_TOP_K, MedusaAcceptance
from simulator.acceptance.sampling import tree_node_probs, walk_tree
from simulator.cost.drafting import OperatorPrices
from simulator.cost.spec_host import tree_rows
from simulator.cost.spec_work import SpecWork
from simulator.engine.plan import (
    BatchDraws,
    BatchView,
    CarriedDraft,
    ChainStretch,
    DraftPlan,
)
from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param
from simulator.models.spec import ModelSpec, attached_model
from simulator.policies.base import PolicyBase, PolicyContext, side_cost, spec_charge
from simulator.policies.tree_acceptance import (
    check_acceptance_param,
    exclusive_table,
    model_width,
    resolve_acceptance,
)
from simulator.speculation.closed_forms import tree_expected_accepted
from simulator.speculation.tree_shapes import best_tree, tree_from_choices

MEDUSA_DEFAULT_NODES = 63  # Medusa's default sparse tree, mc_sim_7b_63


def _heads(params: dict, draft, target) -> tuple[ModelSpec, int]:
    """The heads file and how many of its heads draft; the node budget must reach them all."""
    spec = attached_model("medusa", params["model"], draft, target, field="policy.model")
    heads = params["num_heads"] or spec.medusa_num_heads
    if heads > spec.medusa_num_heads:
        raise SpecsimError(f"{spec.name} has {spec.medusa_num_heads} heads, not {heads}",
                           field="policy.num_heads",
                           fix=f"use num_heads <= {spec.medusa_num_heads}")
    if params["choices"] is None and params["node_budget"] < heads:
        raise SpecsimError(f"a budget of {params['node_budget']} nodes cannot reach depth "
                           f"{heads}", field="policy.node_budget",
                           fix=f"raise node_budget to >= {heads} or lower num_heads")
    return spec, heads


class MedusaSpeculation(PolicyBase, CarriedDraft):
    """Medusa heads draft a Cartesian-product candidate tree; one tree-attention verification."""

    name = "medusa"
    PARAMS = {
        "model": Param("str", default=None, help="medusa heads file (default medusa-<target>)"),
        "num_heads": Param("int", default=None, minimum=1, maximum=64,
                           help="heads that draft (default: all in the file)"),
        "node_budget": Param("int", default=MEDUSA_DEFAULT_NODES, minimum=1, maximum=256,
                             aliases=("num_candidates",), help="tree nodes verified per step"),
        "top_k": Param("int", default=None, minimum=1, maximum=64,
                       help="candidates per head (default: the ranks the acceptance lists)"),
        "choices": Param("any", default=None, aliases=("medusa_choices",),
                         help="explicit tree: paths of child ranks, e.g. [[0], [0, 0], [1]]"),
        "typical_acceptance": Param("bool", default=False, help="lossy typical acceptance"),
        "typical_lift": Param("float", default=None, minimum=0.0, maximum=1.0,
                              help="share of rejections typical acceptance passes (0.2)"),
        "acceptance": Param("any", default=None,
                            help="this policy's own acceptance model (a mapping)"),
    }

    @classmethod
    def check_params(cls, out: dict, *, raw, source: str, prefix: str) -> None:
        if out["choices"] is not None:
            tree_from_choices(out["choices"], field=prefix + "choices")
        if out["typical_lift"] is not None and not out["typical_acceptance"]:
            raise SpecsimError("only used with typical_acceptance: true", source=source,
                               field=prefix + "typical_lift")
        check_acceptance_param(out, source, prefix)

    @classmethod
    def memory_models(cls, params: dict, draft, target):
        """The head weights; heads keep no KV cache."""
        return [_heads(params, draft, target)[0]], []

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        self.spec, self.num_heads = _heads(params, ctx.draft_model, ctx.target_model)
        self.prices = OperatorPrices(side_cost(ctx, self.spec))
        ranked = params["choices"] is None or params["typical_acceptance"]
        if params["choices"] is not None:
            self.tree = tree_from_choices(params["choices"], field="policy.choices")
            if self.tree.max_depth > self.num_heads:
                raise SpecsimError(f"choices reach depth {self.tree.max_depth} but only "
                                   f"{self.num_heads} heads draft", field="policy.choices",
                                   fix="shorten the paths or raise num_heads")
        self.acceptance = resolve_acceptance(params, ctx, _probe(self.num_heads),
                                             policy=self.name, conditionals=ranked,
                                             default=lambda: _published(self.spec),
                                             only="medusa")
        model = self.acceptance.model
        if params["choices"] is None:
            listed = model_width(model, 10)
            width = params["top_k"] or min(listed, 10)
            if width > listed:
                raise SpecsimError(f"the acceptance model lists {listed} ranks per head, not "
                                   f"{width}", field="policy.top_k",
                                   fix=f"use top_k <= {listed}, or list more ranks")
            table = exclusive_table(model, self.num_heads, width, field="policy.top_k")
            self.tree = best_tree(table, params["node_budget"])
        self.acceptance.check_fits(self.tree)
        # the heads draft in one forward; the candidates come from precomputed tree buffers;
        # the target verifies the tree
        self.host = spec_charge(ctx, SpecWork(draft_forwards=1, method=self.name,
                                              verify_tree_keys=tree_rows(self.tree)))
        self.typical = bool(params["typical_acceptance"])
        self._cond = None
        self._by_size: dict[int, float] = {}  # iteration_draft_s, a function of n alone
        if self.typical:
            lift = 0.2 if params["typical_lift"] is None else params["typical_lift"]
            cond = np.asarray(model.node_conditionals(self.tree), float)
            self._cond = 1.0 - (1.0 - cond) * (1.0 - lift)

    @property
    def max_verify_tokens(self) -> int:
        return self.tree.num_nodes + 1

    def heads_time(self, num_requests: int) -> float:
        """Every head's ResBlock and LM head over one token per request."""
        if num_requests == 0:
            return 0.0
        return self.num_heads * (self.prices.square_linear_s(num_requests)
                                 + self.prices.lm_head_s(num_requests)) \
            + self.prices.cost.forward_overhead_s(num_requests)  # the heads: one forward

    def expected_accepted(self) -> float | None:
        """Expected accepted tokens per iteration (bonus excluded)."""
        if self._cond is not None:
            return tree_expected_accepted(self.tree.parents,
                                          tree_node_probs(self.tree, self._cond))
        return self.acceptance.expected(self.tree)

    # ---------------------------------------------------------------- policy interface
    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        k = np.full(len(batch), self.tree.num_nodes, dtype=np.int64)
        return DraftPlan(num_draft=k, verify_tokens=k + 1,
                         draft_time_s=self.heads_time(len(batch)),
                         cpu_time_s=self.host(len(batch)), payload=self.tree)

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        if self._cond is None:
            return self.acceptance.sample(self.tree, batch, plan.num_draft, rng)
        out = np.zeros(len(batch), np.int64)
        on = plan.num_draft > 0
        if on.any():
            out[on] = walk_tree(self.tree, self._cond, rng, int(on.sum()))
        return out

    # ---------------------------------------------------------------- fast-forward
    def chain_stretch(self) -> ChainStretch:
        """Stretches of its tree (simulator/engine/chain_short.py): every request drafts
        the tree's nodes, the heads priced on the batch size, the acceptances drawn as
        ``accept`` draws them (``CarriedDraft``; nothing is re-read or learnt)."""
        return ChainStretch(self.tree.num_nodes, None, None, carried=self)

    def reread_tokens(self, request_ids: np.ndarray) -> np.ndarray:
        return np.ones(request_ids.size)  # the heads read the target's last hidden state only

    def iteration_draft_s(self, request_ids: np.ndarray, context: np.ndarray,
                          reread: np.ndarray, rng: np.random.Generator) -> float:
        n = context.size  # propose's draft_time_s + cpu_time_s, a function of n alone
        got = self._by_size.get(n)
        if got is None:
            if len(self._by_size) >= 1024:
                self._by_size.clear()
            got = self._by_size[n] = self.heads_time(n) + self.host(n)
        return got

    def sum_draft_s(self, n: int):
        """A function of ``n`` alone: ``iteration_draft_s``'s float whatever the sum."""
        got = self.iteration_draft_s(np.empty(0), np.empty(n), np.empty(0), None)
        return lambda s: got

    def batch_draws(self, n: int) -> BatchDraws | None:
        """The acceptance's walk where ``draw_accepted`` takes it (no head conditionals of
        the policy's own)."""
        return self.acceptance.batch_draws(self.tree, n) if self._cond is None else None

    def draw_accepted(self, rng: np.random.Generator, request_ids: np.ndarray,
                      context: np.ndarray) -> np.ndarray:
        if self._cond is None:
            walk = self.acceptance.tree_walk(self.tree)
            if walk is not None:  # sample_all's walk itself: lengths in [0, depth] already
                return walk(rng, request_ids.size)
        got = self.acceptance.sample_all(self.tree, context, request_ids, rng) \
            if self._cond is None else walk_tree(self.tree, self._cond, rng, request_ids.size)
        return np.minimum(np.maximum(np.asarray(got, np.int64), 0), self.tree.num_nodes)

    def observe_accepted(self, request_ids: np.ndarray, accepted: np.ndarray) -> None:
        """Nothing: the heads learn nothing from the outcome."""


def _probe(depth: int):
    """A branching tree ``depth`` deep: what the acceptance model must be able to score."""
    from simulator.speculation.token_tree import TokenTree
    return TokenTree.from_config([2] + [1] * (depth - 1))


def _published(spec: ModelSpec):
    """Medusa's published head accuracies for the heads' Vicuna size, if there are some."""
    size = re.search(r"(\d+b)$", spec.base_model)
    if size is None or size.group(1) not in MEDUSA_TOP_K:
        raise SpecsimError(f"no published head accuracies for {spec.name}",
                           field="acceptance.model",
                           fix="give the policy 'acceptance: {model: medusa, top_k: [...]}'")
    return MedusaAcceptance.published(size.group(1)), f"default: Medusa {size.group(1)} heads"
