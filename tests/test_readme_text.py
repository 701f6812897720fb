"""What README.md states, checked: the "Limits" table names, for every limit, the constant
that holds it, and each one must exist where the table says (a bare name lives in the module
the row above named); every ```python example runs as written."""
from __future__ import annotations

import importlib
import re

from tests.helpers import REPO

README = REPO / "README.md"


def limit_rows() -> list[tuple[str, list[str]]]:
    text = README.read_text()
    section = text.split("### Limits", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| what")]
    return [(row.split("|")[1].strip(), re.findall(r"`([^`]+)`", row.split("|")[3]))
            for row in rows]


def test_every_limit_constant_exists_where_the_readme_says():
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
                    f"README Limits row {what!r}: {module}.{attr} does not exist"
                checked += 1
    assert checked >= 25


def test_every_python_example_in_the_readme_runs(monkeypatch):
    blocks = re.findall(r"```python\n(.*?)\n```", README.read_text(), flags=re.S)
    assert blocks
    monkeypatch.chdir(README.parent)
    for block in blocks:
        exec(compile(block, "README.md example", "exec"), {})
