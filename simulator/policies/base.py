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
- for fast-forward, optionally: ``plain_decode = True`` (it proposes, draws and learns
  nothing: ``none``), or ``chain_stretch()`` -> a
  :class:`~simulator.engine.plan.ChainStretch` or None (its iterations depend on the batch
  alone and draw one uniform per request: ``chain``; the engine then also runs its other
  iterations fused where every decode drafts); without either, fast-forward only skips the
  policy's SimPy timeouts.

Adding a policy touches its own file, the ``POLICIES`` dict in ``registry.py`` and its test;
never the engine.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Protocol

import numpy as np

from simulator.cost.cost_model import CostModel
from simulator.cost.drafting import fits_draft_context
from simulator.cost.parallelism import Parallelism
from simulator.cost.spec_host import SpecCharge, SpecWork
from simulator.engine.plan import BatchView, DraftPlan
from simulator.inputs.params import Param, parse_params
from simulator.models.spec import ModelSpec
from simulator.policies.draft_control import GateControl


@dataclass
class PolicyContext:
    """What a policy may use to build itself: cost models, acceptance, the workload."""

    target_cost: Any                 # CostModel-like: step_time(new, ctx, logits=None)
    draft_cost: Any = None           # CostModel of the draft model, if the scenario has one
    acceptance: Any = None           # a bound AcceptanceModel
    workload: Any = None
    draft_model: Any = None          # ModelSpec of the draft, if any
    target_model: Any = None
    hardware: Any = None


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
    # the engine's lazy form skips the call where this default is not overridden (it adds 0)
    prefill_time.adds_nothing = True

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
    parallel = getattr(ctx.target_cost, "parallel", None)
    if tensor_parallel is None:
        tensor_parallel = parallel.draft_tp if parallel is not None else 1
    execution = getattr(ctx.target_cost, "execution", None)
    separate = execution is not None and not execution.captured_draft_loop
    return CostModel(policy_hardware(ctx), spec, Parallelism(tensor_parallel=tensor_parallel),
                     execution=execution, host=separate)


def spec_charge(ctx: PolicyContext, work: SpecWork) -> SpecCharge:
    """The engine's host work of one speculative iteration of ``work`` (spec_host.py), as a
    function of the drafting requests: every policy charges its iterations by it."""
    return SpecCharge(getattr(ctx.target_cost, "execution", None), work)


def policy_hardware(ctx: PolicyContext):
    """The (overhead-adjusted) profile the scenario's cost models were built on."""
    for cost in (ctx.draft_cost, ctx.target_cost):
        if getattr(cost, "hardware", None) is not None:
            return cost.hardware
    return ctx.hardware
