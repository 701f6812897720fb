"""An output that would land on one of the same command's inputs is refused, before any work.

``specsim tokenize in.jsonl -o in.jsonl --overwrite`` would replace the file it is reading;
``./sub/../in.jsonl``, a symbolic link or a hard link to it is the same file under another
name.  Every command that reads and writes files passes its outputs and its inputs here
first: paths are compared resolved (``..`` and links followed) and, when both exist, by
device and inode (hard links).  A results folder (``run --out``, ``validate --out``) is
replaced whole, so an input anywhere inside it clashes too.  ``--overwrite`` does not lift
this: it allows replacing a file specsim did not write, never the input being read.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from simulator.inputs.errors import SpecsimError

PathLike = str | Path


def _resolved(path: PathLike) -> Path | None:
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        return None


def _same_file(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): the resolved paths decided
        return False


def _clashes(out: Path, source: Path, folder: bool) -> bool:
    if _same_file(out, source):
        return True
    return folder and out in source.parents


def check_outputs_not_inputs(outputs: Iterable[tuple[str, PathLike | None]],
                             inputs: Iterable[PathLike | None], *,
                             folders: Iterable[str] = ()) -> None:
    """Refuse an output that resolves to one of ``inputs`` (``None`` entries are skipped).

    ``outputs`` are ``(flag, path)`` pairs; a flag in ``folders`` names a results folder,
    which also clashes with any input inside it.
    """
    from simulator.inputs.yaml_io import clip
    folder_flags = set(folders)
    sources = [(p, _resolved(p)) for p in inputs if p is not None and str(p) != ""]
    for flag, out in outputs:
        if out is None or str(out) == "":
            continue
        target = _resolved(out)
        if target is None:
            continue
        for given, source in sources:
            if source is not None and _clashes(target, source, flag in folder_flags):
                where = "holds" if target != source and flag in folder_flags else "is"
                raise SpecsimError(
                    f"{clip(repr(str(out)))} {where} the input {clip(repr(str(given)))} of "
                    "this command; writing it would destroy what is being read", field=flag,
                    fix="write the output to another path (--overwrite never replaces an "
                        "input)")


def workload_files(workload: Mapping[str, Any], base_dir: PathLike) -> list[Path]:
    """The trace files a scenario's ``workload`` mapping reads (its trace and the traces of
    its empirical length distributions), resolved against ``base_dir`` as the workload
    resolves them."""
    found: list[Path] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            trace = node.get("trace")
            if isinstance(trace, str) and trace != "default":
                path = Path(trace).expanduser()
                found.append(path if path.is_absolute() else Path(base_dir) / path)
            for value in node.values():
                walk(value)

    walk(workload)
    return found


def results_dir_files(results_dir: PathLike) -> list[Path]:
    """The files ``specsim report`` reads from a results folder: every file in it but an
    HTML report (which a report may replace); nothing when it is not a folder."""
    folder = Path(results_dir).expanduser()
    try:
        return [p for p in folder.iterdir()
                if p.suffix.lower() not in (".html", ".htm") and not p.is_dir()]
    except OSError:  # not a folder: the report's own check names the problem
        return []
