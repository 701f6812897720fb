"""The shipped MoE scenarios (issue 15): each uses a measured InferenceX acceptance curve on
the model family it was measured on, written inline so the scenario runs anywhere; here the
inline numbers are checked against the curve files in ../shared/traces/acceptance/ (skipped
when that folder is absent), and each scenario's deployment is what its comment says."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.acceptance.curve import load_curve
from simulator.deployment import resolve_deployment
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
CURVES = ROOT.parent / "shared" / "traces" / "acceptance"
SCENARIOS = {  # scenario -> (curve file, key), as each scenario's comment names them
    "mtp_moe": ("dsv4_mtp.yaml", "deepseek-v4-pro/thinking_off"),
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
