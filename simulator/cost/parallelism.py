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

    def __post_init__(self) -> None:
        for name in ("tensor_parallel", "pipeline_parallel", "micro_batches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecsimError(f"must be a whole number >= 1, got {value!r}", field=name)
        if not (0.0 <= self.offload_fraction <= 1.0):
            raise SpecsimError(f"must be in [0, 1], got {self.offload_fraction!r}",
                               field="offload_fraction")

    @property
    def devices(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel
