"""Shared test helpers: the project's root, scenarios, constant-time cost models, workloads.

Imported as ``from tests.helpers import ...`` (tests/ is a package, so test files of the
same name can live in different folders); fixtures shared by many files are in conftest.py.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

from simulator.scenario import Batching, PolicyConfig, load_scenario
from workloads.workload import Workload

REPO = Path(__file__).resolve().parent.parent   # the project's root
SHARED = REPO.parent / "shared"                 # ../shared: real traces and measurements


def specsim_command() -> list[str]:
    """How a user runs specsim: the installed ``specsim`` script beside this Python, else
    ``python -m simulator.cli`` (a checkout that was never pip-installed)."""
    script = Path(sys.executable).parent / "specsim"
    return [str(script)] if script.exists() else [sys.executable, "-m", "simulator.cli"]


class ConstantCost:
    """A cost model whose every forward takes ``seconds``, whatever the batch."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def step_time(self, new_tokens, context, logits_tokens=None) -> float:
        return self.seconds

    def chain_decode_time(self, context, steps: int) -> float:
        return self.seconds * steps


def workload(arrival, prompt, output, name="test") -> Workload:
    return Workload(name=name, arrival_s=np.asarray(arrival, float),
                    prompt_tokens=np.asarray(prompt, np.int64),
                    output_tokens=np.asarray(output, np.int64))


def scenario(policy="none", alpha=0.8, **changes):
    """The built-in scenario with a policy, an i.i.d. alpha and field replacements."""
    params = {}
    if ":" in policy:
        name, _, rest = policy.partition(":")
        params = {k: int(v) for k, v in (kv.split("=") for kv in rest.split(","))}
    else:
        name = policy
    sc = load_scenario()
    sc = dataclasses.replace(sc, policy=PolicyConfig(name, params),
                             acceptance={"model": "iid", "alpha": alpha})
    batching = changes.pop("batching", None)
    if batching:
        sc = dataclasses.replace(sc, batching=dataclasses.replace(sc.batching, **batching))
    return dataclasses.replace(sc, **changes)


__all__ = ["REPO", "SHARED", "specsim_command", "Batching", "ConstantCost", "scenario", "workload"]
