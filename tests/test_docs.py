"""What docs/api.md states, checked: its ```python blocks run in order, sharing their names,
in an empty temporary folder (a notebook); every signature in its ```text blocks is the
code's (parameter names, kinds and defaults, and the return annotation where it gives one);
its tables of the requests and steps columns and of the summary keys list every one the code
makes, and nothing else; README and docs/scenarios.md link the page."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import sys

import pytest

from tests.helpers import REPO, ConstantCost, scenario, workload

DOCS = REPO / "docs" / "api.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", flags=re.S | re.M)


def blocks(kind: str) -> list[str]:
    return [body for info, body in FENCE.findall(DOCS.read_text(encoding="utf-8"))
            if info == kind]


def test_the_notebook_runs_in_order(tmp_path, monkeypatch):
    code = blocks("python")
    assert len(code) >= 12
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_api"}
    for i, block in enumerate(code):
        exec(compile(block, f"docs/api.md python block {i + 1}", "exec"), namespace)
    # what the notebook says it wrote, in the folder it ran in
    for name in ("small.yaml", "gamma_sweep.csv", "report.html", "sweep.html", "plan.html",
                 "timeline.json"):
        assert (tmp_path / name).is_file(), name


# ---------------------------------------------------------------- signatures
def signatures() -> list[str]:
    """Every signature line of the ```text blocks (one per line)."""
    out = [line for block in blocks("text") for line in block.splitlines() if line.strip()]
    assert len(out) >= 40
    return out


def resolve(dotted: str):
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise AssertionError(f"docs/api.md: cannot import {dotted}")


def documented(line: str):
    """(name, ast.arguments, return annotation text or None) of one signature line."""
    name, rest = line.split("(", 1)
    tree = ast.parse(f"def _f({rest}: pass")
    fn = tree.body[0]
    ret = ast.unparse(fn.returns) if fn.returns is not None else None
    return name, fn.args, ret


def doc_params(args: ast.arguments) -> list[tuple[str, str, ast.expr | None]]:
    kinds = inspect.Parameter
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [(a.arg, kinds.POSITIONAL_ONLY if a in args.posonlyargs else
            kinds.POSITIONAL_OR_KEYWORD, d) for a, d in zip(positional, defaults)]
    if args.vararg:
        out.append((args.vararg.arg, kinds.VAR_POSITIONAL, None))
    out += [(a.arg, kinds.KEYWORD_ONLY, d) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        out.append((args.kwarg.arg, kinds.VAR_KEYWORD, None))
    return out


def actual_default(obj, param: inspect.Parameter):
    """A parameter's default; a dataclass field's default_factory() where it has one."""
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and \
            repr(param.default) == "<factory>":
        field = {f.name: f for f in dataclasses.fields(obj)}[param.name]
        return field.default_factory()
    return param.default


def unquoted(text: str) -> str:
    return re.sub(r"\s+", "", text).strip("'\"")


@pytest.mark.parametrize("line", signatures(), ids=lambda s: s.split("(")[0])
def test_every_signature_is_the_codes(line):
    name, args, ret = documented(line)
    obj = resolve(name)
    sig = inspect.signature(obj)
    params = list(sig.parameters.values())
    if params and params[0].name == "self":  # a method read off its class
        params = params[1:]
    module = sys.modules[obj.__module__].__dict__
    doc = doc_params(args)
    assert [(n, k) for n, k, _ in doc] == [(p.name, p.kind) for p in params], \
        f"docs/api.md: {name}'s parameters are {sig}"
    for (pname, _, expr), p in zip(doc, params):
        if expr is None:
            assert p.default is inspect.Parameter.empty, f"{name}: {pname} has a default"
            continue
        assert p.default is not inspect.Parameter.empty, f"{name}: {pname} has no default"
        value = eval(compile(ast.Expression(expr), name, "eval"), dict(module))
        assert value == actual_default(obj, p), \
            f"docs/api.md: {name}'s {pname} defaults to {p.default!r}"
    if ret is not None:
        actual = sig.return_annotation
        actual = actual if isinstance(actual, str) else getattr(actual, "__name__", repr(actual))
        assert unquoted(ret) == unquoted(actual), f"docs/api.md: {name} returns {actual}"


# ---------------------------------------------------------------- tables
def table_names(heading: str) -> set[str]:
    """The backticked names in the first column of the table under ``heading``."""
    lines = DOCS.read_text(encoding="utf-8").split(heading + "\n", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1])
    names = {n for cell in rows[2:] for n in re.findall(r"`([^`]+)`", cell)}
    assert names, heading
    return names


@pytest.fixture(scope="module")
def small_run():
    """Three requests of a chain policy, every forward priced at a constant."""
    from simulator.simulate import simulate
    return simulate(scenario("chain:num_speculative_tokens=2"),
                    workload=workload([0.0, 0.5, 3.0], [4, 4, 4], [3, 2, 1]),
                    target_cost=ConstantCost(1.0), draft_cost=ConstantCost(0.25))


def test_the_requests_table_lists_every_column(small_run):
    cols = set(small_run.requests.columns)
    disagg = {"prefill_done_s", "kv_ready_s", "kv_transfer_bytes"}  # disaggregated runs
    assert table_names("#### `Results.requests` columns") == cols | {"task"} | disagg


def test_the_steps_table_lists_every_column(small_run):
    from simulator.engine.step import STEP_FIELDS
    assert set(small_run.steps.columns) == set(STEP_FIELDS)
    assert table_names("#### `Results.steps` columns") == set(STEP_FIELDS)


def test_the_summary_table_lists_every_key(small_run):
    assert table_names("#### `Results.summary()` keys") == set(small_run.summary())


def test_the_readme_and_the_scenarios_page_link_the_page():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    documentation = text.split("\n## Documentation", 1)[1].split("\n## ", 1)[0]
    assert "(docs/api.md)" in documentation
    assert "(api.md)" in (REPO / "docs" / "scenarios.md").read_text(encoding="utf-8")
