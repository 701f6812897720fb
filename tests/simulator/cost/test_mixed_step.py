"""A decode batch carrying prefill chunks, priced without per-request decode arrays.

``CostModel.mixed_step_time`` prices ``n`` one-token decodes by the uniform closed form's
line in their context sum and each prefill chunk by request.  It must agree with the
per-request ``breakdown`` and with ``step_time`` over the concatenated batch within rounding,
on every profile (kernel shapes and flat rates), execution mode, MLA and MoE models, with
1-token chunks (a decode to attention) and at a budget's edge, and give way (None) where no
line applies.
"""
import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import resolve_execution
from simulator.cost.parallelism import Parallelism
from simulator.models.spec import load_model
from tests.simulator.cost.test_hot_path import EXECUTIONS, PROFILES, _cost_model

REL = 1e-12


def _mixed(rng, n_max: int = 200):
    """n decodes (contexts to 8k) and one to three chunks (1 to 600 tokens, contexts to 4k);
    the chunks that complete their prefill send a token through the LM head."""
    n = int(rng.integers(1, n_max + 1))
    dec_ctx = rng.integers(0, 8192, n)
    k = int(rng.integers(1, 4))
    chunks = rng.integers(1, 601, k)
    if rng.random() < 0.3:
        chunks[0] = 1  # a 1-token chunk (a prompt's last token, a budget's last slot)
    chunk_ctx = rng.integers(0, 4096, k)
    completes = rng.random(k) < 0.5
    return dec_ctx, chunks, chunk_ctx, completes


def _concatenated(dec_ctx, chunks, chunk_ctx, completes):
    n = dec_ctx.size
    new = np.concatenate((np.ones(n), chunks.astype(np.float64)))
    ctx = np.concatenate((dec_ctx, chunk_ctx)).astype(np.float64)
    logits = np.concatenate((np.ones(n), completes.astype(np.float64)))
    return new, ctx, logits


def _mixed_time(cm, dec_ctx, chunks, chunk_ctx, completes):
    return cm.mixed_step_time(dec_ctx.size, float(dec_ctx.sum()), chunks.tolist(),
                              chunk_ctx.tolist(), float(dec_ctx.size + completes.sum()))


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("execution", EXECUTIONS)
@pytest.mark.parametrize("model, tp", [("llama-2-70b", 2), ("opt-13b", 1), ("llama-2-7b", 1)])
def test_mixed_steps_match_step_time_and_the_breakdown(profile, execution, model, tp):
    cm = _cost_model(profile, model, tp, execution)
    rng = np.random.default_rng([PROFILES.index(profile), EXECUTIONS.index(execution), tp])
    priced = 0
    for _ in range(30):
        batch = _mixed(rng)
        got = _mixed_time(cm, *batch)
        new, ctx, logits = _concatenated(*batch)
        if (new == 1).all():  # every chunk one token: a uniform batch, step_time's
            assert got is None
            continue
        if got is None:  # no line: the decodes' roof switches with the context
            assert cm._decode_line is None
            continue
        priced += 1
        assert got == pytest.approx(cm.step_time(new, ctx, logits), rel=REL, abs=0.0)
        assert got == pytest.approx(cm.breakdown(new, ctx, logits).time_s, rel=REL, abs=0.0)
    assert priced > 0 or cm._decode_line is None


@pytest.mark.parametrize("model", ["deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b"])
@pytest.mark.parametrize("profile", ["h100-sxm", "h200"])
def test_mixed_steps_on_mla_and_moe_models(model, profile):
    spec = load_model(model)
    tp = 8 if spec.num_layers > 40 else 2
    cm = CostModel(load_profile(profile), spec, Parallelism(tensor_parallel=tp))
    rng = np.random.default_rng(len(model))
    for _ in range(20):
        batch = _mixed(rng, 64)
        got = _mixed_time(cm, *batch)
        new, ctx, logits = _concatenated(*batch)
        if got is None:
            assert (new == 1).all() or cm._decode_line is None
            continue
        assert got == pytest.approx(cm.breakdown(new, ctx, logits).time_s, rel=REL, abs=0.0)


def test_no_mixed_price_where_no_line_applies():
    hw, model = load_profile("a100-80gb"), load_model("llama-2-70b")
    curved = dataclasses.replace(hw, memory_efficiency_curve=((1e3, 0.3), (1e9, 0.9)))
    cases = {
        "curved roofline": CostModel(curved, model),
        "micro-batched pipeline": CostModel(hw, model, Parallelism(
            pipeline_parallel=2, micro_batches=2)),
        "single roofline": CostModel(hw, model, execution=dataclasses.replace(
            resolve_execution(hw), step_model="single_roofline")),
    }
    for name, cm in cases.items():
        assert cm.mixed_step_time(4, 4000.0, [300], [0], 4.0) is None, name
    cm = CostModel(hw, model, Parallelism(tensor_parallel=2))
    assert cm.mixed_step_time(0, 0.0, [300], [0], 1.0) is None  # no decode: step_time's
    assert cm.mixed_step_time(3, 900.0, [1, 1], [10, 20], 5.0) is None  # uniform


def _verifications(rng, u: int, n_max: int = 120):
    """n chain verifications of u tokens (contexts to 8k) and one to three chunks of 2 to 600
    tokens (contexts to 4k), the completing ones sending a token through the LM head."""
    n = int(rng.integers(1, n_max + 1))
    k = int(rng.integers(1, 4))
    chunks = rng.integers(2, 601, k)
    return rng.integers(0, 8192, n), chunks, rng.integers(0, 4096, k), rng.random(k) < 0.5


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("execution", EXECUTIONS)
@pytest.mark.parametrize("u", [2, 5, 9])
def test_chain_verifications_with_chunks_match_step_time(profile, execution, u):
    # what a chain step that admits a prompt prices (simulator/engine/forward.py): the
    # verifications share the multi-query kernel with the chunks
    cm = _cost_model(profile, "llama-2-7b", 1, execution)
    rng = np.random.default_rng([PROFILES.index(profile), EXECUTIONS.index(execution), u])
    priced = 0
    for _ in range(25):
        dec_ctx, chunks, chunk_ctx, completes = _verifications(rng, u)
        n = dec_ctx.size
        got = cm.mixed_verify_time(n, u, float(dec_ctx.sum()), chunks.tolist(),
                                   chunk_ctx.tolist(), float(n * u + completes.sum()))
        new = np.concatenate((np.full(n, float(u)), chunks.astype(np.float64)))
        ctx = np.concatenate((dec_ctx, chunk_ctx)).astype(np.float64)
        logits = np.concatenate((np.full(n, float(u)), completes.astype(np.float64)))
        if got is None:  # no line: the verifications' roof switches with the context
            assert cm._verify_lines[u] is None
            continue
        priced += 1
        assert got == pytest.approx(cm.step_time(new, ctx, logits), rel=REL, abs=0.0)
        assert got == pytest.approx(cm.breakdown(new, ctx, logits).time_s, rel=REL, abs=0.0)
    assert priced > 0 or cm._verify_lines[u] is None


def test_no_chain_mixed_price_where_a_kernel_or_the_closed_form_differs():
    cm = CostModel(load_profile("a100-80gb"), load_model("llama-2-7b"))
    assert cm.mixed_verify_time(4, 5, 4000.0, [300, 1], [0, 7], 21.0) is None  # 1-token chunk
    assert cm.mixed_verify_time(4, 5, 4000.0, [5, 5], [0, 7], 21.0) is None  # uniform batch
    assert cm.mixed_verify_time(0, 5, 0.0, [300], [0], 1.0) is None  # one chunk: uniform
    assert cm.mixed_verify_time(0, 5, 0.0, [300, 300], [0, 9], 1.0) is None  # uniform
    assert cm.mixed_verify_time(0, 5, 0.0, [300, 2], [0, 9], 1.0) is not None  # chunks only
    mla = CostModel(load_profile("h200"), load_model("deepseek-v3"),
                    Parallelism(tensor_parallel=8))
    assert mla.mixed_verify_time(4, 5, 4000.0, [300], [0], 21.0) is None  # MLA: step_time's
    assert cm.mixed_verify_time(4, 5, 4000.0, [300], [0], 21.0) is not None


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("execution", EXECUTIONS)
def test_chunks_alone_match_step_time(profile, execution):
    # a draft model prefilling several prompts' chunks (drafting.draft_prefill_time): no
    # decode, no logits, or a token through the LM head for each completing chunk
    cm = _cost_model(profile, "llama-2-7b", 1, execution)
    rng = np.random.default_rng([PROFILES.index(profile), EXECUTIONS.index(execution)])
    priced = 0
    for _ in range(25):
        k = int(rng.integers(2, 6))
        chunks, ctx = rng.integers(2, 601, k), rng.integers(0, 4096, k)
        logits = (rng.random(k) < 0.5).astype(np.float64) * rng.integers(0, 2)
        got = cm.mixed_verify_time(0, 1, 0.0, chunks.astype(float).tolist(),
                                   ctx.astype(float).tolist(), float(logits.sum()))
        if got is None:  # no line: the multi-query kernel's roof switches
            assert cm._verify_lines[2] is None or (chunks == chunks[0]).all()
            continue
        priced += 1
        new = chunks.astype(np.float64)
        assert got == pytest.approx(cm.step_time(new, ctx, logits), rel=REL, abs=0.0)
        assert got == pytest.approx(cm.breakdown(new, ctx, logits).time_s, rel=REL, abs=0.0)
    assert priced > 0 or cm._verify_lines[2] is None


def test_no_chunks_price_where_no_line_applies():
    hw, model = load_profile("a100-80gb"), load_model("llama-2-7b")
    curved = dataclasses.replace(hw, memory_efficiency_curve=((1e3, 0.3), (1e9, 0.9)))
    for cm in (CostModel(curved, model),
               CostModel(hw, model, Parallelism(pipeline_parallel=2, micro_batches=2)),
               CostModel(hw, model, execution=dataclasses.replace(
                   resolve_execution(hw), step_model="single_roofline"))):
        assert cm.mixed_verify_time(0, 1, 0.0, [300, 40], [0, 9], 0.0) is None
