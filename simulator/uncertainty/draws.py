"""One Monte Carlo draw of a scenario's uncertain inputs, and the scenario it runs.

Draw ``i`` takes its numbers from child ``3 + i`` of ``SeedSequence(scenario.seed)``
(children 0-2 are the run's own streams: simulate.seed_streams), split into one generator
per source, so that draw ``i`` has the same acceptance shift, cost factor and workload
seed whichever other sources vary: a one-source-at-a-time run repeats the joint run's
numbers for that source.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from simulator.scenario import Scenario
from simulator.uncertainty.spec import SOURCES, AcceptanceSpread, Uncertainty, shifted_fields

OWN_STREAMS = 3  # simulate.seed_streams: workload, acceptance parameters, engine
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class Draw:
    """The inputs of one draw: 0.0, 1.0 and None where a source does not vary."""

    index: int
    acceptance_shift: float = 0.0
    cost_factor: float = 1.0
    seed: int | None = None
    spec_cost_factor: float = 1.0


def draw_inputs(seed: int, n: int, unc: Uncertainty) -> list[Draw]:
    """Every source's numbers for draws 0..n-1 (all of them; ``restrict`` keeps some)."""
    children = np.random.SeedSequence(seed).spawn(OWN_STREAMS + n)[OWN_STREAMS:]
    out = []
    for i, child in enumerate(children):
        # one stream per source, in SOURCES' order: a source added at the end leaves the
        # others' numbers as they were (SeedSequence children are keyed by their index)
        acc, cost, wl, spec = (np.random.default_rng(s) for s in child.spawn(len(SOURCES)))
        out.append(Draw(i, _shift(unc.acceptance, acc),
                        float(np.exp(unc.cost_sigma * cost.standard_normal())),
                        int(wl.integers(MAX_SEED)),
                        float(np.exp(unc.spec_cost_sigma * spec.standard_normal()))))
    return out


def restrict(draw: Draw, sources: tuple[str, ...]) -> Draw:
    """``draw`` with the sources not in ``sources`` at their point values."""
    return Draw(draw.index,
                draw.acceptance_shift if "acceptance" in sources else 0.0,
                draw.cost_factor if "cost" in sources else 1.0,
                draw.seed if "workload" in sources else None,
                draw.spec_cost_factor if "spec_cost" in sources else 1.0)


def _shift(spread: AcceptanceSpread | None, rng: np.random.Generator) -> float:
    if spread is None or spread.zero:
        return 0.0
    if spread.sd is not None:
        return float(spread.sd * rng.standard_normal())
    lo, hi = spread.range
    return float(rng.uniform(lo, hi))


def draw_scenario(scenario: Scenario, draw: Draw) -> Scenario:
    """The scenario of one draw; ``scenario`` itself where the draw changes nothing (the
    point estimate, exactly)."""
    kw: dict = {}
    if draw.acceptance_shift != 0.0:
        kw["acceptance"] = shifted_acceptance(scenario, draw.acceptance_shift)
    if draw.cost_factor != 1.0:
        kw["cost_factor"] = draw.cost_factor
    if draw.seed is not None:
        kw["seed"] = draw.seed
    if draw.spec_cost_factor != 1.0:
        kw["spec_cost_factor"] = draw.spec_cost_factor
    return dataclasses.replace(scenario, **kw) if kw else scenario


def shifted_acceptance(scenario: Scenario, shift: float) -> dict:
    """The scenario's acceptance (its block, else its drafter's published default) with
    every probability moved by ``shift``, clipped to [0, 1]."""
    from simulator.acceptance.medusa import with_table
    from simulator.acceptance.provenance import effective_acceptance
    acc = with_table(effective_acceptance(scenario))  # a Medusa size: its table, to shift
    fields = shifted_fields(acc, source=scenario.name)
    for name in (f for f in fields if f in acc):
        value = acc[name]
        moved = np.clip(np.asarray(value, dtype=float) + shift, 0.0, 1.0)
        acc[name] = moved.tolist() if isinstance(value, (list, tuple)) else float(moved)
    return acc


def check_acceptance(scenario: Scenario) -> None:
    """An acceptance spread on a model without probabilities, or an ``acceptance: default``
    without a published spread, is refused before any run."""
    from simulator.uncertainty.published_spread import with_published_spread
    scenario = with_published_spread(scenario)
    if scenario.uncertainty.acceptance is not None:
        shifted_acceptance(scenario, 0.0)
