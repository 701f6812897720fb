"""The serving policies by name: the one registry the scenario, the driver and the adaptive
wrapper use.  The modules it imports policies from are the policy files; the others in
simulator/policies/ are the contract (base.py, every policy's ``PolicyBase``) and kit
(chain_acceptance.py, draft_control.py, feature_draft.py, token_text.py,
tree_acceptance.py, adaptive_controllers.py), which never import a policy file."""
from __future__ import annotations

from types import MappingProxyType

from simulator.policies.adaptive import AdaptiveSpeculation
from simulator.policies.chain import ChainSpeculation
from simulator.policies.eagle import Eagle2Speculation, EagleSpeculation
from simulator.policies.eagle3 import Eagle3Speculation
from simulator.policies.lookahead import JacobiDecoding, LookaheadDecoding
from simulator.policies.medusa import MedusaSpeculation
from simulator.policies.mtp import MtpSpeculation
from simulator.policies.none import NoSpeculation
from simulator.policies.prompt_lookup import PromptLookup
from simulator.policies.specinfer import SpecInferSpeculation
from simulator.policies.staged import StagedSpeculation
from simulator.policies.suffix import SuffixDecoding

# the speculative policies the adaptive wrapper can wrap (not none, not itself)
BASES: dict[str, type] = {
    "chain": ChainSpeculation,
    "staged": StagedSpeculation,
    "specinfer": SpecInferSpeculation,
    "medusa": MedusaSpeculation,
    "eagle": EagleSpeculation,
    "eagle2": Eagle2Speculation,
    "eagle3": Eagle3Speculation,
    "mtp": MtpSpeculation,
    "prompt_lookup": PromptLookup,
    "suffix": SuffixDecoding,
    "jacobi": JacobiDecoding,
    "lookahead": LookaheadDecoding,
}



class Adaptive(AdaptiveSpeculation):
    """The registered ``adaptive`` policy: the wrapper, over every base above."""

    BASES = MappingProxyType(dict(BASES))


POLICIES: dict[str, type] = {
    "none": NoSpeculation,
    **BASES,
    "adaptive": Adaptive,
}
