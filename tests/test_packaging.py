"""What a wheel ships: every data file of the packages (model and hardware YAML, scenarios,
the default trace) is matched by setup.cfg's package_data for the package that holds it, and
every folder of Python modules is a package that setup.cfg's find includes."""
import configparser
import fnmatch

from tests.helpers import REPO

PACKAGES = ("simulator", "hardware", "workloads", "reports", "calibrate", "specsim")


def _cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg", encoding="utf-8")
    return cfg


def _files(pattern_filter):
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and pattern_filter(path):
                yield path


def test_every_data_file_is_in_package_data():
    data = {pkg: [p.strip() for p in pats.replace("\n", ",").split(",") if p.strip()]
            for pkg, pats in _cfg()["options.package_data"].items()}
    missing = []
    for path in _files(lambda p: p.suffix not in (".py", ".pyc")):
        rel = path.relative_to(REPO)
        # the nearest enclosing package (a folder with __init__.py) holds the file
        folder = rel.parent
        while folder.parts and not (REPO / folder / "__init__.py").exists():
            folder = folder.parent
        if not folder.parts:
            missing.append(f"{rel} is in no package (no __init__.py above it)")
            continue
        pkg = ".".join(folder.parts)
        inside = rel.relative_to(folder).as_posix()
        if not any(fnmatch.fnmatch(inside, pat) for pat in data.get(pkg, [])):
            missing.append(f"{rel} (package {pkg}, patterns {data.get(pkg, [])})")
    assert not missing, "\n".join(missing)


def test_every_module_folder_is_a_package_find_includes():
    include = [p.strip() for p in _cfg()["options.packages.find"]["include"].split() if p]
    bad = []
    for path in _files(lambda p: p.suffix == ".py"):
        folder = path.relative_to(REPO).parent
        if not (REPO / folder / "__init__.py").exists():
            bad.append(f"{folder} has modules but no __init__.py")
        name = ".".join(folder.parts)
        if not any(fnmatch.fnmatch(name, pat) for pat in include):
            bad.append(f"{name} is not matched by packages.find include {include}")
    assert not bad, "\n".join(sorted(set(bad)))
