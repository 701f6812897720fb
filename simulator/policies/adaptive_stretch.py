"""The ``adaptive`` wrapper on arrays: its ``VariedDraft`` (engine.plan), around ``chain``
(``AdaptiveChain``) or a model-free base that is one itself (``AdaptiveLimited``:
``prompt_lookup``, ``suffix``).

Each iteration the controller's gammas differ per request (the caps of the schedule and the
switches, the draft model's context, the goodput search), so a stretch cannot draw and price
many iterations at once as a chain's does; the engine takes them one by one instead
(simulator/engine/varied_stretch.py), except where the gammas are the wrapped chain's own
until the batch changes (``AdaptiveChain.fixed_chain``: the fixed controller at the chain's
gamma, no request catching up), which the chain's stretch takes; these classes give it
``propose``, ``accept`` and ``observe`` on the batch's arrays: the same controller
evaluated on the same numbers in the same order (``AdaptiveSpeculation.cap``, ``goodput``,
``learn``; the control's ``predictor``; the base's plan, draws and observation on arrays),
so the results are bitwise the step-by-step path's. Around ``chain`` the goodput search
hands the engine the target's seconds verifying the gammas it chose
(``VariedPlan.verify_s``): it priced them, bitwise ``step_time``'s, so the engine does not
price them again; where no search ran and every request verifies the same k + 1 tokens (the
schedule's and the switches' caps), the target's uniform closed form at the context sum
does (bitwise ``step_time``'s, as a chain's stretches price theirs), and the chain's draft
by ``chain_draft_pricer`` likewise (``ChainControl.draft_seconds``). The wrapped chain
observes nothing (its ``observe`` is the base class's): only the controllers and the draft
model's catch-up learn from an iteration.
"""
from __future__ import annotations

from abc import abstractmethod

import numpy as np

from simulator.engine.plan import VariedDraft, VariedPlan, closed_forms, emitted_tokens

_ANY, _MIN, _MAX, _SUM = (np.logical_or.reduce, np.minimum.reduce, np.maximum.reduce,
                          np.add.reduce)
_ALL = np.logical_and.reduce
_MISSING = object()


class AdaptiveStretch(VariedDraft):
    """``policy`` (an ``AdaptiveSpeculation``), its per-request gammas set through
    ``control`` (its base's draft control), on arrays; a subclass plans, draws and
    observes the base."""

    def __init__(self, policy, control) -> None:
        self.policy, self.control = policy, control
        # whether a request may be past the draft's context (``_speculable`` not all True)
        self._limited = False

    @property
    def max_verify_tokens(self) -> int:
        return self.policy.max_verify_tokens

    def plan_counts(self, request_ids, context, generated, output_len, prompt_len,
                    batch_size, rng):
        policy = self.policy
        top = policy.cap(batch_size)
        k = np.empty(request_ids.size, np.int64)  # np.full's array, without its layers
        k.fill(top)
        # whether any request drafts: all do at top > 0 unless some are past the draft
        # model's context (none where the longest fits: then as many as fit)
        drafting = top > 0 and request_ids.size > 0
        if drafting and self._limited and not self._all_speculable(prompt_len, generated):
            fits = self._speculable(prompt_len, generated)
            k[~fits] = 0
            drafting = bool(_ANY(fits))
        verify_s = None  # the target's seconds verifying k, where the search priced them
        if policy.estimate is not None and drafting:
            k, verify_s = policy.goodput_priced(
                k, request_ids, context, generated, output_len,
                self.control.rows_predictor(request_ids, context))
        return self._plan(request_ids, context, generated, k, verify_s)

    def observe_counts(self, request_ids, generated, output_len, plan, accepted,
                       step_time_s):
        emitted = emitted_tokens(accepted, generated, output_len)
        done = generated + emitted >= output_len
        self._observe_control(request_ids, emitted, done)
        self.policy.learn(request_ids, plan.num_draft, accepted, done)
        self._observe_base(request_ids, generated, output_len, plan, accepted, step_time_s)

    def _speculable(self, prompt_len, generated) -> np.ndarray:
        """The base's ``speculable`` on arrays (every request, by default)."""
        return np.ones(prompt_len.size, bool)

    def _all_speculable(self, prompt_len, generated) -> bool:
        """Whether ``_speculable`` holds for every request (a subclass may answer it
        without the array)."""
        return bool(_ALL(self._speculable(prompt_len, generated)))

    @abstractmethod
    def _plan(self, request_ids, context, generated, k, verify_s) -> VariedPlan:
        """The base's plan under the gammas ``k`` (``verify_s``: the target's seconds
        verifying k + 1 tokens each, None where unpriced)."""

    def _observe_control(self, request_ids, emitted, done) -> None:
        """The control's ``observe`` (nothing, by default)."""

    def _observe_base(self, request_ids, generated, output_len, plan, accepted,
                      step_time_s) -> None:
        """The base's ``observe`` (nothing, by default)."""


class AdaptiveChain(AdaptiveStretch):
    """Around ``chain``: per-request gammas through its ``ChainControl`` (the draft model's
    catch-up), the chain's context limit and acceptance."""

    def __init__(self, policy, control) -> None:
        super().__init__(policy, control)
        self.chain = control.chain
        # no draft context limit: every request is speculable (speculable_of's ones)
        self._limited = self.chain.draft_max_context is not None
        self._forms = closed_forms(policy.target_cost)
        # (requests, tokens each) -> the target's uniform_pricer (None: no closed form)
        self._verify: dict[tuple[int, int], object] = {}
        # the chain's own stretch, where the controller's gammas never change (fixed_chain)
        self._stretch = self.chain.chain_stretch() if policy.fixed_decision else None
        self._same_host: dict[int, bool] = {}  # batch size -> the two host charges agree

    def fixed_chain(self, request_ids, batch_size):
        """The chain's ``ChainStretch`` where its iterations are this wrapper's: the fixed
        controller (nothing learnt), the batch size's cap at the chain's gamma (a request
        past the draft's context ends the chain's stretch as it drafts 0 here), no request
        catching up (its first forward is priced otherwise), and the control's host charge
        of the batch the chain's own (the same float).  The draft loop's seconds are then
        the chain's closed form (``ChainControl._chain_time``'s, bitwise), its verification
        the target's uniform one at the context sum (``_uniform_verify``'s), its draws
        ``draw_chain``'s (the chain's ``sample_chain``, which its stretch draws bitwise),
        and what the control observes leaves its state as it is: every request drafts, so
        none starts lagging, and its last proposal is read only after the next one."""
        stretch = self._stretch
        if stretch is None or self.policy.cap(batch_size) != stretch.gamma \
                or self.control.lagging(request_ids):
            return None
        same = self._same_host.get(batch_size)
        if same is None:
            same = self._same_host[batch_size] = \
                self.control.charge(stretch.gamma)(batch_size) == self.chain.host(batch_size)
        return stretch if same else None

    def _speculable(self, prompt_len, generated) -> np.ndarray:
        return self.chain.speculable_of(prompt_len, generated)

    def _all_speculable(self, prompt_len, generated) -> bool:
        """``speculable_of``'s rule (``fits_draft_context``: seq_len + gamma below the
        draft's context) for every request, from the longest sequence alone: whole numbers,
        so the largest passes exactly when all do."""
        limit = self.chain.draft_max_context
        if limit is None or not prompt_len.size:
            return True
        return int(_MAX(prompt_len + generated)) + self.chain.gamma < int(limit)

    def _plan(self, request_ids, context, generated, k, verify_s) -> VariedPlan:
        time_s, cpu_s = self.control.draft_seconds(request_ids, context, k)
        if verify_s is None:
            verify_s = self._uniform_verify(context, k)
        return VariedPlan(k, k + 1, time_s + cpu_s, None, verify_s)

    def _uniform_verify(self, context, k) -> float | None:
        """Where every request verifies the same k + 1 tokens (no search priced them), the
        target's seconds by its uniform closed form at the context sum (``uniform_pricer``:
        bitwise ``step_time``'s, as a chain's stretches price it); None elsewhere."""
        n = k.size
        if self._forms is None or not n or context.dtype.kind not in "iu":
            return None
        u = int(_MAX(k)) + 1
        if int(_MIN(k)) + 1 != u:
            return None
        price = self._verify.get((n, u), _MISSING)
        if price is _MISSING:
            price = self._verify[(n, u)] = self._forms.uniform_pricer(n, u, n * u)
        return None if price is None else price(float(_SUM(context)))

    def draw_counts(self, rng, request_ids, context, generated, plan):
        return self.chain.draw_chain(rng, request_ids, context, plan.num_draft)

    def _observe_control(self, request_ids, emitted, done) -> None:
        self.control.observe_arrays(request_ids, emitted, done)


class AdaptiveLimited(AdaptiveStretch):
    """Around a ``LimitedDraft`` base (``control.base``): its lookups under the caps."""

    def _plan(self, request_ids, context, generated, k, verify_s) -> VariedPlan:
        # its lookups may find fewer drafts than k: the engine prices what they found
        return self.control.base.plan_limited(request_ids, generated, k)

    def draw_counts(self, rng, request_ids, context, generated, plan):
        if not _ANY(plan.num_draft):
            return np.zeros(request_ids.size, np.int64)
        return self.control.base.draw_counts(rng, request_ids, context, generated, plan)

    def _observe_base(self, request_ids, generated, output_len, plan, accepted,
                      step_time_s) -> None:
        self.control.base.observe_counts(request_ids, generated, output_len, plan, accepted,
                                         step_time_s)
