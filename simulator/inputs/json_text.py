"""JSON in, with the one failure ``json.loads`` raises outside ``ValueError``: nesting.

Python's JSON decoder recurses once per ``[`` or ``{``; a line of 100,000 ``[`` raises
``RecursionError`` (a ``RuntimeError``, not the ``JSONDecodeError`` every reader catches),
which crashed ``compare-measured`` and ``tokenize`` with a traceback.  :func:`loads` turns
it into one :class:`SpecsimError` naming the file; other errors propagate unchanged, so
each reader keeps its own message for malformed JSON.
"""
from __future__ import annotations

import json
from typing import Any

from simulator.inputs.errors import SpecsimError


def loads(text: str | bytes, *, source: str, where: str = "", field: str | None = None,
          fix: str = "give plain JSON records (a few levels of nesting)") -> Any:
    """``json.loads(text)``; nesting deeper than the interpreter's recursion limit (about
    1,000 levels) is a SpecsimError on ``source`` (``where``: e.g. ``"line 3: "``)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise SpecsimError(f"{where}JSON nested too deeply (more levels of [ or {{ than the "
                           "parser's recursion limit of about 1,000)", source=source,
                           field=field, fix=fix) from None
