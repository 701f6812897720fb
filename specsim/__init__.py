"""specsim's public Python API in one import: ``import specsim``.

A facade, nothing of its own: every name is the very object its home module defines
(docs/api.md documents each one there).  Scenarios, ``simulate``, ``Results`` and
``SpecsimError`` load with the package (no pandas: the engine builds its frames when a run
ends); sweeps, plans, gamma maps, the analytic point, results folders, the timeline and
the vLLM-keyed metrics load on first use (pandas), and the reports too (altair), so that
``import specsim`` stays as quick as importing the engine.  The project's own packages
never import this one.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.inputs.errors import SpecsimError
from simulator.results import Results
from simulator.scenario import (
    PolicyConfig,
    Scenario,
    load_scenario,
    parse_compare,
    scenario_from_dict,
)
from simulator.simulate import simulate

if TYPE_CHECKING:  # what type checkers and editors see of the names loaded on first use
    from reports import build_report_html, render_report, render_report_from_dir
    from simulator.planning.analytic import analytic_point
    from simulator.planning.capacity import CapacitySLO, max_sustainable_rate
    from simulator.planning.gamma_map import gamma_map
    from simulator.planning.plan import load_plan, plan, plan_from_dict
    from simulator.planning.quick_plan import Question
    from simulator.planning.quick_search import answer_question
    from simulator.planning.sweep import (
        SweepSpec,
        expand_grid,
        load_sweep,
        run_sweep,
        sweep_from_dict,
    )
    from simulator.results_dir import load_results_dir
    from simulator.timeline import write_timeline
    from simulator.vllm_metrics import bench_serve_metrics

EAGER = ("load_scenario", "scenario_from_dict", "parse_compare", "Scenario", "PolicyConfig",
         "simulate", "Results", "SpecsimError")
# name -> the group whose module defines it (loaded by _load on first use)
LAZY = {
    "load_results_dir": "results_dir", "bench_serve_metrics": "vllm_metrics",
    "write_timeline": "timeline",
    "SweepSpec": "sweep", "expand_grid": "sweep", "load_sweep": "sweep", "run_sweep": "sweep",
    "sweep_from_dict": "sweep",
    "plan": "plan", "load_plan": "plan", "plan_from_dict": "plan",
    "Question": "quick_plan", "answer_question": "quick_search",
    "CapacitySLO": "capacity", "max_sustainable_rate": "capacity",
    "gamma_map": "gamma_map", "analytic_point": "analytic",
    "render_report": "reports", "render_report_from_dir": "reports",
    "build_report_html": "reports",
}
__all__ = [*EAGER, *LAZY]


def _load(group: str) -> Any:
    """The module of ``group``; each import is written out, so that the import rules
    (tests/test_import_rules.py) see it."""
    if group == "results_dir":
        from simulator import results_dir as module
    elif group == "vllm_metrics":
        from simulator import vllm_metrics as module
    elif group == "timeline":
        from simulator import timeline as module
    elif group == "sweep":
        from simulator.planning import sweep as module
    elif group == "plan":
        from simulator.planning import plan as module
    elif group == "quick_plan":
        from simulator.planning import quick_plan as module
    elif group == "quick_search":
        from simulator.planning import quick_search as module
    elif group == "capacity":
        from simulator.planning import capacity as module
    elif group == "gamma_map":
        from simulator.planning import gamma_map as module
    elif group == "analytic":
        from simulator.planning import analytic as module
    else:
        import reports as module  # altair: only when a report is asked for
    return module


def __getattr__(name: str) -> Any:
    """A lazily loaded name (PEP 562), kept in the package once loaded."""
    if name not in LAZY:
        raise AttributeError(f"module 'specsim' has no attribute {name!r}")
    value = getattr(_load(LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
