"""vLLM's synthetic rejection sampling as an acceptance model.

``speculative_config: {rejection_sample_method: synthetic, synthetic_acceptance_rates: [...]}``
makes vLLM accept drafts against declared rates instead of the target's distribution
(vllm/config/speculative.py: exactly one of ``synthetic_acceptance_rates`` -- one
*unconditional* rate per position, length ``num_speculative_tokens``, in [0, 1] and
non-increasing, entry i the probability that the first i + 1 drafts are all accepted -- and
``synthetic_acceptance_length``, a mean acceptance length in [1, k + 1] resolved to the
least-variance rates: (length - 1) whole positions accepted, then the fraction, then 0).
The same acceptance here is the ``positional`` model with conditional rates
``u_i / u_{i-1}``: P(first i accepted) is u_i either way.
"""
from __future__ import annotations

from typing import Any, Mapping

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number, as_str, short

METHODS = ("standard", "synthetic")
KEYS = ("rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length")


def length_to_rates(length: float, k: int) -> list[float]:
    """vLLM's resolution of a mean acceptance length into unconditional rates."""
    accepted = length - 1.0
    return [min(1.0, max(0.0, accepted - i)) for i in range(k)]


def _rates(value: Any, k: int, source: str, field: str) -> list[float]:
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise SpecsimError(f"expected a list of {k} rates, got {short(value)}", source=source,
                           field=field)
    rates = [float(as_number(v, source=source, field=f"{field}[{i}]", minimum=0.0,
                             maximum=1.0)) for i, v in enumerate(value)]
    if len(rates) != k:
        raise SpecsimError(f"has {len(rates)} rates for num_speculative_tokens {k}",
                           source=source, field=field, fix=f"give {k} rates")
    if any(b > a for a, b in zip(rates, rates[1:])):
        raise SpecsimError("must not increase from one position to the next (each is the "
                           "probability that every draft up to it is accepted)",
                           source=source, field=field)
    return rates


def synthetic_acceptance(spec: Mapping[str, Any], k: int, source: str,
                         field: str) -> dict[str, Any] | None:
    """The scenario's ``acceptance`` block for a synthetic speculative_config, else None."""
    method = as_str(spec.get("rejection_sample_method", "standard"), source=source,
                    field=field + ".rejection_sample_method", choices=METHODS)
    given = [key for key in KEYS[1:] if spec.get(key) is not None]
    if method == "standard":
        if given:
            raise SpecsimError("only goes with rejection_sample_method: synthetic",
                               source=source, field=f"{field}.{given[0]}")
        return None
    if len(given) != 1:
        raise SpecsimError("rejection_sample_method synthetic needs exactly one of "
                           "synthetic_acceptance_rates and synthetic_acceptance_length",
                           source=source, field=field + ".rejection_sample_method")
    if given[0] == KEYS[1]:
        rates = _rates(spec[KEYS[1]], k, source, f"{field}.{KEYS[1]}")
        said = f"synthetic_acceptance_rates {rates}"
    else:
        length = float(as_number(spec[KEYS[2]], source=source, field=f"{field}.{KEYS[2]}",
                                 minimum=1.0, maximum=k + 1.0))
        rates, said = length_to_rates(length, k), f"synthetic_acceptance_length {length:g}"
    return positional_block(rates, f"vLLM's synthetic rejection sampling ({said}, "
                                   "unconditional per position), as conditional rates")


def positional_block(rates: list[float], source: str) -> dict[str, Any]:
    """The ``positional`` acceptance block of unconditional per-position rates u_i (the
    probability that the first i drafts are all accepted): conditional rates u_i / u_{i-1}."""
    conditional = [r / prev if prev > 0 else 0.0 for prev, r in zip([1.0] + rates, rates)]
    return {"model": "positional", "rates": [float(f"{c:.12g}") for c in conditional],
            "source": source}

