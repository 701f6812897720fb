"""The one error type users see: it names the field and the fix."""
from __future__ import annotations

_KEEP = object()


class SpecsimError(ValueError):
    """Bad user input: a scenario, profile, model, trace or argument that cannot be used.

    The CLI prints ``str(error)`` and exits with status 2; library callers get a
    ``ValueError`` subclass they can catch.
    """

    def __init__(self, message: str, *, field: str | None = None, fix: str | None = None,
                 source: str | None = None) -> None:
        self.message = message
        self.field = field
        self.fix = fix
        self.source = source
        super().__init__(self._render())

    def relocated(self, *, source=_KEEP, field=_KEEP, prefix: str = "") -> SpecsimError:
        """The same message and fix, reported where the user wrote the value: another
        ``source`` and/or ``field`` (``prefix`` goes before the field).  Re-raise it with
        ``raise exc.relocated(...) from None``: one line, no chained traceback."""
        new_field = self.field if field is _KEEP else field
        if prefix:
            new_field = prefix + (new_field or "")
        return SpecsimError(self.message, fix=self.fix, field=new_field,
                            source=self.source if source is _KEEP else source)

    def _render(self) -> str:
        where = ": ".join(part for part in (self.source, self.field) if part)
        text = f"{where}: {self.message}" if where else self.message
        if self.fix:
            text += f" (fix: {self.fix})"
        return text
