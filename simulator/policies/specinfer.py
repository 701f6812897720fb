"""``specinfer``: token-tree speculative inference (Miao et al., SpecInfer, ASPLOS 2024).

Expansion-based (the default): the scenario's draft model (SpecInfer's SSM) expands a tree
from a configuration <k1, ..., kd> (default SpecInfer's <1,1,3,1,1,1,1,1>), one forward per
level over the nodes that get children.  Merge-based (``draft_models: [a, b, ...]``): several
small drafts each propose a chain of ``num_speculative_tokens`` and the chains are merged into
one tree; the drafts sit data-parallel on the replica's devices (tensor x pipeline), so
drafting takes the slowest device's time, not the sum.  The target verifies the tree in one
tree-attention forward of n + 1 tokens per request (the cost model reads each request's
prefix KV once); tensor/pipeline parallelism and offloading come from the scenario's
``parallelism``, where SpecInfer's gains are largest (fewer steps, fewer weight transfers).

Acceptance comes from the scenario's acceptance model when it has tree semantics (tree_topk,
sequoia, medusa, token_level), else from the policy's own ``acceptance:``.  ``verification``
(greedy, mss, naive) switches the algorithm where the model runs it (token_level:
``tree_method``; greedy needs temperature 0); parametric models carry their verification in
their numbers, so setting it there is an error.

A request is speculated only while the drafts can hold the tree's depth past it (``chain``'s
rule, vLLM's, with k = the tree depth: prompt + generated + depth < the shortest draft
max_context); the others decode normally.  Merged drafts share the target's vocabulary.

Simplified: merged chains are assumed to share no prefix (the most nodes a merge can give;
sharing only shrinks the tree, never changes the accepted path), and draft i's chain takes
rank i at the root -- with tree_topk or sequoia acceptance, rank i reads as "draft i is right
where drafts 0..i-1 were wrong", which is what SpecInfer's collective boost-tuning trains
for.  Expansion drafting splits the batch over the devices (one SSM copy on each); memory
counts every draft on every device (the memory hook does not see the parallelism).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from simulator.acceptance.tree_kinds import TreeAlgorithm
from simulator.cost.drafting import (
    chain_draft_pricer,
    chain_draft_time,
    draft_max_context,
    draft_prefill_mask,
    draft_prefill_time,
    forward_tokens,
    level_draft_pricer,
    level_draft_time,
    shard_slices,
    sharded_time,
)
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
from simulator.inputs.params import Param, given
from simulator.models.spec import check_shared_vocabulary, load_model
from simulator.policies.base import (
    PolicyBase,
    PolicyContext,
    batch_fits_draft,
    deployed,
    draft_spec,
    side_cost,
    spec_charge,
)
from simulator.policies.tree_acceptance import check_acceptance_param, resolve_acceptance
from simulator.speculation.token_tree import TokenTree
from simulator.speculation.tree_shapes import check_expansion_size, check_tree_size, parallel_chains

_SUM = np.add.reduce  # ndarray.sum without its method layer (exact on whole numbers)
SPECINFER_EXPANSION = (1, 1, 3, 1, 1, 1, 1, 1)  # SpecInfer section 6 (seed 000, section 4.2)
VERIFICATIONS = ("greedy", "mss", "naive")


class SpecInferSpeculation(PolicyBase, CarriedDraft):
    """Expansion- or merge-based token trees verified in one tree-attention forward."""

    draft_parallelism = "data"  # SpecInfer's SSMs: a whole copy per GPU, the batch split

    name = "specinfer"
    needs_draft_model = False  # merge-based trees name their own drafts
    PARAMS = {
        "expansion": Param("int_list", default=None, minimum=1, maximum=64,
                           aliases=("expansion_config",),
                           help="children per node at each depth <k1, ..., kd>"),
        "draft_models": Param("any", default=None,
                              help="merge-based: small drafts whose chains are merged"),
        "num_speculative_tokens": Param("int", default=4, minimum=1, maximum=64,
                                        aliases=("gamma",),
                                        help="merge-based: tokens each draft proposes"),
        "verification": Param("str", default=None, choices=VERIFICATIONS,
                              help="greedy, mss or naive (token_level acceptance only)"),
        "acceptance": Param("any", default=None,
                            help="this policy's own acceptance model (a mapping)"),
    }

    @classmethod
    def check_params(cls, out: dict, *, raw, source: str, prefix: str) -> None:
        drafts = out["draft_models"]
        if drafts is not None:
            if out["expansion"] is not None:
                raise SpecsimError("give 'expansion' (one draft expands a tree) or "
                                   "'draft_models' (several drafts' chains are merged), not "
                                   "both", source=source, field=prefix + "draft_models")
            if isinstance(drafts, str) or not isinstance(drafts, (list, tuple)) or not drafts \
                    or not all(isinstance(d, str) and d for d in drafts):
                raise SpecsimError("expected a non-empty list of model names", source=source,
                                   field=prefix + "draft_models",
                                   fix="e.g. [llama-68m, llama-160m]")
        if out["expansion"] is not None:
            check_expansion_size(out["expansion"], source=source, field=prefix + "expansion")
        check_acceptance_param(out, source, prefix)
        gamma = given(raw, cls.PARAMS, "num_speculative_tokens")
        if gamma and drafts is None:
            raise SpecsimError("only used with draft_models (merge-based trees)", source=source,
                               field=prefix + gamma,
                               fix="set the tree with 'expansion: [k1, k2, ...]' instead")

    @classmethod
    def memory_models(cls, params: dict, draft, target):
        """The drafts and their KV caches (all on every device: the conservative count)."""
        if params["draft_models"] is not None:
            specs = [_decoder(name, target) for name in params["draft_models"]]
            return specs, specs
        return ([draft], [draft]) if draft is not None else ([], [])

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        target = deployed(ctx.target_cost)
        self.devices = target.parallel.devices if target is not None else 1
        if params["draft_models"] is not None:
            specs = [_decoder(name, ctx.target_model) for name in params["draft_models"]]
            # SpecInfer's SSMs run data parallel, one whole copy per device
            self.draft_costs = [side_cost(ctx, spec, tensor_parallel=1) for spec in specs]
            gamma = params["num_speculative_tokens"]
            self.tree = check_tree_size(parallel_chains(len(self.draft_costs), gamma),
                                        "policy.draft_models")
            self.mode = "merge"
        else:
            if ctx.draft_cost is None:
                raise SpecsimError("expansion-based specinfer needs a draft model", field="draft",
                                   fix="set 'draft: llama-68m' (or another small decoder), or "
                                       "give the policy draft_models: [...]")
            self.draft_costs = [ctx.draft_cost]
            specs = [draft_spec(ctx)]
            self.tree = TokenTree.from_config(params["expansion"] or SPECINFER_EXPANSION)
            self.mode = "expansion"
        self.draft_max_context = draft_max_context(*specs)
        self.acceptance = resolve_acceptance(params, ctx, self.tree, policy=self.name)
        if params["verification"] is not None:
            self.acceptance.model = _with_verification(self.acceptance.model,
                                                       params["verification"])
        model = self.acceptance.model
        self.verification = params["verification"] or (
            model.tree_method if isinstance(model, TreeAlgorithm) else "as measured")
        self._levels = forward_tokens(self.tree)
        self._pricers: dict = {}  # draft_time's closed form, by batch size (None: none)
        self._sums: dict = {}  # of those, the ones of the context sum alone (sum_draft_s)
        depth = self.tree.max_depth  # one draft forward a level; a tree where it branches
        self.host = spec_charge(ctx, SpecWork(
            draft_forwards=depth, tree_nodes=self.tree.num_nodes,
            tree_levels=depth if self.tree.num_nodes > depth else 0,
            verify_tree_keys=tree_rows(self.tree)))

    @property
    def max_verify_tokens(self) -> int:
        return self.tree.num_nodes + 1

    # ---------------------------------------------------------------- pricing
    def _device_drafts(self) -> list[list[int]]:
        """Merge-based drafts placed round-robin on the replica's devices."""
        return [list(range(d, len(self.draft_costs), self.devices))
                for d in range(min(self.devices, len(self.draft_costs)))]

    def draft_time(self, context: np.ndarray) -> float:
        """GPU time to draft the tree for requests at ``context``."""
        if context.dtype.kind in "iu" and context.size:  # whole numbers: the closed forms
            price = self._pricers.get(context.size, self._pricers)
            if price is self._pricers:
                price = self._pricers[context.size] = self._draft_pricer(context.size)
            if price is not None:
                return price(context)
        if self.mode == "expansion":
            cost = self.draft_costs[0]
            return sharded_time(self.devices, context.size,
                                lambda s: level_draft_time(cost, context[s], self._levels))
        gamma = self.tree.max_depth
        k = np.full(context.size, gamma, np.int64)
        return max(sum(chain_draft_time(self.draft_costs[i], context, k) for i in group)
                   for group in self._device_drafts())

    def _draft_pricer(self, n: int):
        """``draft_time`` of ``n`` requests as a function of their contexts (ints) through
        each shard's (or draft's) closed form at its context sum: bitwise the loop's
        (``level_draft_pricer``, ``chain_draft_pricer``), the same shards, the same order of
        additions and maxima; None where a forward has no closed form."""
        if len(self._pricers) >= 1024:
            self._pricers.clear()
            self._sums.clear()
        if self.mode == "merge":
            drafts = [chain_draft_pricer(cost, n, self.tree.max_depth)
                      for cost in self.draft_costs]
            if any(d is None for d in drafts):
                return None
            groups = [[drafts[i] for i in group] for group in self._device_drafts()]

            def by_sum(s: float) -> float:
                return max(sum(d(s) for d in group) for group in groups)
            self._sums[n] = by_sum
            return lambda ctx: by_sum(float(int(_SUM(ctx))))
        shards = shard_slices(self.devices, n)
        prices = [level_draft_pricer(self.draft_costs[0], stop - start, self._levels)
                  for start, stop in shards]
        if any(p is None for p in prices):
            return None
        if len(shards) == 1:
            price = self._sums[n] = prices[0]
            if n <= 64:  # a few integers sum faster as a list than by a reduction's call
                return lambda ctx: price(float(sum(ctx.tolist())))
            return lambda ctx: price(float(int(_SUM(ctx))))
        return lambda ctx: max(price(float(int(_SUM(ctx[start:stop]))))
                               for price, (start, stop) in zip(prices, shards))

    def expected_accepted(self) -> float | None:
        """Expected accepted tokens per iteration (bonus excluded), where a closed form exists."""
        return self.acceptance.expected(self.tree)

    # ---------------------------------------------------------------- policy interface
    def speculable(self, batch: BatchView) -> np.ndarray:
        """Requests the drafts can grow the tree on (the others decode normally)."""
        return batch_fits_draft(batch, self.tree.max_depth, self.draft_max_context)

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        on = self.speculable(batch)
        k = np.where(on, self.tree.num_nodes, 0).astype(np.int64)
        return DraftPlan(num_draft=k, verify_tokens=k + 1,
                         draft_time_s=self.draft_time(batch.context[on]),
                         cpu_time_s=self.host(int(np.count_nonzero(on))), payload=self.tree)

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        return self.acceptance.sample(self.tree, batch, plan.num_draft, rng)

    # ---------------------------------------------------------------- fast-forward
    def chain_stretch(self) -> ChainStretch:
        """Stretches of its tree (simulator/engine/chain_short.py, ``CarriedDraft``): every
        request drafts the tree's nodes while prompt + generated + depth < the drafts'
        context, i.e. + nodes < that context + nodes - depth (the stretch's rule)."""
        limit = self.draft_max_context
        nodes = self.tree.num_nodes
        return ChainStretch(nodes, None if limit is None else
                            limit + nodes - self.tree.max_depth, None, carried=self)

    def reread_tokens(self, request_ids: np.ndarray) -> np.ndarray:
        return np.ones(request_ids.size)  # the drafts keep their own KV: nothing re-read

    def iteration_draft_s(self, request_ids: np.ndarray, context: np.ndarray,
                          reread: np.ndarray, rng: np.random.Generator) -> float:
        return self.draft_time(context) + self.host(context.size)

    def sum_draft_s(self, n: int):
        """One shard's (or the merged drafts') closed form at the context sum, plus the
        host's charge: ``iteration_draft_s``'s two terms, the same floats."""
        if n not in self._pricers:
            self._pricers[n] = self._draft_pricer(n)
        form, host = self._sums.get(n), self.host(n)
        return None if form is None else (lambda s: form(float(s)) + host)

    def batch_draws(self, n: int) -> BatchDraws | None:
        return self.acceptance.batch_draws(self.tree, n)

    def draw_accepted(self, rng: np.random.Generator, request_ids: np.ndarray,
                      context: np.ndarray) -> np.ndarray:
        walk = self.acceptance.tree_walk(self.tree)
        if walk is not None:  # sample_all's walk itself: lengths in [0, depth] already
            return walk(rng, request_ids.size)
        got = self.acceptance.sample_all(self.tree, context, request_ids, rng)
        return np.minimum(np.maximum(np.asarray(got, np.int64), 0), self.tree.num_nodes)

    def observe_accepted(self, request_ids: np.ndarray, accepted: np.ndarray) -> None:
        """Nothing: the drafts learn nothing from the outcome."""

    def prefill_time(self, new_tokens: np.ndarray, context: np.ndarray) -> float:
        if new_tokens.size == 1 and self.mode == "expansion":
            # one chunk (the usual): one shard, draft_prefill_mask's test, then the draft's
            # closed form where one applies (bitwise its step_time)
            return draft_prefill_time(self.draft_costs[0], new_tokens, context,
                                      self.tree.max_depth, self.draft_max_context)
        if self.draft_max_context is not None and new_tokens.size:
            keep = draft_prefill_mask(new_tokens, context, self.tree.max_depth,
                                      self.draft_max_context)
            new_tokens, context = new_tokens[keep], context[keep]
        if not new_tokens.size:
            return 0.0
        no_logits = np.zeros(new_tokens.size)
        if self.mode == "expansion":
            cost = self.draft_costs[0]
            return sharded_time(self.devices, new_tokens.size, lambda s: cost.step_time(
                new_tokens[s], context[s], no_logits[s]))
        return max(sum(self.draft_costs[i].step_time(new_tokens, context, no_logits)
                       for i in group) for group in self._device_drafts())


def _decoder(name: str, target=None):
    spec = load_model(name)
    if spec.kind != "decoder":
        raise SpecsimError(f"{name} is a {spec.kind} model, not a draft decoder",
                           field="policy.draft_models", fix="name small decoder models")
    if target is not None:
        check_shared_vocabulary(spec, target, field="policy.draft_models")
    return spec


def _with_verification(model, method: str):
    """The acceptance model running ``method``; only models that run the algorithm can."""
    if not isinstance(model, TreeAlgorithm):
        raise SpecsimError(f"acceptance model {model.name!r} fixes acceptance by its numbers, "
                           "so the verification method cannot change it",
                           field="policy.verification",
                           fix="remove it, or use acceptance model token_level")
    greedy = model.temperature == 0.0
    if (method == "greedy") != greedy:
        raise SpecsimError(f"{method} verification with acceptance temperature "
                           f"{model.temperature}", field="policy.verification",
                           fix="greedy verification goes with temperature 0, mss and naive "
                               "with temperature > 0")
    return model if greedy else dataclasses.replace(model, tree_method=method)
