"""Analytic ``mtp`` and ``eagle3`` points: the engine policy's own draft time, the closed-form
E from a measured curve, gamma 0 refused; ``specsim gamma-map`` and ``specsim plan`` on a
mixture-of-experts target with MTP (DeepSeek-V3 on 8 H200s)."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
import yaml

from simulator.acceptance import acceptance_from_config
from simulator.cli import main
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.planning.analytic import analytic_point, point_cost_models
from simulator.policies.base import PolicyContext
from simulator.policies.eagle3 import Eagle3Speculation
from simulator.policies.mtp import MtpSpeculation
from tests.helpers import SHARED

CURVE = SHARED / "traces" / "acceptance" / "dsv4_mtp.yaml"
DSV3 = {"hardware": "h200", "target": "deepseek-v3", "tensor_parallel": 8, "batch": 16,
        "context": 2048.0, "policy": "mtp", "gamma": 3, "draft": None}


@pytest.mark.parametrize("policy,cls,point", [
    ("mtp", MtpSpeculation, DSV3),
    ("eagle3", Eagle3Speculation, {**DSV3, "target": "llama-3.1-8b", "tensor_parallel": 1,
                                   "policy": "eagle3"})])
def test_a_point_prices_the_engine_policys_draft(policy, cls, point):
    out = analytic_point(point)
    e = 1 + 0.8 + 0.8 ** 2 + 0.8 ** 3  # i.i.d. alpha 0.8 (the analytic default), gamma 3
    assert out["expected_tokens"] == pytest.approx(e, rel=1e-12)
    tcm, _ = point_cost_models("h200", None, point["target"], None, point["tensor_parallel"],
                               True, None, policy, 3)
    params = cls.parse_params({"num_speculative_tokens": 3}, source="t")
    pol = cls(params, PolicyContext(target_cost=tcm, target_model=load_model(point["target"]),
                                    acceptance=acceptance_from_config(
                                        {"model": "iid", "alpha": 0.8}, source="t")))
    b, ctx = point["batch"], point["context"]
    # the first forward re-reads E tokens per request: the steady state of the engine's
    # per-request re-read
    draft = pol.draft_time(np.full(b, ctx), np.full(b, e))
    assert out["draft_s"] == pytest.approx(draft, rel=1e-12)
    assert out["verify_s"] == pytest.approx(tcm.verify_time(b, ctx, 4), rel=1e-12)
    assert out["speedup"] == pytest.approx(e * out["decode_s"] / (draft + out["verify_s"]))
    assert out["draft_tokens"] == 3 and out["feasible"]


def test_a_point_reads_its_expectation_from_the_measured_curve():
    if not CURVE.exists():
        pytest.skip("../shared/traces/acceptance/dsv4_mtp.yaml is absent")
    acc = {"model": "curve", "path": str(CURVE), "key": "deepseek-v4-pro/thinking_on"}
    # the file's AL(k) for deepseek-v4-pro, thinking_on (the fit is exact up to k = 4)
    for k, al in {1: 1.79, 2: 2.27, 3: 2.49, 4: 2.54}.items():
        out = analytic_point({**DSV3, "gamma": k, "acceptance": acc})
        assert out["expected_tokens"] == pytest.approx(al, rel=1e-9)


def test_mtp_points_refuse_gamma_0_and_a_target_without_modules():
    with pytest.raises(SpecsimError, match="gamma 0"):
        analytic_point({**DSV3, "gamma": 0})
    with pytest.raises(SpecsimError, match="llama-3.1-8b ships no multi-token"):
        analytic_point({**DSV3, "target": "llama-3.1-8b", "tensor_parallel": 1})


def test_gamma_map_runs_on_deepseek_v3_with_mtp(capsys):
    assert main(["gamma-map", "--hardware", "h200", "--tensor-parallel", "8", "--target",
                 "deepseek-v3", "--policy", "mtp", "--batch", "1,64", "--context", "1024",
                 "--gamma", "0-3", "--format", "csv"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert len(df) == 2 and set(df["policy"]) == {"mtp"}
    assert df["best_gamma"].between(1, 3).all()  # mtp has no gamma 0
    assert (df["speedup"] > 1).all()  # alpha 0.8: MTP pays at batch 1 and 64
    assert main(["gamma-map", "--hardware", "h200", "--tensor-parallel", "8", "--target",
                 "deepseek-v3", "--policy", "mtp", "--batch", "1", "--context", "1024",
                 "--gamma", "1-2", "--max-batch", "64"]) == 0
    assert "mtp" in capsys.readouterr().out


def test_plan_runs_on_deepseek_v3_with_mtp(tmp_path, capsys):
    plan = {"name": "dsv3_mtp", "scenario": "default",
            "fixed": {"workload.max_requests": 6, "target": "deepseek-v3", "hardware": "h200",
                      "draft": None, "parallelism.tensor_parallel": 8},
            "slo": {"p99_ttft_ms": 2000, "p99_tpot_ms": 100},
            "search": {"min_rate_per_s": 0.5, "max_rate_per_s": 4, "rel_tol": 1.0},
            "candidates": [{"name": "none", "policy": "none"},
                           {"name": "mtp k=2",
                            "policy": {"name": "mtp", "num_speculative_tokens": 2}}]}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    assert main(["plan", str(path), "--executor", "serial", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "mtp k=2" in text and "none" in text


def test_estimate_runs_on_deepseek_v3_with_mtp_as_the_analytic_points_do(capsys):
    import json
    assert main(["estimate", "--hardware", "h200", "--tensor-parallel", "8", "--target",
                 "deepseek-v3", "--policy", "mtp", "--batch", "16", "--context", "2048",
                 "--gamma", "0-3", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["gamma"] for r in rows] == [1, 2, 3]  # no gamma 0 for mtp
    for r in rows:
        point = analytic_point({**DSV3, "gamma": r["gamma"]})
        for key in ("draft_s", "verify_s", "decode_s", "expected_tokens", "speedup", "c"):
            assert r[key] == pytest.approx(point[key], rel=1e-12), key
