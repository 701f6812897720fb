"""The serving policies by name: the one registry the scenario, the driver and the adaptive
wrapper use.  The modules it imports policies from are the policy files; the others in
simulator/policies/ are the contract (base.py, every policy's ``PolicyBase``) and kit
(chain_acceptance.py, draft_control.py, feature_draft.py, token_text.py,
tree_acceptance.py, adaptive_controllers.py), which never import a policy file.

A policy's file is imported when its class is first looked up (``POLICIES[name]``), not
when the registry is: a run imports only the policies it runs (``specsim run`` of ``none``
skips the other policy files and what only they bring, 28 modules: 5-8 ms CPU measured on
the issue 14 run).  Names, order and membership (``in``, iteration) import nothing."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping


def _none() -> type:
    from simulator.policies.none import NoSpeculation
    return NoSpeculation


def _chain() -> type:
    from simulator.policies.chain import ChainSpeculation
    return ChainSpeculation


def _staged() -> type:
    from simulator.policies.staged import StagedSpeculation
    return StagedSpeculation


def _specinfer() -> type:
    from simulator.policies.specinfer import SpecInferSpeculation
    return SpecInferSpeculation


def _medusa() -> type:
    from simulator.policies.medusa import MedusaSpeculation
    return MedusaSpeculation


def _eagle() -> type:
    from simulator.policies.eagle import EagleSpeculation
    return EagleSpeculation


def _eagle2() -> type:
    from simulator.policies.eagle import Eagle2Speculation
    return Eagle2Speculation


def _eagle3() -> type:
    from simulator.policies.eagle3 import Eagle3Speculation
    return Eagle3Speculation


def _mtp() -> type:
    from simulator.policies.mtp import MtpSpeculation
    return MtpSpeculation


def _prompt_lookup() -> type:
    from simulator.policies.prompt_lookup import PromptLookup
    return PromptLookup


def _suffix() -> type:
    from simulator.policies.suffix import SuffixDecoding
    return SuffixDecoding


def _jacobi() -> type:
    from simulator.policies.lookahead import JacobiDecoding
    return JacobiDecoding


def _lookahead() -> type:
    from simulator.policies.lookahead import LookaheadDecoding
    return LookaheadDecoding


class LazyPolicies(Mapping[str, type]):
    """Policy classes by name, each imported on its first lookup (read-only)."""

    def __init__(self, loaders: Mapping[str, Callable[[], type] | None]) -> None:
        self._loaders = dict(loaders)
        self._classes: dict[str, type] = {}

    def __getitem__(self, name: str) -> type:
        cls = self._classes.get(name)
        if cls is None:
            loader = self._loaders[name]  # KeyError for a name not registered
            if loader is None:
                raise KeyError(name)
            cls = self._classes[name] = loader()
        return cls

    def __contains__(self, name: object) -> bool:
        return name in self._loaders

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaders)

    def __len__(self) -> int:
        return len(self._loaders)


class PolicyRegistry(LazyPolicies, MutableMapping[str, type]):
    """``POLICIES``: lazy like its bases; a class may be registered (or removed) by hand."""

    def __setitem__(self, name: str, cls: type) -> None:
        self._loaders[name] = None  # given, not imported
        self._classes[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._loaders[name]
        self._classes.pop(name, None)


# the speculative policies the adaptive wrapper can wrap (not none, not itself)
_BASE_LOADERS = {
    "chain": _chain, "staged": _staged, "specinfer": _specinfer, "medusa": _medusa,
    "eagle": _eagle, "eagle2": _eagle2, "eagle3": _eagle3, "mtp": _mtp,
    "prompt_lookup": _prompt_lookup, "suffix": _suffix, "jacobi": _jacobi,
    "lookahead": _lookahead}
BASES: Mapping[str, type] = LazyPolicies(_BASE_LOADERS)


def _adaptive() -> type:
    """``registry.Adaptive``, made on first use (its module loads only when a run asks)."""
    from simulator.policies.adaptive import AdaptiveSpeculation

    cls = type("Adaptive", (AdaptiveSpeculation,), {
        "__module__": __name__, "BASES": BASES,
        "__doc__": "The registered ``adaptive`` policy: the wrapper, over every base."})
    globals()["Adaptive"] = cls  # pickled by reference: registry.Adaptive is this class
    return cls


POLICIES: MutableMapping[str, type] = PolicyRegistry(
    {"none": _none, **_BASE_LOADERS, "adaptive": _adaptive})


def __getattr__(name: str) -> type:
    """``registry.Adaptive``: the registered wrapper class (PEP 562), made on first use."""
    if name == "Adaptive":
        return POLICIES["adaptive"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
