"""How a model is split over devices: tensor, pipeline and expert parallelism, weight offloading.

Expert parallelism follows vLLM's ``enable_expert_parallel``: a MoE layer's experts are spread
whole over the EP ranks instead of each expert being sharded over the TP ranks; attention (and
every dense layer) stays tensor parallel.  vLLM's EP size is TP x DP; this project runs one
data-parallel rank per replica (DP = 1, replicas are separate engines), so EP is either off
(1) or equal to tensor_parallel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number


@dataclass(frozen=True)
class Parallelism:
    """How a model is split over devices and where its weights live."""

    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    micro_batches: int = 1
    offload_fraction: float = 0.0  # share of weights streamed over the host link each step
    # vLLM's draft_tensor_parallel_size: the draft (a draft model, EAGLE/Medusa/MTP heads)
    # is sharded over this many of the target's ranks; None: the target's TP (vLLM's
    # default, and how vLLM and SGLang run EAGLE heads), 1: replicated on one GPU per rank
    draft_tensor_parallel: int | None = None
    # vLLM's enable_expert_parallel: 1 off; else the EP degree, which must be tensor_parallel
    expert_parallel: int = 1

    def __post_init__(self) -> None:
        for name in ("tensor_parallel", "pipeline_parallel", "micro_batches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecsimError(f"must be a whole number >= 1, got {value!r}", field=name)
        dtp = self.draft_tensor_parallel
        if dtp is not None and (isinstance(dtp, bool) or dtp not in (1, self.tensor_parallel)):
            raise SpecsimError(f"must be 1 or the target's tensor_parallel "
                               f"({self.tensor_parallel}), got {dtp!r}",
                               field="parallelism.draft_tensor_parallel_size",
                               fix=f"use 1 or {self.tensor_parallel}, as vLLM allows")
        ep = self.expert_parallel
        if isinstance(ep, bool) or ep not in (1, self.tensor_parallel):
            raise SpecsimError(f"must be 1 (off) or the tensor_parallel degree "
                               f"({self.tensor_parallel}), got {ep!r}",
                               field="parallelism.expert_parallel",
                               fix="write expert_parallel: true (EP = TP, as vLLM's "
                                   "enable_expert_parallel with one data-parallel rank) or "
                                   "false")
        if not (0.0 <= self.offload_fraction <= 1.0):
            raise SpecsimError(f"must be in [0, 1], got {self.offload_fraction!r}",
                               field="offload_fraction")

    @property
    def draft_tp(self) -> int:
        """The draft's tensor parallel degree."""
        return self.tensor_parallel if self.draft_tensor_parallel is None \
            else self.draft_tensor_parallel

    def draft(self) -> "Parallelism":
        """The draft's own Parallelism (its weights on the host's GPUs, no offloading)."""
        return Parallelism(tensor_parallel=self.draft_tp)

    @property
    def devices(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel


def expert_parallel_degree(value: Any, tp: int, source: str) -> int:
    """A scenario's ``expert_parallel``: true (EP = TP), false, or the degree (1 or TP)."""
    if isinstance(value, bool):
        return tp if value else 1
    ep = as_number(value, source=source, field="parallelism.expert_parallel", integer=True,
                   minimum=1, maximum=1024)
    if ep not in (1, tp):
        raise SpecsimError(f"must be true, false, 1 or tensor_parallel ({tp}), got {ep}",
                           source=source, field="parallelism.expert_parallel",
                           fix="EP = TP x DP in vLLM and a replica here has DP = 1: write "
                               "expert_parallel: true")
    return ep
