"""The speculative-decoding fields of a ``vllm bench serve`` result: compared with the
simulation's, and usable as the acceptance model.

vLLM's bench writes, when the server speculates, ``spec_decode_acceptance_length`` (1 +
accepted / drafts), ``spec_decode_acceptance_rate`` (100 x accepted / draft tokens) and
``spec_decode_per_position_acceptance_rates`` (per position, the drafts whose token there
was accepted over all drafts: an unconditional rate, as vLLM counts a position only when
every one before it was accepted).  ``measured_acceptance`` turns the per-position rates
(else the mean length, resolved as vLLM resolves its synthetic length) into the scenario's
``positional`` acceptance.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from simulator.inputs.errors import SpecsimError
from simulator.sim2real.bench_result import FIELD
from simulator.vllm_synthetic import length_to_rates, positional_block

SPEC_METRICS = ("spec_decode_acceptance_length", "spec_decode_acceptance_rate")
PER_POSITION = "spec_decode_per_position_acceptance_rates"


def predicted_spec_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """The simulation's values of vLLM's two acceptance fields (none without speculation)."""
    length = summary.get("mean_acceptance_length")
    if length is None or not math.isfinite(float(length)):
        return {}
    return {"spec_decode_acceptance_length": float(length),
            "spec_decode_acceptance_rate": 100.0 * float(summary["acceptance_rate"])}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def measured_acceptance(data: Mapping[str, Any], k: int) -> dict[str, Any]:
    """The result's acceptance as a ``positional`` block (``k``: the scenario's drafts per
    step, used to resolve a mean length when the per-position rates are absent)."""
    rates = data.get(PER_POSITION)
    if isinstance(rates, list) and rates:
        if not all(_number(r) and 0 <= r <= 1 for r in rates) or \
                any(b > a + 1e-9 for a, b in zip(rates, rates[1:])):
            raise SpecsimError("expected non-increasing rates in [0, 1]",
                               field=f"{FIELD}.{PER_POSITION}")
        return positional_block([float(r) for r in rates],
                                f"measured: the result's {PER_POSITION} {rates}")
    length = data.get("spec_decode_acceptance_length")
    if _number(length) and 1 <= length <= k + 1:
        return positional_block(length_to_rates(float(length), k),
                                f"measured: the result's spec_decode_acceptance_length "
                                f"{length:g}, resolved as vLLM's synthetic length")
    raise SpecsimError("the result holds no speculative-decoding acceptance (per-position "
                       f"rates, or a mean length from 1 to {k + 1})", field=FIELD,
                       fix="save a result of a speculating server, or drop "
                           "--acceptance-from-result")
