"""``adaptive``: gamma controllers wrapped around any chain or tree policy.

One design, a wrapper::

    policy:
      name: adaptive
      base: {name: chain, num_speculative_tokens: 6}   # the wrapped policy; its gamma is the cap
      controller: goodput                              # fixed | acceptance_ema | goodput
      num_speculative_tokens_per_batch_size: [[1, 8, 6], [9, 32, 2], [33, 256, 0]]
      speculative_disable_by_batch_size: 48
      acceptance_rate_window_size: 64                  # the kill switch, with ...
      acceptance_rate_threshold: 0.3                   # ... its threshold

Each iteration the per-request cap starts at the base's gamma, is lowered by the batch-size
schedule (vLLM's triples or TensorRT-LLM's ``draft_len_schedule`` pairs), set to zero when
the batch holds ``speculative_disable_by_batch_size`` requests or more (vLLM's ``>=``) or
once the kill switch has tripped; then the controller picks gammas under the caps:
``fixed`` takes the cap, ``acceptance_ema`` (SGLang) one step count for the batch, and
``goodput`` (SmartSpec/TurboSpec) a gamma per request maximising expected emitted tokens
per second of step time predicted by the cost models.  ``controller`` may also be a mapping
``{kind: goodput, ...}`` with the controller's parameters.

Per-request gammas need a base that can draft less than its maximum, which says so by
the handle its ``draft_control`` returns (simulator/policies/draft_control.py): ``chain``
(a draft model that skipped iterations catches up on the missed tokens in its first
forward) and the model-free ``prompt_lookup`` and ``suffix`` (their ``propose_limited``).
Any other base is switched on or off as a whole (a zero cap drops its drafts), and
``goodput`` refuses it.  Around ``chain``, ``prompt_lookup`` or ``suffix`` fast-forward takes
its iterations on arrays (``varied_draft``: adaptive_stretch.py), with the same results.
``goodput`` prices its candidate gammas all at once (``rows_predictor``: the draft's and
the target's ``verify_step_times``), bitwise what pricing them one by one (``predictor``,
kept as the definition the tests hold it to) gives.  The policies it can wrap are handed to
it by the registry, which declares the registered wrapper as a subclass with its
``BASES``; this file imports no other policy.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, ClassVar, Mapping

import numpy as np

from simulator.engine.plan import (BatchView, DraftPlan, VariedDraft, closed_forms,
                                   emitted_tokens)
from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param, parse_params
from simulator.inputs.yaml_io import as_str, require_mapping
from simulator.policies.adaptive_controllers import (
    AcceptanceEMA,
    AcceptanceEstimate,
    BatchSizeSchedule,
    KillSwitch,
    goodput_choice,
)
from simulator.policies.base import PolicyBase, PolicyContext
from simulator.policies.adaptive_stretch import AdaptiveChain, AdaptiveLimited
from simulator.policies.draft_control import ChainControl, LimitedControl, LimitedDraft

_ANY, _SUM = np.logical_or.reduce, np.add.reduce

CONTROLLERS: dict[str, dict[str, Param]] = {
    "fixed": {},
    "acceptance_ema": {
        "candidate_steps": Param("int_list", default=None, minimum=0, maximum=256,
                                 help="step counts to choose from (default 0..gamma)"),
        "ema_alpha": Param("float", default=0.2, minimum=0.0, maximum=1.0),
        "update_interval": Param("int", default=5, minimum=1, maximum=10**6),
        "warmup_batches": Param("int", default=10, minimum=0, maximum=10**6),
        "down_hysteresis": Param("float", default=-0.25, minimum=-64.0, maximum=64.0),
        "up_hysteresis": Param("float", default=0.0, minimum=-64.0, maximum=64.0),
    },
    "goodput": {
        "prior_alpha": Param("float", default=0.5, minimum=0.0, maximum=1.0,
                             help="acceptance assumed before any verification"),
        "prior_weight": Param("float", default=4.0, minimum=0.0, maximum=1e6,
                              help="pseudo-observations pulling a request to the global rate"),
        "decay": Param("float", default=0.99, minimum=0.0, maximum=1.0,
                       help="per-iteration decay of the global acceptance counts"),
    },
}


def _parse_base(value: Any, bases: Mapping[str, type[PolicyBase]], source: str,
                prefix: str) -> dict:
    if not bases:
        raise SpecsimError("this adaptive wrapper has no base policies", source=source,
                           field=prefix + "base", fix="use POLICIES['adaptive'] from "
                           "simulator.policies.registry (it is given its bases there)")
    if value is None:
        raise SpecsimError("missing the wrapped policy", source=source, field=prefix + "base",
                           fix="add base: {name: chain, num_speculative_tokens: 4}")
    if isinstance(value, str):
        value = {"name": value}
    data = require_mapping(value, source=source, field=prefix + "base")
    if "name" not in data:
        raise SpecsimError("missing the wrapped policy's name", source=source,
                           field=prefix + "base.name", fix="one of: " + ", ".join(bases))
    name = as_str(data["name"], source=source, field=prefix + "base.name", choices=bases)
    params = {k: v for k, v in data.items() if k != "name"}
    return {"name": name, "params": bases[name].parse_params(
        params, source=source, prefix=prefix + "base.")}


def _parse_controller(value: Any, source: str, prefix: str) -> dict:
    field = prefix + "controller"
    if isinstance(value, str):
        value = {"kind": value}
    data = require_mapping(value, source=source, field=field)
    if "kind" not in data:
        raise SpecsimError("missing the controller kind", source=source, field=field + ".kind",
                           fix="one of: " + ", ".join(CONTROLLERS))
    kind = as_str(data["kind"], source=source, field=field + ".kind", choices=CONTROLLERS)
    params = parse_params({k: v for k, v in data.items() if k != "kind"}, CONTROLLERS[kind],
                          source=source, prefix=field + ".")
    return {"kind": kind, **params}


def _within_output(k: np.ndarray, generated: np.ndarray, output_len: np.ndarray) -> np.ndarray:
    """``np.minimum(k, np.maximum(output_len - generated - 1, 0))``: no request drafts past
    its last token; ``k`` itself where every request has room for the most any drafts
    (whole numbers: the minimum changes nothing then; two lists instead of four calls)."""
    left, ks = (output_len - generated).tolist(), k.tolist()
    if not ks or min(left) - 1 >= max(ks):
        return k
    return np.minimum(k, np.maximum(output_len - generated - 1, 0))


class AdaptiveSpeculation(PolicyBase):
    """A base speculative policy whose draft lengths a controller sets every iteration."""

    name = "adaptive"
    # needs_draft_model stays False: the base decides (chain raises without a draft model)
    # name -> wrappable policy class; set by the registry's subclass (registry.Adaptive)
    BASES: ClassVar[Mapping[str, type[PolicyBase]]] = MappingProxyType({})
    PARAMS = {
        "base": Param("any", help="the wrapped policy: {name: ..., its parameters}"),
        "controller": Param("any", default="fixed", help="fixed | acceptance_ema | goodput"),
        "num_speculative_tokens_per_batch_size": Param(
            "any", help="vLLM: [[min_batch, max_batch, gamma], ...]"),
        "draft_len_schedule": Param("any", help="TensorRT-LLM: [[max_batch, gamma], ...]"),
        "speculative_disable_by_batch_size": Param("int", minimum=1, maximum=10**9),
        "acceptance_rate_window_size": Param("int", minimum=1, maximum=10**9),
        "acceptance_rate_threshold": Param("float", minimum=0.0, maximum=1.0),
    }

    @classmethod
    def check_params(cls, out: dict, *, raw, source: str, prefix: str) -> None:
        """Parse the base and the controller in place; the schedule once, into ``schedule``."""
        out["base"] = _parse_base(out["base"], cls.BASES, source, prefix)
        out["controller"] = _parse_controller(out["controller"], source, prefix)
        vllm, trt = out["num_speculative_tokens_per_batch_size"], out["draft_len_schedule"]
        if vllm is not None and trt is not None:
            raise SpecsimError("give one batch-size schedule, not both", source=source,
                               field=prefix + "draft_len_schedule",
                               fix="keep num_speculative_tokens_per_batch_size or "
                                   "draft_len_schedule")
        key = "draft_len_schedule" if trt is not None else \
            "num_speculative_tokens_per_batch_size"
        if vllm is not None or trt is not None:
            out["schedule"] = BatchSizeSchedule.parse(out[key], source=source,
                                                      field=prefix + key)
        else:
            out["schedule"] = None
        window, threshold = out["acceptance_rate_window_size"], out["acceptance_rate_threshold"]
        if (window is None) != (threshold is None):
            missing = "acceptance_rate_threshold" if threshold is None else \
                "acceptance_rate_window_size"
            raise SpecsimError("the kill switch needs both its window and its threshold",
                               source=source, field=prefix + missing, fix=f"add {missing}")

    @classmethod
    def memory_models(cls, params: Mapping, draft, target):
        """The wrapped policy's models (a chain base keeps its draft model and its KV)."""
        base = params["base"]
        return cls.BASES[base["name"]].memory_models(base["params"], draft, target)

    @classmethod
    def drafting(cls, params: Mapping) -> tuple[type[PolicyBase], Mapping]:
        """The wrapped policy, with its parameters."""
        base = params["base"]
        return cls.BASES[base["name"]], base["params"]

    @classmethod
    def speculative_tokens(cls, params: Mapping) -> int:
        """The wrapped policy's (its longest draft)."""
        base = params["base"]
        return cls.BASES[base["name"]].speculative_tokens(base["params"])

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        base = params["base"]
        self.base = self.BASES[base["name"]](base["params"], ctx)
        self.control = self.base.draft_control(base["params"])
        self.target_cost = ctx.target_cost
        self._target_forms = closed_forms(ctx.target_cost)  # rows_predictor's, found once
        self.schedule: BatchSizeSchedule | None = params["schedule"]
        self.disable_at = params["speculative_disable_by_batch_size"]
        window = params["acceptance_rate_window_size"]
        self.kill = KillSwitch(window, params["acceptance_rate_threshold"]) \
            if window is not None else None
        c = dict(params["controller"])
        self.kind = c.pop("kind")
        self.ema = self.estimate = None
        if self.kind == "acceptance_ema":
            steps = c.pop("candidate_steps") or range(self.control.max_draft + 1)
            self.ema = AcceptanceEMA(steps, self.control.max_draft, **c)
        elif self.kind == "goodput":
            if not self.control.per_request:
                raise SpecsimError(f"the goodput controller needs per-request draft lengths; "
                                   f"base policy {base['name']!r} has none", field="policy.base",
                                   fix="wrap chain, prompt_lookup or suffix")
            self.estimate = AcceptanceEstimate(**c)

    @property
    def max_verify_tokens(self) -> int:
        return self.base.max_verify_tokens

    @property
    def fixed_decision(self) -> bool:
        """Whether the gammas follow from the batch size alone (the ``fixed`` controller,
        no kill switch or one that cannot trip): nothing an iteration teaches changes them."""
        return self.kind == "fixed" and (self.kill is None or self.kill.never_trips)

    def varied_draft(self) -> VariedDraft | None:
        """Around ``chain`` (per-request gammas with its catch-up) or a ``LimitedDraft``
        (``prompt_lookup``, ``suffix``), its iterations on arrays (adaptive_stretch.py), any
        controller; None around any other base (switched on and off as a whole)."""
        control = self.control
        if isinstance(control, ChainControl) and control.chain is not None:
            return AdaptiveChain(self, control)
        if isinstance(control, LimitedControl) and isinstance(control.base, LimitedDraft):
            return AdaptiveLimited(self, control)
        return None

    # ------------------------------------------------------------------ the iteration
    def cap(self, batch_size: int) -> int:
        """The iteration's gamma limit from the schedule and the switches (before the
        requests past the draft model's context are set to 0)."""
        k = self.control.max_draft
        if self.schedule is not None:
            k = min(k, self.schedule.gamma(batch_size))
        if self.disable_at is not None and batch_size >= self.disable_at:
            k = 0
        if self.kill is not None and self.kill.tripped:
            k = 0
        if self.ema is not None:
            k = min(k, self.ema.steps)
        return k

    def caps(self, batch: BatchView) -> np.ndarray:
        """Per-request gamma limits from the schedule and the switches."""
        k = self.cap(batch.batch_size)
        caps = np.full(len(batch), k, np.int64)
        if k:  # requests past the draft model's context
            caps[~self.base.speculable(batch)] = 0
        return caps

    def step_predictor(self, batch: BatchView):
        """k -> predicted seconds of this iteration's drafting and verification."""
        return self.predictor(batch.context, self.control.draft_predictor(batch))

    def predictor(self, context: np.ndarray, draft):
        """``step_predictor`` at ``context`` with the draft's predictor ``draft``."""
        ctx, step_time = context.astype(float), self.target_cost.step_time

        def predict(k: np.ndarray) -> float:
            tokens = (k + 1).astype(float)
            return draft(k) + step_time(tokens, ctx, tokens)

        return predict

    def rows_predictor(self, context: np.ndarray, draft_rows, verified: list | None = None):
        """``predictor`` of every row of a (C, n) matrix of gammas at once, bitwise
        (``draft_rows``: the draft's ``rows_predictor``; the target's verifications by its
        ``verify_step_times`` where it declares closed forms, else one ``step_time`` a row;
        ``verified``, where given, receives those verifications' seconds)."""
        ctx, target = context.astype(float), self._target_forms
        step_time = self.target_cost.step_time

        def predict(ks: np.ndarray) -> np.ndarray:
            tokens = ks + 1  # whole numbers: as (k + 1).astype(float) to the pricer
            verify = target.verify_step_times(tokens, ctx) if target is not None else \
                np.array([step_time(row, ctx, row) for row in tokens.astype(float)])
            if verified is not None:
                verified.append(verify)
            return draft_rows(ks) + verify

        return predict

    def goodput(self, k: np.ndarray, request_ids: np.ndarray, context: np.ndarray,
                generated: np.ndarray, output_len: np.ndarray, draft_rows) -> np.ndarray:
        """The goodput controller's gammas under the caps ``k`` (``draft_rows``: the
        draft's ``rows_predictor`` for these requests): its candidates priced at once."""
        return self.goodput_priced(k, request_ids, context, generated, output_len,
                                   draft_rows)[0]

    def goodput_priced(self, k: np.ndarray, request_ids: np.ndarray, context: np.ndarray,
                       generated: np.ndarray, output_len: np.ndarray,
                       draft_rows) -> tuple[np.ndarray, float | None]:
        """``goodput``'s gammas and the target's seconds verifying them at ``context`` (the
        search priced them: bitwise ``step_time``'s), None where it priced nothing."""
        k = _within_output(k, generated, output_len)
        alpha, verified = self.estimate.alpha(request_ids), []
        ks, best = goodput_choice(alpha, k, step_times=self.rows_predictor(
            context, draft_rows, verified))
        return ks[best].copy(), (float(verified[0][best]) if verified else None)

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        k = self.caps(batch)
        if self.estimate is not None and _ANY(k):
            k = self.goodput(k, batch.request_ids, batch.context, batch.generated,
                             batch.output_len,
                             self.control.rows_predictor(batch.request_ids, batch.context))
        return self.control.propose(batch, rng, k)

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        if not _ANY(plan.num_draft):
            return np.zeros(len(batch), np.int64)
        return self.base.accept(plan, batch, rng)

    def observe(self, plan: DraftPlan, batch: BatchView, accepted: np.ndarray,
                step_time_s: float) -> None:
        emitted = emitted_tokens(accepted, batch.generated, batch.output_len)
        done = batch.generated + emitted >= batch.output_len
        self.control.observe(plan, batch, emitted, done)
        self.learn(batch.request_ids, plan.num_draft, accepted, done)
        self.base.observe(plan, batch, accepted, step_time_s)

    def learn(self, request_ids: np.ndarray, drafted: np.ndarray, accepted: np.ndarray,
              done: np.ndarray) -> None:
        """The controllers' part of ``observe``: the EMA, the kill switch, the estimates."""
        if self.ema is not None:
            if _ANY(drafted):
                self.ema.update(accepted[drafted > 0])
            elif self.ema.steps == 0:  # count no-speculation batches towards the next probe
                self.ema.update(accepted)
        if self.kill is not None:
            self.kill.update(int(_SUM(accepted)), int(_SUM(drafted)))
        if self.estimate is not None:
            self.estimate.update(request_ids, drafted, accepted)
            self.estimate.forget(request_ids[done])

    def prefill_time(self, new_tokens: np.ndarray, context: np.ndarray) -> float:
        return self.base.prefill_time(new_tokens, context)
