"""One writer per output path, and OS errors on a user's path as one line naming it.

The lock (:class:`OutputLock`) sits beside the target (``.specsim-<name>.lock``); the error
helpers turn an ``OSError`` (a full disk, a read-only place, a name too long) into one
:class:`SpecsimError` that names the path and the reason.  simulator/output_paths.py
re-exports them beside the writers they serve.
"""
from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from simulator.inputs.errors import SpecsimError

TEMP_PREFIX = ".specsim-"
MAX_PATH_ECHO = 200  # characters of a path echoed in an error


def describe_os_error(exc: OSError) -> str:
    """``[Errno 13] Permission denied: 'x'`` -> ``permission denied``; an error without a
    reason (``OSError()``, as some libraries raise) is named by its message or its type,
    as written (it printed "oSError")."""
    if exc.strerror:
        return exc.strerror[:1].lower() + exc.strerror[1:]
    if exc.errno in errno.errorcode:
        return os.strerror(exc.errno).lower()
    text = " ".join(str(a) for a in exc.args if a is not None).strip()  # not the filename
    return text or type(exc).__name__


def os_error(exc: OSError, path: Path | str, field: str, action: str = "write") -> SpecsimError:
    """An OS error on a user's path as one SpecsimError line."""
    fix = "choose a shorter path" if exc.errno == errno.ENAMETOOLONG else \
        "choose a path in a folder you can write to"
    return SpecsimError(f"cannot {action} {display_path(path)}: {describe_os_error(exc)}",
                        field=field, fix=fix)


def display_path(path: Path | str) -> str:
    from simulator.inputs.yaml_io import clip
    return clip(repr(str(path)), MAX_PATH_ECHO)


class OutputLock:
    """An exclusive, non-blocking lock on one output path, held until ``release``.

    The lock file sits beside the target; ``flock`` is released by the kernel when the
    holder dies, so a stale file never blocks a later run.  The path is re-checked after
    locking (a releasing holder unlinks it), so two writers never both hold it.
    """

    def __init__(self, target: Path, field: str) -> None:
        self.path = target.parent / f"{TEMP_PREFIX}{target.name}.lock"
        self.field = field
        self._fd: int | None = None
        for _ in range(20):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise os_error(exc, target, field) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise SpecsimError(f"another specsim command is writing "
                                       f"{display_path(target)}", field=field,
                                       fix="wait for it to finish, or choose another path") \
                        from None
                raise os_error(exc, target, field) from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                return
            os.close(fd)  # the previous holder unlinked it between our open and our lock
        raise SpecsimError(f"cannot lock {display_path(target)}", field=field,
                           fix="retry, or choose another path")

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> "OutputLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
