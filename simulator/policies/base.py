"""The policy interface: what the engine asks a speculative serving policy each iteration.

Per iteration the engine hands the policy the requests that are decoding (a ``BatchView``);
the policy returns a ``DraftPlan``: per request how many draft tokens it proposes and how many
tokens the verification forward carries for it, plus the proposer's time.  The engine prices
verification with the target cost model on exactly those token counts, advances time, then
asks the policy how many drafts each request accepted and emits accepted + 1 tokens.  A policy
may observe the outcome (adaptive controllers do).  Adding a policy touches its own file, the
``POLICIES`` dict in ``simulator/policies/__init__.py`` and its test — never the engine.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_bool, as_number, as_str, check_keys


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


class Policy(Protocol):
    """A serving policy instance (one per simulation; may hold adaptive state)."""

    name: str

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan: ...

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        """Accepted draft tokens per request, each in [0, plan.num_draft[i]]."""

    def observe(self, plan: DraftPlan, batch: BatchView, accepted: np.ndarray,
                step_time_s: float) -> None: ...

    def prefill_time(self, new_tokens: np.ndarray, context: np.ndarray) -> float:
        """Extra proposer time for prefill chunks (a draft model prefilling its own KV)."""


@dataclass(frozen=True)
class Param:
    """One policy parameter: type, bounds, default, and the other names it accepts."""

    kind: str                    # "int" | "float" | "bool" | "str" | "int_list" | "any"
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    aliases: tuple[str, ...] = ()
    help: str = ""


def parse_params(params: Mapping[str, Any], spec: Mapping[str, Param], *, source: str,
                 prefix: str = "policy.",
                 check: Callable[[dict, str, str], None] | None = None) -> dict[str, Any]:
    """Validate raw policy parameters against ``spec``; return canonical names -> values."""
    alias = {a: name for name, p in spec.items() for a in p.aliases}
    allowed = list(spec) + list(alias)
    check_keys(params, allowed=allowed, source=source, prefix=prefix)
    out = {name: p.default for name, p in spec.items()}
    seen: dict[str, str] = {}
    for key, value in params.items():
        name = alias.get(key, key)
        if name in seen:
            raise SpecsimError(f"given twice (as {seen[name]!r} and {key!r})", source=source,
                               field=prefix + key)
        seen[name] = key
        p, f = spec[name], prefix + key
        if p.kind == "int":
            value = as_number(value, source=source, field=f, integer=True, minimum=p.minimum,
                              maximum=p.maximum)
        elif p.kind == "float":
            value = float(as_number(value, source=source, field=f, minimum=p.minimum,
                                    maximum=p.maximum))
        elif p.kind == "bool":
            value = as_bool(value, source=source, field=f)
        elif p.kind == "str":
            value = as_str(value, source=source, field=f, choices=p.choices)
        elif p.kind == "int_list":
            if not isinstance(value, (list, tuple)) or not value:
                raise SpecsimError("expected a non-empty list of whole numbers", source=source,
                                   field=f)
            value = tuple(as_number(v, source=source, field=f"{f}[{i}]", integer=True,
                                    minimum=p.minimum, maximum=p.maximum)
                          for i, v in enumerate(value))
        out[name] = value
    if check is not None:
        check(out, source, prefix)
    return out


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
    extra: dict = field(default_factory=dict)


def draft_max_context(*models) -> int | None:
    """The shortest ``max_context`` of the draft models given (None where there are none)."""
    limits = [int(m.max_context) for m in models if getattr(m, "max_context", None)]
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


def batch_fits_draft(batch: BatchView, num_draft: int, max_context: int | None) -> np.ndarray:
    """:func:`fits_draft_context` for the requests of ``batch``."""
    return fits_draft_context(batch.prompt_len + batch.generated, num_draft, max_context)


def draft_prefill_mask(new_tokens: np.ndarray, context: np.ndarray, num_draft: int,
                       max_context: int | None) -> np.ndarray:
    """Prefill chunks a draft model computes: not one after which the request can never be
    speculated (its first decode has ``seq_len >= context + new + 1``), so a draft is never
    priced at positions past its context.  (With chunked prefill, the earlier chunks of a
    prompt that turns out too long are still drafted: the chunk does not tell the total.)"""
    ends = np.asarray(context, dtype=np.float64) + np.asarray(new_tokens, np.float64) + 1.0
    return fits_draft_context(ends, num_draft, max_context)


class NoDraftMixin:
    """Defaults for policies without a draft model of their own."""

    def prefill_time(self, new_tokens: np.ndarray, context: np.ndarray) -> float:
        return 0.0

    def observe(self, plan: DraftPlan, batch: BatchView, accepted: np.ndarray,
                step_time_s: float) -> None:
        return None
