"""Kit: drafting with a layer that runs inside the target's engine step on the target's
hidden states -- EAGLE's layer (``eagle``, ``eagle2``), EAGLE-3's (``eagle3``) and a model's
own multi-token-prediction modules (``mtp``).

All of them work the same way each iteration: the first forward re-reads the tokens the
target accepted last time (their hidden states come from the target's verification, and
they are not yet in the drafter's own one-layer KV cache), then one forward per tree level
(one token per request for a chain), each through an LM head.  What differs is the layer's
shapes and the small linears around it, which a policy prices in ``_extra_s``.  vLLM's
``EagleProposer`` (vllm/v1/spec_decode/eagle.py) runs EAGLE, EAGLE-3 and MTP drafts this
way.

``FeatureDraft`` is that shared machinery; a policy sets ``spec`` (its ModelSpec, whose
reduced ``draft_vocab_size`` and fused ``feature_layers`` are engine host work too),
``cost`` (the layer's CostModel), ``prices`` (its ``OperatorPrices``), ``tree``,
``levels``, ``logits`` and ``acceptance`` (a ``PolicyAcceptance``), and says what its
extra linears cost.

The first forward is the engine's draft extend; where the engine runs it outside any CUDA
graph (SGLang before PR #6606: ``SpecHost.draft_extend_eager``, engines.yaml) it is priced by
the same layer's cost model in eager mode (``extend_cost``), as are the layer's prompt
chunks, which go through the same extend path.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from simulator.cost.cost_model import CostModel
from simulator.cost.dp_attention import cost_model
from simulator.cost.drafting import level_draft_time
from simulator.cost.parallelism import Parallelism
from simulator.cost.spec_host import tree_rows
from simulator.cost.spec_work import SpecWork
from simulator.engine.plan import BatchView, CarriedDraft, ChainStretch, DraftPlan, closed_forms
from simulator.inputs.errors import SpecsimError
from simulator.policies.base import (
    PolicyBase,
    PolicyContext,
    deployed,
    policy_hardware,
    spec_charge,
    spec_execution,
)
from simulator.policies.feature_rows import (few_price, first_rows, later_rows, later_times,
                                             one_chunk_s)
from simulator.policies.tree_acceptance import (
    PolicyAcceptance,
    exclusive_table,
    model_width,
    resolve_acceptance,
)
from simulator.speculation.token_tree import TokenTree
from simulator.speculation.tree_shapes import check_tree_size, dynamic_tree

_SUM = np.add.reduce  # ndarray.sum without its method layer (the same pairwise sum)
_MAX = np.maximum.reduce
_FEW = 8  # up to this many requests the first forward is priced on Python numbers
_FEW_ROWS = 32  # up to this many iterations draft_rows adds its forwards on Python numbers


class FeatureDraft(PolicyBase, CarriedDraft):
    """A one-layer drafter on the target's features (see the module docstring)."""

    # EAGLE-2's tree (and EAGLE-3's with topk > 1) is rebuilt and reranked every iteration
    reranks: bool = False

    def _start(self, ctx: PolicyContext) -> None:
        self._emitted = np.ones(len(ctx.workload) if ctx.workload is not None else 0)
        self._ctx = ctx
        self._host = None
        self._first = extend_cost(self.cost)  # the draft extend's pricer (eager or not)
        self._first_forms = closed_forms(self._first)
        self._later: dict = {}  # iteration_draft_s' pricers, by batch size
        self._extras: dict = {}  # and its _extra_s, by (first forward's tokens, batch size)
        self._pricers: dict = {}  # draft_rows' first forwards' uniform pricers (feature_rows)
        self._few_uniform: dict = {}  # _first_few's pricers of alike requests, by (n, tokens)
        self._few_prices: dict = {}  # few_draft_s' pricers, by batch size (at most _FEW)
        self._counts = None  # draw_accepted's chain counter, once the model is bound

    @property
    def host(self):
        """The engine's host work of one iteration (built on first use: the subclass sets
        its tree after ``_start``)."""
        if self._host is None:
            forwards, s = len(self.levels), self.spec
            tree = self.tree.num_nodes > self.tree.max_depth
            # a tree's later forwards draft levels[j] tokens a request, each over the j
            # drafted tokens of its branch (SGLang's draft step j - 1: decode_length j)
            drafted = tuple((int(self.levels[j]), j) for j in range(1, forwards)) \
                if tree else ()
            self._host = spec_charge(self._ctx, SpecWork(
                draft_forwards=forwards, tree_levels=forwards if tree else 0,
                tree_nodes=self.tree.num_nodes, rerank=tree and self.reranks,
                vocab_map=0 < s.draft_vocab_size < s.vocab_size,
                feature_layers=s.feature_layers, verify_tree_keys=tree_rows(self.tree),
                draft_tree=drafted, method=self.name), draft=self.cost)
        return self._host

    def _extra_s(self, first_tokens: float, later_tokens: list[float]) -> float:
        """Seconds of the policy's linears around the layer: ``first_tokens`` in the first
        forward (summed over requests), ``later_tokens[j]`` in forward j + 1."""
        return 0.0

    def draft_time(self, context: np.ndarray, reread: np.ndarray | None = None) -> float:
        """The drafter's forwards for one iteration (``reread``: tokens accepted last time)."""
        n = context.size
        if n == 0:
            return 0.0
        first = np.ones(n) if reread is None else np.maximum(reread, 1.0)
        total = level_draft_time(self.cost, context, self.levels, logits=self.logits,
                                 first_tokens=first, first_cost=self._first)
        return total + self._extra_s(first.sum(), [n * t for t in self.levels[1:]])

    def _reread(self, request_ids: np.ndarray) -> np.ndarray:
        try:  # the workload's ids are in range: no probe of the largest an iteration
            return self._emitted[request_ids]
        except IndexError:
            return self._grow(request_ids)[request_ids]

    def _grow(self, request_ids: np.ndarray) -> np.ndarray:
        grown = np.ones(int(_MAX(request_ids)) + 1)  # room for ids beyond the workload's
        grown[:self._emitted.size] = self._emitted
        self._emitted = grown
        return grown

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
                         cpu_time_s=self.host(len(batch)), payload=self.tree)

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        return self.acceptance.sample(self.tree, batch, plan.num_draft, rng)

    def observe(self, plan, batch, accepted, step_time_s) -> None:
        self.observe_accepted(batch.request_ids, accepted)

    # ---------------------------------------------------------------- fast-forward
    def chain_stretch(self) -> ChainStretch:
        """Stretches of its chain or tree (simulator/engine/chain_short.py): every request
        drafts the tree's nodes, its draft priced from the contexts and the tokens each
        request re-reads, its acceptances drawn as ``accept`` draws them (``CarriedDraft``)."""
        return ChainStretch(self.tree.num_nodes, None, None, carried=self)

    def reread_tokens(self, request_ids: np.ndarray) -> np.ndarray:
        return self._reread(request_ids)

    def draw_accepted(self, rng: np.random.Generator, request_ids: np.ndarray,
                      context: np.ndarray) -> np.ndarray:
        counts = self._counts
        if counts is None and self.tree.is_chain:  # a context-free chain: its counts from
            counts = self._counts = self.acceptance.chain_counter(  # the same uniforms
                self.tree.num_nodes)
        if counts is not None:
            return counts(rng.random(request_ids.size), request_ids)
        got = np.asarray(self.acceptance.sample_all(self.tree, context, request_ids, rng),
                         np.int64)
        return np.minimum(np.maximum(got, 0), self.tree.num_nodes)

    def iteration_draft_s(self, request_ids: np.ndarray, context: np.ndarray,
                          reread: np.ndarray | list, rng: np.random.Generator) -> float:
        """``draft_time`` + the host work, on the same arrays (``level_draft_time``'s first
        forward, on the tokens re-read), its later forwards (uniform: one token a request
        over contexts summing to the batch's + n x offset) priced by the layer's closed form
        as a function of that sum, as ``step_time`` prices them (bitwise: the same memoised
        form, the same whole-number sum)."""
        n = context.size
        memo = self._later.get(n, self._later)
        if memo is self._later:
            memo = self._later[n] = self._later_pricers(n)
        if memo is None:
            return self.draft_time(context.astype(np.float64), reread) + self.host(n)
        logits, later = memo
        got = None if n > _FEW else self._first_few(
            reread.tolist() if isinstance(reread, np.ndarray) else reread, context.tolist())
        if got is None:
            first = np.maximum(reread, 1.0)  # >= 1: level_draft_time's new tokens, bitwise
            start = np.maximum(context.astype(np.float64) - (first - 1.0), 0.0)
            got = self._first.step_time(first, start, logits), first.sum(), \
                float(int(_SUM(context)))
        total = 0.0 + got[0]
        s = got[2]
        for offset, price, _, _ in later:
            total += price(s + offset)
        return total + self._linears_s(got[1], n) + self.host(n)

    def few_draft_s(self, n: int):
        """``iteration_draft_s`` of ``n`` (up to ``_FEW``) requests on lists where the layer
        has closed forms: the same memoised pricers and the same additions (bitwise)."""
        if n > _FEW or self._first_forms is None:
            return None
        price = self._few_prices.get(n, self._few_prices)
        if price is self._few_prices:  # kept by batch size: a pure function of its lists
            memo = self._later.get(n, self._later)
            if memo is self._later:
                memo = self._later[n] = self._later_pricers(n)
            price = self._few_prices[n] = None if memo is None else few_price(
                (memo[1], closed_forms(self.cost)), self.host(n), self._linears_s,
                self._first_few, n, self._first_forms, float(int(self.logits[0])))
        return price

    def _linears_s(self, tokens: float, n: int) -> float:
        """``_extra_s`` of a first forward of ``tokens`` new tokens in all over ``n``
        requests, memoised: the linears' seconds are a function of (tokens, n) alone."""
        extra = self._extras.get((tokens, n))
        if extra is None:
            if len(self._extras) >= 4096:
                self._extras.clear()
            extra = self._extras[tokens, n] = self._extra_s(
                tokens, [n * t for t in self.levels[1:]])
        return extra

    def _first_few(self, reread: list, context: list):
        """(the first forward's seconds, its new tokens in all, the contexts' sum) of a few
        requests at whole-number ``context`` on Python numbers: the layer's
        ``few_step_time`` over the same new tokens (max(re-read, 1)) and starts
        (max(context - (new - 1), 0)) as ``draft_time`` hands ``step_time``, bitwise its
        float; the LM head's tokens as ints (their sum exact, as numpy's of the logits
        array); None where the layer declares no closed forms."""
        forms = self._first_forms
        if forms is None:
            return None
        first = [max(float(r), 1.0) for r in reread]
        n, t = len(first), first[0] if first else 0.5
        # alike, whole counts over whole (int) contexts: the closed form at the starts' sum
        if first.count(t) == n and t.is_integer() and type(context[0]) is int:
            key = (n, t)
            price = self._few_uniform.get(key, self._few_uniform)
            if price is self._few_uniform:
                if len(self._few_uniform) >= 1024:
                    self._few_uniform.clear()
                price = self._few_uniform[key] = forms.few_uniform_pricer(
                    n, t, float(n * int(self.logits[0])))
            if price is not None:  # whole numbers: the sum exact in any order
                return price(float(sum([max(c - (t - 1.0), 0.0) for c in context]))), \
                    np.float64(sum(first)), float(int(sum(context)))
        start = [max(c - (t - 1.0), 0.0) for c, t in zip(context, first)]
        head = int(self.logits[0])
        got = forms.few_mixed_time(first, start, float(n * head)) if n and all(
            map(float.is_integer, first)) and type(context[0]) is int else None
        if got is None:
            got = forms.few_step_time(first, start, [head] * n)
        return got, np.float64(sum(first)), \
            float(int(sum(context)))  # whole numbers: exact in any order, as _SUM's

    def chain_counts(self):
        """A chain's counts from its uniforms (``draw_accepted``'s counter), once its
        acceptance model is bound (its first draw binds it); None for a tree."""
        if self._counts is None and self.tree.is_chain:
            self._counts = self.acceptance.chain_counter(self.tree.num_nodes)
        return self._counts

    def draft_rows(self, request_ids: np.ndarray, context: np.ndarray,
                   reread: np.ndarray) -> np.ndarray | None:
        """``iteration_draft_s`` of K iterations at once: the first forwards by the layer's
        closed forms (``rows_step_times``; a few requests' rows by ``first_rows``), the
        later ones by its closed form at each row's context sum (the scalar pricers'
        floats), the linears from the same memo, added in the same order, elementwise."""
        k, n = context.shape
        memo = self._later.get(n, self._later)
        if memo is self._later:
            memo = self._later[n] = self._later_pricers(n)
        forms = closed_forms(self._first)
        if memo is None or forms is None:
            return None
        logits, later = memo
        if k <= _FEW_ROWS and n <= _FEW:  # a few rows of a few requests: Python numbers
            firsts, sums, tokens = first_rows(forms, self._pricers, context, reread, logits)
            return np.array(later_rows(firsts, sums, tokens, later, self._linears_s, n,
                                       self.host(n)))
        first = np.maximum(reread, 1.0)
        start = np.maximum(context.astype(np.float64) - (first - 1.0), 0.0)
        total = 0.0 + forms.rows_step_times(first, start, logits)
        if k <= _FEW_ROWS:
            return np.array(later_rows(total.tolist(), _SUM(context, axis=1).tolist(),
                                       _SUM(first, axis=1).tolist(), later, self._linears_s,
                                       n, self.host(n)))
        s = _SUM(context, axis=1).astype(np.float64)  # whole numbers: exact
        for times in later_times(closed_forms(self.cost), n, s, later):
            total = total + times
        extras = [self._linears_s(tokens, n) for tokens in _SUM(first, axis=1).tolist()]
        return total + np.array(extras) + self.host(n)

    def _later_pricers(self, n: int) -> tuple | None:
        """(the first forward's logits per request; (n x the tokens before it, its price as a
        function of the context sum, its tokens a request and its logits in all) of every
        later forward); None where one has no closed form."""
        forms, out, offset = closed_forms(self.cost), [], 0.0
        if len(self._later) >= 1024:
            self._later.clear()
        for t, lg in zip(self.levels[1:], self.logits[1:]):
            offset += float(self.levels[len(out)])
            price = None if forms is None or t < 1 else \
                forms.uniform_pricer(n, int(t), n * int(lg))
            if price is None:
                return None
            out.append((float(n) * offset, price, int(t), n * int(lg)))
        return np.full(n, float(self.logits[0])), out

    def observe_accepted(self, request_ids: np.ndarray, accepted: np.ndarray) -> None:
        emitted = np.asarray(accepted) + 1.0
        try:  # (numpy checks every index before it writes)
            self._emitted[request_ids] = emitted
        except IndexError:
            self._grow(request_ids)[request_ids] = emitted

    def prefill_time(self, new_tokens: np.ndarray, context: np.ndarray) -> float:
        """The layer fills its own KV over every prompt chunk (no logits)."""
        if not new_tokens.size:
            return 0.0
        first = None if self._first_forms is None or new_tokens.size != 1 else \
            one_chunk_s(self._first_forms, new_tokens, context)  # the usual: one chunk
        if first is None:
            first = self._first.step_time(new_tokens, context, np.zeros(new_tokens.size))
        return first + self._extra_s(float(new_tokens.sum()), [])


def extend_cost(cost):
    """The pricer of the layer's draft extend (the forward over the tokens accepted last
    time, and the prompt chunks): ``cost`` itself, or, where the engine launches that forward
    outside any CUDA graph (``SpecHost.draft_extend_eager``), the same model on the same
    deployment with every kernel launched eagerly."""
    model = deployed(cost)
    if model is None:
        return cost
    execution = model.execution
    if not (execution.spec.draft_extend_eager and execution.cuda_graphs):
        return cost
    return cost_model(model.hardware, model.model, model.parallel, host=model.host,
                      execution=dataclasses.replace(execution, cuda_graphs=False))


def module_cost(ctx: PolicyContext, spec) -> CostModel:
    """The cost model of a drafting module built from the target's own layers (MTP): sharded
    as the target is (its tensor parallel degree, or the draft's where set, and whatever
    else the target's Parallelism says, e.g. expert parallelism), one pipeline stage, no
    offloading; forwards inside the target's step (graph replay, no host time of their own)."""
    target = deployed(ctx.target_cost)
    parallel = target.parallel if target is not None else Parallelism()
    change = {"pipeline_parallel": 1, "micro_batches": 1, "offload_fraction": 0.0,
              "tensor_parallel": parallel.draft_tp, "draft_tensor_parallel": None}
    try:
        own = dataclasses.replace(parallel, **change)
    except SpecsimError:  # another degree that needs the target's TP: the module unsplit by it
        fields = {f.name for f in dataclasses.fields(parallel)}
        own = dataclasses.replace(parallel, **change, **{
            f: 1 for f in ("expert_parallel",) if f in fields})
    execution = spec_execution(ctx)
    separate = execution is not None and not execution.captured_draft_loop
    return cost_model(policy_hardware(ctx), spec, own, execution=execution, host=separate)


# ---------------------------------------------------------------- EAGLE-2's dynamic tree
def check_dynamic_tree(steps: int, topk: int, draft_tokens: int, *, source: str,
                       prefix: str) -> None:
    """SGLang's knobs must describe a tree: ``draft_tokens - 1`` nodes reach depth ``steps``
    and are no more than ``steps`` forwards of top-``topk`` can propose."""
    nodes = draft_tokens - 1
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


def dynamic_draft_tree(params: dict, ctx: PolicyContext, steps: int, topk: int,
                       draft_tokens: int, *, policy: str) -> tuple[PolicyAcceptance, TokenTree]:
    """EAGLE-2's tree: expand the ``topk`` best nodes for ``steps`` forwards, keep the best
    ``draft_tokens - 1`` by path probability (the acceptance model's per-node rates)."""
    probe = TokenTree.from_config([2] + [1] * (steps - 1))
    acceptance = resolve_acceptance(params, ctx, probe, policy=policy, conditionals=True)
    width = model_width(acceptance.model, topk)
    if width < topk:
        raise SpecsimError(f"the acceptance model lists {width} child ranks, fewer than "
                           f"topk {topk}", field="policy.speculative_eagle_topk",
                           fix=f"use speculative_eagle_topk <= {width}, or list more ranks")
    table = exclusive_table(acceptance.model, steps, topk, field="policy.acceptance")
    tree = check_tree_size(dynamic_tree(table, steps, topk, draft_tokens - 1),
                           "policy.speculative_num_draft_tokens")
    acceptance.check_fits(tree)
    return acceptance, tree
