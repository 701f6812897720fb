"""``run --compare``: the policies to run on one trace and seed, each with its parameters and,
optionally, an acceptance of its own.

``none,chain:gamma=4,specinfer:expansion=[2,2,1]``: a comma starts a new policy unless the
next item is another ``key=value`` of the current one; values are YAML (lists in brackets,
mappings in braces).  Two keys set the entry's acceptance (the scenario's ``acceptance``
block for that run) rather than a policy parameter:

- ``acceptance=<mapping or file>``: a whole acceptance mapping,
  ``acceptance={model: iid, alpha: 0.7, source: "..."}``, or a YAML file holding one
  (``acceptance=eagle3-acceptance.yaml``, relative to the working directory);
- ``acceptance.<field>=<value>``: one field of the scenario's block changed
  (``chain:gamma=2,acceptance.alpha=0.7``); its ``source`` and ``measured_for`` are dropped
  unless given, since they described the numbers as written; naming ``acceptance.model``
  starts a new mapping.

A whole mapping is checked as the entry is read; a changed field when the scenario is known
(``Scenario.with_policy``, before any simulation); either error names ``--compare``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import load_yaml_file, parse_yaml_text, require_mapping, short

FIELD = "--compare"
ACCEPTANCE_FIX = ("write acceptance={model: iid, alpha: 0.7, source: ...}, "
                  "acceptance=FILE.yaml or acceptance.alpha=0.7")


@dataclass(frozen=True)
class AcceptanceOverride:
    """A --compare entry's acceptance: a whole mapping and/or changed fields, as written."""

    whole: Mapping[str, Any] | None = None
    fields: tuple[tuple[str, Any], ...] = ()
    written: tuple[str, ...] = ()          # the entry's acceptance items, for its label

    def apply(self, base: Mapping[str, Any], *, where: str) -> dict[str, Any]:
        """The run's acceptance mapping over the scenario's ``base``, validated."""
        from simulator.acceptance import acceptance_from_config
        changed = dict(self.fields)
        if self.whole is not None:
            cfg = dict(self.whole)
        elif "model" in changed:
            cfg = {}
        else:
            cfg = {k: v for k, v in base.items() if k not in ("source", "measured_for")}
        cfg.update(changed)
        try:
            acceptance_from_config(cfg, source=f"{FIELD} {where}: acceptance")
        except SpecsimError as exc:
            raise exc.relocated(source=f"{FIELD} {where}", prefix="acceptance.") from None
        return cfg


def split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets, so ``expansion=[2,2,1]`` stays one value."""
    parts, depth, cur = [], 0, []
    for ch in text:
        depth += ch in "[{("
        depth -= ch in "]})"
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _whole(value: Any, part: str) -> Mapping[str, Any]:
    """``acceptance=``'s value: a mapping, or the name of a YAML file holding one."""
    from simulator.acceptance import acceptance_from_config
    where = f"{FIELD} {short(part)}: acceptance"
    if isinstance(value, str) and value.endswith((".yaml", ".yml")):
        path = Path(value).expanduser()
        if not path.is_file():
            raise SpecsimError(f"no acceptance file {short(value)}", field=FIELD,
                               fix="give an existing YAML file (relative to the working "
                                   "directory), or " + ACCEPTANCE_FIX)
        value, where = load_yaml_file(path), str(path)
        base_dir = path.resolve().parent
    else:
        base_dir = None
    if not isinstance(value, Mapping):
        raise SpecsimError(f"acceptance must be a mapping or a .yaml file, got {short(value)}",
                           field=FIELD, fix=ACCEPTANCE_FIX)
    value = dict(require_mapping(value, source=where))
    acceptance_from_config(value, source=where, base_dir=base_dir)
    return value


def entry(part: str) -> tuple[dict[str, Any], AcceptanceOverride | None]:
    """One entry: (the policy mapping, its acceptance or None)."""
    name, _, rest = part.partition(":")
    data: dict[str, Any] = {"name": name.strip()}
    whole, fields, written = None, [], []
    for kv in split_top_level(rest):
        if "=" not in kv:
            raise SpecsimError(f"cannot read {short(kv)} in {short(part)}", field=FIELD,
                               fix="write policies as name:key=value,key=value")
        key, value = (s.strip() for s in kv.split("=", 1))
        parsed = parse_yaml_text(value, source=FIELD)
        if key == "acceptance":
            whole = _whole(parsed, part)
        elif key.startswith("acceptance."):
            sub = key[len("acceptance."):]
            if not sub or "." in sub:
                raise SpecsimError(f"cannot read {short(key)} in {short(part)}", field=FIELD,
                                   fix=ACCEPTANCE_FIX)
            fields.append((sub, parsed))
        else:
            data[key] = parsed
            continue
        written.append(f"{key}={value}")
    if not written:
        return data, None
    return data, AcceptanceOverride(whole, tuple(fields), tuple(sorted(written)))


def entries(text: str) -> list[tuple[dict[str, Any], AcceptanceOverride | None]]:
    """The entries of a --compare text, as (policy mapping, acceptance or None)."""
    parts: list[str] = []
    for token in split_top_level(text or ""):
        head = token.split("=", 1)[0]
        if parts and "=" in token and ":" not in head:
            parts[-1] += "," + token  # another key=value of the previous policy
        else:
            parts.append(token)
    if not parts:
        raise SpecsimError("no policy given", field=FIELD, fix="e.g. --compare none,chain")
    return [entry(part) for part in parts]
