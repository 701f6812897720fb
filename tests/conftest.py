"""Test layout: tests/ mirrors the packages (tests/simulator/engine/ tests simulator/engine/,
tests/workloads/ tests workloads/, ...); tests of the whole project (the README's commands,
the import rules, hostile inputs, dependency ranges) sit at the top.  Shared helpers live in
tests/helpers.py and the hostile-input tables in tests/hostile_cases*.py, imported as
``tests.<module>``; their asserts are rewritten by pytest like a test file's."""
import pytest

pytest.register_assert_rewrite("tests.helpers", "tests.hostile_cases",
                               "tests.hostile_cases_commands")
