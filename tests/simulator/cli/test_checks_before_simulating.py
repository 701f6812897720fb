"""Issue 37: every --compare entry and every plan candidate is checked before the first
simulation (a bad third policy cost two full simulations first)."""
from __future__ import annotations

import pytest
import yaml

from simulator.cli import main
from simulator.inputs.errors import SpecsimError

PLAN = {"name": "p", "scenario": "default", "fixed": {"workload.max_requests": 10},
        "slo": {"p99_ttft_ms": 1000, "p99_tpot_ms": 40},
        "search": {"min_rate_per_s": 0.5, "max_rate_per_s": 8, "rel_tol": 0.2}}


def _no_simulation(*args, **kwargs):
    raise AssertionError("simulated before every entry was checked")


def test_a_bad_compare_entry_fails_before_the_first_simulation(tmp_path, monkeypatch,
                                                                capsys):
    import simulator.cli.run as cli_run
    monkeypatch.setattr(cli_run, "simulate", _no_simulation)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--no-progress", "--compare", "none,chain,mtp"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specsim: error: --compare mtp: policy.name")
    assert list(tmp_path.iterdir()) == []


def test_a_bad_plan_candidate_fails_before_any_search(tmp_path, monkeypatch, capsys):
    import simulator.planning.capacity as capacity
    monkeypatch.setattr(capacity, "simulate", _no_simulation)
    plan = dict(PLAN, candidates=[{"name": "a", "policy": "none"},
                                  {"name": "b", "policy": "mtp"}])
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(plan))
    assert main(["plan", str(tmp_path / "p.yaml"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "candidate b: policy.name" in err[0]


def test_a_deployment_that_does_not_fit_is_a_plan_result_not_an_error():
    from simulator.scenario import load_scenario
    from simulator.simulate import check_runnable
    big = load_scenario(None, ["target=opt-66b", "workload.max_requests=10"])
    with pytest.raises(SpecsimError, match="does not fit"):
        check_runnable(big)
    check_runnable(big, infeasible_ok=True)   # the plan's table reports it
    mtp = load_scenario(None, ["policy=mtp", "workload.max_requests=10"])
    with pytest.raises(SpecsimError, match="candidate x: policy.name"):
        check_runnable(mtp, where="candidate x", infeasible_ok=True)
