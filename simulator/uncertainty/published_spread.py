"""``uncertainty: {acceptance: default}``: draw the acceptance of a scenario that gives none
(its drafter's published default, ``drafter_defaults``) with that default's own measured
spread (``default_spreads``), instead of a hand-given ``acceptance.uncertainty``.

The spread belongs to one policy's drafter, so it is resolved per policy scenario (a
``--compare`` entry may draft with another model, or not at all); a policy that reads no
acceptance mapping (``none``, the model-free methods) varies no acceptance.
"""
from __future__ import annotations

import dataclasses

from simulator.inputs.errors import SpecsimError
from simulator.scenario import Scenario
from simulator.uncertainty.spec import AcceptanceSpread

FIELD = "uncertainty.acceptance"


def with_published_spread(scenario: Scenario) -> Scenario:
    """``scenario`` with its drafter's published spread as its acceptance spread where its
    uncertainty block says ``acceptance: default``; itself otherwise.  An error, before any
    run, where there is no such spread to take."""
    from simulator.acceptance.default_spreads import default_spread
    from simulator.acceptance.provenance import drafting_policy, simulated_pair, written

    unc = scenario.uncertainty
    if not unc.acceptance_default or "acceptance" not in unc.sources:
        return scenario  # (acceptance not varied: its spread is not read)
    cls, params = drafting_policy(scenario)
    if cls is None or cls.name == "none" or cls.acceptance_from_tokens:
        return scenario  # reads no acceptance mapping: nothing to vary
    if written(scenario):
        raise SpecsimError("the scenario gives its own acceptance, not a published default",
                           source=scenario.name, field=FIELD,
                           fix="declare the block's spread as acceptance.uncertainty: "
                               "{sd, source}, or drop the acceptance block to use the "
                               "drafter's published default")
    drafter = simulated_pair(scenario, cls, params)[1]
    found = default_spread(drafter)
    if found is None:
        raise SpecsimError(f"{drafter or 'this policy'} has no published default acceptance "
                           "(simulator/acceptance/drafter_defaults.py)", source=scenario.name,
                           field=FIELD, fix="give an acceptance block with its own "
                                            "uncertainty: {sd, source}")
    if not found.given:
        raise SpecsimError(f"the published default of {drafter} states no spread: "
                           f"{found.source.removeprefix('no spread: ')}", source=scenario.name,
                           field=FIELD, fix="give an acceptance block with its own "
                                            "uncertainty: {sd, source}, or drop "
                                            "uncertainty.acceptance")
    spread = AcceptanceSpread(sd=found.sd, range=found.range, source=found.source)
    return dataclasses.replace(scenario, uncertainty=dataclasses.replace(unc, acceptance=spread))
