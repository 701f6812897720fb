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

Per-request gammas need a base that can draft less than its maximum: ``chain`` (handled
here; a draft model that skipped iterations catches up on the missed tokens in its first
forward) and the model-free ``prompt_lookup`` and ``suffix`` (their ``propose_limited``).
Any other base is switched on or off as a whole (a zero cap drops its drafts), and
``goodput`` refuses it.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from simulator.cost.drafting import chain_draft_time
from simulator.engine.plan import BatchView, DraftPlan
from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param, parse_params
from simulator.inputs.yaml_io import as_str, require_mapping
from simulator.policies.adaptive_controllers import (
    AcceptanceEMA,
    AcceptanceEstimate,
    BatchSizeSchedule,
    KillSwitch,
    goodput_gammas,
)
from simulator.policies.base import PolicyContext
from simulator.policies.chain import ChainSpeculation

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
_NOT_BASES = ("none", "adaptive")


def _parse_base(value: Any, source: str, prefix: str) -> dict:
    from simulator.policies.registry import POLICIES
    if value is None:
        raise SpecsimError("missing the wrapped policy", source=source, field=prefix + "base",
                           fix="add base: {name: chain, num_speculative_tokens: 4}")
    if isinstance(value, str):
        value = {"name": value}
    data = require_mapping(value, source=source, field=prefix + "base")
    names = [n for n in POLICIES if n not in _NOT_BASES]
    if "name" not in data:
        raise SpecsimError("missing the wrapped policy's name", source=source,
                           field=prefix + "base.name", fix="one of: " + ", ".join(names))
    name = as_str(data["name"], source=source, field=prefix + "base.name", choices=names)
    params = {k: v for k, v in data.items() if k != "name"}
    return {"name": name, "params": POLICIES[name].parse_params(
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


def _check(out: dict, source: str, prefix: str) -> None:
    out["base"] = _parse_base(out["base"], source, prefix)
    # the verification width the memory plan reserves logits for is the base's
    out["num_speculative_tokens"] = out["base"]["params"].get("num_speculative_tokens")
    out["controller"] = _parse_controller(out["controller"], source, prefix)
    vllm, trt = out["num_speculative_tokens_per_batch_size"], out["draft_len_schedule"]
    if vllm is not None and trt is not None:
        raise SpecsimError("give one batch-size schedule, not both", source=source,
                           field=prefix + "draft_len_schedule",
                           fix="keep num_speculative_tokens_per_batch_size or draft_len_schedule")
    key = "draft_len_schedule" if trt is not None else "num_speculative_tokens_per_batch_size"
    if vllm is not None or trt is not None:
        out["schedule"] = BatchSizeSchedule.parse(out[key], source=source, field=prefix + key)
    else:
        out["schedule"] = None
    window, threshold = out["acceptance_rate_window_size"], out["acceptance_rate_threshold"]
    if (window is None) != (threshold is None):
        missing = "acceptance_rate_threshold" if threshold is None else \
            "acceptance_rate_window_size"
        raise SpecsimError("the kill switch needs both its window and its threshold",
                           source=source, field=prefix + missing, fix=f"add {missing}")


class _ChainControl:
    """Per-request gammas for the ``chain`` policy, with the draft model's catch-up."""

    per_request = True

    def __init__(self, base: ChainSpeculation, target_cost) -> None:
        self.base = base
        self.max_draft = base.gamma
        self.draft_cost = base.draft_cost
        self.target_cost = target_cost
        self._lags: dict[int, int] = {}
        self._drafted: dict[int, bool] = {}
        self._memo: dict[tuple[int, int], float] = {}

    def _lag(self, batch: BatchView) -> np.ndarray:
        return np.fromiter((self._lags.get(r, 0) for r in batch.request_ids.tolist()),
                           np.int64, len(batch))

    def _catch_up_s(self, ctx: np.ndarray, lag: np.ndarray) -> float:
        """Extra time of first forwards that also feed ``lag`` skipped tokens."""
        busy = lag > 0
        if not busy.any():
            return 0.0
        c = ctx[busy].astype(float)
        return self.draft_cost.step_time((1 + lag[busy]).astype(float), c - lag[busy]) \
            - self.draft_cost.step_time(np.ones(c.size), c)

    def propose(self, batch: BatchView, rng, k: np.ndarray) -> DraftPlan:
        on = k > 0
        self._drafted = dict(zip(batch.request_ids.tolist(), on.tolist()))
        time_s = chain_draft_time(self.draft_cost, batch.context, k)
        if on.any():  # the first forward also feeds the tokens the draft model skipped
            time_s += self._catch_up_s(batch.context[on], self._lag(batch)[on])
        return DraftPlan(num_draft=k, verify_tokens=k + 1, draft_time_s=time_s)

    def draft_predictor(self, batch: BatchView):
        """k -> predicted draft time: memoised decode steps (contexts rounded to 128 tokens)."""
        ctx, lag = batch.context.astype(float), self._lag(batch)
        memo, decode_time = self._memo, self.draft_cost.decode_time

        def predict(k: np.ndarray) -> float:
            k_max = int(k.max(initial=0))
            if k_max == 0:
                return 0.0
            # requests drafting more than j tokens, and their summed contexts, for every j
            n = np.cumsum(np.bincount(k, minlength=k_max + 1)[::-1])[::-1][1:]
            c = np.cumsum(np.bincount(k, weights=ctx, minlength=k_max + 1)[::-1])[::-1][1:]
            total = 0.0
            for j in range(k_max):
                key = (int(n[j]), int(c[j] / n[j] + j) >> 7)
                t = memo.get(key)
                if t is None:
                    t = memo[key] = decode_time(key[0], (key[1] << 7) + 64)
                total += t
            on = k > 0
            return total + self._catch_up_s(ctx[on], lag[on])

        return predict

    def observe(self, plan: DraftPlan, batch: BatchView, emitted: np.ndarray,
                done: np.ndarray) -> None:
        # a request whose drafts the engine trimmed still ran the draft model: use the proposal
        for rid, e, d in zip(batch.request_ids.tolist(), emitted.tolist(), done.tolist()):
            if d or self._drafted.get(rid, False):
                self._lags.pop(rid, None)
            else:
                self._lags[rid] = self._lags.get(rid, 0) + e


class _LimitedControl:
    """Per-request caps for a base with ``propose_limited`` (the model-free policies)."""

    per_request = True

    def __init__(self, base) -> None:
        self.base = base
        self.max_draft = int(base.max_draft_tokens)

    def propose(self, batch: BatchView, rng, k: np.ndarray) -> DraftPlan:
        return self.base.propose_limited(batch, rng, k)

    def draft_predictor(self, batch: BatchView):
        return lambda k: 0.0  # CPU microseconds, negligible against a forward

    def observe(self, *args) -> None:
        return None


class _GateControl:
    """On/off for any other base: a zero cap drops that request's drafts."""

    per_request = False

    def __init__(self, base, base_params: dict) -> None:
        self.base = base
        self.max_draft = int(getattr(base, "max_draft_tokens", None)
                             or base_params.get("num_speculative_tokens") or 1)

    def propose(self, batch: BatchView, rng, k: np.ndarray) -> DraftPlan:
        if not k.any():
            n = len(batch)
            return DraftPlan(num_draft=np.zeros(n, np.int64), verify_tokens=np.ones(n, np.int64))
        plan = self.base.propose(batch, rng)
        plan.trim(k > 0)
        return plan

    def observe(self, *args) -> None:
        return None


class AdaptiveSpeculation:
    """A base speculative policy whose draft lengths a controller sets every iteration."""

    name = "adaptive"
    needs_draft_model = False  # the base decides (chain raises without a draft model)
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
    def parse_params(cls, params, *, source: str, prefix: str = "policy.") -> dict:
        return parse_params(params, cls.PARAMS, source=source, prefix=prefix, check=_check)

    @classmethod
    def memory_models(cls, params: Mapping, draft, target):
        """The wrapped policy's models (a chain base keeps its draft model and its KV)."""
        from simulator.policies.base import memory_models
        from simulator.policies.registry import POLICIES
        base = params["base"]
        return memory_models(POLICIES[base["name"]], base["params"], draft, target)

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        from simulator.policies.registry import POLICIES
        base = params["base"]
        self.base = POLICIES[base["name"]](base["params"], ctx)
        if isinstance(self.base, ChainSpeculation):
            self.control = _ChainControl(self.base, ctx.target_cost)
        elif hasattr(self.base, "propose_limited"):
            self.control = _LimitedControl(self.base)
        else:
            self.control = _GateControl(self.base, base["params"])
        self.max_verify_tokens = int(getattr(self.base, "max_verify_tokens",
                                             self.control.max_draft + 1))
        self.target_cost = ctx.target_cost
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

    # ------------------------------------------------------------------ the iteration
    def caps(self, batch: BatchView) -> np.ndarray:
        """Per-request gamma limits from the schedule and the switches."""
        k = self.control.max_draft
        if self.schedule is not None:
            k = min(k, self.schedule.gamma(batch.batch_size))
        if self.disable_at is not None and batch.batch_size >= self.disable_at:
            k = 0
        if self.kill is not None and self.kill.tripped:
            k = 0
        if self.ema is not None:
            k = min(k, self.ema.steps)
        caps = np.full(len(batch), k, np.int64)
        speculable = getattr(self.base, "speculable", None)  # the draft model's context
        if speculable is not None and k:
            caps[~speculable(batch)] = 0
        return caps

    def step_predictor(self, batch: BatchView):
        """k -> predicted seconds of this iteration's drafting and verification."""
        draft = self.control.draft_predictor(batch)
        ctx = batch.context.astype(float)

        def predict(k: np.ndarray) -> float:
            tokens = (k + 1).astype(float)
            return draft(k) + self.target_cost.step_time(tokens, ctx, tokens)

        return predict

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        k = self.caps(batch)
        if self.estimate is not None and k.any():
            k = np.minimum(k, np.maximum(batch.output_len - batch.generated - 1, 0))
            alpha = self.estimate.alpha(batch.request_ids)
            k = goodput_gammas(alpha, k, self.step_predictor(batch))
        return self.control.propose(batch, rng, k)

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        if not plan.num_draft.any():
            return np.zeros(len(batch), np.int64)
        return self.base.accept(plan, batch, rng)

    def observe(self, plan: DraftPlan, batch: BatchView, accepted: np.ndarray,
                step_time_s: float) -> None:
        emitted = np.minimum(accepted + 1, batch.output_len - batch.generated)
        done = batch.generated + emitted >= batch.output_len
        drafted = plan.num_draft
        self.control.observe(plan, batch, emitted, done)
        if self.ema is not None:
            if drafted.any():
                self.ema.update(accepted[drafted > 0])
            elif self.ema.steps == 0:  # count no-speculation batches towards the next probe
                self.ema.update(accepted)
        if self.kill is not None:
            self.kill.update(int(accepted.sum()), int(drafted.sum()))
        if self.estimate is not None:
            self.estimate.update(batch.request_ids, drafted, accepted)
            self.estimate.forget(batch.request_ids[done])
        self.base.observe(plan, batch, accepted, step_time_s)

    def prefill_time(self, new_tokens: np.ndarray, context: np.ndarray) -> float:
        return self.base.prefill_time(new_tokens, context)
