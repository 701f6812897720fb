"""argparse value types shared by the subcommands: each rejects bad text with one line.

The limits below bound every number a flag gives before anything is allocated from it
(README.md, "Limits").  They match the analytic fields of ``simulator.planning.gamma_map.FIELDS``
where one exists.
"""
from __future__ import annotations

import argparse
import math

from simulator.inputs.yaml_io import short

# Largest values a flag accepts (each check is one clear error, before any work).
MAX_BATCH = 1_000_000          # requests in one analytic step (gamma_map.FIELDS["batch"])
MAX_CONTEXT_TOKENS = 10_000_000  # context length of an analytic point, in tokens
MAX_GAMMA = 64                 # draft tokens per iteration (gamma_map.FIELDS["gamma"])
MAX_CURVE_GAMMA = 1024         # `specsim gamma --max-gamma`: closed forms only, no cost model
MAX_C = 1_000.0                # Leviathan's c = draft / target step time
MAX_TENSOR_PARALLEL = 1024     # devices per replica (scenario parallelism.* limit)
MAX_WORKERS = 256              # processes of the local pool
MAX_ECHO = 60                  # characters of a flag's text echoed in an error


def _number(text: str, kind):
    """``kind(text)``; a whole number may be written 1e6 (a float that is whole)."""
    try:
        return kind(text)
    except ValueError:
        pass
    if kind is int:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value.is_integer():
            return int(value)
    what = "a whole number" if kind is int else "a number"
    raise argparse.ArgumentTypeError(f"expected {what}, got {short(text, MAX_ECHO)}") from None


def _limit(value, maximum, text: str):
    if maximum is not None and value > maximum:
        shown = f"{int(maximum):,}" if float(maximum).is_integer() else f"{maximum:g}"
        raise argparse.ArgumentTypeError(f"must be at most {shown}, got "
                                         f"{short(text, MAX_ECHO)} (the limit keeps the "
                                         "work bounded; see README 'Limits')")
    return value


def bounded_int(maximum: int | None, minimum: int = 1):
    """An argparse type: a whole number in ``[minimum, maximum]``."""
    def parse(text: str) -> int:
        try:
            value = _number(text, int)
        except argparse.ArgumentTypeError:
            span = f"{minimum} to {maximum:,}" if maximum is not None else f">= {minimum}"
            raise argparse.ArgumentTypeError(f"expected one whole number, {span}, got "
                                             f"{short(text, MAX_ECHO)}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got "
                                             f"{short(text, MAX_ECHO)}")
        return _limit(value, maximum, text)
    parse.__name__ = "whole number"
    return parse


def bounded_float(maximum: float | None, minimum: float = 0.0, *, strict: bool = False):
    """An argparse type: a finite number in ``[minimum, maximum]`` (``strict``: > minimum)."""
    def parse(text: str) -> float:
        value = _number(text, float)
        low_ok = value > minimum if strict else value >= minimum
        if not (math.isfinite(value) and low_ok):
            raise argparse.ArgumentTypeError(
                f"must be a finite number {'>' if strict else '>='} {minimum:g}, got "
                f"{short(text, MAX_ECHO)}")
        return _limit(value, maximum, text)
    parse.__name__ = "number"
    return parse


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    value = _number(text, int)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {short(text, MAX_ECHO)}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _number(text, float)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got "
                                         f"{short(text, MAX_ECHO)}")
    return value


def nonneg_float(text: str) -> float:
    """A finite number >= 0."""
    value = _number(text, float)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got "
                                         f"{short(text, MAX_ECHO)}")
    return value


def unit_float(text: str) -> float:
    """A number in [0, 1]."""
    value = _number(text, float)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {short(text, MAX_ECHO)}")
    return value
