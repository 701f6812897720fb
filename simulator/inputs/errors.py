"""The one error type users see: it names the field and the fix."""
from __future__ import annotations


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

    def _render(self) -> str:
        where = ": ".join(part for part in (self.source, self.field) if part)
        text = f"{where}: {self.message}" if where else self.message
        if self.fix:
            text += f" (fix: {self.fix})"
        return text
