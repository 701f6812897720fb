"""JSON Lines input, shared by the JSONL trace readers (Mooncake, token-id traces)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any, Iterator

from simulator.inputs.errors import SpecsimError


def json_lines(handle: IO[str], path: Path, fix: str = "one JSON object per line"
               ) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed value) for every non-blank line; a line that is not valid
    JSON is one error naming it."""
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecsimError(f"line {number}: not valid JSON ({exc.msg})", source=str(path),
                               fix=fix) from None
        yield number, value
