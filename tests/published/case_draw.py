"""One Monte Carlo draw of a published case's declared uncertain inputs, as a change of each
run's scenario (tests/published/coverage.py; harness.drawn applies it to every run).

Three sources, each drawn independently per draw:

- the acceptance: one additive shift on the run's acceptance probabilities, with the spread
  ``simulator/acceptance/default_spreads.py`` gives the run's drafter (normal ``sd`` times
  ``acceptance_z``, or uniform over ``range`` at ``acceptance_u``); none where the source
  states none, and none for a run without speculation;
- the cost: the device's cost factor (``Scenario.cost_factor``), on every run;
- the speculative path: ``Scenario.spec_cost_factor`` (draft forwards and the engine's
  speculative host work, relative to the target's), on runs that speculate.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from simulator.scenario import Scenario


@dataclass(frozen=True)
class CaseDraw:
    """The numbers of one draw (hashable: part of the harness's cache key)."""

    acceptance_z: float = 0.0   # a standard normal: the shift of an ``sd`` spread over sd
    acceptance_u: float = 0.5   # a uniform on [0, 1): where in a ``range`` spread
    cost_factor: float = 1.0
    spec_cost_factor: float = 1.0

    def plain(self) -> "CaseDraw":
        """The draw as a run without speculation sees it: only the cost factor, so that every
        case's baseline of one draw is one run."""
        return CaseDraw(cost_factor=self.cost_factor)

    def apply(self, scenario: Scenario, draft: str | None) -> Scenario:
        """``scenario`` under this draw (``draft``: the harness's; unused, the drafter is
        read from the scenario as ``uncertainty: {acceptance: default}`` reads it)."""
        kw: dict = {"cost_factor": self.cost_factor,
                    "spec_cost_factor": self.spec_cost_factor}
        shift = self.acceptance_shift(scenario)
        if shift != 0.0:
            from simulator.uncertainty.draws import shifted_acceptance
            kw["acceptance"] = shifted_acceptance(scenario, shift)
        return dataclasses.replace(scenario, **kw)

    def acceptance_shift(self, scenario: Scenario) -> float:
        """The shift of the run's drafter's published spread (0.0 where it has none)."""
        spread = drafter_spread(scenario)
        if spread is None or not spread.given:
            return 0.0
        if spread.sd is not None:
            return spread.sd * self.acceptance_z
        lo, hi = spread.range
        return lo + (hi - lo) * self.acceptance_u


def drafter_spread(scenario: Scenario):
    """The ``DefaultSpread`` of the drafter ``scenario``'s policy drafts with; None where it
    drafts with none (no speculation, a model-free method) or the drafter has no default."""
    from simulator.acceptance.default_spreads import default_spread
    from simulator.acceptance.provenance import drafting_policy, simulated_pair

    cls, params = drafting_policy(scenario)
    if cls is None or cls.name == "none" or cls.acceptance_from_tokens:
        return None
    return default_spread(simulated_pair(scenario, cls, params)[1])
