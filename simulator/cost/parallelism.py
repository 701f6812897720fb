"""How a model is split over devices: tensor and pipeline parallelism, weight offloading."""
from __future__ import annotations

from dataclasses import dataclass

from simulator.inputs.errors import SpecsimError


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
