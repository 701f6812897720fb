"""The serving policies by name: the one registry the scenario and the engine use."""
from __future__ import annotations

from simulator.policies.chain import ChainSpeculation
from simulator.policies.none import NoSpeculation

POLICIES: dict[str, type] = {
    "none": NoSpeculation,
    "chain": ChainSpeculation,
}
