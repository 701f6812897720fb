"""Every published case within its a-priori tolerance, except the known misses, which are
xfail(strict): a change that fixes or breaks a case is noticed.  ``python -m tests.published``
prints the table."""
import pytest

from tests.published.cases import CASES, KNOWN_MISSES, Tolerance, evaluate


def _param(case):
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[case.name])] \
        if case.name in KNOWN_MISSES else []
    return pytest.param(case, id=case.name, marks=marks)


def test_there_are_at_least_ten_cases_and_every_miss_is_a_case():
    names = [c.name for c in CASES]
    assert len(names) >= 10 and len(set(names)) == len(names)
    assert set(KNOWN_MISSES) <= set(names)


def test_tolerances_can_fail():
    assert not Tolerance("rel", 0.2).ok(2.0, 2.41) and Tolerance("rel", 0.2).ok(2.0, 2.39)
    assert not Tolerance("range", 0.1).ok((2.0, 2.5), 2.76)
    assert not Tolerance("order").ok(("a", "b"), ("b", "a"))


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
