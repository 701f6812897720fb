"""YAML in, validated plain values out: the one boundary where user data enters.

Every loader in the project goes through these helpers so that a malformed file, an
unknown key, a string where a number belongs, NaN, a negative or an absurd value all
produce one :class:`SpecsimError` that names the file and the field.

Parsing keeps ``yaml.safe_load``'s semantics (only plain data: mappings, lists, strings,
numbers, booleans, null, timestamps) and adds the guards a hostile file needs (see
docs/limits.md):

- a file larger than :data:`MAX_YAML_BYTES` is refused before it is read;
- a key written twice in one mapping is an error naming the key and both lines (PyYAML
  would silently keep the last one);
- alias uses are capped (:data:`MAX_YAML_ALIASES`) and so is the number of values the
  document would have with every alias expanded (:data:`MAX_YAML_NODES`), counted on the
  parse events before any node is built, so a "billion laughs" document is refused after
  a few hundred events;
- an alias inside the node it names (a recursive document) is refused;
- nesting deeper than :data:`MAX_YAML_DEPTH` is refused before Python's recursion limit
  can be reached;
- messages echo user values through :func:`short`, which cuts them to
  :data:`MAX_ECHO_CHARS` characters.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from yaml.composer import ComposerError
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from simulator.inputs.errors import SpecsimError

try:  # libyaml (C) parses and composes when present; construction stays in Python
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.composer import Composer
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser, Composer):
        """Pure-Python reader, scanner, parser and composer."""

        def __init__(self, stream) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            Composer.__init__(self)

# Limits on one YAML document (documented in docs/limits.md).  A scenario, profile,
# model, sweep or plan file is a few kilobytes; these leave room for large inline lists
# (say, 100,000 empirical lengths) while keeping a hostile file's cost to seconds.
MAX_YAML_BYTES = 16 * 2**20        # file (or text) size, checked before parsing
MAX_YAML_ALIASES = 10_000          # alias uses (*name) per document
MAX_YAML_NODES = 1_000_000         # nodes with every alias expanded (billion laughs)
MAX_YAML_DEPTH = 64                # nesting of lists and mappings
MAX_ECHO_CHARS = 80                # longest user value echoed in an error message


def clip(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters with ``...`` when longer."""
    text = str(text)
    if len(text) > 4 * limit:
        text = text[:4 * limit]
    text = " ".join(text.splitlines()) if ("\n" in text or "\r" in text) else text
    return text if len(text) <= limit else text[:limit - 3] + "..."


def short(value: Any, limit: int = MAX_ECHO_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters: how error messages echo user values.

    Long strings are cut before ``repr`` runs and large containers are summarised, so a
    10 MB string or a million-item list costs nothing to describe.
    """
    if isinstance(value, str):
        return clip(repr(value[:4 * limit]) if len(value) > 4 * limit else repr(value), limit)
    if isinstance(value, (list, tuple, set, frozenset, dict)) and len(value) > limit // 2:
        return f"<{type(value).__name__} of {len(value)} items>"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"<integer of {len(str(value)) if value.bit_length() < 10_000 else 'many'} digits>"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails still needs a description
        text = f"<{type(value).__name__}>"
    return clip(text, limit)


def _num(x: float) -> str:
    """A bound for a message: 1024, 0.5, 1e+30 (whole numbers without a trailing .0)."""
    if isinstance(x, int) or (float(x).is_integer() and abs(x) < 1e16):
        return str(int(x))
    return f"{x:g}"


class _Refused(ComposerError):
    """A document refused by a guard (not a syntax error): carries its own fix."""

    def __init__(self, problem: str, mark, fix: str) -> None:
        super().__init__(None, None, problem, mark)
        self.fix = fix


def _check_events(text: str) -> None:
    """Walk the parse events once (no nodes built) and enforce the document limits.

    Counts every value as the document would have it with each alias expanded (an
    anchored node's expanded size is known when its end event arrives), so a "billion
    laughs" file is refused after a few hundred events.
    """
    parser = _Parser(text)
    try:
        stack: list[tuple[str | None, int]] = []   # (anchor, expanded count at its start)
        sizes: dict[str, int] = {}                 # anchor -> expanded size of its node
        expanded = aliases = 0
        while parser.check_event():
            event = parser.get_event()
            kind = type(event)
            if kind is yaml.ScalarEvent:
                expanded += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            elif kind is yaml.SequenceStartEvent or kind is yaml.MappingStartEvent:
                if len(stack) >= MAX_YAML_DEPTH:
                    raise _Refused(f"lists and mappings nested deeper than {MAX_YAML_DEPTH} "
                                   "levels", event.start_mark, "flatten the structure")
                stack.append((event.anchor, expanded))
                expanded += 1
            elif kind is yaml.SequenceEndEvent or kind is yaml.MappingEndEvent:
                anchor, before = stack.pop()
                if anchor is not None:
                    sizes[anchor] = expanded - before
            elif kind is yaml.AliasEvent:
                aliases += 1
                if aliases > MAX_YAML_ALIASES:
                    raise _Refused(f"more than {MAX_YAML_ALIASES:,} alias uses (*name)",
                                   event.start_mark, "write the data out, or use fewer aliases")
                if any(event.anchor == a for a, _ in stack):
                    raise _Refused(f"alias *{clip(event.anchor)} is used inside the node it "
                                   "names (a recursive document)", event.start_mark,
                                   "point the alias at a node outside it")
                expanded += sizes.get(event.anchor, 1)  # undefined: the composer says so
            else:
                continue
            if expanded > MAX_YAML_NODES:
                raise _Refused(f"the document has more than {MAX_YAML_NODES:,} values "
                               "(counting each alias at its full size)", event.start_mark,
                               "give large data as a trace file, or use fewer aliases")
    finally:
        parser.dispose()


class _GuardedConstructor(SafeConstructor):
    """SafeConstructor that refuses duplicate keys and turns value errors into YAML errors."""

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError, TypeError) as exc:  # e.g. 2023-13-45, 5000 digits
            raise _Refused(f"cannot read the value {short(getattr(node, 'value', None), 40)}: "
                           f"{clip(exc, 100)}", node.start_mark, "correct that value") from None

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # '<<: *base' merges; explicit keys may override merged ones
                key = self.construct_object(key_node, deep=True)
                try:  # by type too: 1 and true are equal in Python but not the same key
                    first = seen.get((type(key), key))
                except TypeError:  # unhashable: the base class reports it
                    continue
                if first is not None:
                    raise _Refused(f"duplicate key {short(key)} (first on line {first + 1})",
                                   key_node.start_mark, "keep one of the two")
                seen[(type(key), key)] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


class _Loader(_Parser, _GuardedConstructor, Resolver):
    """``yaml.SafeLoader`` semantics, with duplicate keys refused."""

    def __init__(self, stream) -> None:
        _Parser.__init__(self, stream)
        _GuardedConstructor.__init__(self)
        Resolver.__init__(self)


def _too_large(size: int, source: str) -> SpecsimError:
    return SpecsimError(f"the file is {size / 2**20:.1f} MiB; YAML input is limited to "
                        f"{MAX_YAML_BYTES // 2**20} MiB", source=source,
                        fix="split the file, or give large data as a trace file")


def load_yaml_file(path: str | Path) -> Any:
    """Read a YAML file (at most MAX_YAML_BYTES) and parse it; errors name the file."""
    path = Path(path)
    try:
        if not path.exists():
            raise SpecsimError("file not found", source=clip(path, 200), fix="check the path")
        if not path.is_file():
            raise SpecsimError("not a regular file", source=clip(path, 200),
                               fix="name a YAML file")
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise _too_large(size, clip(path, 200))
        with path.open("rb") as handle:
            data = handle.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise SpecsimError(f"cannot read file: {clip(exc.strerror or exc, 120)}",
                           source=clip(path, 200)) from None
    if len(data) > MAX_YAML_BYTES:
        raise _too_large(len(data), clip(path, 200))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecsimError(f"not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x})",
                           source=clip(path, 200), fix="save the file as UTF-8") from None
    return parse_yaml_text(text, source=clip(path, 200))


def _tab_indented(text: str, line: int) -> bool:
    lines = text.splitlines()
    for i in (line, line - 1):
        if 0 <= i < len(lines):
            row = lines[i]
            if "\t" in row[:len(row) - len(row.lstrip(" \t"))]:
                return True
    return False


def parse_yaml_text(text: str, *, source: str) -> Any:
    """Parse YAML text with ``yaml.safe_load`` semantics and the limits above.

    A syntax error names its line; an empty text gives None (callers say what they need).
    """
    if len(text) > MAX_YAML_BYTES:
        raise _too_large(len(text.encode("utf-8", "replace")), source)
    loader = None
    try:
        _check_events(text)  # limits first: nothing is built for a refused document
        loader = _Loader(text)
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        # a MarkedYAMLError (scanner, parser, composer, constructor) says where; a reader's
        # error (a bad byte) does not
        marked = exc if isinstance(exc, yaml.MarkedYAMLError) else None
        mark = (marked.problem_mark or marked.context_mark) if marked else None
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = (marked.problem if marked else None) or str(exc).splitlines()[0]
        context = marked.context if marked else None
        if context and marked.problem:
            problem = f"{context} {problem}" if context.startswith("expected") \
                else f"{problem} ({context})"
        fix = exc.fix if isinstance(exc, _Refused) else "correct the YAML syntax"
        if mark is not None and _tab_indented(text, mark.line):
            problem, fix = "a tab in the indentation", "indent with spaces; YAML forbids tabs"
        elif "\t" in str(problem) and "cannot start any token" in str(problem):
            problem, fix = "a tab where YAML expects a token", "use spaces instead of tabs"
        elif "nesting depth" in str(problem):  # libyaml's own limit (1000 levels)
            fix = f"flatten the structure (at most {MAX_YAML_DEPTH} levels)"
        raise SpecsimError(f"malformed YAML: {where}{clip(problem, 160)}", source=source,
                           fix=fix) from None
    except RecursionError:  # a guard above should have caught it first
        raise SpecsimError(f"malformed YAML: nested too deeply (limit {MAX_YAML_DEPTH} levels)",
                           source=source, fix="flatten the structure") from None
    finally:
        if loader is not None:
            loader.dispose()


def _describe(data: Any) -> str:
    if data is None:
        return "nothing (an empty document or a null value)"
    if isinstance(data, list):
        return f"a list of {len(data)} items"
    return f"{type(data).__name__} {short(data)}"


def require_mapping(data: Any, *, source: str, field: str | None = None) -> Mapping[str, Any]:
    """Return ``data`` if it is a mapping with string keys, else raise."""
    if not isinstance(data, Mapping):
        fix = "write 'key: value' lines" if field is None else f"write {field}: {{key: value}}"
        if data is None and field is None:
            raise SpecsimError("the document is empty (nothing but blanks or comments)",
                               source=source, fix=fix)
        raise SpecsimError(f"expected a mapping of keys to values, got {_describe(data)}",
                           source=source, field=field, fix=fix)
    for key in data:
        if not isinstance(key, str):
            raise SpecsimError(f"key {short(key)} is not a string", source=source, field=field,
                               fix="quote the key")
    return data


def check_keys(data: Mapping[str, Any], *, allowed: Iterable[str], required: Iterable[str] = (),
               source: str, prefix: str = "") -> None:
    """Reject unknown keys (listing the valid ones) and missing required keys."""
    allowed = list(allowed)
    for key in data:
        if key not in allowed:
            raise SpecsimError(f"unknown key {short(key)}", source=source,
                               field=prefix + clip(key),
                               fix="valid keys are: " + ", ".join(sorted(allowed)))
    for key in required:
        if key not in data:
            raise SpecsimError("missing required key", source=source, field=prefix + key,
                               fix=f"add '{key}: ...'")


def as_number(value: Any, *, source: str, field: str, minimum: float | None = None,
              maximum: float | None = None, strictly_positive: bool = False,
              integer: bool = False, fix: str | None = None) -> float | int:
    """Validate a number: no bools, no strings, finite, within bounds.

    ``fix`` replaces the generic advice given when the value is out of bounds.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecsimError(f"expected a number, got {type(value).__name__} {short(value)}",
                           source=source, field=field,
                           fix="write a plain number such as 1.5 or 3.12e+14 (YAML needs the "
                               "'.' and the sign in exponents)")
    if not math.isfinite(value):
        raise SpecsimError(f"must be finite, got {short(value)}", source=source, field=field,
                           fix=fix or "write a finite number")
    if integer:
        if isinstance(value, float) and not value.is_integer():
            raise SpecsimError(f"expected a whole number, got {short(value)}", source=source,
                               field=field, fix=fix)
        value = int(value)
    if strictly_positive and value <= 0:
        raise SpecsimError(f"must be greater than zero, got {short(value)}", source=source,
                           field=field, fix=fix)
    if minimum is not None and value < minimum:
        raise SpecsimError(f"must be at least {_num(minimum)}, got {short(value)}",
                           source=source, field=field, fix=fix)
    if maximum is not None and value > maximum:
        raise SpecsimError(f"must be at most {_num(maximum)}, got {short(value)}",
                           source=source, field=field, fix=fix)
    return value


def as_bool(value: Any, *, source: str, field: str) -> bool:
    """Validate a YAML boolean."""
    if not isinstance(value, bool):
        raise SpecsimError(f"expected true or false, got {short(value)}", source=source,
                           field=field)
    return value


def as_str(value: Any, *, source: str, field: str, choices: Iterable[str] | None = None) -> str:
    """Validate a string, optionally one of ``choices``."""
    if not isinstance(value, str) or not value:
        # YAML 1.1 reads unquoted on/off/yes/no as booleans ("steps_table: off")
        fix = "quote it (YAML reads unquoted on, off, yes and no as true or false)" \
            if isinstance(value, bool) else None
        raise SpecsimError(f"expected a non-empty string, got {short(value)}", source=source,
                           field=field, fix=fix)
    if choices is not None:
        choices = list(choices)
        if value not in choices:
            raise SpecsimError(f"unknown value {short(value)}", source=source, field=field,
                               fix="choose one of: " + ", ".join(choices))
    return value
