"""``few_step_time``: a forward of a few requests with different token counts priced on
Python numbers must be ``step_time``'s float bit for bit, on every device pricing it takes
(kernel shapes with FA2- and FA3-class prefill kernels, FA3's per-query overhead past
DECODE_MAX_QUERY tokens), every way a forward runs, and every mix: decodes and verifications
together, verifications only, one request or eight, a given LM-head total or the new
tokens'.  Where it has no shortcut it must say so (None), never guess."""
import dataclasses
import functools

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import eager, resolve_execution
from simulator.cost.few_step import few_step_time
from simulator.cost.parallelism import Parallelism
from simulator.models.spec import load_model


@functools.cache
def _cost_model(profile: str, model: str, tp: int, execution: str) -> CostModel:
    hw = load_profile(profile.removesuffix("-flat"))
    if profile.endswith("-flat"):  # the same device without its kernels block
        hw = dataclasses.replace(hw, kernels=None)
    plain = resolve_execution(hw)
    ex = {"graphs": None, "eager": eager(hw),
          "async": dataclasses.replace(plain, async_scheduling=True),
          # vLLM's FA3 on Hopper (engines.yaml): causal pairs plus a per-query overhead
          "fa3": dataclasses.replace(plain, spec=dataclasses.replace(
              plain.spec, prefill_attention="fa3"))}
    # "draft": priced inside another model's engine step (no host time of its own)
    return CostModel(hw, load_model(model), Parallelism(tensor_parallel=tp),
                     execution=ex[execution.removesuffix("-draft")],
                     host=not execution.endswith("-draft"))


PRICED = [("a100-40gb", "opt-1.3b", 1, "graphs"), ("a100-40gb", "opt-1.3b", 1, "graphs-draft"),
          ("h100-sxm", "llama-2-7b", 1, "eager-draft"), ("a100-80gb", "opt-13b", 1, "eager"),
          ("h100-sxm", "llama-2-70b", 2, "graphs"), ("h100-sxm", "llama-2-70b", 2, "async"),
          ("h100-sxm", "llama-2-70b", 2, "eager"), ("h100-sxm", "llama-2-70b", 2, "fa3"),
          ("h200", "llama-2-70b", 4, "fa3")]


def test_fa3_cases_price_its_overhead():
    """The FA3 cases take the causal form with its per-query overhead (the branch for
    requests past DECODE_MAX_QUERY tokens is exercised, not skipped)."""
    for case in PRICED:
        cm = _cost_model(*case)
        assert cm._prefill_causal == (case[3] == "fa3")
        assert (cm._prefill_overhead > 0.0) == (case[3] == "fa3")
        assert cm.host == (not case[3].endswith("-draft"))


def _batches(rng: np.random.Generator):
    """Token counts as staged's varied rounds make them (1 to gamma2 + 1), wider ones past
    DECODE_MAX_QUERY (FA3's overhead), and mixes with decodes; never all alike."""
    for _ in range(4):
        for n in range(1, 9):
            for top in (4, 8, 40):
                new = rng.integers(1, top + 1, n)
                if n > 1 and new.min() == new.max():
                    new[0] = new[0] % top + 1
                yield new, rng.integers(0, 9000, n)
    # FA3's overhead starts past DECODE_MAX_QUERY (16) tokens: either side of the edge
    yield np.array([16, 17, 1, 15]), np.array([0, 3000, 70, 8191])


@pytest.mark.parametrize("profile,model,tp,execution", PRICED,
                         ids=["-".join(map(str, c)) for c in PRICED])
def test_prices_are_step_time_bit_for_bit(profile, model, tp, execution):
    cm = _cost_model(profile, model, tp, execution)
    rng, priced = np.random.default_rng(11), 0
    for new, ctx in _batches(rng):
        if len(new) == 1:  # one request is uniform: step_time's closed form, not ours
            assert few_step_time(cm, new.tolist(), ctx.tolist()) is None
            continue
        u = new.astype(np.float64)
        want = cm.step_time(u, ctx, u)
        assert few_step_time(cm, new.tolist(), ctx.tolist()) == want, (new, ctx)
        assert few_step_time(cm, u.tolist(), ctx.astype(np.float64).tolist(),
                             float(u.sum())) == want
        # an LM head over one token a request (a prefill's, a draft layer's)
        ones = np.ones(len(new))
        assert few_step_time(cm, new.tolist(), ctx.tolist(), float(len(new))) == \
            cm.step_time(u, ctx, ones)
        priced += 1
    assert priced == 4 * 7 * 3 + 1  # every batch of two requests or more


@pytest.mark.parametrize("profile,model,tp", [("a100-80gb-flat", "opt-13b", 1),
                                              ("h200", "deepseek-v3", 8)])
def test_no_shortcut_without_kernel_shapes_or_for_mla(profile, model, tp):
    cm = _cost_model(profile, model, tp, "graphs")
    assert few_step_time(cm, [1, 3, 4], [100, 200, 300]) is None


def test_batches_it_leaves_to_step_time():
    """A uniform batch, a fraction of a token, an idle request, no request, ragged lists."""
    cm = _cost_model("a100-80gb", "opt-13b", 1, "graphs")
    ctx = [100, 2000, 50]
    for new in ([3, 3, 3], [1.0, 2.5, 3.0], [0, 1, 4], []):
        assert few_step_time(cm, new, ctx[:len(new)]) is None
    assert few_step_time(cm, [1, 2], ctx) is None
