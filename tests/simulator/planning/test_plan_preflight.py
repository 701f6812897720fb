"""Plan pre-flight: requests over the contexts counted before any simulation, dropped or
truncated on request; progress bounded; the output says how the rates were measured."""
from __future__ import annotations

import csv

import numpy as np
import pytest

from simulator.cli import main as cli_main
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import load_yaml_file
from simulator.planning import capacity
from simulator.planning.capacity import RateSearch, rate_search_bound, replica_search_bound
from simulator.planning.plan import plan, plan_candidate, plan_from_dict
from simulator.planning.preflight import fit_context, preflight, preflight_lines
from simulator.scenario import scenario_from_dict
from simulator.simulate import simulate
from tests.helpers import REPO

AZURE = REPO.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
# opt-13b: max_context 2048 (facebook/opt-13b config.json max_position_embeddings)
ROWS = [(0.0, 100, 50),     # fits
        (1.0, 2000, 48),    # exactly 2048: fits (vLLM admits prompt + max_tokens == limit)
        (2.0, 2000, 49),    # 2049: over by one; truncated to 48
        (3.0, 2048, 10),    # the prompt fills the context: no room for an output token
        (4.0, 3000, 5),     # the prompt alone is over
        (5.0, 1500, 600)]   # over; truncated to 548
SLO = {"p99_ttft_ms": 5000, "p99_tpot_ms": 200}
SEARCH = {"min_rate_per_s": 0.5, "max_rate_per_s": 8, "rel_tol": 0.5}


def _trace(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n"
                    + "".join(f"{t},{p},{o}\n" for t, p, o in ROWS))
    return path


def _short_draft(tmp_path, max_context=1024):
    """opt-125m with a shorter context: the draft's limit is then the binding one."""
    data = load_yaml_file(REPO / "simulator" / "models" / "opt-125m.yaml")
    data.update(name="opt-125m-short", max_context=max_context,
                learned_position_embeddings=max_context + 2)
    path = tmp_path / "opt-125m-short.yaml"
    import yaml
    path.write_text(yaml.safe_dump(data))
    return path


def _spec(tmp_path, candidates, **extra):
    data = {"scenario": "default", "slo": SLO, "search": SEARCH,
            "fixed": {"workload": {"trace": str(_trace(tmp_path)), "format": "specsim"}},
            "candidates": candidates, **extra}
    return plan_from_dict(data, source="plan.yaml", base_dir=tmp_path)


def test_preflight_counts_the_requests_over_each_context(tmp_path):
    draft = _short_draft(tmp_path)
    spec = _spec(tmp_path, [{"name": "plain", "policy": "none"},
                            {"name": "chain", "policy": "chain", "draft": str(draft)}])
    plain, chain = preflight(spec)
    # by hand from ROWS: 2049, 2058, 3005 and 2100 exceed 2048; 2048 and 3000 fill it
    assert (plain["requests"], plain["over_context"], plain["prompt_over_context"]) == (6, 4, 2)
    assert plain["draft_max_context"] == -1 and plain["over_draft_context"] == -1
    # every request but the first (150 tokens) exceeds the draft's 1024
    assert (chain["draft_max_context"], chain["over_draft_context"]) == (1024, 5)
    lines = preflight_lines([plain, chain])
    assert len(lines) == 2 and lines[0].startswith(
        "pre-flight: 4 of 6 requests (66.7%) have prompt + output over opt-13b's max_context")
    assert "the engine rejects them" in lines[0] and lines[0].endswith("[plain]")
    assert "5 over the draft's max_context 1,024" in lines[1]
    assert "dropped from the trace" in preflight_lines([plain], "drop")[0]
    assert "2 whose prompt fills the context dropped" in preflight_lines([plain], "truncate")[0]


def test_the_default_rejects_them_in_the_engine(tmp_path):
    spec = _spec(tmp_path, [{"name": "plain", "policy": "none"}])
    sc = scenario_from_dict(spec.candidates[0][1], source="x", base_dir=spec.base_dir)
    req = simulate(sc).requests
    rejected = req["status"] == "rejected"
    assert rejected.tolist() == [False, False, True, True, True, True]
    assert req.loc[rejected, "reject_reason"].str.contains("max_context 2048").all()


@pytest.mark.parametrize("mode, kept, outputs", [
    ("reject", [0, 1, 2, 3, 4, 5], [50, 48, 49, 10, 5, 600]),
    ("drop", [0, 1], [50, 48]),
    ("truncate", [0, 1, 2, 5], [50, 48, 48, 548]),  # 2048 - 2000, 2048 - 1500
])
def test_drop_and_truncate_change_the_simulated_trace_exactly(tmp_path, monkeypatch, mode,
                                                              kept, outputs):
    spec = _spec(tmp_path, [{"name": "plain", "policy": "none"}], over_context=mode)
    seen = []

    def fake(scenario, *, workload):
        seen.append(workload)
        raise RuntimeError("stop after the first simulation")

    monkeypatch.setattr(capacity, "simulate", fake)
    task = (*spec.candidates[0], spec.base_dir, spec.slo, spec.search, None, 4, None, mode)
    with pytest.raises(RuntimeError, match="stop after"):
        plan_candidate(task)
    wl = seen[0]
    assert wl.prompt_tokens.tolist() == [ROWS[i][1] for i in kept]
    assert wl.output_tokens.tolist() == outputs
    arrivals = np.array([ROWS[i][0] for i in kept])
    # one rescaling factor for every kept arrival (the search's rate), none reordered
    factor = wl.arrival_s[1] / arrivals[1]
    assert np.allclose(wl.arrival_s, arrivals * factor, rtol=1e-12, atol=0)


def test_truncation_cuts_token_ids_with_the_output():
    from workloads.workload import Workload
    wl = Workload("ids", np.array([0.0, 1.0]), np.array([3, 2]), np.array([4, 1]),
                  task=np.array(["a", "b"], dtype=object),
                  prompt_ids=(np.array([1, 2, 3]), np.array([4, 5])),
                  output_ids=(np.array([6, 7, 8, 9]), np.array([10])))
    cut = fit_context(wl, 5, "truncate")
    assert cut.output_tokens.tolist() == [2, 1] and cut.output_ids[0].tolist() == [6, 7]
    assert cut.task.tolist() == ["a", "b"] and cut.prompt_ids[1].tolist() == [4, 5]
    assert len(fit_context(wl, 5, "drop")) == 1
    with pytest.raises(SpecsimError, match="every request") as err:
        fit_context(wl, 2, "truncate")  # the prompts of 3 and 2 leave no room
    assert err.value.field == "over_context"


def test_the_flags_are_mutually_exclusive_and_the_yaml_key_is_checked(tmp_path, capsys):
    assert cli_main(["plan", "x.yaml", "--drop-over-context", "--truncate-over-context"]) != 0
    assert "not allowed with argument --drop-over-context" in capsys.readouterr().err
    with pytest.raises(SpecsimError, match="unknown value"):
        _spec(tmp_path, [{"policy": "none"}], over_context="clip")


def test_progress_counts_simulations_within_the_bound():
    short = {"synthetic": {"num_requests": 60, "arrival": {"process": "poisson", "rate_per_s": 2},
                           "prompt": {"dist": "uniform", "min_tokens": 64, "max_tokens": 128},
                           "output": {"dist": "uniform", "min_tokens": 16, "max_tokens": 32}}}
    spec = plan_from_dict({"scenario": "default", "slo": SLO, "search": SEARCH,
                           "fixed": {"workload": short}, "target_rate_per_s": 2.0,
                           "max_replicas": 4, "candidates": [
                               {"name": "a", "policy": "none"},
                               {"name": "b", "policy": "none", "replicas": 2}]},
                          source="plan.yaml")
    calls = []
    df = plan(spec, executor="serial", progress=lambda d, t: calls.append((d, t)))
    per = rate_search_bound(RateSearch(**SEARCH)) + replica_search_bound(4)
    ran = int((df["evaluations"] + df["replica_evaluations"]).sum())
    assert calls[0][1] == 2 * per  # the bound, known before the first simulation
    assert all(d <= t for d, t in calls) and [d for d, _ in calls] == sorted(
        d for d, _ in calls)
    assert calls[-1] == (ran, ran)  # at the end, the total is what ran
    # the check at the target is a simulation of that many replicas at that rate
    for row in df.itertuples():
        assert row.replicas_checked_at_target == row.min_replicas_for_target
        assert row.time_stretch_at_target == pytest.approx(row.trace_rate_per_s / 2.0)


def test_bounds_cover_every_search():
    # the lattice 0.5 * 1.5^k up to 8 has top 6; one doubling is 2 steps: the start, steps
    # of 1, 2, 2, 2 lattice points to the other end after 3 steps sized by the violations,
    # a bisection within 2, and the two probes beside a point near the limits:
    # 1 + 3 + 4 + 1 + 2
    assert RateSearch(**SEARCH).top == 6 and rate_search_bound(RateSearch(**SEARCH)) == 11
    # max_replicas 4: 1, 2, 4, (4), a bisection of at most 2
    assert replica_search_bound(4) == 6


@pytest.mark.skipif(not AZURE.exists(), reason="../shared/traces is not present")
def test_azure_preflight_is_printed_before_any_simulation(tmp_path, monkeypatch, capsys):
    # the count by hand from the CSV: prompt + output over Llama-2-70B's 4096
    # (meta-llama/Llama-2-70b-hf config.json max_position_embeddings)
    with AZURE.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    over = sum(int(r["ContextTokens"]) + int(r["GeneratedTokens"]) > 4096 for r in rows)
    assert len(rows) == 19_366
    plan_yaml = tmp_path / "plan.yaml"
    plan_yaml.write_text(
        "scenario: default\n"
        "fixed: {target: llama-2-70b, draft: null, hardware: h100-sxm,\n"
        "        parallelism.tensor_parallel: 4,\n"
        f"        workload: {{trace: {AZURE}, format: azure}}}}\n"
        "slo: {p99_ttft_ms: 2000, p99_tpot_ms: 100}\n"
        "target_rate_per_s: 40\n"
        "candidates: [{name: h100 tp4, policy: none}]\n")
    printed = []

    def fake(scenario, *, workload):
        printed.append(capsys.readouterr().out)
        raise RuntimeError("no simulation in this test")

    monkeypatch.setattr(capacity, "simulate", fake)
    assert cli_main(["plan", str(plan_yaml), "--executor", "serial", "--no-progress"]) == 0
    assert printed and " ".join(printed[0].split()).startswith(  # wrapped to the width
        f"pre-flight: {over:,} of 19,366 requests ({over / 19_366:.1%}) have prompt + output "
        "over llama-2-70b's max_context 4,096: the engine rejects them")
    assert "failed: RuntimeError: no simulation in this test" in capsys.readouterr().out


def test_a_search_settled_in_a_worker_counts_its_own_simulations():
    from simulator.planning.plan import _SimulationCount
    calls = []
    count = _SimulationCount(10, 2, lambda d, t: calls.append((d, t)))
    count.settled(1, {"evaluations": 3, "replica_evaluations": 2})  # ran elsewhere: no ticks
    assert calls[-1] == (5, 15)  # 5 done; its 5 unused of 10 leave the total
    count.tick(), count.tick()  # the next one runs here
    count.settled(0, {"evaluations": 2})
    assert calls[-1] == (7, 7)
