"""The shipped MoE scenarios (issue 15): each uses a measured InferenceX acceptance curve on
the model family it was measured on, written inline so the scenario runs anywhere; here the
inline numbers are checked against the curve files in ../shared/traces/acceptance/ (skipped
when that folder is absent), and each scenario's deployment is what its comment says."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.acceptance.curve import load_curve
from simulator.deployment import resolve_deployment
from simulator.scenario import load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[2]
CURVES = ROOT.parent / "shared" / "traces" / "acceptance"
SCENARIOS = {  # scenario -> (curve file, key), as each scenario's comment names them
    "mtp_moe": ("dsv4_mtp.yaml", "deepseek-v4-pro/thinking_off"),
    "deepseek_dp_attention": ("dsv4_mtp.yaml", "deepseek-v4-pro/thinking_off"),
    "eagle3_moe": ("kimik2.5_eagle3.yaml", "kimi-k2.5-nvfp4/thinking_off"),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_inline_curve_is_the_measured_file(name):
    file, key = SCENARIOS[name]
    if not (CURVES / file).exists():
        pytest.skip(f"../shared/traces/acceptance/{file} is not here")
    sc = load_scenario(str(ROOT / "workloads" / "scenarios" / f"{name}.yaml"))
    measured = load_curve(str(CURVES / file), key)
    inline = [sc.acceptance["lengths"][g] for g in range(1, len(measured) + 1)]
    assert inline == list(measured)


@pytest.mark.parametrize("name, policy, target", [("mtp_moe", "mtp", "deepseek-v3"),
                                                  ("eagle3_moe", "eagle3", "kimi-k2")])
def test_scenario_deploys_a_moe_target(name, policy, target):
    sc = load_scenario(str(ROOT / "workloads" / "scenarios" / f"{name}.yaml"))
    res = resolve_deployment(sc)
    assert sc.policy.name == policy and res.target.name == target
    assert res.target.is_moe and res.target.is_mla
    assert sc.parallelism.tensor_parallel == 8


def _plain_deployment(name: str):
    """The scenario's deployment without speculation (its target on its hardware)."""
    import yaml

    data = yaml.safe_load((ROOT / "workloads" / "scenarios" / f"{name}.yaml").read_text())
    data["policy"] = {"name": "none"}
    data.pop("acceptance")
    return resolve_deployment(scenario_from_dict(data, source=name))


def test_deepseek_v3_single_stream_decode_is_inside_the_published_span():
    # DeepSeek-V3 FP8 on 8 x H200, TP 8 + EP (mtp_moe's deployment), one request decoding
    # at a 1k context.  Published single-stream time per output token (the measurements
    # issue 35 part 4 quotes): 33 ms with SGLang (early 2025), 55 ms with vLLM V0
    # (vllm-project/vllm#12755), 16-26 ms at the most tuned InferenceX operating points.
    # Tolerance, fixed before the new prediction was seen: inside the span of those
    # measurements, [16, 55] ms, widened by 30% each way (the engines and versions differ
    # by more than 3x among themselves).
    cm = _plain_deployment("mtp_moe").target_cost
    ms = cm.decode_time(1, 1024.0) * 1e3
    assert 16 * 0.7 <= ms <= 55 * 1.3, ms


def test_mixtral_chunk_step_prices_the_grouped_gemm_at_its_real_rows():
    # Mixtral-8x7B TP 2 on H100: a step of 32 decodes and a 575-token prefill chunk against
    # the 32 decodes alone.  No published kernel timing of these shapes was found, so the
    # check is the mechanism's closed form: 1214 routed rows over the 8 experts, 151.75 an
    # expert, run as 3 tiles of 64 rows per expert (tile quantisation per expert), each
    # projection its padded tiles at the per-SM rate of the profile's fused-MoE compute
    # efficiency (c) and the experts' 16-bit weights at the GEMM kind's memory rate (m),
    # combined as (c^p + m^p)^(1/p) with the profile's overlap exponent p (vLLM PR #24700's
    # Mixtral TP2 H100 series, hardware/profiles/h100-sxm.yaml), plus the kernel latency;
    # and the chunk step dearer.
    from math import ceil

    import numpy as np

    from hardware.profile import load_profile
    from simulator.cost.cost_model import CostModel
    from simulator.cost.parallelism import Parallelism
    from simulator.models.spec import load_model

    hw = load_profile("h100-sxm")
    m = load_model("mixtral-8x7b")
    cm = CostModel(hw, m, Parallelism(tensor_parallel=2))
    new, ctx = np.array([1.0] * 32 + [575.0]), np.array([500.0] * 32 + [0.0])
    ops = {op.name: op for op in cm.breakdown(new, ctx).ops}
    roof = hw.roofline("bf16")
    _, bw, latency, _ = roof.kind_rates("gemm")
    crate = roof.peak_flops_per_s * hw.moe_grouped_gemm_compute_efficiency
    p = hw.moe_grouped_gemm_overlap_exponent
    rows, f = 607 * 2, m.expert_ffn_size / 2
    for name, n, k in (("experts_up", 2 * f, m.hidden_size), ("experts_down", m.hidden_size, f)):
        tiles = 8 * ceil(rows / 8 / 64) * ceil(n / 128)
        compute = ceil(tiles / 132) * 2 * 64 * 128 * k / (crate / 132)
        memory = (8 * n * k * 2 + rows * (n + k) * 2) / bw
        both = (compute ** p + memory ** p) ** (1 / p)
        assert ops[name].time_s == pytest.approx(32 * (both + latency), rel=1e-9)
    decode = cm.step_time(np.ones(32), np.full(32, 500.0))
    assert cm.step_time(new, ctx) > decode * 1.1
