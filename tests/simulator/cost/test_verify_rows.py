"""``verify_step_times``: many candidate verifications of one batch priced at once (the
goodput controller's search).  Each row must be ``step_time``'s float bit for bit, on every
kind of device pricing (kernel shapes with FA2- and FA3-class prefill kernels, flat rates,
MLA), every way a forward runs, and every mix of rows: uniform (the closed form), all
decodes, all verifications, decodes and verifications together, batches past numpy's
pairwise-summation block (128).  And ``chain_draft_time`` of per-request draft counts on
whole-number contexts (its forwards by the closed form) against its definition."""
import dataclasses
import functools

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.drafting import chain_draft_time, level_draft_time
from simulator.cost.execution import eager, resolve_execution
from simulator.cost.parallelism import Parallelism
from simulator.cost.verify_rows import step_tail
from simulator.engine.plan import ClosedFormPricer
from simulator.models.spec import load_model


@functools.cache
def _cost_model(profile: str, model: str, tp: int, execution: str) -> CostModel:
    hw = load_profile(profile.removesuffix("-flat"))
    if profile.endswith("-flat"):  # the same device without its kernels: block
        hw = dataclasses.replace(hw, kernels=None)
    spec, par = load_model(model), Parallelism(tensor_parallel=tp)
    ex = {"graphs": None, "eager": eager(hw),
          "async": dataclasses.replace(resolve_execution(hw), async_scheduling=True)}
    return CostModel(hw, spec, par, execution=ex[execution])


CASES = [("a100-80gb", "opt-13b", 1, "graphs"), ("a100-80gb", "opt-13b", 1, "eager"),
         ("a100-80gb-flat", "opt-13b", 1, "graphs"), ("h100-sxm", "llama-2-70b", 2, "graphs"),
         ("h100-sxm", "llama-2-70b", 2, "async"), ("h200", "deepseek-v3", 8, "graphs"),
         ("h200-flat", "deepseek-v3", 8, "eager"), ("tpu-v4", "opt-13b", 1, "graphs")]


def _candidates(rng: np.random.Generator, n: int, gamma: int) -> np.ndarray:
    """Rows as the goodput search makes them: uniform ones, thresholded ones (random per
    request), all zero, and a few at random."""
    cap = rng.integers(0, gamma + 1, n)
    rows = [np.minimum(cap, u) for u in range(gamma + 1)]
    rows += [np.full(n, u) for u in range(gamma + 1)]
    rows += [rng.integers(0, gamma + 1, n) * (rng.random(n) < p) for p in (0.2, 0.8, 1.0)]
    return np.array(rows, np.int64) + 1  # tokens verified: the drafts and the target's own


@pytest.mark.parametrize("profile,model,tp,execution", CASES,
                         ids=["-".join(map(str, c)) for c in CASES])
def test_rows_are_step_time_bit_for_bit(profile, model, tp, execution):
    cm = _cost_model(profile, model, tp, execution)
    rng = np.random.default_rng(7)
    for n in (1, 2, 7, 9, 30, 129, 300):
        for _ in range(3):
            ctx = rng.integers(1, 8000, n).astype(np.float64)
            tokens = _candidates(rng, n, int(rng.integers(1, 8))).astype(np.float64)
            got = cm.verify_step_times(tokens, ctx)
            want = [cm.step_time(row, ctx, row) for row in tokens]
            assert got.tolist() == want, (n, tokens)
            # the same counts as integers (what the goodput search passes)
            assert cm.verify_step_times(tokens.astype(np.int64), ctx).tolist() == want


def test_rows_left_to_step_time_are_priced_by_it():
    """Fractional token counts and idle requests take ``step_time`` itself."""
    cm = _cost_model("a100-80gb", "opt-13b", 1, "graphs")
    ctx = np.array([100.0, 2000.0, 50.0])
    tokens = np.array([[1.0, 2.5, 3.0], [0.0, 1.0, 4.0], [2.0, 2.0, 2.0]])
    assert cm.verify_step_times(tokens, ctx).tolist() == \
        [cm.step_time(row, ctx, row) for row in tokens]


class _Plain(ClosedFormPricer):
    """A pricer declaring no shortcut for rows: the protocol's default, one call a row."""

    def step_time(self, new_tokens, context, logits_tokens=None) -> float:
        return float(np.sum(new_tokens) * 1e-3 + np.sum(context) * 1e-6 + 1e-4)

    uniform_step_times = uniform_step_time = uniform_pricer = mixed_step_time = \
        mixed_verify_time = chain_decode_times = lambda self, *a: None


def test_default_is_one_step_time_a_row():
    tokens = np.array([[1.0, 3.0], [2.0, 5.0]])
    ctx = np.array([10.0, 20.0])
    # the toy's own formula: 1 ms a token, 1 us a context token, 0.1 ms a step
    assert _Plain().verify_step_times(tokens, ctx).tolist() == \
        [4.0 * 1e-3 + 30.0 * 1e-6 + 1e-4, 7.0 * 1e-3 + 30.0 * 1e-6 + 1e-4]


@pytest.mark.parametrize("profile,model,tp,execution", CASES[:6],
                         ids=["-".join(map(str, c)) for c in CASES[:6]])
def test_a_varied_chain_is_its_forwards_to_the_bit(profile, model, tp, execution):
    """``chain_draft_time`` of per-request draft counts on whole-number contexts (its
    closed-form forwards) against its definition: forward j is one decode of the requests
    drafting more than j, at their contexts + j."""
    cm = _cost_model(profile, model, tp, execution)
    rng = np.random.default_rng(11)
    for n in (2, 5, 17, 140):
        ctx = rng.integers(1, 8000, n)
        k = rng.integers(0, 7, n)
        k[0], k[1] = 6, 0  # never all equal (the uniform case is chain_decode_time's)
        want = 0.0
        for j in range(6):
            on = k > j
            want += cm.step_time(np.ones(int(on.sum())), ctx[on] + j)
        assert chain_draft_time(cm, ctx, k) == want


@pytest.mark.parametrize("profile,model,tp,execution", CASES[:6],
                         ids=["-".join(map(str, c)) for c in CASES[:6]])
def test_tree_levels_are_their_forwards_to_the_bit(profile, model, tp, execution):
    """``level_draft_time`` on whole-number contexts (its forwards by the closed form)
    against its definition: forward j carries tokens[j] a request over the prefix and the
    tokens before it, logits[j] of them through the head."""
    cm = _cost_model(profile, model, tp, execution)
    rng = np.random.default_rng(13)
    for n in (1, 4, 33, 150):
        ctx = rng.integers(1, 8000, n).astype(np.float64)
        tokens, logits = [1, 3, 7, 2], [1, 0, 7, 2]
        want, offset = 0.0, 0.0
        for t, lg in zip(tokens, logits):
            want += cm.step_time(np.full(n, float(t)), ctx + offset, np.full(n, float(lg)))
            offset += t
        assert level_draft_time(cm, ctx, tokens, logits=logits) == want


def test_a_dp_attention_target_prices_its_rows_by_its_own_step_time():
    # DpAttentionCostModel overrides step_time (each DP rank's attention, the EP dispatch);
    # the rows' closed form is CostModel's, so it must not price them: each row is the
    # subclass's own step_time, and differs from what the plain model would say
    from simulator.cost.dp_attention import DpAttentionCostModel
    hw, m = load_profile("h200"), load_model("deepseek-v3")
    par = Parallelism(tensor_parallel=1, data_parallel_attention=8, expert_parallel=8)
    cm = DpAttentionCostModel(hw, m, par)
    ctx = np.array([900.0, 1500.0, 2100.0, 300.0, 4000.0, 700.0, 1200.0, 2500.0])
    rows = np.array([[1] * 8, [3] * 8, [1, 2, 3, 4, 5, 1, 2, 3]])
    want = [cm.step_time(r.astype(float), ctx, r.astype(float)) for r in rows]
    assert cm.verify_step_times(rows, ctx).tolist() == want
    plain = CostModel(hw, m, Parallelism(tensor_parallel=8))
    assert plain.verify_step_times(rows, ctx).tolist() != want


@pytest.mark.parametrize("profile,model,tp,execution", CASES,
                         ids=["-".join(map(str, c)) for c in CASES])
def test_rows_of_one_kernel_past_the_pairwise_block(profile, model, tp, execution):
    """Rows whose every request verifies 2-7 tokens (the multi-query kernel alone, its
    mask holding every request) and rows mixing decodes in, past numpy's 128-wide
    summation block: each ``step_time``'s float."""
    cm = _cost_model(profile, model, tp, execution)
    rng = np.random.default_rng(17)
    for n in (8, 129, 300):
        ctx = rng.integers(1, 8000, n).astype(np.float64)
        tokens = np.vstack([rng.integers(2, 8, (3, n)), rng.integers(1, 8, (2, n))])
        want = [cm.step_time(row, ctx, row) for row in tokens.astype(np.float64)]
        assert cm.verify_step_times(tokens, ctx).tolist() == want


@pytest.mark.parametrize("profile,model,tp,execution", CASES,
                         ids=["-".join(map(str, c)) for c in CASES])
def test_step_tail_is_step_from_to_the_bit(profile, model, tp, execution):
    """``step_tail(cm, n)`` binds ``_step_from``'s numbers once: the same float in every
    runtime mode, attention below and above the eager launches, any host time."""
    cm = _cost_model(profile, model, tp, execution)
    rng = np.random.default_rng(19)
    for n in (1, 3, 64, 300):
        tail = step_tail(cm, n)
        # every forward eager: the fixed part is the stream's parts (eager_stream.py)
        modes = ("eager",) if cm._stream is not None else ("full", "piecewise", "eager")
        for mode in modes:
            for a_layer in [0.0, *rng.uniform(0.0, 1e-3, 6), *rng.uniform(0.0, 1e-7, 6)]:
                fixed = float(rng.uniform(1e-5, 5e-2)) if cm._stream is None else \
                    cm._fixed(float(n), float(n), mode, float(n), 0.0)
                assert tail(mode, fixed, a_layer) == cm._step_from(mode, fixed, a_layer, n)


@pytest.mark.parametrize("profile,model,tp,execution", CASES,
                         ids=["-".join(map(str, c)) for c in CASES])
def test_attention_of_a_stack_is_each_rows_own(profile, model, tp, execution):
    """``attention_layers`` on (K, n) stacks with per-row contexts, rows of decodes only
    among them, is ``CostModel._attention_s`` of each row alone: no kernel is charged to a
    row that has no member of it (a stack of K rows is not one row of K x n requests)."""
    from simulator.cost.verify_rows import attention_layers
    cm = _cost_model(profile, model, tp, execution)
    rng = np.random.default_rng(23)
    for n in (1, 4, 130):
        tokens = np.vstack([np.ones((2, n)), rng.integers(2, 6, (2, n)),
                            rng.integers(1, 4, (3, n))]).astype(np.float64)
        ctx = rng.integers(1, 6000, tokens.shape).astype(np.float64)
        want = [cm._attention_s(t, c, True) for t, c in zip(tokens, ctx)]
        assert attention_layers(cm, tokens, ctx) == want
