"""Parameters as data: ``Param`` (type, bounds, default, aliases) and ``parse_params``, which
checks a mapping of raw values against a table of them (policy knobs, analytic sweep
fields); ``given`` tells whether a user set an optional value."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_bool, as_number, as_str, check_keys


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
                 prefix: str = "policy.") -> dict[str, Any]:
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
    return out


def given(raw: dict, spec: dict, name: str) -> str | None:
    """The key under which ``name`` (or one of its aliases) was given in ``raw``, if any."""
    for key in (name,) + spec[name].aliases:
        if key in raw:
            return key
    return None
