"""YAML in, validated plain values out: the one boundary where user data enters.

Every loader in the project goes through these helpers so that a malformed file, an
unknown key, a string where a number belongs, NaN, a negative or an absurd value all
produce one :class:`SpecsimError` that names the file and the field.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from simulator.errors import SpecsimError


def load_yaml_file(path: str | Path) -> Any:
    """Read a YAML file with ``yaml.safe_load``; errors name the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecsimError("file not found", source=str(path),
                           fix="check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecsimError(f"cannot read file: {exc}", source=str(path)) from None
    return parse_yaml_text(text, source=str(path))


def parse_yaml_text(text: str, *, source: str) -> Any:
    """Parse YAML text with ``yaml.safe_load``; a syntax error names the line."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecsimError(f"malformed YAML: {where}{problem}", source=source,
                           fix="correct the YAML syntax") from None


def require_mapping(data: Any, *, source: str, field: str | None = None) -> Mapping[str, Any]:
    """Return ``data`` if it is a mapping with string keys, else raise."""
    if not isinstance(data, Mapping):
        kind = "empty" if data is None else type(data).__name__
        raise SpecsimError(f"expected a mapping of keys to values, got {kind}",
                           source=source, field=field)
    for key in data:
        if not isinstance(key, str):
            raise SpecsimError(f"key {key!r} is not a string", source=source, field=field)
    return data


def check_keys(data: Mapping[str, Any], *, allowed: Iterable[str], required: Iterable[str] = (),
               source: str, prefix: str = "") -> None:
    """Reject unknown keys (listing the valid ones) and missing required keys."""
    allowed = list(allowed)
    for key in data:
        if key not in allowed:
            raise SpecsimError(f"unknown key {key!r}", source=source, field=prefix + key,
                               fix="valid keys are: " + ", ".join(sorted(allowed)))
    for key in required:
        if key not in data:
            raise SpecsimError("missing required key", source=source, field=prefix + key,
                               fix=f"add '{key}: ...'")


def as_number(value: Any, *, source: str, field: str, minimum: float | None = None,
              maximum: float | None = None, strictly_positive: bool = False,
              integer: bool = False) -> float | int:
    """Validate a number: no bools, no strings, finite, within bounds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecsimError(f"expected a number, got {type(value).__name__} {value!r}",
                           source=source, field=field,
                           fix="write a plain number such as 1.5 or 3.12e+14 (YAML needs the "
                               "'.' and the sign in exponents)")
    if not math.isfinite(value):
        raise SpecsimError(f"must be finite, got {value!r}", source=source, field=field)
    if integer:
        if isinstance(value, float) and not value.is_integer():
            raise SpecsimError(f"expected a whole number, got {value!r}", source=source,
                               field=field)
        value = int(value)
    if strictly_positive and value <= 0:
        raise SpecsimError(f"must be greater than zero, got {value!r}", source=source,
                           field=field)
    if minimum is not None and value < minimum:
        raise SpecsimError(f"must be at least {minimum}, got {value!r}", source=source,
                           field=field)
    if maximum is not None and value > maximum:
        raise SpecsimError(f"must be at most {maximum}, got {value!r}", source=source,
                           field=field)
    return value


def as_bool(value: Any, *, source: str, field: str) -> bool:
    """Validate a YAML boolean."""
    if not isinstance(value, bool):
        raise SpecsimError(f"expected true or false, got {value!r}", source=source, field=field)
    return value


def as_str(value: Any, *, source: str, field: str, choices: Iterable[str] | None = None) -> str:
    """Validate a string, optionally one of ``choices``."""
    if not isinstance(value, str) or not value:
        raise SpecsimError(f"expected a non-empty string, got {value!r}", source=source,
                           field=field)
    if choices is not None:
        choices = list(choices)
        if value not in choices:
            raise SpecsimError(f"unknown value {value!r}", source=source, field=field,
                               fix="choose one of: " + ", ".join(choices))
    return value
