"""The import rules of the house (CONTRIBUTING.md, "Layout and import rules"), read from
the source with ``ast``.

Every rule is checked on the project's own files; each failure names the file, the line
and the rule.  The checker is also run on a scratch copy of the tree with deliberately
broken imports, so a rule that could never fire would fail here too.
"""
from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import REPO

PACKAGES = ("simulator", "hardware", "workloads", "reports", "calibrate", "specsim")
# Largest file and function in simulator/ (CONTRIBUTING.md, "House rules"); the exceptions
# are named with their reason and their size today, so one that grows fails too.
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
FILE_EXCEPTIONS: dict[str, tuple[int, str]] = {}
FUNCTION_EXCEPTIONS: dict[str, tuple[int, str]] = {}


@dataclass(frozen=True)
class Import:
    module: str      # the importing module, dotted
    path: str        # its file, relative to the root
    line: int
    target: str      # the imported module, dotted (a package's name for its __init__)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_files(root: Path) -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py"))


def read_imports(root: Path) -> tuple[list[Import], set[str]]:
    """Every import statement of the project (top-level or inside a function)."""
    files = project_files(root)
    modules = {module_name(p, root) for p in files}
    out: list[Import] = []
    for path in files:
        me = module_name(path, root)
        rel = path.relative_to(root).as_posix()
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = me.split(".") if is_pkg else me.split(".")[:-1]
                    pkg = pkg[:len(pkg) - node.level + 1]
                    base = ".".join(pkg + ([base] if base else []))
                # ``from pkg import sub`` imports the module pkg.sub when there is one
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            else:
                continue
            for target in dict.fromkeys(targets):
                out.append(Import(me, rel, node.lineno, target))
    return out, modules


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def policy_files(root: Path) -> set[str]:
    """The policy modules: the ones the registry imports its policies from (the registry
    names every policy by a ``from simulator.policies.<file> import <Class>``)."""
    tree = ast.parse((root / "simulator" / "policies" / "registry.py").read_text())
    return {n.module for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module
            and _in(n.module, "simulator.policies")}


# what a policy (or kit) file may import of the project (LAYOUT.md): the contract and kit,
# the cost models, acceptance, the maths, the models, the ground floor, and the engine's socket
POLICY_MAY_IMPORT = ("simulator.policies", "simulator.cost", "simulator.acceptance",
                     "simulator.speculation", "simulator.models", "simulator.inputs",
                     "simulator.engine.plan")
MIN_POLICY_FILES = 8  # fewer found means the registry's imports changed shape: fix the rule


def rule_violations(root: Path) -> list[str]:
    """One line per broken rule: ``file:line: module imports target (rule)``."""
    imports, modules = read_imports(root)
    policies = policy_files(root)
    bad: list[str] = []
    if len(policies) < MIN_POLICY_FILES:
        bad.append(f"simulator/policies/registry.py: only {len(policies)} policy files found "
                   f"among its imports; the policy rules would check nothing")

    def flag(imp: Import, rule: str) -> None:
        bad.append(f"{imp.path}:{imp.line}: {imp.module} imports {imp.target} ({rule})")

    project = PACKAGES
    for imp in imports:
        me, tgt = imp.module, imp.target
        mine = tgt.split(".")[0] in project
        if _in(tgt, "specsim") and not _in(me, "specsim"):
            flag(imp, "the project never imports specsim/ (the users' facade: the packages "
                      "import each other directly)")
        if _in(me, "specsim") and not mine and tgt not in ("__future__", "typing"):
            flag(imp, "specsim/ re-exports the project's names and imports nothing else")
        if _in(me, "simulator.inputs") and mine and not _in(tgt, "simulator.inputs"):
            flag(imp, "simulator/inputs/ imports nothing of the project")
        if (_in(me, "hardware") or _in(me, "workloads")) and mine \
                and not (_in(tgt, "simulator.inputs") or _in(tgt, me.split(".")[0])):
            flag(imp, "hardware/ and workloads/ import only simulator.inputs")
        if _in(me, "simulator.engine") and mine and not _in(tgt, "simulator.engine"):
            flag(imp, "simulator/engine/ imports nothing of the project: it calls the Policy "
                      "and StepPricer it is handed")
        if _in(me, "simulator.speculation") and (
                (mine and not (_in(tgt, "simulator.speculation")
                               or _in(tgt, "simulator.inputs"))) or _in(tgt, "simpy")):
            flag(imp, "simulator/speculation/ imports only simulator.inputs (no cost model, "
                      "no SimPy)")
        if _in(me, "simulator.policies") and tgt in policies and tgt != me \
                and me != "simulator.policies.registry":
            flag(imp, "a policy file never imports another policy file (shared code lives "
                      "in a kit file)")
        if _in(me, "simulator.policies") and me != "simulator.policies.registry" and mine \
                and not any(_in(tgt, p) for p in POLICY_MAY_IMPORT):
            flag(imp, "a policy or kit file imports only policies/ (base and kit), cost/, "
                      "acceptance/, speculation/, models/, inputs/ and engine.plan")
        if _in(me, "simulator.planning") and _in(tgt, "simulator.policies"):
            flag(imp, "simulator/planning/ never imports a policy")
        if _in(me, "simulator") and not _in(me, "simulator.cli") and any(
                _in(tgt, p) for p in ("reports", "calibrate", "tqdm", "argparse",
                                      "simulator.cli")):
            flag(imp, "only simulator/cli/ imports reports/, calibrate/, tqdm or argparse")
        if _in(tgt, "torch") and not _in(me, "calibrate"):
            flag(imp, "torch is imported only in calibrate/")
        if (_in(tgt, "altair") or _in(tgt, "vl_convert")) and not _in(me, "reports"):
            flag(imp, "altair is imported only in reports/")
        if _in(tgt, "ray") and me != "simulator.planning.executors":
            flag(imp, "ray is imported only behind the sweep executor "
                      "(simulator/planning/executors.py)")
        if _in(me, "reports") and _in(tgt, "simulator.cli"):
            flag(imp, "reports/ never imports simulator/cli/")
    bad += _prints(root)
    bad += _circles(imports, modules)
    return bad


def _prints(root: Path) -> list[str]:
    """Only simulator/cli/ prints (the library returns data and takes callbacks): no
    ``print()``, no use of ``sys.stdout``/``sys.stderr`` elsewhere in simulator/."""
    out = []
    for path in project_files(root):
        rel = path.relative_to(root).as_posix()
        if not rel.startswith("simulator/") or rel.startswith("simulator/cli/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "print":
                out.append(f"{rel}:{node.lineno}: print() outside simulator/cli/ (only the "
                           f"command line prints)")
            if isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr") \
                    and isinstance(node.value, ast.Name) and node.value.id == "sys":
                out.append(f"{rel}:{node.lineno}: sys.{node.attr} outside simulator/cli/ "
                           f"(only the command line prints)")
    return out


def _circles(imports: list[Import], modules: set[str]) -> list[str]:
    """Import circles among the project's modules (Tarjan's strongly connected components
    over every import, top-level or deferred: a deferred import hides a circle, it does not
    remove it).  A package's ``__init__`` re-exporting its own modules is not a circle."""
    edges: dict[str, dict[str, Import]] = {m: {} for m in modules}
    for imp in imports:
        if imp.target in modules and imp.target != imp.module \
                and not _in(imp.module, imp.target):  # a module using its package's __init__
            edges[imp.module].setdefault(imp.target, imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def visit(v: str) -> None:  # iterative enough: the graph is a few hundred modules deep
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for m in sorted(modules):
        if m not in index:
            visit(m)
    out = []
    for comp in comps:
        members = set(comp)
        links = [edges[a][b] for a in comp for b in sorted(edges[a]) if b in members]
        where = "; ".join(f"{i.path}:{i.line} -> {i.target}" for i in links)
        out.append(f"import circle among {', '.join(comp)}: {where}")
    return out


def size_violations(root: Path) -> list[str]:
    """Files over MAX_FILE_LINES and functions over MAX_FUNCTION_LINES in simulator/."""
    out = []
    for path in sorted((root / "simulator").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        text = path.read_text()
        lines = len(text.splitlines())
        limit = FILE_EXCEPTIONS.get(rel, (MAX_FILE_LINES, ""))[0]
        if lines > limit:
            out.append(f"{rel}: {lines} lines (limit {limit})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                name = f"{rel}:{node.name}"
                flimit = FUNCTION_EXCEPTIONS.get(name, (MAX_FUNCTION_LINES, ""))[0]
                if n > flimit:
                    out.append(f"{rel}:{node.lineno}: {node.name} is {n} lines "
                               f"(limit {flimit})")
    return out


def test_the_project_keeps_every_import_rule():
    bad = rule_violations(REPO)
    assert not bad, "\n".join(bad)


def test_no_file_or_function_in_simulator_outgrows_the_limits():
    bad = size_violations(REPO)
    assert not bad, "\n".join(bad)


def test_every_size_exception_is_still_needed():
    for rel, (limit, why) in FILE_EXCEPTIONS.items():
        lines = len((REPO / rel).read_text().splitlines())
        assert why and MAX_FILE_LINES < lines <= limit, (rel, lines)


@pytest.fixture
def scratch(tmp_path):
    """A copy of the project's packages to break on purpose."""
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, tmp_path / pkg,
                        ignore=shutil.ignore_patterns("__pycache__", "*.yaml", "*.csv", "*.npy",
                                                      "data", "profiles", "assets"))
    assert not rule_violations(tmp_path)
    return tmp_path


def _append(path: Path, line: str) -> int:
    """Add ``line`` at the end of ``path``; return its line number."""
    text = path.read_text()
    path.write_text(text.rstrip("\n") + "\n" + line + "\n")
    return len(text.rstrip("\n").splitlines()) + 1


BROKEN = [
    ("simulator/engine/replica.py", "from simulator.cost.cost_model import CostModel",
     "simulator/engine/ imports nothing of the project"),
    ("simulator/engine/step.py", "import torch", "torch is imported only in calibrate/"),
    ("simulator/policies/eagle.py", "from simulator.policies.chain import ChainSpeculation",
     "a policy file never imports another policy file"),
    ("simulator/planning/gamma_map.py", "import simulator.policies.specinfer",
     "simulator/planning/ never imports a policy"),
    ("simulator/results.py", "from reports import render_report",
     "only simulator/cli/ imports reports/"),
    ("simulator/simulate.py", "import argparse", "only simulator/cli/ imports"),
    ("hardware/profile.py", "from simulator.cost.cost_model import CostModel",
     "hardware/ and workloads/ import only simulator.inputs"),
    ("workloads/traces.py", "from simulator.scenario import Scenario",
     "hardware/ and workloads/ import only simulator.inputs"),
    ("simulator/inputs/errors.py", "from simulator.models.spec import ModelSpec",
     "simulator/inputs/ imports nothing of the project"),
    ("simulator/speculation/token_tree.py", "import simpy",
     "simulator/speculation/ imports only simulator.inputs"),
    ("reports/page.py", "from simulator.cli.run import main", "reports/ never imports"),
    ("simulator/results_dir.py", "import altair", "altair is imported only in reports/"),
    ("simulator/planning/sweep.py", "import ray", "ray is imported only behind the sweep"),
    ("simulator/results.py", "print('done')", "print() outside simulator/cli/"),
    ("simulator/results.py", "import sys; sys.stdout.write('done')",
     "sys.stdout outside simulator/cli/"),
    ("simulator/policies/chain.py", "from simulator.results import Results",
     "a policy or kit file imports only"),
    ("simulator/policies/token_text.py", "from simulator.planning.analytic import FIELDS",
     "a policy or kit file imports only"),
    ("simulator/results.py", "import specsim", "the project never imports specsim/"),
    ("reports/page.py", "from specsim import simulate", "the project never imports specsim/"),
    ("specsim/__init__.py", "import yaml", "specsim/ re-exports the project's names"),
]


@pytest.mark.parametrize("rel,line,rule", BROKEN, ids=[b[0] + ":" + b[2][:30] for b in BROKEN])
def test_a_broken_rule_is_reported_with_its_file_and_line(scratch, rel, line, rule):
    lineno = _append(scratch / rel, line)
    bad = rule_violations(scratch)
    assert any(b.startswith(f"{rel}:{lineno}:") and rule in b for b in bad), bad


def test_an_import_circle_is_reported_with_every_link(scratch):
    # a deferred import inside a function closes the circle just the same
    lineno = _append(scratch / "simulator/inputs/errors.py",
                     "def _later():\n    from simulator.inputs.yaml_io import clip\n")
    bad = [b for b in rule_violations(scratch) if b.startswith("import circle")]
    assert len(bad) == 1, bad
    assert "simulator.inputs.errors, simulator.inputs.yaml_io" in bad[0]
    assert f"simulator/inputs/errors.py:{lineno + 1} -> simulator.inputs.yaml_io" in bad[0]


def test_an_oversized_function_is_reported(scratch):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    lineno = _append(scratch / "simulator/results.py", f"def long_one():\n{body}\n")
    bad = size_violations(scratch)
    assert f"simulator/results.py:{lineno}: long_one is {MAX_FUNCTION_LINES + 1} lines " \
           f"(limit {MAX_FUNCTION_LINES})" in bad


def test_a_registry_that_names_no_policy_file_is_reported(scratch):
    path = scratch / "simulator/policies/registry.py"
    path.write_text("import importlib\nPOLICIES = {}\n")
    assert any("policy rules would check nothing" in b for b in rule_violations(scratch))
