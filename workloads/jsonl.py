"""JSON Lines input, shared by the JSONL trace readers (Mooncake, token-id traces)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from simulator.inputs import json_text
from simulator.inputs.errors import SpecsimError


def json_lines(path: Path, fix: str = "one JSON object per line") -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed value) for every non-blank line of the file at ``path``; a
    missing or unreadable file and a line that is not valid JSON are one error each."""
    try:
        with path.open(encoding="utf-8-sig") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    value = json_text.loads(line, source=str(path),
                                            where=f"line {number}: ", fix=fix)
                except json.JSONDecodeError as exc:
                    raise SpecsimError(f"line {number}: not valid JSON ({exc.msg})",
                                       source=str(path), fix=fix) from None
                yield number, value
    except FileNotFoundError:
        raise SpecsimError("file not found", source=str(path), fix="check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecsimError(f"cannot read file: {exc}", source=str(path)) from None
