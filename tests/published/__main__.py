"""``python -m tests.published``: the published-results table (case, engine, published,
predicted, tolerance, pass/miss, source); exit status 1 if a case not listed as a known miss
misses, or a listed one passes.  ``--coverage N``: the 90% intervals' coverage per case group
over N draws instead (tests/published/coverage.py); exit status 1 if a group leaves 80-97%."""
from __future__ import annotations

import sys
import time

from tests.published.cases import CASES, KNOWN_MISSES, evaluate


def _fmt(value, kind: str = "") -> str:
    if isinstance(value, tuple) and value and isinstance(value[0], str):
        return (", " if kind == "exact" else " > ").join(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, tuple):
        return "-".join(f"{v:.2f}" for v in value)
    return f"{value:.2f}"


def main() -> int:
    start = time.perf_counter()
    rows, surprises = [], 0
    for case in CASES:
        predicted, ok = evaluate(case)
        known = case.name in KNOWN_MISSES
        surprises += int(ok == known)
        verdict = "pass" if ok else "miss" + (" (known)" if known else "")
        kind = case.tolerance.kind
        rows.append((case.name, case.engine, _fmt(case.published, kind), _fmt(predicted, kind),
                     case.tolerance.text(), verdict, case.source))
    head = ("case", "engine", "published", "predicted", "tolerance", "result")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  source")
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1])
    passed = sum(r[5] == "pass" for r in rows)
    print(f"{passed}/{len(rows)} within tolerance, {len(rows) - passed} miss "
          f"({len(KNOWN_MISSES)} listed as known), {time.perf_counter() - start:.1f} s")
    return 1 if surprises else 0


def cli(argv: list[str]) -> int:
    if argv[:1] == ["--coverage"]:
        if len(argv) != 2 or not argv[1].isdigit() or int(argv[1]) < 2:
            print("--coverage: give a number of draws, 2 or more (e.g. --coverage 10)",
                  file=sys.stderr)
            return 2
        from tests.published.coverage import print_coverage
        return print_coverage(int(argv[1]))
    if argv:
        print(f"unknown argument {argv[0]!r}: give none, or --coverage N", file=sys.stderr)
        return 2
    return main()


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
