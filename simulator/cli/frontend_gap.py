"""``python -m simulator.cli.frontend_gap GUIDELLM_JSON SPAN_FOLDER [...]``: the client-minus-
server latency of vLLM requests by load and the idle line (calibrate/frontend_gap.py), printed.
Exit 2 with one message on a missing file or key."""
from __future__ import annotations

import sys

from calibrate.frontend_gap import read_pairs, report

USAGE = "usage: python -m simulator.cli.frontend_gap GUIDELLM_JSON SPAN_FOLDER [...]"


def main(argv: list[str]) -> int:
    if not argv or len(argv) % 2:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        text = report(read_pairs(argv))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        detail = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
        print(f"frontend_gap: {type(exc).__name__}: {detail}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
