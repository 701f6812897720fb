"""``CostModel.few_step_time``: a forward of a few requests given as lists must be
``step_time``'s float bit for bit, on every device pricing it takes (kernel shapes with FA2-
and FA3-class prefill kernels, FA3's per-query overhead past DECODE_MAX_QUERY tokens), every
way a forward runs, and every mix: decodes and verifications together, verifications only,
one request or eight, all alike (the closed form) or not, a given LM-head total or the new
tokens', MLA's latent attention too.  Where it has no shortcut (no kernel shapes, an MLA
request past DECODE_MAX_QUERY tokens, another class of pricer, a fraction of a token, an
idle request) it must still be ``step_time``'s float."""
import dataclasses
import functools

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost import few_step
from simulator.cost.dp_attention import DpAttentionCostModel, cost_model
from simulator.cost.execution import eager, resolve_execution
from simulator.cost.parallelism import Parallelism
from simulator.inputs.errors import SpecsimError
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
          ("h200", "llama-2-70b", 4, "fa3"),
          # MLA: its decode form's coefficients up to DECODE_MAX_QUERY tokens a request, the
          # expanded form (step_time's own pricing) past it
          ("h200", "deepseek-v3", 8, "graphs"), ("h200", "deepseek-v3", 8, "fa3")]


def test_fa3_cases_price_its_overhead():
    """The FA3 cases take the causal form with its per-query overhead (the branch for
    requests past DECODE_MAX_QUERY tokens is exercised, not skipped)."""
    for case in PRICED:
        cm = _cost_model(*case)
        assert cm._prefill_causal == (case[3] == "fa3")
        assert (cm._prefill_overhead > 0.0) == (case[3] == "fa3")
        assert cm.host == (not case[3].endswith("-draft"))
        assert cm._small and cm._few is not None  # the shortcuts are the ones tested here


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
        u = new.astype(np.float64)
        want = cm.step_time(u, ctx, u)
        assert cm.few_step_time(new.tolist(), ctx.tolist()) == want, (new, ctx)
        assert cm.few_step_time(u.tolist(), ctx.astype(np.float64).tolist(), u) == want
        assert cm.few_step_time(new.tolist(), ctx.tolist(), new.tolist()) == want
        # the same as a function of the contexts (FewAttention.pricer's factors bound once)
        assert cm.few_pricer(new.tolist())(ctx.tolist()) == want
        assert cm.few_pricer(new.tolist())(ctx.astype(np.float64).tolist()) == want  # floats
        # bound from the counts in another order (staged's varied rounds, by multiset)
        bind = cm.few_binder(sorted(new.tolist()))
        assert bind is None or bind(new.tolist())(ctx.tolist()) == want, (new, ctx)
        # an LM head over one token a request (a prefill's, a draft layer's)
        ones = np.ones(len(new))
        assert cm.few_step_time(new.tolist(), ctx.tolist(), ones) == \
            cm.step_time(u, ctx, ones)
        priced += 1
    assert priced == 4 * 8 * 3 + 1  # one request (uniform: the closed form) or more


@pytest.mark.parametrize("profile,model,tp,execution", PRICED[:5],
                         ids=["-".join(map(str, c)) for c in PRICED[:5]])
def test_uniform_batches_are_step_time_bit_for_bit(profile, model, tp, execution):
    """Every request the same count: ``step_time``'s closed form at the contexts' sum, the
    contexts as ints or whole floats; decode and verification widths."""
    cm = _cost_model(profile, model, tp, execution)
    rng = np.random.default_rng(5)
    for n in range(1, 9):
        for u in (1, 2, 4, 7):
            ctx = rng.integers(0, 9000, n)
            new = np.full(n, float(u))
            want = cm.step_time(new, ctx, new)
            assert cm.few_step_time([u] * n, ctx.tolist()) == want
            assert cm.few_step_time([float(u)] * n, ctx.astype(np.float64).tolist(),
                                    new) == want


@pytest.mark.parametrize("profile,model,tp", [("a100-80gb-flat", "opt-13b", 1),
                                              ("h200", "deepseek-v3", 8)])
def test_without_kernel_shapes_or_for_mla_still_step_time(profile, model, tp):
    cm = _cost_model(profile, model, tp, "graphs")
    for new in ([1, 3, 4], [2, 2, 2]):
        u = np.array(new, np.float64)
        assert cm.few_step_time(new, [100, 200, 300]) == \
            cm.step_time(u, np.array([100.0, 200.0, 300.0]), u)


def test_batches_without_a_shortcut_are_step_time():
    """A fraction of a token, an idle request, contexts that are not whole numbers, an
    LM-head list of fractions, no request: ``step_time`` itself prices them; ragged lists
    are refused as ``step_time`` refuses them."""
    cm = _cost_model("a100-80gb", "opt-13b", 1, "graphs")
    ctx = [100, 2000, 50]
    for new, c, head in (([1.0, 2.5, 3.0], ctx, None), ([0, 1, 4], ctx, None),
                         ([3, 3, 3], [100.5, 2000.25, 50.0], None),
                         ([1, 2, 4], ctx, [0.5, 1.5, 2.25]), ([], [], None)):
        a = np.array(new, np.float64)
        want = cm.step_time(a, np.array(c, np.float64),
                            None if head is None else np.array(head))
        assert cm.few_step_time(new, c, head) == want, (new, c, head)
    with pytest.raises(SpecsimError):
        cm.few_step_time([1, 2], ctx)


def test_another_class_of_pricer_is_its_own_step_time():
    """DP attention's ranks price otherwise: its ``few_step_time`` is its ``step_time``."""
    par = Parallelism(tensor_parallel=1, data_parallel_attention=8, expert_parallel=8)
    cm = cost_model(load_profile("h200"), load_model("deepseek-v3"), par)
    assert isinstance(cm, DpAttentionCostModel)
    new, ctx = [1, 3, 4, 1], [100, 200, 300, 4000]
    u = np.array(new, np.float64)
    assert cm.few_step_time(new, ctx, new) == cm.step_time(u, np.array(ctx, np.float64), u)


@pytest.mark.parametrize("profile,model,tp,execution", PRICED,
                         ids=["-".join(map(str, c)) for c in PRICED])
def test_the_first_forward_shortcuts_are_step_time_bit_for_bit(profile, model, tp, execution):
    """``few_uniform_pricer`` (alike requests, as a function of the contexts' sum) and
    ``few_mixed_time`` (different counts as whole floats): ``step_time``'s float, an LM head
    of one token a request; ``few_mixed_time`` declines alike counts that have a closed form
    and MLA's requests past its decode form (None), and prices alike ones that have none."""
    cm, rng, mixed, expect = _cost_model(profile, model, tp, execution), \
        np.random.default_rng(7), 0, 0
    for new, ctx in _batches(rng):
        u, c, ones = new.astype(np.float64), ctx.astype(np.float64), np.ones(len(new))
        n, wide = len(new), cm._mla is not None and new.max() > 16
        got = cm.few_mixed_time(u.tolist(), c.tolist(), float(n))
        alike = np.full(n, u[0])
        closed = cm.uniform_step_time(n, u[0], float(c.sum()), n) is not None
        assert (got is None) == (wide or n == 1 and closed)
        assert got is None or got == cm.step_time(u, c, ones)
        price = cm.few_mixed_pricer(u.tolist(), float(n))  # the same, bound to the counts
        assert price is None if got is None else price(c.tolist()) == got
        mixed, expect = mixed + (n > 1 and got is not None), expect + (n > 1 and not wide)
        alike_got = cm.few_mixed_time(alike.tolist(), c.tolist(), float(n))
        assert (alike_got is None) == (closed or cm._mla is not None and u[0] > 16)
        assert alike_got is None or alike_got == cm.step_time(alike, c, ones)
        price = cm.few_uniform_pricer(n, float(u[0]), float(n))
        # None exactly where the batch has no closed form (an attention roof that can switch)
        assert (price is None) == (not closed)
        assert price is None or price(float(c.sum())) == cm.step_time(alike, c, ones)
    # every batch of two or more requests (never all alike; MLA's within its decode form:
    # at least those of up to 4 and 8 tokens a request)
    assert mixed == expect == 4 * 7 * 3 + 1 or cm._mla is not None and mixed == expect >= 56
    flat = _cost_model("a100-80gb-flat", "opt-13b", 1, "graphs")  # no kernel shapes
    assert flat.few_mixed_time([1.0, 3.0], [100.0, 200.0], 2.0) is None


def test_a_masked_sum_is_numpys_run_by_run():
    """``_masked_sum``: numpy's ``where=`` reduction of up to 8 roofs (each run of members
    summed, the runs added in order), bit for bit, where members left to right would not
    always be (the order shows in the last bits)."""
    rng, differs = np.random.default_rng(5), 0
    for _ in range(3000):
        n = int(rng.integers(2, 9))
        flops, nbytes = (rng.uniform(1e3, 1e9, n) * 10.0 ** rng.integers(-3, 4, n)
                         for _ in range(2))
        members = rng.random(n) < 0.6
        if not members.any() or members.all():
            continue
        per = np.maximum(flops / 3e14, nbytes / 2e12)
        want = float(np.add.reduce(per, where=members))
        assert few_step._masked_sum(3e14, 2e12, flops.tolist(), nbytes.tolist(),
                                    members.tolist()) == want
        differs += float(sum(per[members].tolist(), 0.0)) != want
    assert differs  # the run order matters: a plain left-to-right sum would fail
