"""The README and the pages of docs/, checked against each other and against the code: the
README stays short and links every page (and every page it links exists), every relative
link resolves, and the pages that document a schema list what the code accepts (scenario
keys, sweep and plan keys, policies, acceptance models, commands, the size rules)."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.helpers import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_BYTES = 15 * 1024
LINK = re.compile(r"\]\(([^)\s]+)\)")


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def table_names(page: Path, heading: str) -> set[str]:
    """The backticked names of the first column of the first table after ``heading``."""
    lines = read(page).split(heading + "\n", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:  # after the header and its rule
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1])
    names = {n for cell in rows for n in re.findall(r"`([^`]+)`", cell)}
    assert names, f"{page.name}: no table under {heading!r}"
    return names


def test_the_readme_is_at_most_15_kib():
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size:,} bytes (limit {README_MAX_BYTES:,})"


def test_the_readme_links_every_docs_page_and_only_pages_that_exist():
    linked = {m for m in LINK.findall(read(README)) if m.startswith("docs/") and
              m.split("#")[0].endswith(".md")}
    linked_pages = {m.split("#")[0] for m in linked}
    missing = sorted(p for p in linked_pages if not (REPO / p).is_file())
    assert not missing, f"README.md links pages that do not exist: {missing}"
    pages = {p.relative_to(REPO).as_posix() for p in DOCS.glob("*.md")}
    assert len(pages) >= 10
    assert pages <= linked_pages, f"README.md does not link {sorted(pages - linked_pages)}"


@pytest.mark.parametrize("page", [README, REPO / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page):
    targets = [t for t in LINK.findall(read(page)) if not re.match(r"[a-z]+:", t)]
    for target in targets:
        path = target.split("#")[0]
        if path:
            assert (page.parent / path).exists(), f"{page.name}: broken link {target}"
        anchor = target.split("#")[1] if "#" in target else None
        if anchor:
            text = read(page.parent / path) if path else read(page)
            slugs = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
                     for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}
            assert anchor in slugs, f"{page.name}: no heading for #{anchor} in {path or page}"


def test_the_scenarios_page_lists_every_top_level_key():
    from simulator.scenario import _TOP
    assert table_names(DOCS / "scenarios.md", "## Top-level keys") == set(_TOP)


def test_the_scenarios_page_names_every_batching_and_execution_key():
    from simulator.cost.execution import _KEYS
    from simulator.scenario import Batching
    text = read(DOCS / "scenarios.md")
    keys = [f.name for f in dataclasses.fields(Batching)] + list(_KEYS)
    assert [k for k in keys if f"{k}" not in text] == []


def test_the_plan_page_lists_every_plan_slo_and_search_key():
    from simulator.planning.capacity import RateSearch
    from simulator.planning.plan import OVER_CONTEXT, PLAN_KEYS, SLO_KEYS
    page = DOCS / "plan.md"
    assert table_names(page, "## The plan YAML") == set(PLAN_KEYS)
    assert table_names(page, "`slo` (`simulator.planning.plan.SLO_KEYS`; milliseconds in "
                             "the YAML):") == set(SLO_KEYS)
    assert table_names(page, "`search` (`simulator.planning.capacity.RateSearch`):") == \
        {f.name for f in dataclasses.fields(RateSearch)}
    assert all(f"`{mode}`" in read(page) for mode in OVER_CONTEXT)


def test_the_plan_page_lists_every_sweep_key_and_field():
    from simulator.planning import analytic
    from simulator.planning.sweep import MODES, SIM_ALIASES, SIM_SWEEPABLE, TOP_KEYS
    page = DOCS / "plan.md"
    assert table_names(page, "## The sweep YAML") == set(TOP_KEYS)
    section = read(page).split("## The sweep YAML", 1)[1].split("\n## ", 1)[0]
    names = [*MODES, *SIM_ALIASES, *SIM_SWEEPABLE, *analytic.FIELDS]
    assert [n for n in names if f"`{n}`" not in section] == []


def test_the_methods_page_lists_every_policy_and_acceptance_model():
    from simulator.acceptance import ACCEPTANCE_MODELS
    from simulator.policies.registry import POLICIES
    page = DOCS / "methods.md"
    assert table_names(page, "## Policies") == set(POLICIES)
    assert table_names(page, "## Acceptance models") == set(ACCEPTANCE_MODELS)


def test_the_commands_page_lists_every_command():
    from simulator.cli.main import COMMANDS
    assert table_names(DOCS / "commands.md", "# Commands") == set(COMMANDS)


def test_contributing_states_the_size_rules_the_checker_enforces():
    from tests.test_import_rules import MAX_FILE_LINES, MAX_FUNCTION_LINES, PACKAGES
    text = read(REPO / "CONTRIBUTING.md")
    assert f"under {MAX_FILE_LINES} lines and functions under {MAX_FUNCTION_LINES}" in text
    layout = text.split("## Layout and import rules", 1)[1]
    assert [p for p in PACKAGES if f"\n{p}/" not in layout] == []
