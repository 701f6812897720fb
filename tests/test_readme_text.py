"""What README.md and docs/ state, checked: the table of docs/limits.md names, for every
limit, the constant that holds it, and each one must exist where the table says (a bare name
lives in the module the row above named); every ```python example of README.md and of the
docs pages runs as written (docs/api.md's, a notebook, are tests/test_docs.py's)."""
from __future__ import annotations

import importlib
import re

from tests.helpers import REPO

README = REPO / "README.md"
LIMITS = REPO / "docs" / "limits.md"


def limit_rows() -> list[tuple[str, list[str]]]:
    text = LIMITS.read_text(encoding="utf-8")
    section = text.split("# Limits\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| what")]
    return [(row.split("|")[1].strip(), re.findall(r"`([^`]+)`", row.split("|")[3]))
            for row in rows]


def test_every_limit_constant_exists_where_the_limits_page_says():
    rows = limit_rows()
    assert len(rows) >= 20
    module = None
    checked = 0
    for what, names in rows:
        assert names, f"row {what!r} names no constant"
        for name in names:
            for part in name.split("/"):
                if "." in part:
                    module, attr = part.rsplit(".", 1)
                attr = part.rsplit(".", 1)[-1]
                mod = importlib.import_module(module)
                assert isinstance(getattr(mod, attr, None), (int, float, dict)), \
                    f"docs/limits.md row {what!r}: {module}.{attr} does not exist"
                checked += 1
    assert checked >= 25


def python_examples() -> list[tuple[str, str]]:
    """(page, block) of every ```python block of README.md and docs/*.md but docs/api.md."""
    pages = [README] + sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "api.md")
    return [(page.relative_to(REPO).as_posix(), block) for page in pages
            for block in re.findall(r"```python\n(.*?)\n```", page.read_text(encoding="utf-8"),
                                    flags=re.S)]


def test_every_python_example_in_the_readme_and_docs_runs(monkeypatch):
    examples = python_examples()
    assert any(page == "docs/scenarios.md" for page, _ in examples)
    monkeypatch.chdir(README.parent)
    for page, block in examples:
        exec(compile(block, f"{page} example", "exec"), {})
