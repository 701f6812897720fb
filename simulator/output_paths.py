"""Where specsim writes: checked before any work, written atomically, never a foreign byte lost.

The rules every command follows for the paths a user gives (``--out``, ``--report``,
``-o``):

* A file output (a report, a plan table) is written to a temporary sibling and renamed over
  the target.  An existing target is replaced only when specsim wrote it (its first bytes
  carry specsim's mark), or with an explicit ``--overwrite``; a folder, a missing parent or a
  read-only place is one error line.
* A results folder is written into a fresh temporary sibling and renamed into place.  An
  existing folder is replaced only when it is a specsim results folder whose manifest lists
  every entry it holds; anything else is refused (``--overwrite`` writes specsim's files into
  it instead, and refuses if a file there already has one of their names without an earlier
  specsim manifest listing it: nothing else is touched).  Nothing is ever deleted through a symbolic link.
* One writer per target at a time: a lock beside the target (``.specsim-<name>.lock``,
  ``flock``-based, so a killed writer never leaves it held) makes a second concurrent writer
  exit with one line instead of mixing its files with the first.
* Every temporary is named ``.specsim-*`` and removed on any exit, Ctrl-C and SIGTERM
  included.

Every check runs before anything is removed.  OS errors on these paths become one
:class:`SpecsimError` line naming the path and the flag.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from simulator.inputs.errors import SpecsimError
from simulator.output_lock import (  # noqa: F401 - callers import the lock and helpers here
    TEMP_PREFIX,
    OutputLock,
    describe_os_error,
    os_error,
)
from simulator.output_lock import display_path as _display

RESULTS_MARK = "specsim-results"   # manifest.json: {"kind": RESULTS_MARK, "files": [...]}
MANIFEST = "manifest.json"


def _umask() -> int:
    """The process's umask: read from /proc on Linux; elsewhere by setting and restoring it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_parent(path: Path, field: str) -> Path:
    """The folder a new ``path`` would live in: it must exist and be a folder."""
    parent = path.parent
    try:
        if not parent.exists():
            raise SpecsimError(f"the folder {_display(parent)} does not exist", field=field,
                               fix="create it first (mkdir -p) or choose another path")
        if not parent.is_dir():
            raise SpecsimError(f"{_display(parent)} is not a folder", field=field,
                               fix="choose a path inside a folder")
    except OSError as exc:
        raise os_error(exc, path, field, "use") from None
    return parent


# --------------------------------------------------------------------------- files
def has_mark(path: Path, marks: Iterable[bytes], head: int = 4096) -> bool:
    """Whether the first ``head`` bytes of the file at ``path`` contain one of ``marks``."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(head)
    except OSError:
        return False
    return any(m in data for m in marks)


def check_file_target(path: str | Path, field: str, *, marks: Iterable[bytes] = (),
                      overwrite: bool = False, what: str = "file") -> Path:
    """Check that a file may be written at ``path``; return it (not resolved: links stay links).

    An existing regular file is replaced only when it carries one of ``marks`` (specsim wrote
    it) or ``overwrite`` is set.  A folder, a missing parent or anything not a regular file
    is refused.
    """
    if isinstance(path, str) and path.endswith(("/", os.sep)):
        raise SpecsimError(f"{_display(path)} names a folder, not a file", field=field,
                           fix="give a file name such as report.html")
    path = Path(path).expanduser()
    if str(path) in ("", ".") or path.name in ("", ".", ".."):
        raise SpecsimError(f"{_display(path)} names a folder, not a file", field=field,
                           fix="give a file name such as report.html")
    check_parent(path, field)
    try:
        if path.is_symlink():
            raise SpecsimError(f"{_display(path)} is a symbolic link", field=field,
                               fix="give the real file's path, or another path")
        if path.exists():
            if path.is_dir():
                raise SpecsimError(f"{_display(path)} is a folder", field=field,
                                   fix="give a file name such as report.html")
            if not path.is_file():
                raise SpecsimError(f"{_display(path)} is not a regular file", field=field,
                                   fix="choose another path")
            if not overwrite and not has_mark(path, marks):
                raise SpecsimError(f"{_display(path)} exists and was not written by specsim "
                                   f"as a {what}", field=field,
                                   fix="choose another path, or add --overwrite to replace it")
        _probe_writable(path.parent)
    except OSError as exc:
        raise os_error(exc, path, field) from None
    return path


def _probe_writable(folder: Path) -> None:
    """Create and remove a temporary file in ``folder`` (catches read-only places and
    pseudo file systems such as /proc before any work is done); OSError if it fails."""
    fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".probe", dir=folder)
    os.close(fd)
    os.unlink(name)


def write_file_atomic(path: Path, write: Callable[[Path], None], field: str) -> Path:
    """``write(tmp)`` into a temporary sibling, then rename it over ``path``."""
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise os_error(exc, path, field) from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private: as open() would
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise os_error(exc, path, field) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_text_file(path: str | Path, text: str, field: str, *, marks: Iterable[bytes] = (),
                    overwrite: bool = False, what: str = "file") -> Path:
    """Check, lock and atomically write ``text`` to ``path``."""
    path = check_file_target(path, field, marks=marks, overwrite=overwrite, what=what)
    with OutputLock(path, field):
        check_file_target(path, field, marks=marks, overwrite=overwrite, what=what)
        write_file_atomic(path, lambda p: p.write_text(text, encoding="utf-8"), field)
    return path


# --------------------------------------------------------------------------- results folders
def read_results_manifest(folder: Path) -> dict | None:
    """The manifest of a specsim results folder, or None if ``folder`` is not one."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):  # not specsim's
        return None
    if not isinstance(data, dict) or data.get("kind") != RESULTS_MARK:
        return None
    files = data.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return data


def _foreign_entries(folder: Path) -> list[str]:
    """Entries of ``folder`` that its specsim manifest does not list as regular files."""
    manifest = read_results_manifest(folder)
    entries = sorted(os.listdir(folder))
    if manifest is None:
        return entries
    ours = set(manifest["files"]) | {MANIFEST}
    foreign = []
    for name in entries:
        if name not in ours or not (folder / name).is_file() or (folder / name).is_symlink():
            foreign.append(name)
    return foreign


def merge_clashes(folder: Path, names: Iterable[str]) -> list[str]:
    """Which of ``names`` exist in ``folder`` without being files an earlier specsim run
    listed there: ``--overwrite`` must not replace them."""
    manifest = read_results_manifest(folder)
    ours = set(manifest["files"]) | {MANIFEST} if manifest else set()
    out = []
    for name in names:
        entry = folder / name
        if not (entry.exists() or entry.is_symlink()):
            continue
        if name not in ours or entry.is_symlink() or not entry.is_file():
            out.append(name)
    return sorted(out)


def _clash_error(folder: Path, clashes: list[str], field: str) -> SpecsimError:
    shown = ", ".join(clashes[:3]) + (f" and {len(clashes) - 3} more" if len(clashes) > 3
                                      else "")
    return SpecsimError(f"{_display(folder)} holds {shown}, which specsim did not write and "
                        f"would replace", field=field,
                        fix="choose another folder, or move those files away first")


def check_results_target(out: str | Path, field: str = "--out", *,
                         overwrite: bool = False, names: Iterable[str] | None = None) -> Path:
    """Check that a results folder may be written at ``out``; return the path.

    ``out`` may be missing (its parent must exist), an empty folder, or a specsim results
    folder holding nothing its manifest does not list.  With ``overwrite`` any folder is
    accepted and specsim writes its files into it (replacing only files of the same names).
    """
    out = Path(out).expanduser()
    if str(out) in ("",):
        raise SpecsimError("empty path", field=field, fix="name a folder")
    try:
        here = Path.cwd().resolve()
        if not overwrite and out.exists() and (out.resolve() == here
                                               or out.resolve() in here.parents):
            raise SpecsimError(f"{_display(out)} is the current folder or one above it",
                               field=field, fix="name a new folder such as specsim-out")
        if out.is_symlink():
            raise SpecsimError(f"{_display(out)} is a symbolic link; specsim never replaces or "
                               f"deletes through one", field=field,
                               fix="give the real folder's path, or another folder")
        if out.exists():
            if not out.is_dir():
                raise SpecsimError(f"{_display(out)} exists and is not a folder", field=field,
                                   fix="choose another folder")
            if overwrite:  # the names this command will write (the manifest at least)
                clashes = merge_clashes(out, [*(names or ()), MANIFEST])
                if clashes:
                    raise _clash_error(out, clashes, field)
                return out
            foreign = _foreign_entries(out)
            if foreign:
                shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more"
                                                  if len(foreign) > 3 else "")
                raise SpecsimError(f"{_display(out)} is not an empty folder or a specsim "
                                   f"results folder (it holds {shown})", field=field,
                                   fix="choose another folder, or add --overwrite to write "
                                       "specsim's files into it and leave the rest alone")
            return out
        check_parent(out.absolute(), field)
    except OSError as exc:
        raise os_error(exc, out, field, "use") from None
    except RuntimeError:  # Path.resolve() on a symlink loop (Python < 3.13)
        raise SpecsimError(f"{_display(out)} is a loop of symbolic links", field=field,
                           fix="choose another folder") from None
    return out


class ResultsFolderWriter:
    """Write a results folder at ``out`` safely; use as a context manager.

    ``__enter__`` checks the target, takes the lock and makes the temporary sibling
    (``.path``) that the caller fills; ``commit(files)`` writes the manifest and puts the
    folder in place; leaving the block without a commit removes the temporary.
    """

    def __init__(self, out: str | Path, field: str = "--out", *, overwrite: bool = False,
                 names: Iterable[str] | None = None) -> None:
        self.out = Path(out).expanduser()
        self.field = field
        self.overwrite = overwrite
        self.names = list(names) if names is not None else None  # what it expects to write
        self.path: Path | None = None
        self._lock: OutputLock | None = None

    def __enter__(self) -> "ResultsFolderWriter":
        check_results_target(self.out, self.field, overwrite=self.overwrite, names=self.names)
        parent = self.out.absolute().parent
        self._lock = OutputLock(self.out.absolute(), self.field)
        try:
            check_results_target(self.out, self.field, overwrite=self.overwrite,
                                 names=self.names)
            self.path = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{self.out.name}-",
                                              dir=parent))
        except OSError as exc:
            self._lock.release()
            raise os_error(exc, self.out, self.field) from None
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        tmp = self.path
        try:
            if self.path is not None and self.path.exists():
                shutil.rmtree(self.path, ignore_errors=True)  # our own fresh temporary
        finally:
            if self._lock is not None:
                self._lock.release()
        if isinstance(exc, OSError):  # filling the folder failed (a full disk): name the file
            name = Path(exc.filename) if isinstance(exc.filename, (str, Path)) else None
            where = self.out / name.name if name is not None and tmp is not None and \
                name.parent == tmp else (name or self.out)
            raise os_error(exc, where, self.field) from None

    def commit(self, manifest: dict) -> Path:
        """Write ``manifest`` (plus the mark and the file list) and put the folder in place."""
        assert self.path is not None, "commit() outside the with block"
        files = sorted(name for name in os.listdir(self.path) if name != MANIFEST)
        manifest = {"kind": RESULTS_MARK, "files": files, **manifest}
        try:
            (self.path / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str),
                                              encoding="utf-8")
            os.chmod(self.path, 0o777 & ~_umask())  # mkdtemp makes it private
            check_results_target(self.out, self.field, overwrite=self.overwrite, names=files)
            if self.overwrite and self.out.is_dir():
                self._merge_into(self.out, files)
            else:
                self._swap_into(self.out)
        except OSError as exc:
            raise os_error(exc, self.out, self.field) from None
        return self.out

    def _swap_into(self, out: Path) -> None:
        if not out.exists():
            os.rename(self.path, out)
            self.path = None
            return
        old = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}old-", dir=out.absolute().parent))
        os.rmdir(old)
        os.rename(out, old)            # atomic: the old folder steps aside whole
        try:
            os.rename(self.path, out)
        except BaseException:
            os.rename(old, out)        # put it back untouched
            raise
        self.path = None
        _remove_results_folder(old)

    def _merge_into(self, out: Path, files: list[str]) -> None:
        previous = read_results_manifest(out)
        clashes = merge_clashes(out, files + [MANIFEST])  # every check before any replace
        if clashes:
            raise _clash_error(out, clashes, self.field)
        for name in files + [MANIFEST]:
            os.replace(self.path / name, out / name)
        # files an earlier specsim run listed and this one did not write are stale results
        for name in (previous or {}).get("files", []):
            stale = out / name
            if name not in files and name == Path(name).name and stale.is_file() \
                    and not stale.is_symlink():
                stale.unlink()


def _remove_results_folder(folder: Path) -> None:
    """Remove a folder that ``check_results_target`` accepted: only the files its manifest
    lists (or nothing, for an empty folder), never through a link; then the folder itself."""
    manifest = read_results_manifest(folder)
    for name in ((manifest or {}).get("files", []) + [MANIFEST]):
        entry = folder / name
        if name == Path(name).name and (entry.is_file() or entry.is_symlink()):
            entry.unlink()
    try:
        os.rmdir(folder)
    except OSError:  # something appeared in it meanwhile: keep it, under its temporary name
        pass
