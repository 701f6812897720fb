"""Every scenario YAML shipped in workloads/scenarios/ runs (truncated to a few requests)."""

import pytest

from simulator.inputs.yaml_io import load_yaml_file
from simulator.scenario import _TOP, load_scenario
from simulator.simulate import simulate
from tests.helpers import REPO

SCENARIO_DIR = REPO / "workloads" / "scenarios"


def _scenario_files():
    """Scenario files: YAML mappings whose keys are all scenario keys (not sweeps or plans)."""
    out = []
    for path in sorted(SCENARIO_DIR.glob("*.yaml")):
        data = load_yaml_file(path)
        if isinstance(data, dict) and data and set(data) <= set(_TOP):
            out.append(path)
    return out


def test_the_default_scenario_is_found():
    assert SCENARIO_DIR / "default.yaml" in _scenario_files()


@pytest.mark.parametrize("path", _scenario_files(), ids=lambda p: p.stem)
def test_shipped_scenario_runs(path):
    sc = load_scenario(path, ["workload.max_requests=12"])
    res = simulate(sc)
    summary = res.summary()
    assert summary["finished"] + summary["rejected"] == summary["requests"] == 12
    assert summary["finished"] > 0
