"""Precision (issue 15 item 2): FP8/FP4 weights priced at their bytes and their peaks, 16-bit
activations and attention, FP8 KV, refused on devices without the tensor cores."""
import dataclasses

import numpy as np
import pytest

from hardware.profile import DTYPE_BYTES, load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.memory_plan import plan_memory
from simulator.cost.parallelism import Parallelism
from simulator.cost.precision import supported_weight_dtypes, with_precision
from simulator.deployment import resolve_deployment
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.scenario import scenario_from_dict

H100 = load_profile("h100-sxm")
H100_FLAT = dataclasses.replace(H100, kernels=None)
A100 = load_profile("a100-80gb")
LLAMA = load_model("llama-3.1-8b")
LINEARS = ("qkv_proj", "o_proj", "mlp_up", "mlp_down")


def test_fp8_weights_halve_the_weight_bytes():
    fp8 = with_precision(LLAMA, H100, "fp8")
    assert fp8.dtype == "fp8" and fp8.activation_bytes == 2.0
    assert fp8.weight_bytes() == LLAMA.weight_bytes() / 2
    bf16_cm, fp8_cm = CostModel(H100, LLAMA), CostModel(H100, fp8)
    head = LLAMA.lm_head_params() * 2  # the LM head stays 16-bit (vLLM quantises linears)
    assert fp8_cm.weight_bytes_read_per_step - head == pytest.approx(
        (bf16_cm.weight_bytes_read_per_step - head) / 2, rel=1e-12)
    # the memory plan holds the quantised weights
    par = Parallelism()
    assert plan_memory(H100, fp8, par).weight_bytes == LLAMA.weight_bytes() / 2


def _linear_time(cm, batch: int) -> float:
    ops = cm.breakdown(np.ones(batch), np.full(batch, 512.0)).ops
    return sum(op.time_s for op in ops if op.name in LINEARS)


def test_fp8_decode_weight_term_near_twice_cheaper():
    # batch 1 on the flat roofline: the linears are memory-bound on their weights, so FP8
    # (1 B an element against 2) makes them nearly 2x faster (activations stay 16-bit)
    bf16, fp8 = CostModel(H100_FLAT, LLAMA), CostModel(H100_FLAT, with_precision(LLAMA, H100,
                                                                                  "fp8"))
    ratio = _linear_time(bf16, 1) / _linear_time(fp8, 1)
    assert 1.95 < ratio <= 2.0001, ratio
    # attention reads the same 16-bit KV either way, at the 16-bit peak
    attn = [next(op for op in cm.breakdown(np.ones(4), np.full(4, 4096.0)).ops
                 if op.name == "attention") for cm in (bf16, fp8)]
    assert attn[0].time_s == attn[1].time_s
    assert fp8._roof.peak_flops_per_s == H100.peak_flops("bf16")
    assert fp8._lin_roof.peak_flops_per_s == H100.peak_flops("fp8")
    # compute-bound (a long prefill): the FP8 peak is twice the BF16 one (H100 datasheet:
    # 1,979 against 989 dense TFLOPS), so the linears approach 2x there too
    new, ctx = np.array([8192.0]), np.array([0.0])
    lin = [sum(op.time_s for op in cm.breakdown(new, ctx).ops if op.name in LINEARS)
           for cm in (bf16, fp8)]
    assert 1.9 < lin[0] / lin[1] <= 1978.9 / 989.4


@pytest.mark.parametrize("device", ["a100-80gb", "a100-40gb", "a10"])
def test_fp8_on_a_device_without_fp8_tensor_cores_names_it(device):
    hw = load_profile(device)
    with pytest.raises(SpecsimError) as exc:
        with_precision(LLAMA, hw, "fp8")
    text = str(exc.value)
    assert exc.value.field == "quantization" and device in text
    assert "bf16" in text and "fp16" in text  # the dtypes it supports
    with pytest.raises(SpecsimError, match=device):  # a model file stored in fp8 alike
        CostModel(hw, dataclasses.replace(LLAMA, dtype="fp8"))
    with pytest.raises(SpecsimError) as exc:
        with_precision(LLAMA, hw, None, "fp8")
    assert exc.value.field == "kv_cache_dtype" and device in str(exc.value)
    assert supported_weight_dtypes(hw) == ["bf16", "fp16"]


def test_fp4_only_on_a_device_with_an_fp4_peak():
    with pytest.raises(SpecsimError, match="h100-sxm.*fp4|fp4.*h100-sxm"):
        with_precision(LLAMA, H100, "nvfp4")
    # a test device: H100 with an fp4 peak (a mechanism check; the shipped Blackwell
    # profiles carry the datasheet numbers)
    peaks = dict(H100.peak_flops_per_s, fp4=4 * H100.peak_flops("bf16"))
    fp4_hw = dataclasses.replace(H100_FLAT, name="fp4-test", peak_flops_per_s=peaks)
    for fmt in ("nvfp4", "mxfp4"):
        m = with_precision(LLAMA, fp4_hw, fmt)
        cm = CostModel(fp4_hw, m)
        assert cm._lin_roof.peak_flops_per_s == peaks["fp4"]
        assert m.weight_bytes() == LLAMA.param_count() * DTYPE_BYTES[fmt]
    # NVFP4 4.5 bits (E4M3 scale per 16), MXFP4 4.25 bits (E8M0 per 32): OCP MX spec v1.0
    assert DTYPE_BYTES["nvfp4"] == 4.5 / 8 and DTYPE_BYTES["mxfp4"] == 4.25 / 8


def test_fp8_kv_cache_halves_kv_bytes_and_doubles_capacity():
    fp8kv = with_precision(LLAMA, H100, None, "fp8")
    assert fp8kv.dtype == LLAMA.dtype
    assert fp8kv.kv_bytes_per_token() == LLAMA.kv_bytes_per_token() / 2
    a, b = plan_memory(H100, LLAMA, Parallelism()), plan_memory(H100, fp8kv, Parallelism())
    assert b.kv_bytes_per_token == a.kv_bytes_per_token / 2
    assert b.kv_blocks in (2 * a.kv_blocks, 2 * a.kv_blocks + 1)
    # decode attention reads half the KV bytes
    ctx = np.full(8, 8192.0)
    ops = [next(op for op in CostModel(H100_FLAT, m).breakdown(np.ones(8), ctx).ops
                if op.name == "attention") for m in (LLAMA, fp8kv)]
    kv = 8 * 8193 * LLAMA.kv_bytes_per_token()
    assert ops[0].hbm_bytes - ops[1].hbm_bytes == pytest.approx(kv / 2, rel=1e-12)


def test_scenario_keys_apply_to_the_target():
    raw = {"hardware": "h100-sxm", "target": "llama-3.1-8b", "quantization": "fp8",
           "kv_cache_dtype": "fp8"}
    res = resolve_deployment(scenario_from_dict(raw, source="t"))
    assert res.target.dtype == "fp8" and res.target.kv_cache_dtype == "fp8"
    assert res.target_cost._lin_roof.peak_flops_per_s == H100.peak_flops("fp8")
    plain = resolve_deployment(scenario_from_dict(dict(raw, quantization=None,
                                                       kv_cache_dtype="auto"), source="t"))
    assert plain.target == LLAMA
    with pytest.raises(SpecsimError) as exc:
        resolve_deployment(scenario_from_dict(dict(raw, hardware="a100-80gb"), source="t"))
    assert exc.value.field == "quantization" and "a100-80gb" in str(exc.value)
    for key, bad in (("quantization", "int3"), ("kv_cache_dtype", "fp4")):
        with pytest.raises(SpecsimError, match=key):
            scenario_from_dict(dict(raw, **{key: bad}), source="t")


def test_dense_16_bit_pricing_is_untouched_by_the_precision_split():
    # bf16 weights: one roofline for linears and attention, the weights' bytes the
    # activations' (the existing cost tests pin the numbers)
    cm = CostModel(A100, LLAMA)
    assert cm._lin_roof is cm._roof and cm._wb == cm._b == 2


def test_nvfp4_on_the_shipped_blackwell_profile():
    try:
        b200 = load_profile("b200")
    except SpecsimError:
        pytest.skip("no b200 profile in this checkout")
    m = with_precision(LLAMA, b200, "nvfp4")
    cm = CostModel(b200, m)
    assert cm._lin_roof.peak_flops_per_s == b200.peak_flops("fp4")
    assert cm._roof.peak_flops_per_s == b200.peak_flops("bf16")
    assert "nvfp4" in supported_weight_dtypes(b200) and "fp8" in supported_weight_dtypes(b200)
    # decode at batch 1 is memory-bound on the weights: 4.5 bits against 16
    flat = CostModel(dataclasses.replace(b200, kernels=None), m)
    bf16 = CostModel(dataclasses.replace(b200, kernels=None), LLAMA)
    assert 3.3 < _linear_time(bf16, 1) / _linear_time(flat, 1) <= 16 / 4.5
