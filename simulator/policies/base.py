"""The policy contract: everything the driver, the engine and the adaptive wrapper ask of a
speculative serving policy, stated once in ``PolicyBase``.

A policy class says, as data and members:

- ``name``, and ``PARAMS``: its knobs as :class:`~simulator.inputs.params.Param` data;
  ``check_params`` adds the rules that span several knobs.  ``parse_params`` (here, for
  every policy) checks raw values against both and returns canonical names -> values with
  the defaults filled in; the scenario parses once and keeps the result.
- ``needs_draft_model``: whether the scenario must name a draft model (default: no).
- ``acceptance_from_tokens``: whether its acceptance comes from matching the workload's
  token ids (model-free proposers) rather than an acceptance model (default: no), and
  ``drafting(params)``: the class that drafts (a wrapper names its base); provenance reads
  both through :class:`AcceptanceDeclared`.
- ``memory_models(params, draft, target)``: the models it holds beside the target (weights
  on every device, and those that keep a KV cache); default: the draft model, if it needs one.

A built policy (``cls(params, ctx)``, one per replica) says:

- ``max_verify_tokens``: the most tokens one request carries in a verification forward
  (every policy defines it; the memory plan holds logits for that many per sequence);
- per iteration, ``propose(batch, rng)`` -> ``DraftPlan`` (per request the draft tokens and
  the tokens its verification carries, plus the proposer's time; the engine prices
  verification on exactly those counts) and ``accept(plan, batch, rng)`` -> accepted drafts
  per request (the engine emits accepted + 1);
- ``observe(...)``: the outcome, for policies that learn from it (default: nothing);
- ``prefill_time(...)``: the proposer's time for prefill chunks (default 0: no draft KV);
- for the ``adaptive`` wrapper: ``speculable(batch)`` (default: every request) and
  ``draft_control(params)``, the handle through which per-request draft lengths are set
  (default: all or none, :class:`~simulator.policies.draft_control.GateControl`);
- for fast-forward (the engine's ``Policy`` protocol declares both; defaults here):
  ``plain_decode`` (True: it proposes, draws and learns nothing, ``none``), and
  ``chain_stretch()`` -> a :class:`~simulator.engine.plan.ChainStretch` or None (its
  iterations depend on the batch alone and draw one uniform per request: ``chain``; or the
  policy prices and draws them itself, a ``CarriedDraft``: ``eagle``, ``eagle2``,
  ``eagle3``, ``mtp``, ``medusa``, ``specinfer``, ``staged``; the engine then also runs its
  other iterations fused where every decode drafts); or ``varied_draft()`` -> a
  :class:`~simulator.engine.plan.VariedDraft` or None (per-request counts that vary: the
  model-free proposers, the ``adaptive`` wrapper around ``chain`` or one of them; its
  iterations run on arrays); without any,
  fast-forward only skips the policy's SimPy timeouts.  ``prefill_adds_time`` says
  whether the class overrides ``prefill_time`` (the engine skips the base's, which adds 0).

Adding a policy touches its own file, ``POLICIES`` in ``registry.py`` and its test;
never the engine (docs/adding-a-method.md walks through one, start to finish).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Protocol

import numpy as np

from simulator.cost.cost_model import CostModel
from simulator.cost.drafting import fits_draft_context
from simulator.cost.parallelism import Parallelism
from simulator.cost.spec_host import SpecCharge
from simulator.cost.spec_work import SpecWork
from simulator.engine.plan import BatchView, ChainStretch, DraftPlan, StepPricer, VariedDraft
from simulator.inputs.params import Param, parse_params
from simulator.models.spec import ModelSpec
from simulator.policies.draft_control import GateControl


@dataclass
class PolicyContext:
    """What a policy may use to build itself: cost models, acceptance, the workload."""

    target_cost: StepPricer          # a CostModel (``deployed``), or a test's pricer
    draft_cost: StepPricer | None = None  # the draft model's, if the scenario has one
    acceptance: Any = None           # a bound AcceptanceModel
    workload: Any = None
    draft_model: Any = None          # ModelSpec of the draft, if any
    target_model: Any = None
    hardware: Any = None
    # the speculative path's own profile and execution (deployment.speculative_path), where
    # the scenario's spec_cost_factor moves it; None: the target's
    spec_hardware: Any = None
    spec_execution: Any = None


class AcceptanceDeclared(Protocol):
    """What provenance (simulator/acceptance/provenance.py) reads of a policy class."""

    name: ClassVar[str]
    acceptance_from_tokens: ClassVar[bool]

    @classmethod
    def drafting(cls, params: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        """The class that drafts, with its parameters."""

    @classmethod
    def memory_models(cls, params: dict, draft: ModelSpec | None,
                      target: ModelSpec) -> tuple[list[ModelSpec], list[ModelSpec]]:
        """Models kept beside the target; the first held is the drafter."""


class PolicyBase(ABC):
    """The contract of a serving policy (see the module docstring)."""

    # how the policy's draft models use the target's GPUs: "tensor" (sharded over
    # draft_tensor_parallel_size ranks, vLLM's way) or "data" (a whole copy per GPU, the
    # batch split over them: SpecInfer's SSMs)
    draft_parallelism: ClassVar[str] = "tensor"

    name: ClassVar[str]
    PARAMS: ClassVar[dict[str, Param]] = {}
    needs_draft_model: ClassVar[bool] = False
    # its acceptance is measured by running its matching on the workload's token ids (the
    # model-free proposers): it reads no acceptance model (provenance says so)
    acceptance_from_tokens: ClassVar[bool] = False
    plain_decode: bool = False  # engine.plan.Policy's: one token per decode (``none``)

    # ------------------------------------------------------------------ the class: data
    @classmethod
    def check_params(cls, params: dict, *, raw: Mapping[str, Any], source: str,
                     prefix: str) -> None:
        """Rules across parameters, on the parsed ``params`` (``raw``: as written)."""

    @classmethod
    def parse_params(cls, params: Mapping[str, Any], *, source: str,
                     prefix: str = "policy.") -> dict:
        """Validate raw parameters; return canonical names -> values, defaults filled in."""
        out = parse_params(params, cls.PARAMS, source=source, prefix=prefix)
        cls.check_params(out, raw=params, source=source, prefix=prefix)
        return out

    @classmethod
    def memory_models(cls, params: dict, draft: ModelSpec | None,
                      target: ModelSpec) -> tuple[list[ModelSpec], list[ModelSpec]]:
        """Models kept beside the target: (weights held, models that keep a KV cache)."""
        if cls.needs_draft_model and draft is not None:
            return [draft], ([draft] if draft.kind == "decoder" else [])
        return [], []

    @classmethod
    def drafting(cls, params: Mapping[str, Any]) -> tuple[type[PolicyBase], Mapping[str, Any]]:
        """The policy class that drafts, with its parameters: itself (a wrapper: its base)."""
        return cls, params

    @classmethod
    def speculative_tokens(cls, params: Mapping) -> int:
        """Tokens drafted per request (vLLM's num_speculative_tokens, which sizes its CUDA
        graphs); 0 where the policy has no such knob."""
        k = params.get("num_speculative_tokens")
        return int(k) if isinstance(k, int) and not isinstance(k, bool) else 0

    # ------------------------------------------------------------------ a built policy
    @property
    @abstractmethod
    def max_verify_tokens(self) -> int:
        """The most tokens one request carries in a verification forward."""

    @abstractmethod
    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        """This iteration's drafts and verification tokens per request."""

    @abstractmethod
    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        """Accepted draft tokens per request, each in [0, plan.num_draft[i]]."""

    def observe(self, plan: DraftPlan, batch: BatchView, accepted: np.ndarray,
                step_time_s: float) -> None:
        """See one iteration's outcome (policies that learn from it override this)."""

    def prefill_time(self, new_tokens: np.ndarray, context: np.ndarray) -> float:
        """Extra proposer time for prefill chunks (a draft model prefilling its own KV)."""
        return 0.0

    @property
    def prefill_adds_time(self) -> bool:
        """Whether ``prefill_time`` is overridden (the base's adds 0: the engine skips it)."""
        return type(self).prefill_time is not PolicyBase.prefill_time

    def chain_stretch(self) -> ChainStretch | None:
        """What the engine needs to advance several iterations at once (engine.plan's
        ``ChainStretch``); None by default: each iteration is proposed and drawn alone."""
        return None

    def varied_draft(self) -> VariedDraft | None:
        """Per-request draft counts that vary, advanced on arrays (engine.plan's
        ``VariedDraft``); None by default."""
        return None

    def speculable(self, batch: BatchView) -> np.ndarray:
        """Requests the proposer can speculate on (the others decode normally)."""
        return np.ones(len(batch), bool)

    def draft_control(self, params: dict):
        """How the adaptive wrapper sets this policy's draft lengths (``params``: its own)."""
        return GateControl(self, params)


def batch_fits_draft(batch: BatchView, num_draft: int, max_context: int | None) -> np.ndarray:
    """:func:`fits_draft_context` for the requests of ``batch``."""
    return fits_draft_context(batch.prompt_len + batch.generated, num_draft, max_context)


def side_cost(ctx: PolicyContext, spec: ModelSpec, *, tensor_parallel: int | None = None):
    """The cost model of a model that runs inside the target's engine step (a second draft
    model, EAGLE's layer, Medusa's heads): the scenario's hardware and execution (graph
    replay per forward, no host step time of its own: the target's step pays that once),
    sharded over the draft's tensor parallel degree unless ``tensor_parallel`` is given."""
    target = deployed(ctx.target_cost)
    if tensor_parallel is None:
        tensor_parallel = target.parallel.draft_tp if target is not None else 1
    execution = spec_execution(ctx)
    separate = execution is not None and not execution.captured_draft_loop
    return CostModel(policy_hardware(ctx), spec, Parallelism(tensor_parallel=tensor_parallel),
                     execution=execution, host=separate)


def spec_charge(ctx: PolicyContext, work: SpecWork, draft=None) -> SpecCharge:
    """The engine's host work of one speculative iteration of ``work`` (spec_host.py), and
    the GPU work its tree attention adds on the target's layers and on ``draft``'s (the
    method's draft layer cost model, where its forwards expand a tree), as a function of the
    drafting requests: every policy charges its iterations by it."""
    return SpecCharge(spec_execution(ctx), work, deployed(ctx.target_cost), deployed(draft))


def spec_execution(ctx: PolicyContext):
    """The execution the speculative path is priced under: the target's, unless the
    scenario's spec_cost_factor gives the path its own (ctx.spec_execution)."""
    if ctx.spec_execution is not None:
        return ctx.spec_execution
    target = deployed(ctx.target_cost)
    return target.execution if target is not None else None


def policy_hardware(ctx: PolicyContext):
    """The (overhead-adjusted) profile the scenario's cost models were built on (the
    speculative path's, where the scenario's spec_cost_factor gives it its own)."""
    if ctx.spec_hardware is not None:
        return ctx.spec_hardware
    for cost in (deployed(ctx.draft_cost), deployed(ctx.target_cost)):
        if cost is not None:
            return cost.hardware
    return ctx.hardware


def draft_spec(ctx: PolicyContext) -> ModelSpec | None:
    """The scenario's draft model: named, else the draft cost's model (None: neither)."""
    if ctx.draft_model is not None:
        return ctx.draft_model
    cost = deployed(ctx.draft_cost)
    return cost.model if cost is not None else None


def deployed(cost) -> CostModel | None:
    """``cost`` where it is a model on a deployment (a ``CostModel``: its ``model``,
    ``parallel``, ``execution`` and ``hardware``), None where it is only a pricer (a test's
    constant-time cost, a wrapper)."""
    return cost if isinstance(cost, CostModel) else None
