"""``ClosedForms.uniform_sum_pricer`` (``step_models.sum_pricer``): several uniform forwards
at offsets from one context sum, added in one loop, must be the float the forwards' own
scalar pricers give added left to right from the same start (hence ``step_time``'s, which
test_few_step.py and test_hot_path.py hold those to), or None where a forward's form is not
the usual one (eager launches, async overlap); and ``feature_rows.one_chunk_s``, a prompt
chunk's closed form, must be ``step_time``'s float of that chunk."""
import dataclasses
import functools

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import eager, resolve_execution
from simulator.cost.parallelism import Parallelism
from simulator.models.spec import load_model
from simulator.policies.feature_rows import one_chunk_s


@functools.cache
def _cost_model(profile: str, model: str, tp: int, execution: str) -> CostModel:
    hw = load_profile(profile)
    plain = resolve_execution(hw)
    ex = {"graphs": None, "eager": eager(hw),
          "async": dataclasses.replace(plain, async_scheduling=True)}
    return CostModel(hw, load_model(model), Parallelism(tensor_parallel=tp),
                     execution=ex[execution.removesuffix("-draft")],
                     host=not execution.endswith("-draft"))


USUAL = [("a100-40gb", "opt-1.3b", 1, "graphs"), ("a100-40gb", "opt-1.3b", 1, "graphs-draft"),
         ("h100-sxm", "llama-2-70b", 2, "graphs"), ("a100-40gb", "llama-2-7b", 1, "graphs")]
# EAGLE-2's later forwards (topk 4 tokens a request each) and a chain's (one each)
FORWARDS = [[(1.0, 4, 4), (5.0, 4, 4), (9.0, 4, 4), (13.0, 4, 4)],
            [(0.0, 1, 1), (1.0, 1, 1), (2.0, 1, 1), (3.0, 1, 1), (4.0, 1, 1)]]


@pytest.mark.parametrize("case", USUAL)
@pytest.mark.parametrize("n", [1, 3, 7])
@pytest.mark.parametrize("forwards", FORWARDS)
def test_sum_is_the_pricers_sum(case, n, forwards):
    cm = _cost_model(*case)
    shapes = [(n * offset, u, n * lg) for offset, u, lg in forwards]
    together = cm.uniform_sum_pricer(n, shapes)
    assert together is not None  # the usual graphs: the one-loop form applies
    pricers = [(offset, cm.uniform_pricer(n, u, lg)) for offset, u, lg in shapes]
    rng = np.random.default_rng(7)
    for start, x in zip(rng.random(200) * 1e-3, rng.integers(n, n * 40_000, 200).tolist()):
        want = 0.0 + float(start)
        for offset, price in pricers:
            want += price(float(x) + offset)
        assert together(0.0 + float(start), float(x)) == want  # bit for bit


@pytest.mark.parametrize("execution", ["eager", "async"])
def test_other_forms_have_no_sum(execution):
    """Eager launches and async overlap: scalar_time's general branch, no one-loop form."""
    cm = _cost_model("a100-40gb", "opt-1.3b", 1, execution)
    assert cm.uniform_sum_pricer(2, [(0.0, 1, 2), (2.0, 1, 2)]) is None


@pytest.mark.parametrize("case", USUAL)
def test_one_chunk_is_step_time(case):
    cm, formed = _cost_model(*case), 0
    for chunk, ctx in [(1, 0), (17, 0), (512, 0), (300, 1024), (2048, 4096), (5, 77)]:
        new, context = np.array([chunk], np.int64), np.array([float(ctx)])
        want = cm.step_time(new, context, np.zeros(1))
        got = one_chunk_s(cm, new, context)
        assert got is None or got == want  # bit for bit where the form applies
        formed += got is not None
    assert formed >= 4  # the form is taken (most chunks have one), not skipped
    assert one_chunk_s(cm, np.array([2.5]), np.array([10.0])) is None  # not whole: no form
