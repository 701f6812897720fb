"""The published acceptance defaults state their spread (or that their source gives none),
and ``uncertainty: {acceptance: default}`` draws a default-acceptance run with it."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.acceptance.default_spreads import (
    default_spread,
    default_spreads,
    shift_for_tau,
    shifted_tree_tau,
    task_shifts,
)
from simulator.acceptance.drafter_defaults import drafter_default, drafter_defaults
from simulator.acceptance.medusa import MEDUSA_TOP_K, medusa_tree
from simulator.cli import main
from simulator.inputs.errors import SpecsimError
from simulator.planning.executors import SerialExecutor
from simulator.scenario import scenario_from_dict
from simulator.speculation.token_tree import TokenTree
from simulator.uncertainty.draws import Draw, draw_scenario
from simulator.uncertainty.propagate import propagate
from simulator.uncertainty.published_spread import with_published_spread
from tests.simulator.test_uncertainty import SYNTHETIC

# EAGLE (Li et al., ICML 2024, arXiv:2401.15077v3) Table 5, MT-bench, T=0: chain tau of
# Vicuna 7B/13B/33B and LLaMA2-Chat 7B/13B/70B
EAGLE_TABLE5_CHAIN_TAU = (3.20, 3.23, 2.97, 3.00, 3.18, 3.12)
# DeepSeek-V3 Technical Report (arXiv:2412.19437) sec. 5.4.3: "between 85% and 90%"
DSV3_LOW, DSV3_HIGH = 0.85, 0.90
NO_SPREAD = ("eagle-llama-3.1-8b-instruct", "eagle3-llama-3.1-8b-instruct", "eagle3-kimi-k2")
# Spec-Bench Leaderboard.md, "Leaderboard on A100", Vicuna-7B-v1.3, Medusa: speedup on
# MT-bench, translation, summarization, QA, math reasoning, RAG
SPEC_BENCH_MEDUSA_7B = (2.05, 1.73, 1.57, 1.75, 2.05, 1.51)
# SpecInfer (ASPLOS '24) Table 3, multi-step speculative sampling: Alpaca, CP, WebQA, CIP, PIQA
SPECINFER_TABLE3_MSS = (2.38, 2.28, 2.21, 2.29, 2.21)


def eagle(policy="eagle", acceptance=None, unc=None, **kw):
    data = {"target": "vicuna-7b", "draft": "eagle-vicuna-7b",
            "policy": {"name": policy, **({"num_speculative_tokens": 3}
                                          if policy != "none" else {})},
            "workload": SYNTHETIC,
            "uncertainty": unc or {"acceptance": "default", "sources": ["acceptance"]}, **kw}
    if acceptance is not None:
        data["acceptance"] = acceptance
    return scenario_from_dict(data, source="test")


def chain_alpha(tau: float, gamma: int = 5) -> float:
    """The alpha in (0, 1) with 1 + alpha + ... + alpha^gamma = tau (a polynomial root)."""
    roots = np.roots([1.0] * gamma + [1.0 - tau])
    return float(next(r.real for r in roots if abs(r.imag) < 1e-12 and 0 < r.real < 1))


def test_every_published_default_states_its_spread_or_that_it_has_none():
    assert set(default_spreads()) == set(drafter_defaults())
    for name, s in default_spreads().items():
        assert s.given != s.source.startswith("no spread: "), name
        assert (s.sd is None) or (s.range is None), name
    assert {n for n, s in default_spreads().items() if not s.given} == set(NO_SPREAD)


def test_an_eagle_heads_spread_is_the_sd_of_table5s_alphas():
    sd = float(np.std([chain_alpha(t) for t in EAGLE_TABLE5_CHAIN_TAU], ddof=1))
    for head in ("eagle-vicuna-7b", "eagle-llama-2-70b-chat"):
        s = default_spread(head)
        assert s.sd == pytest.approx(sd, abs=1e-4) and s.range is None
        assert "Table 5" in s.source


def test_the_mtp_spread_is_the_reports_own_range_around_its_midpoint():
    s = default_spread("deepseek-v3-mtp")
    mid = drafter_default("deepseek-v3-mtp")["alpha"]
    assert mid == pytest.approx((DSV3_LOW + DSV3_HIGH) / 2)
    assert s.range == pytest.approx((DSV3_LOW - mid, DSV3_HIGH - mid)) and s.sd is None
    assert "sec. 5.4.3" in s.source


def test_a_shift_for_a_chain_tau_is_the_closed_form_alpha_less_the_default():
    # a chain under one constant rate a: tau = 1 + a + ... + a^5 (chain_alpha inverts it)
    chain = TokenTree.chain(5)
    for tau in (1.5, 2.32, 3.9):
        assert shift_for_tau([[0.6]], chain, tau) == pytest.approx(chain_alpha(tau) - 0.6,
                                                                   abs=1e-9)
    with pytest.raises(SpecsimError, match="outside"):
        shift_for_tau([[0.6]], chain, 6.5)  # a chain of 5 accepts at most 6


@pytest.mark.parametrize("drafter, coverage, tree, measured", [
    ("medusa-vicuna-7b", MEDUSA_TOP_K["7b"], medusa_tree("7b"), SPEC_BENCH_MEDUSA_7B),
    ("llama-68m", drafter_default("llama-68m")["coverage"],
     TokenTree.from_config([1, 1, 5, 1, 1, 1, 1, 1]), SPECINFER_TABLE3_MSS),
])
def test_a_per_task_spread_is_the_sd_of_the_shifts_that_reproduce_each_task(
        drafter, coverage, tree, measured):
    base = shifted_tree_tau(coverage, tree)
    shifts = task_shifts(coverage, tree, measured)
    for d, m in zip(shifts, measured):  # each shift moves the tree tau by the task's ratio
        assert shifted_tree_tau(coverage, tree, d) == pytest.approx(
            base * m / np.mean(measured), rel=1e-9)
    assert np.sign(shifts).tolist() == np.sign(np.asarray(measured) - np.mean(measured)).tolist()
    s = default_spread(drafter)
    assert s.sd == pytest.approx(np.std(shifts, ddof=1), abs=1e-4) and s.range is None


def test_the_kimi_default_names_the_spread_it_cannot_take():
    # InferenceX kimik2.5_eagle3.yaml, K=8: thinking on 3.77 against off 3.51, +7.4%
    assert "7.4%" in default_spread("eagle3-kimi-k2").source
    assert default_spread("not-a-drafter") is None


def test_acceptance_default_shifts_the_drafters_published_coverage():
    sc = with_published_spread(eagle())
    assert sc.uncertainty.acceptance.sd == default_spread("eagle-vicuna-7b").sd
    cov = np.asarray(drafter_default("eagle-vicuna-7b")["coverage"])
    moved = draw_scenario(sc, Draw(0, acceptance_shift=0.02)).acceptance
    assert np.allclose(moved["coverage"], np.clip(cov + 0.02, 0.0, 1.0))
    assert moved["measured_for"] == drafter_default("eagle-vicuna-7b")["measured_for"]
    assert draw_scenario(sc, Draw(0)) is sc  # no shift: the point scenario itself



def test_a_medusa_size_is_shifted_as_its_table():
    sc = scenario_from_dict({"target": "vicuna-7b", "draft": "medusa-vicuna-7b",
                             "policy": {"name": "medusa"}, "workload": SYNTHETIC,
                             "uncertainty": {"acceptance": "default"}}, source="t")
    sc = with_published_spread(sc)
    assert sc.uncertainty.acceptance.sd == default_spread("medusa-vicuna-7b").sd
    moved = draw_scenario(sc, Draw(0, acceptance_shift=0.3)).acceptance
    assert "size" not in moved
    assert np.allclose(moved["top_k"], np.clip(np.asarray(MEDUSA_TOP_K["7b"]) + 0.3, 0, 1))

def test_acceptance_default_varies_the_drafting_policy_only():
    rows = propagate([eagle("none"), eagle()], 3, SerialExecutor())
    none, spec = rows
    assert none["p50_tpot_s_p5"] == none["p50_tpot_s_p95"]
    assert spec["p50_tpot_s_p5"] < spec["p50_tpot_s_p95"]


@pytest.mark.parametrize("kw, says", [
    ({"acceptance": {"model": "iid", "alpha": 0.7,
                     "uncertainty": {"sd": 0.02, "source": "t"}}}, "gives its own spread"),
    ({"unc": {"acceptance": "defaults"}}, "unknown value"),
])
def test_a_bad_acceptance_default_is_refused_when_read(kw, says):
    with pytest.raises(SpecsimError, match=says) as err:
        eagle(**kw)
    assert err.value.field == "uncertainty.acceptance"


@pytest.mark.parametrize("make, says", [
    (lambda: eagle(acceptance={"model": "iid", "alpha": 0.7}), "its own acceptance"),
    (lambda: scenario_from_dict({"target": "llama-3.1-8b",
                                 "draft": "eagle-llama-3.1-8b-instruct",
                                 "policy": {"name": "eagle", "num_speculative_tokens": 3},
                                 "workload": SYNTHETIC,
                                 "uncertainty": {"acceptance": "default"}}, source="t"),
     "states no spread: vLLM issue #20780"),
])
def test_acceptance_default_without_a_published_spread_is_refused(make, says):
    with pytest.raises(SpecsimError, match=says) as err:
        with_published_spread(make())
    assert err.value.field == "uncertainty.acceptance"


def test_a_default_spread_left_out_of_the_sources_is_not_asked_for():
    sc = scenario_from_dict({"target": "llama-3.1-8b", "draft": "eagle-llama-3.1-8b-instruct",
                             "policy": {"name": "eagle", "num_speculative_tokens": 3},
                             "workload": SYNTHETIC, "uncertainty": {
                                 "acceptance": "default", "sources": ["cost"]}}, source="t")
    assert with_published_spread(sc) is sc


def test_the_cli_refuses_it_before_any_run(tmp_path, capsys):
    import yaml
    data = {"target": "llama-3.1-8b", "draft": "eagle-llama-3.1-8b-instruct",
            "policy": {"name": "eagle", "num_speculative_tokens": 3}, "workload": SYNTHETIC,
            "uncertainty": {"acceptance": "default"}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    code = main(["run", str(tmp_path / "s.yaml"), "--uncertainty", "2", "--no-progress",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "uncertainty.acceptance" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
