"""FlashAttention-3 prefill on Hopper, priced by the profile's ``attention_prefill_fa3`` entry,
against the published kernel measurements, and selected by the engine that runs it."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hardware.kernels import ATTENTION_PREFILL, ATTENTION_PREFILL_FA3
from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import parse_execution, resolve_execution
from simulator.cost.spec_catalog import load_engine
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model

SEQ = (512, 1024, 2048, 4096, 8192, 16384)
# Shah et al. 2024, FlashAttention-3 (arXiv:2407.08608) Figure 5, H100 80GB SXM5, BF16 forward,
# hidden 2048, batch x sequence = 16k tokens: TFLOPS at SEQ (causal FLOPs counted as half)
FA3_HD128_CAUSAL = (292, 423, 521, 579, 602, 616)
FA3_HD128_FULL = (467, 565, 625, 638, 646, 648)
FA3_HD256_CAUSAL = (286, 427, 537, 612, 628, 642)


def _tflops(profile: str, head_dim: int, causal: bool) -> np.ndarray:
    """The paper's benchmark priced by Roofline.attention_time at the FA3 kind: batch
    16k / s requests of s new tokens, no cache, one layer of 2048 / head_dim heads."""
    roof = load_profile(profile).roofline("bf16")
    kind, overhead = roof.prefill_kind_for("fa3")
    assert kind == ATTENTION_PREFILL_FA3
    heads, out = 2048 // head_dim, []
    for s in SEQ:
        b = 16384 // s
        new = np.full(b, float(s))
        # the kernel's pairs: causal s (s + 1) / 2, else s^2, plus the per-query overhead
        width = (0.5 * (s + 1.0) if causal else float(s)) + overhead
        flops = 4.0 * heads * head_dim * new * width
        nbytes = 2.0 * 2.0 * heads * head_dim * new * 2  # Q, K, V read and O written
        t = roof.attention_time(flops, nbytes, new, kind)
        out.append(4.0 * b * s * s * heads * head_dim / (2 if causal else 1) / t / 1e12)
    return np.array(out)


@pytest.mark.parametrize("profile", ["h100-sxm", "h200"])
@pytest.mark.parametrize("head_dim,causal,published", [
    (128, True, FA3_HD128_CAUSAL), (128, False, FA3_HD128_FULL),
    (256, True, FA3_HD256_CAUSAL)])
def test_fa3_matches_the_papers_figure(profile, head_dim, causal, published):
    err = _tflops(profile, head_dim, causal) / np.array(published, float) - 1.0
    assert np.max(np.abs(err)) < 0.10, np.round(100 * err, 1)


def test_fa3_curve_rises_with_sequence_as_measured():
    # the mechanism: a fixed per-query cost amortised over more keys, so TFLOPS rise with s
    got = _tflops("h100-sxm", 128, True)
    assert np.all(np.diff(got) > 0) and got[0] < 0.5 * got[-1]


def test_gpu_without_fa3_prices_the_fa2_class_kernel():
    # FA3 is a Hopper kernel: an A100 profile has no entry, so every engine gets the FA2 fit
    for name in ("a100-80gb", "b200"):
        assert load_profile(name).roofline("bf16").prefill_kind_for("fa3") \
            == (ATTENTION_PREFILL, 0.0)


def _prefill_s(engine: str | None, chunk: int, ctx: int = 0) -> float:
    hw = load_profile("h100-sxm")
    ex = resolve_execution(hw)
    ex = ex if engine is None else dataclasses.replace(ex, spec=load_engine(engine))
    cm = CostModel(hw, load_model("llama-3.1-8b"), execution=ex)
    return cm._attention_s(np.array([float(chunk)]), np.array([float(ctx)]), True)


def test_engine_selects_the_kernel():
    # vLLM V1 runs FA3 on Hopper, SGLang 0.4.1 FlashInfer (priced as the FA2 class)
    assert load_engine("vllm-v0.9").prefill_attention == "fa3"
    assert load_engine("sglang-v0.4").prefill_attention == "fa2"
    fa3, fa2 = _prefill_s("vllm-v0.9", 4096), _prefill_s("sglang-v0.4", 4096)
    assert _prefill_s(None, 4096) == fa2  # no engine named: the FA2-class kernel
    # closed form of one 4096-token prompt, one layer of Llama-3.1-8B (32 heads of 128):
    # FA3 on its causal pairs 4096 x 4097 / 2 plus 275 keys a query, FA2 on 4096 x 4096
    pair, peak, lat = 4.0 * 4096, 989.4e12, 3.8e-6
    assert fa3 == pytest.approx(pair * 4096 * (0.5 * 4097 + 275) / (0.675 * peak) + lat, rel=1e-9)
    assert fa2 == pytest.approx(pair * 4096 * 4096 / (0.35 * peak) + lat, rel=1e-9)


def test_the_scenario_can_name_the_kernel():
    # SGLang's --attention-backend fa3 on the 0.4.1 engine's counts, as harness "sglang-2025"
    out = parse_execution({"engine": "sglang-v0.4", "prefill_attention": "fa3"}, source="t")
    assert out["spec"].name == "sglang-v0.4" and out["spec"].prefill_attention == "fa3"
    assert parse_execution({"prefill_attention": "fa3"}, source="t")["spec"].name == "none"
    with pytest.raises(SpecsimError) as err:
        parse_execution({"prefill_attention": "fa4"}, source="t")
    assert err.value.field == "execution.prefill_attention" and "fa3" in str(err.value)
