"""The socket between the engine and a policy: what the engine hands a policy each iteration
(``BatchView``), what the policy returns (``DraftPlan``), what a chain policy offers its
stretches (``ChainStretch``, with a ``CarriedDraft`` where its draft's price depends on the
previous iteration's acceptances), ``VariedDraft`` (per-request draft counts that vary),
the ``Policy`` protocol the engine calls, and (re-exported from plan_pricer.py) the
``StepPricer`` protocol and the ``ClosedFormPricer`` closed forms of the target's cost model.
The engine imports nothing else of the project."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol

import numpy as np

from simulator.engine.plan_draws import BatchDraws, DrawnDraft
from simulator.engine.plan_pricer import ClosedFormPricer, StepPricer, closed_forms

# (re-exported: the socket a policy imports)
__all__ = ["BatchDraws", "DrawnDraft", "ClosedFormPricer", "StepPricer", "closed_forms"]


@dataclass(frozen=True)
class BatchView:
    """The decoding requests of one iteration (arrays aligned by position)."""

    request_ids: np.ndarray   # int64 indices into the workload
    context: np.ndarray       # tokens in the target's KV before this step
    generated: np.ndarray     # output tokens emitted so far
    output_len: np.ndarray    # output tokens the request will emit in total
    prompt_len: np.ndarray
    batch_size: int           # all requests in the step (decodes + prefills)
    now_s: float

    def __len__(self) -> int:
        return int(self.request_ids.size)


@dataclass
class DraftPlan:
    """What a policy proposes for one iteration."""

    num_draft: np.ndarray           # draft tokens proposed per request (0: no speculation)
    verify_tokens: np.ndarray       # tokens per request in the verification forward
    draft_time_s: float = 0.0       # GPU time of the proposer, serial before verification
    cpu_time_s: float = 0.0         # CPU proposer time (model-free methods), also serial
    payload: Any = None             # policy-private (a tree, proposed token ids, ...)

    def trim(self, keep: np.ndarray) -> None:
        """Drop the drafts of requests where ``keep`` is False (the token budget ran out)."""
        self.num_draft = np.where(keep, self.num_draft, 0)
        self.verify_tokens = np.where(keep, self.verify_tokens, 1)


def emitted_tokens(accepted: np.ndarray, generated: np.ndarray,
                   output_len: np.ndarray) -> np.ndarray:
    """Tokens a decode emits: its accepted drafts plus the target's own token, never past
    the output length.  The engine's rule, here in the socket so that a policy observing
    the outcome counts exactly what the engine emitted."""
    return np.minimum(accepted + 1, output_len - generated)


class CarriedDraft(ABC):
    """A proposer whose every request drafts the same count (a chain, or a tree's nodes)
    and whose price may also depend on what each request accepted last iteration (EAGLE's
    layer and MTP's modules re-read those tokens in their first forward), declared by
    subclassing.  Its ``ChainStretch`` carries it: the engine advances such a stretch
    iteration by iteration, prices each from the contexts and the previous acceptances,
    draws each iteration's acceptances through it (from the replica's generator, where
    ``accept`` would draw them) and tells the policy what it would have observed."""

    @abstractmethod
    def draw_accepted(self, rng: np.random.Generator, request_ids: np.ndarray,
                      context: np.ndarray) -> np.ndarray:
        """Accepted drafts per request (a new int64 array, each in [0, gamma]) of an
        iteration in which every request at ``context`` drafted: what ``accept`` returns
        (clamped as the engine clamps it) with the same draws."""

    @abstractmethod
    def reread_tokens(self, request_ids: np.ndarray) -> np.ndarray:
        """Per request, the tokens its next draft re-reads (what it last observed)."""

    @abstractmethod
    def iteration_draft_s(self, request_ids: np.ndarray, context: np.ndarray,
                          reread: np.ndarray | list, rng: np.random.Generator) -> float:
        """The proposer's seconds (GPU and CPU) of one iteration in which every request
        (``request_ids``) at ``context`` (ints) drafts, re-reading ``reread`` tokens
        (accepted + 1 last time: an array, or a list of numbers where a few requests' walks
        are kept as lists):
        bitwise ``propose``'s ``draft_time_s + cpu_time_s``, with ``propose``'s draws from
        ``rng`` where it draws (a staged draft's inner acceptances)."""

    @abstractmethod
    def observe_accepted(self, request_ids: np.ndarray, accepted: np.ndarray) -> None:
        """What ``observe`` records of an iteration whose drafts ``accepted`` (uncapped)."""

    def chain_counts(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
        """Where each iteration's only draws are ``draw_accepted``'s one uniform a request
        (``iteration_draft_s`` draws none): ``counts(draws, request_ids)``, the accepted
        drafts (K, n) of K iterations from their uniforms (K, n), row j what
        ``draw_accepted`` returns when ``rng.random(n)`` gives draws[j]; with
        ``draft_rows`` the engine then advances such a stretch K iterations at once
        (chain_stretch.py).  None (the default): iteration by iteration."""
        return None

    def sum_draft_s(self, n: int) -> Callable[[int], float] | None:
        """Where ``iteration_draft_s`` of ``n`` requests depends on their context sum alone
        (nothing re-read, nothing drawn): ``price(s)``, that of contexts summing to ``s``,
        bitwise; the engine then prices an iteration from the sum it keeps, without the
        contexts.  None (the default): from the contexts."""
        return None

    def batch_draws(self, n: int) -> BatchDraws | None:
        """Where ``draw_accepted`` of ``n`` requests depends on the batch size alone (a
        tree walk the same for every request) and ``iteration_draft_s`` draws nothing, or
        only as ``drawn_draft_s(n)`` declares: ``BatchDraws``, with which the engine may
        draw several iterations' uniforms in one call and give back the ones not taken
        (chain_short.py).  None (the default): ``draw_accepted`` is called."""
        return None

    def few_draft_s(self, n: int) -> Callable[[list, list], float] | None:
        """``price(context, reread)``: ``iteration_draft_s`` of ``n`` requests (a few) as lists
        of ints, bitwise, drawing nothing; None (the default): no such form."""
        return None

    def drawn_draft_s(self, n: int) -> DrawnDraft | None:
        """Where ``iteration_draft_s`` of ``n`` requests draws (a staged draft's inner
        acceptances) and ``batch_draws(n)`` walks uniforms drawn ahead: ``DrawnDraft``, its
        price from the same uniforms drawn ahead (chain_short.py).  None (the default): it
        draws nothing, or from the generator (then ``batch_draws`` offers no ``ahead``)."""
        return None

    def draft_rows(self, request_ids: np.ndarray, context: np.ndarray,
                   reread: np.ndarray) -> np.ndarray | None:
        """``iteration_draft_s`` of K iterations of the same requests at once (a float
        array): row j that of ``context[j]`` (ints, (K, n)) re-reading ``reread[j]``,
        bitwise; None (the default) where there is no such form."""
        return None


@dataclass(frozen=True)
class ChainStretch:
    """What a chain policy gives the engine to advance several of its iterations at once
    (chain_stretch.py), where its per-iteration work depends on the batch (and, with
    ``carried``, on the previous iteration's acceptances) alone: every request drafts
    ``gamma`` while prompt + generated + gamma < ``max_context`` (None: no limit)."""

    gamma: int
    max_context: int | None
    # accepted(draws, request_ids): accepted drafts (K, n) from uniforms (K, n), row j what
    # ``accept`` gives when its ``rng.random(n)`` returns draws[j], element by element;
    # None where ``carried`` draws them
    accepted: Callable[[np.ndarray, np.ndarray], np.ndarray] | None
    # draft_times(n, ctx_sums): the proposer's seconds of K iterations of n requests whose
    # contexts sum to ctx_sums (K,), bitwise ``propose``'s; None: no closed form (and no
    # such function where ``carried`` prices the draft)
    draft_times: Callable[[int, np.ndarray], np.ndarray | None] | None = None
    # draft_pricer(n): draft_times of one iteration of n requests as a function of their
    # context sum (a Python float), bitwise; None (or returning None): use draft_times
    draft_pricer: Callable[[int], Callable[[float], float] | None] | None = None
    # a draft priced from the previous acceptances too (then draft_times and accepted are
    # None): the engine prices a stretch iteration by iteration through it, draws through it
    # and reports what it accepted
    carried: CarriedDraft | None = None

    def __post_init__(self) -> None:
        if (self.draft_times is None) == (self.carried is None) or \
                (self.accepted is None) == (self.carried is None):
            raise ValueError("a ChainStretch prices its draft and draws its acceptances by "
                             "draft_times and accepted, or by carried")


class VariedPlan(NamedTuple):
    """One iteration's plan of a ``VariedDraft``: what its ``DraftPlan`` would hold."""

    num_draft: np.ndarray      # draft tokens per request (int64; 0: no speculation)
    verify_tokens: np.ndarray  # tokens per request in the verification forward (int64)
    seconds: float             # the proposer's ``draft_time_s + cpu_time_s``
    payload: Any = None        # policy-private, as ``DraftPlan.payload``
    # the target's seconds of this verification where the proposer priced it already on the
    # cost model the engine prices with: bitwise ``step_time(verify_tokens, context,
    # verify_tokens)`` (None: the engine prices it)
    verify_s: float | None = None


class VariedDraft(ABC):
    """A proposer whose per-request draft counts may differ from request to request and
    from iteration to iteration (the ``adaptive`` wrapper's controllers, the model-free
    proposers' lookups), declared by subclassing.  Between two batch-changing events the
    engine advances it iteration by iteration on arrays (varied_stretch.py): no
    ``BatchView`` and no ``DraftPlan`` per iteration, its counts, prices and draws through
    these methods, bitwise what ``propose``, ``accept`` and ``observe`` give for the batch
    the arrays describe (every running request decoding, nothing trimmed: the engine checks
    the bounds first).  The arrays are the engine's: read them, do not keep them."""

    @property
    @abstractmethod
    def max_verify_tokens(self) -> int:
        """The most tokens one request verifies in an iteration."""

    @abstractmethod
    def plan_counts(self, request_ids: np.ndarray, context: np.ndarray,
                    generated: np.ndarray, output_len: np.ndarray, prompt_len: np.ndarray,
                    batch_size: int, rng: np.random.Generator) -> VariedPlan:
        """``propose``'s plan for these requests (``batch_size``: the running batch's),
        its state moved and its draws made as ``propose`` moves and makes them."""

    @abstractmethod
    def draw_counts(self, rng: np.random.Generator, request_ids: np.ndarray,
                    context: np.ndarray, generated: np.ndarray,
                    plan: VariedPlan) -> np.ndarray:
        """``accept``'s accepted drafts per request of ``plan`` (before the engine clamps
        them to [0, num_draft]), with the same draws from ``rng``."""

    @abstractmethod
    def observe_counts(self, request_ids: np.ndarray, generated: np.ndarray,
                       output_len: np.ndarray, plan: VariedPlan, accepted: np.ndarray,
                       step_time_s: float) -> None:
        """``observe`` of an iteration of ``plan`` whose requests had ``generated`` tokens
        before it and ``accepted`` (clamped) drafts accepted."""

    def fixed_chain(self, request_ids: np.ndarray, batch_size: int) -> ChainStretch | None:
        """Where these requests' next iterations, until the batch changes, are a chain's own
        (each drafting its gamma, nothing learnt that could change it), its ``ChainStretch``,
        advanced by chain_short.py; None (the default): iteration by iteration."""
        return None


class VariedRows(NamedTuple):
    """K iterations of an ``AheadDraft`` planned at once: row j what ``plan_counts`` and
    ``draw_counts`` give on the j-th iteration (every request decoding, nothing trimmed)."""

    num_draft: np.ndarray      # (K, n) int64: draft tokens per request
    verify_tokens: np.ndarray  # (K, n) int64: tokens per request in the verification
    accepted: np.ndarray       # (K, n) int64: accepted drafts, within [0, num_draft]
    seconds: np.ndarray        # (K,) float64: the proposer's seconds of each iteration


class AheadDraft(VariedDraft):
    """A ``VariedDraft`` whose every iteration is a function of each request's own text
    position and state alone -- no draws from the generator once a request has started --
    declared by subclassing: the engine may then plan, price and record K of its iterations
    at once (varied_rows.py), keep the first k of them (``keep_rows``) and take the one
    that stopped them (it finishes a request or crosses the next arrival) one by one."""

    @abstractmethod
    def plan_rows(self, request_ids: np.ndarray, generated: np.ndarray,
                  output_len: np.ndarray, steps: int,
                  rng: np.random.Generator) -> VariedRows | None:
        """``steps`` iterations of these requests, each request's ``generated`` moved on
        by what it emits in the rows before (``emitted_tokens``); a request's rows from
        the one that finishes it on may hold anything but valid counts (never kept).  A
        request's first iteration draws from ``rng`` as ``plan_counts`` draws (the same
        draws in the same order), made whether or not its rows are kept: the engine takes
        the first row one by one where it keeps none.  None: not now.  The engine calls
        ``keep_rows`` next, before any other call."""

    @abstractmethod
    def keep_rows(self, kept: int) -> None:
        """The engine kept the first ``kept`` rows of the last ``plan_rows`` (none of them
        finishes a request): the policy's state moves as those iterations'
        ``observe_counts`` would move it, and as if the other rows were never planned."""


class Policy(Protocol):
    """A serving policy instance (one per simulation; may hold adaptive state)."""

    name: str
    # it proposes, draws and learns nothing: every decode verifies and emits one token
    # (``none``); the engine then runs its iterations fused and its stretches in lockstep
    plain_decode: bool

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan: ...

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        """Accepted draft tokens per request, each in [0, plan.num_draft[i]]."""

    def observe(self, plan: DraftPlan, batch: BatchView, accepted: np.ndarray,
                step_time_s: float) -> None: ...

    def prefill_time(self, new_tokens: np.ndarray, context: np.ndarray) -> float:
        """Extra proposer time for prefill chunks (a draft model prefilling its own KV)."""

    @property
    def prefill_adds_time(self) -> bool:
        """Whether ``prefill_time`` may add time (False: it returns 0.0 whatever the chunks,
        and the engine's lazy form skips the call); a class attribute serves."""

    def chain_stretch(self) -> ChainStretch | None:
        """How the engine may advance several of its iterations at once while every request
        decodes (chain_stretch.py); None: it may not (each iteration is proposed, drawn and
        observed one by one)."""

    def varied_draft(self) -> VariedDraft | None:
        """Where ``chain_stretch`` is None: how the engine may advance its iterations on
        arrays while every request decodes, with draft counts that vary (varied_stretch.py);
        None: it may not."""
