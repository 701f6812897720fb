"""Every published case within its a-priori tolerance, except the known misses, which are
xfail(strict): a change that fixes or breaks a case is noticed.  ``python -m tests.published``
prints the table."""
import pytest

from tests.published.cases import CASES, KNOWN_MISSES, Tolerance, evaluate
from tests.published.harness import ENGINES, run


def _param(case):
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[case.name])] \
        if case.name in KNOWN_MISSES else []
    return pytest.param(case, id=case.name, marks=marks)


def test_there_are_at_least_forty_cases_and_every_miss_is_a_case():
    names = [c.name for c in CASES]
    assert len(names) >= 40 and len(set(names)) == len(names)
    assert set(KNOWN_MISSES) <= set(names)


def test_tolerances_can_fail():
    assert not Tolerance("rel", 0.2).ok(2.0, 2.41) and Tolerance("rel", 0.2).ok(2.0, 2.39)
    assert not Tolerance("range", 0.1).ok((2.0, 2.5), 2.76)
    assert not Tolerance("order").ok(("a", "b"), ("b", "a"))
    assert not Tolerance("abs", 1).ok(3, 5) and Tolerance("abs", 1).ok(3, 4)
    assert not Tolerance("exact").ok(("gain", "loss"), ("gain", "gain"))


def test_every_case_names_the_engines_it_ran_on():
    for case in CASES:
        assert case.engine and set(case.engine.split("/")) <= set(ENGINES), case.name
    assert ENGINES["hf"] == {"enforce_eager": True,        # the papers' eager PyTorch code
                             "captured_draft_loop": False, "engine": "eagle-official"}
    # the engines' defaults, with their speculative path's host work
    assert ENGINES["vllm"] == {"engine": "vllm-v0.9"}
    assert ENGINES["sglang"] == {"engine": "sglang-v0.4"}


def test_an_unknown_engine_is_refused():
    with pytest.raises(KeyError, match="unknown engine"):
        run("h100-sxm", "llama-3.1-8b", {"name": "none"}, engine="tgi")


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_published_case(case):
    predicted, ok = evaluate(case)
    assert ok, (f"{case.name}: predicted {predicted} vs published {case.published} "
                f"({case.tolerance.text()}); source: {case.source}")


def test_the_table_prints_every_case(capsys):
    from tests.published.__main__ import main
    assert main() == 0                        # no surprise: misses are exactly the known ones
    out = capsys.readouterr().out
    assert all(c.name in out for c in CASES)
    assert "published" in out and "predicted" in out and "tolerance" in out
