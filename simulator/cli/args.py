"""argparse value types shared by the subcommands: each rejects bad text with one line.

The limits below bound every number a flag gives before anything is allocated from it
(docs/limits.md).  They match the analytic fields of ``simulator.planning.analytic.FIELDS``
where one exists.
"""
from __future__ import annotations

import argparse
import math
import re

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import short

# Largest values a flag accepts (each check is one clear error, before any work).
MAX_BATCH = 1_000_000          # requests in one analytic step (analytic.FIELDS["batch"])
MAX_CONTEXT_TOKENS = 10_000_000  # context length of an analytic point, in tokens
MAX_GAMMA = 64                 # draft tokens per iteration (analytic.FIELDS["gamma"])
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
                                         "work bounded; see docs/limits.md)")
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


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _number(text, float)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got "
                                         f"{short(text, MAX_ECHO)}")
    return value


def unit_float(text: str) -> float:
    """A number in [0, 1]."""
    value = _number(text, float)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {short(text, MAX_ECHO)}")
    return value


def add_executor_arguments(p: argparse.ArgumentParser, default: str = "local") -> None:
    """--executor, --workers, --address and --no-progress (shared with ``plan``)."""
    from simulator.planning.executors import EXECUTORS  # multiprocessing: not for `run`
    choices = tuple(EXECUTORS) + (("auto",) if default == "auto" else ())
    p.add_argument("--executor", choices=choices, default=default,
                   help=f"where points run (default {default}"
                        + (": one process for analytic sweeps under 20,000 points, else the "
                           "local pool" if default == "auto" else "")
                        + "; ray needs pip install 'specsim[ray]')")
    p.add_argument("--workers", type=bounded_int(MAX_WORKERS), default=None,
                   help=f"processes for the local pool (default: every core; at most "
                        f"{MAX_WORKERS})")
    p.add_argument("--address", default=None, help="Ray cluster address (with --executor ray)")
    p.add_argument("--no-progress", action="store_true")


# Most values one list flag (--batch 1-5000, --gamma 0,1,2...) may expand to; a range's
# size is checked before it is expanded.  docs/limits.md.
MAX_LIST_VALUES = 10_000


def parse_number_list(text: str, *, field: str, integer: bool = True,
                      minimum: float = 0, maximum: float | None = None,
                      max_count: int = MAX_LIST_VALUES, ordered: bool = False) -> list:
    """``1,2,4``, a range ``0-8`` (integers) or both mixed, into a sorted list of distinct
    values (``ordered``: as given, repeats kept, e.g. per-rank rates).

    Every value must be finite and within ``[minimum, maximum]``; at most ``max_count``
    values, a range's size being checked before it is expanded.
    """
    values: list = []
    seen: set = set()

    def add(value) -> None:
        if ordered or value not in seen:
            values.append(value)
            seen.add(value)
    shown = short(str(text), 60)
    fix = "write a list like 1,2,4" + (" or a range like 0-8" if integer else "")

    def over(value) -> SpecsimError:
        return SpecsimError(f"{value:,} is above the limit of {maximum:,}, in {shown}",
                            field=field, fix=f"keep the values at most {maximum:,}")

    def too_many(count: int) -> SpecsimError:
        return SpecsimError(f"{shown} gives {count:,} values; the limit is {max_count:,}",
                            field=field, fix="give fewer values (a coarser list)")

    try:
        for part in filter(None, (s.strip() for s in str(text).split(","))):
            m = re.fullmatch(r"(\d{1,18})-(\d{1,18})", part) if integer else None
            if m:
                lo, hi = int(m.group(1)), int(m.group(2))
                if hi < lo:
                    raise SpecsimError(f"the range {short(part, 40)} runs backwards",
                                       field=field, fix=f"write it low-high, as {hi}-{lo}")
                if maximum is not None and hi > maximum:
                    raise over(hi)
                if hi - lo + 1 > max_count:
                    raise too_many(hi - lo + 1)
                for value in range(lo, hi + 1):
                    add(value)
            else:
                value = float(part)
                if not math.isfinite(value):
                    raise SpecsimError(f"needs finite numbers, got {short(part, 40)}",
                                       field=field, fix=fix)
                if integer and not value.is_integer():
                    raise ValueError
                if maximum is not None and value > maximum:
                    raise over(int(value) if integer else value)
                add(int(value) if integer else value)
            if len(values) > max_count:
                raise too_many(len(values))
    except SpecsimError:
        raise
    except ValueError:
        raise SpecsimError(f"cannot read {shown}", field=field, fix=fix) from None
    if not values or min(values) < minimum:
        raise SpecsimError(f"needs numbers >= {minimum:g}, got {shown}", field=field, fix=fix)
    return values if ordered else sorted(values)
