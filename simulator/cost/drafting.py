"""What drafting costs: the one pricer of draft forwards, used by the policies and by
analytic planning alike.

A chain of gamma draft tokens is gamma sequential draft forwards of one token per request
(``chain_draft_time``); a tree is one forward per level over that level's nodes
(``level_draft_time``); a draft model prefills its own KV for every prompt chunk it can
later speculate on (``draft_prefill_time``).  A draft model never runs past its own
``max_context`` (vLLM's rule, ``fits_draft_context``).

Trees (DESIGN.md section 5): a drafter builds a tree one forward per level; forward j
carries, per request, the nodes of level j-1 that get children (the root alone first),
attending to the prefix plus the nodes drafted before it.  The target then verifies n nodes
+ 1 in one forward, which the engine prices (tree attention: each request's prefix KV is
read once).  Medusa heads and EAGLE's fusing fc are priced from the cost model's own
operators of a one-layer model of the same shapes (``OperatorPrices``).
"""
from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Sequence

import numpy as np

from simulator.cost.closed_forms import ClosedForms
from simulator.cost.linear_op import linear_op_s
from simulator.cost.scalar_forms import bare_terms, round_pricer
from simulator.engine.plan import closed_forms
from simulator.speculation.token_tree import TokenTree

if TYPE_CHECKING:
    from simulator.models.spec import ModelSpec


# ---------------------------------------------------------------- drafting cost
def forward_tokens(tree: TokenTree) -> np.ndarray:
    """Tokens each sequential drafting forward carries per request (the root's forward first)."""
    has_child = np.zeros(tree.num_nodes, bool)
    has_child[tree.parents[tree.parents >= 0]] = True
    per_level = np.bincount(tree.depth[has_child], minlength=tree.max_depth)
    return np.concatenate(([1], per_level[1:tree.max_depth])).astype(np.int64)


def level_draft_time(cost, context: np.ndarray, tokens: Sequence[int], *,
                     logits: Sequence[int] | None = None,
                     first_tokens: np.ndarray | None = None, first_cost=None) -> float:
    """Seconds of sequential draft forwards over the batch.

    Forward j carries ``tokens[j]`` tokens per request (``first_tokens`` per request for
    j = 0 when given: EAGLE re-reads the tokens the target accepted) and computes
    ``logits[j]`` distributions per request; its context is the prefix plus every token
    the forwards before it added.  ``tokens = [1] * g`` is a draft model's chain of g.
    ``first_cost`` prices forward 0 where the engine runs it otherwise than the rest
    (SGLang's eager draft extend); by default ``cost`` prices all of them.
    """
    ctx = np.asarray(context, dtype=np.float64)
    if ctx.size == 0 or len(tokens) == 0:
        return 0.0
    logits = tokens if logits is None else logits
    forms = closed_forms(cost)
    if forms is not None and first_tokens is None and _whole(ctx):
        total = _uniform_levels(forms, ctx, tokens, logits)
        if total is not None:
            return total
    total, offset = 0.0, np.zeros(ctx.size)
    for j, (t, lg) in enumerate(zip(tokens, logits)):
        new = np.full(ctx.size, float(t))
        start = ctx + offset
        if j == 0 and first_tokens is not None:
            new = np.maximum(np.asarray(first_tokens, np.float64), 1.0)
            start = np.maximum(ctx - (new - 1.0), 0.0)  # those tokens are not in its KV yet
        pricer = first_cost if j == 0 and first_cost is not None else cost
        total += pricer.step_time(new, start, np.full(ctx.size, float(lg)))
        offset += float(t)
    return total


def _whole(ctx: np.ndarray) -> bool:
    """Whole-number contexts (their sums are exact in any order)."""
    return bool((ctx == np.floor(ctx)).all())


def _uniform_levels(forms, ctx: np.ndarray, tokens: Sequence[int],
                    logits: Sequence[int]) -> float | None:
    """``level_draft_time``'s loop without a first forward of its own, on whole numbers:
    forward j is a uniform batch of ``tokens[j]`` new tokens a request at contexts ``ctx``
    + the tokens before it, whose ``step_time`` is the closed form at the contexts' sum
    (exact, as ``step_time``'s) where one applies, ``step_time`` itself elsewhere; None
    where a count is not a whole number (at least one token): the sums would not be exact."""
    n, ctx_sum = ctx.size, float(np.add.reduce(ctx))
    total, offset = 0.0, 0.0
    for t, lg in zip(tokens, logits):
        u, g = float(t), float(lg)
        if u < 1.0 or not u.is_integer() or not g.is_integer():
            return None
        x = forms.uniform_step_time(n, u, ctx_sum + n * offset, n * g)
        if x is None:
            x = forms.step_time(np.full(n, u), ctx + offset, np.full(n, g))
        total += x
        offset += u
    return total


def level_draft_pricer(cost, n: int, tokens: Sequence[int],
                       logits: Sequence[int] | None = None):
    """``level_draft_time`` of ``n`` requests (no first forward of their own, whole-number
    contexts) as a function of their context sum alone, on Python numbers: bitwise
    ``_uniform_levels``' closed forms (each forward's ``uniform_pricer`` at the sum + n x
    the tokens before it, added left to right from 0.0); None where a forward has none."""
    forms = closed_forms(cost)
    if forms is None or n < 1 or len(tokens) == 0:
        return None
    logits = tokens if logits is None else logits
    parts, shapes, offset = [], [], 0.0
    for t, lg in zip(tokens, logits):
        u, g = float(t), float(lg)
        if u < 1.0 or not u.is_integer() or not g.is_integer():
            return None
        price = forms.uniform_pricer(n, u, n * g)
        if price is None:
            return None
        parts.append((n * offset, price))
        shapes.append((n * offset, u, n * g))
        offset += u
    # the same forms' terms in one loop, no call a forward (scalar_forms.sum_pricer)
    whole = forms.uniform_sum_pricer(n, shapes) if isinstance(forms, ClosedForms) else None
    if whole is not None:
        return partial(whole, 0.0)  # whole(0.0, ctx_sum), no Python frame between

    def draft(ctx_sum: float) -> float:
        total = 0.0
        for before, price in parts:
            total += price(ctx_sum + before)
        return total
    return draft


_SHARDS: dict[tuple[int, int], list[np.ndarray]] = {}


def sharded_time(devices: int, size: int, price) -> float:
    """Data parallel over ``devices``: the batch split evenly, the slowest shard's time."""
    if size == 0:
        return 0.0
    return max(price(s) for s in _shards(devices, size))


def shard_slices(devices: int, size: int) -> list[tuple[int, int]]:
    """``sharded_time``'s shards of a batch of ``size`` >= 1 as (start, stop): each a run
    of consecutive positions (np.array_split's)."""
    return [(int(s[0]), int(s[-1]) + 1) for s in _shards(devices, size)]


def _shards(devices: int, size: int) -> list[np.ndarray]:
    key = (devices, size)
    shards = _SHARDS.get(key)
    if shards is None:  # np.array_split's even split, a pure function of the two sizes
        shards = [s for s in np.array_split(np.arange(size), min(max(devices, 1), size))
                  if s.size]
        if len(_SHARDS) < 4096:
            _SHARDS[key] = shards
    return shards


class OperatorPrices:
    """Per-layer seconds of a model's linear operators, from ``cost.breakdown`` (cached); the
    square linear from its o_proj alone where ``linear_op_s`` prices it (bitwise the same:
    a prompt chunk's token count rarely repeats, and a whole breakdown a miss is most of a
    MoE drafter's run)."""

    def __init__(self, cost) -> None:
        self.cost = cost
        m = cost.model
        self._square = m.hidden_size / m.q_size  # o_proj is q x h; a square h x h layer
        self._cache: dict[int, tuple[float, float]] = {}
        self._squares: dict[int, float] = {}

    def _ops(self, tokens: int) -> tuple[float, float]:
        hit = self._cache.get(tokens)
        if hit is None:
            t = np.array([float(tokens)])
            ops = {op.name: op.time_s for op in
                   self.cost.breakdown(t, np.zeros(1), logits_tokens=t).ops}
            layers = self.cost.model.num_layers
            hit = (ops["o_proj"] / layers * self._square, ops["lm_head"])
            if len(self._cache) > 1024:
                self._cache.clear()
            self._cache[tokens] = hit
        return hit

    def square_linear_s(self, tokens: int) -> float:
        """An h x h linear over ``tokens`` tokens (Medusa's ResBlock; half of EAGLE's fc)."""
        if tokens <= 0:
            return 0.0
        tokens = int(tokens)
        hit = self._squares.get(tokens)
        if hit is None:
            o_proj = linear_op_s(self.cost, "o_proj", tokens)
            hit = self._ops(tokens)[0] if o_proj is None else \
                o_proj / self.cost.model.num_layers * self._square
            if len(self._squares) > 1024:
                self._squares.clear()
            self._squares[tokens] = hit
        return hit

    def lm_head_s(self, tokens: int) -> float:
        """An h x vocab linear over ``tokens`` tokens (an LM head)."""
        return self._ops(int(tokens))[1] if tokens > 0 else 0.0


def chain_draft_time(draft_cost, context: np.ndarray, num_draft: np.ndarray) -> float:
    """Time of max(num_draft) draft forwards; forward j carries the requests drafting > j.

    The one chain-draft pricer: the chain, staged, SpecInfer and adaptive policies charge it,
    and the analytic model (``specsim estimate``, sweeps, gamma maps) prices with it, so an
    analytic point and a simulated step of the same shape cost the same to the last bit.
    When every request drafts the same k it is the cost model's one-pass closed form
    (``CostModel.chain_decode_time``); otherwise one forward per draft position."""
    if not num_draft.size:
        return 0.0
    k_max = int(num_draft.max())
    if int(num_draft.min()) == k_max:  # the common case: one vectorised pass
        return draft_cost.chain_decode_time(context, k_max)
    forms = closed_forms(draft_cost)
    if forms is not None and context.dtype.kind in "iu":
        return _varied_chain_time(forms, context, num_draft, k_max)
    total = 0.0
    for j in range(k_max):
        mask = num_draft > j
        n = int(mask.sum())
        total += draft_cost.step_time(np.ones(n), context[mask] + j)
    return total


def _varied_chain_time(forms, context: np.ndarray, num_draft: np.ndarray,
                       k_max: int) -> float:
    """``chain_draft_time``'s loop for whole-number contexts: forward j's batch of ones is
    the cost's uniform closed form at the sum of its contexts (integers: exact however
    summed, as ``step_time`` sums them), ``step_time`` itself where none applies."""
    over = num_draft > np.arange(k_max)[:, None]  # (forwards, requests)
    counts = np.add.reduce(over, axis=1).tolist()
    sums = np.add.reduce(over * context, axis=1).tolist()
    total = 0.0
    for j, (n, s) in enumerate(zip(counts, sums)):
        t = forms.uniform_step_time(n, 1, float(s + n * j), n)
        if t is None:
            t = forms.step_time(np.ones(n), context[over[j]] + j)
        total += t
    return total


def chain_draft_pricer(draft_cost, n: int, steps: int):
    """``chain_draft_time`` of ``n`` requests all drafting ``steps`` tokens as a function of
    their context sum alone, on Python numbers: bitwise a row of the draft cost's
    ``chain_decode_times`` (its ``uniform_pricer`` at each forward's sum, added left to
    right as numpy adds fewer than 8 numbers; from 8 on its sum is pairwise); None where
    the cost declares no closed forms (``ClosedFormPricer``), none applies, or ``steps`` is
    not 1-7."""
    forms = closed_forms(draft_cost)
    price = forms.uniform_pricer(n, 1, n) if forms is not None and 0 < steps < 8 and n >= 1 \
        else None
    if price is None:
        return None
    offsets = [float(n * j) for j in range(1, steps)]  # chain_decode_times' s + n j
    if steps <= 3:  # the same sums left to right, unrolled (a chain of one to three forwards)
        if steps == 1:
            return price
        o1 = offsets[0]
        if steps == 2:
            return lambda x: price(x) + price(x + o1)
        o2 = offsets[1]
        return lambda x: price(x) + price(x + o1) + price(x + o2)

    def draft(ctx_sum: float) -> float:
        total = price(ctx_sum)
        for offset in offsets:
            total += price(ctx_sum + offset)
        return total
    return draft


def chain_round_pricer(draft_cost, n: int, steps: int, verify_cost):
    """A staged round of ``n`` requests each drafting ``steps`` (1-3) tokens as a function
    of (running seconds, context sum): the running seconds plus ``chain_draft_pricer(
    draft_cost, n, steps)`` then ``verify_cost``'s ``uniform_pricer(n, steps + 1, n (steps +
    1))`` at the sum, the same forms' terms in one call (``scalar_forms.round_pricer``:
    bitwise the two added in that order); None where either cost has no such form."""
    d, v = closed_forms(draft_cost), closed_forms(verify_cost)
    if not (isinstance(d, ClosedForms) and isinstance(v, ClosedForms)) or n < 1:
        return None
    chain, verify = d.uniform_form(n, 1, n), v.uniform_form(n, steps + 1, n * (steps + 1))
    return None if chain is None or verify is None else round_pricer(chain, steps, n, verify)


def decode_terms(draft_cost, n: int) -> tuple | None:
    """``scalar_forms.bare_terms`` of ``draft_cost``'s forward of ``n`` one-token requests
    (its ``uniform_pricer(n, 1, n)``'s form), None where it has no such form."""
    forms = closed_forms(draft_cost)
    return bare_terms(forms.uniform_form(n, 1, n)) if isinstance(forms, ClosedForms) else None


def draft_prefill_time(draft_cost, new_tokens: np.ndarray, context: np.ndarray,
                       num_draft: int = 1, max_context: int | None = None) -> float:
    """A draft model prefilling its own KV over the step's prompt chunks (no logits).

    Chunks after which a request could no longer be speculated ``num_draft`` tokens within
    ``max_context`` are skipped (:func:`draft_prefill_mask`).
    """
    if draft_cost is None or not new_tokens.size:
        return 0.0
    forms = closed_forms(draft_cost)
    if forms is not None and new_tokens.size == 1:  # one chunk (usual): the closed form
        c, x = float(new_tokens[0]), float(context[0])
        if max_context is not None and not (x + c) + 1.0 + int(num_draft) < int(max_context):
            return 0.0  # draft_prefill_mask's test
        chunk = forms.chunk_pricer() if isinstance(forms, ClosedForms) and c > 1.0 else None
        if chunk is not None and c.is_integer():  # uniform_step_time's float, read once
            t = chunk(c, x)
        else:
            t = forms.uniform_step_time(1, c, x, 0) if c >= 1.0 and c.is_integer() else None
        if t is None and c >= 1.0 and c.is_integer() and x.is_integer():
            t = forms.few_mixed_time([c], [x], 0.0)  # no form: step_time's float on numbers
        if t is not None:
            return t
    if max_context is not None:
        keep = draft_prefill_mask(new_tokens, context, num_draft, max_context)
        if not keep.all():
            new_tokens, context = new_tokens[keep], context[keep]
            if not new_tokens.size:
                return 0.0
    if forms is not None and new_tokens.size > 1:  # several chunks: step_time's sum (1e-12)
        t = forms.mixed_verify_time(0, 1, 0.0, new_tokens.tolist(), context.tolist(), 0.0)
        if t is not None:
            return t
    return draft_cost.step_time(new_tokens, context, logits_tokens=np.zeros(new_tokens.size))


def draft_max_context(*models: ModelSpec | None) -> int | None:
    """The shortest ``max_context`` of the draft models given (None entries: no model;
    None where there are none)."""
    limits = [int(m.max_context) for m in models if m is not None and m.max_context]
    return min(limits) if limits else None


def fits_draft_context(seq_len: np.ndarray, num_draft: int,
                       max_context: int | None) -> np.ndarray:
    """Which sequences a draft model of ``max_context`` may speculate ``num_draft`` tokens on.

    vLLM's rule (``Top1Proposer._split_by_proposal_len``, vllm/spec_decode/top1_proposer.py):
    a sequence is speculated only while ``seq_len + k < max_proposal_len``, the draft's
    max_model_len; the others skip the draft and decode normally (proposal length 0).
    ``seq_len`` counts prompt and generated tokens (the last one not yet in the KV).  For a
    tree, ``num_draft`` is its depth: the draft forwards one level at a time.
    """
    seq_len = np.asarray(seq_len)
    if max_context is None:
        return np.ones(seq_len.shape, bool)
    return seq_len + int(num_draft) < int(max_context)


def draft_prefill_mask(new_tokens: np.ndarray, context: np.ndarray, num_draft: int,
                       max_context: int | None) -> np.ndarray:
    """Prefill chunks a draft model computes: not one after which the request can never be
    speculated (its first decode has ``seq_len >= context + new + 1``), so a draft is never
    priced at positions past its context.  (With chunked prefill, the earlier chunks of a
    prompt that turns out too long are still drafted: the chunk does not tell the total.)"""
    ends = np.asarray(context, dtype=np.float64) + np.asarray(new_tokens, np.float64) + 1.0
    return fits_draft_context(ends, num_draft, max_context)
