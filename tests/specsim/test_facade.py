"""``import specsim``: the public API in one import.  Each name is the very object of its home
module (the table below is written out here, not read from the facade), the facade exposes
nothing else, and the heavy parts (pandas for sweeps and plans, altair for reports) load only
when one of their names is first used."""
import importlib
import subprocess
import sys

import pytest

import specsim
from tests.helpers import REPO

HOMES = {
    "load_scenario": "simulator.scenario", "scenario_from_dict": "simulator.scenario",
    "parse_compare": "simulator.scenario", "Scenario": "simulator.scenario",
    "PolicyConfig": "simulator.scenario", "simulate": "simulator.simulate",
    "Results": "simulator.results", "SpecsimError": "simulator.inputs.errors",
    "load_results_dir": "simulator.results_dir", "bench_serve_metrics": "simulator.vllm_metrics",
    "write_timeline": "simulator.timeline",
    "SweepSpec": "simulator.planning.sweep", "expand_grid": "simulator.planning.sweep",
    "load_sweep": "simulator.planning.sweep", "run_sweep": "simulator.planning.sweep",
    "sweep_from_dict": "simulator.planning.sweep",
    "plan": "simulator.planning.plan", "load_plan": "simulator.planning.plan",
    "plan_from_dict": "simulator.planning.plan", "CapacitySLO": "simulator.planning.capacity",
    "max_sustainable_rate": "simulator.planning.capacity",
    "Question": "simulator.planning.quick_plan",
    "answer_question": "simulator.planning.quick_search",
    "gamma_map": "simulator.planning.gamma_map", "analytic_point": "simulator.planning.analytic",
    "render_report": "reports", "render_report_from_dir": "reports",
    "build_report_html": "reports",
}


def test_the_facade_lists_exactly_the_public_names():
    assert sorted(specsim.__all__) == sorted(HOMES)
    assert len(set(specsim.__all__)) == len(specsim.__all__)
    assert set(HOMES) <= set(dir(specsim))


@pytest.mark.parametrize("name", sorted(HOMES))
def test_each_name_is_its_home_modules_object(name):
    home = importlib.import_module(HOMES[name])
    assert getattr(specsim, name) is getattr(home, name)
    assert getattr(specsim, name) is getattr(specsim, name)  # kept once loaded


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="'specsim' has no attribute 'simulator'"):
        specsim.simulator  # noqa: B018
    assert not hasattr(specsim, "render")


def test_heavy_parts_load_on_first_use():
    """A fresh interpreter: ``import specsim`` loads the engine, not pandas or altair; a sweep
    name loads pandas, a report name altair."""
    heavy = ("pandas", "altair")
    code = ("import sys\n"
            "def loaded(): return [m for m in " + repr(heavy) + " if m in sys.modules]\n"
            "import specsim\n"
            "print(loaded(), 'simulator.simulate' in sys.modules)\n"
            "specsim.run_sweep\n"
            "print(loaded())\n"
            "specsim.render_report\n"
            "print(loaded())\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.splitlines() == ["[] True", "['pandas']", "['pandas', 'altair']"], \
        out.stdout + out.stderr
