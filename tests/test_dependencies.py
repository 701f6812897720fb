"""Dependency ranges: every requirement is bounded above at its next major version, and
what is installed lies inside the declared ranges (so CI tests what a user's pip resolves).

Known breakages inside a range are pinned by behaviour tests elsewhere: simpy 4.1.2 keeps the
``run(until=...)`` event queued, which hung the old progress loop
(tests/test_readme_commands.py runs the README's command with progress on).
"""
import configparser
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.helpers import REPO


def requirements() -> dict[str, list[Requirement]]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg", encoding="utf-8")
    groups = {"core": cfg["options"]["install_requires"]}
    groups.update(cfg["options.extras_require"])
    return {name: [Requirement(line.strip()) for line in text.splitlines() if line.strip()]
            for name, text in groups.items()}


def test_every_requirement_has_a_lower_bound_and_a_next_major_upper_bound():
    for group, reqs in requirements().items():
        assert reqs, group
        for req in reqs:
            lower = [s for s in req.specifier if s.operator == ">="]
            upper = [s for s in req.specifier if s.operator == "<"]
            assert lower and upper, f"{group}: {req} needs >= and < bounds"
            low, up = Version(lower[0].version), Version(upper[0].version)
            # the bound is a major version (X, not X.Y): the next major after the tested one
            assert up.minor == 0 and up.micro == 0, f"{req}: bound a major, not a minor"
            low_major, up_major = low.major, up.major
            assert up_major > low_major, req


def test_installed_versions_lie_in_the_declared_ranges():
    checked = 0
    for group, reqs in requirements().items():
        for req in reqs:
            try:
                version = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                assert group != "core", f"core dependency {req.name} is not installed"
                continue
            assert req.specifier.contains(version, prereleases=True), \
                f"{req.name} {version} is outside {req.specifier} ({group})"
            checked += 1
    assert checked >= 7  # at least the core set


def test_vl_convert_and_pyarrow_are_core_because_the_main_command_needs_them():
    """README command 1 writes --report, whose page inlines the Vega bundle from vl-convert,
    and its results folder, whose big tables are Parquet by default (pyarrow); torch and Ray
    stay extras.  The ``parquet`` extra is kept, naming pyarrow alone, so that an install
    that asks for it still resolves."""
    core = {r.name for r in requirements()["core"]}
    assert {"vl-convert-python", "pyarrow"} <= core
    assert "torch" not in core and "ray" not in core
    assert {r.name for r in requirements()["parquet"]} == {"pyarrow"}
    assert str(next(r for r in requirements()["core"] if r.name == "pyarrow").specifier) \
        == str(next(iter(requirements()["parquet"])).specifier)


def test_parquet_without_pyarrow_names_the_package_and_csv(monkeypatch):
    import builtins

    from simulator.inputs.errors import SpecsimError
    from simulator.results_dir import require_format
    real = builtins.__import__

    def no_pyarrow(name, *a, **k):
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ImportError("no pyarrow")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(SpecsimError, match=r"pyarrow>=14,<27.*--results-format csv"):
        require_format("parquet")
    require_format("csv")
