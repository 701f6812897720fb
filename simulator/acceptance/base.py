"""The acceptance interface the engine calls, the name -> class registry, and vLLM metrics.

An acceptance model answers one question per engine iteration: for each running request,
how many of its draft tokens survive verification.  Models are frozen dataclasses built from
YAML (``{"model": "iid", "alpha": 0.8}``); ``bind`` returns a copy holding per-request state
(drawn alphas, hidden easy/hard states, toy-LM text) and never changes the original.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Protocol, runtime_checkable

import numpy as np

from simulator.acceptance.context_decay import ContextDecayAcceptance
from simulator.acceptance.curve import CurveAcceptance
from simulator.acceptance.hard_token import HardTokenAcceptance
from simulator.acceptance.iid import IIDAcceptance
from simulator.acceptance.medusa import MedusaAcceptance
from simulator.acceptance.per_request import PerRequestAcceptance
from simulator.acceptance.positional import PositionalAcceptance
from simulator.acceptance.sequoia import SequoiaAcceptance
from simulator.acceptance.token_level import TokenLevelAcceptance
from simulator.acceptance.tree_topk import TopKCoverageAcceptance
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_str, require_mapping
from simulator.speculation.token_tree import TokenTree


@runtime_checkable
class AcceptanceModel(Protocol):
    """What the engine needs from an acceptance model."""

    name: str

    def bind(self, num_requests: int, rng: np.random.Generator,
             tasks: np.ndarray | None = None) -> "AcceptanceModel":
        """Return a copy with per-request parameters drawn; stateless models return self."""

    def sample_chain(self, gammas: np.ndarray, contexts: np.ndarray, request_ids: np.ndarray,
                     rng: np.random.Generator) -> np.ndarray:
        """Accepted draft tokens per request, ints in [0, gammas[i]], vectorised."""

    def sample_tree(self, tree: TokenTree, contexts: np.ndarray, request_ids: np.ndarray,
                    rng: np.random.Generator) -> np.ndarray:
        """Accepted path length per request (bonus excluded), every request verifying ``tree``."""

    def position_rates(self, gamma: int, context: int = 0) -> np.ndarray:
        """vLLM's per-position rate: entry i = P(the first i+1 drafts are all accepted)."""

    def expected_accepted(self, gamma: int, context: int = 0) -> float | None:
        """Closed-form expected accepted drafts (bonus excluded), None where none exists."""


ACCEPTANCE_MODELS: dict[str, type] = {
    "iid": IIDAcceptance,
    "positional": PositionalAcceptance,
    "curve": CurveAcceptance,
    "medusa": MedusaAcceptance,
    "per_request": PerRequestAcceptance,
    "context_decay": ContextDecayAcceptance,
    "hard_token": HardTokenAcceptance,
    "token_level": TokenLevelAcceptance,
    "tree_topk": TopKCoverageAcceptance,
    "sequoia": SequoiaAcceptance,
}


def acceptance_from_config(cfg: Mapping[str, Any], *, source: str = "acceptance",
                           base_dir: str | Path | None = None) -> AcceptanceModel:
    """Build the acceptance model named by ``cfg['model']`` from the rest of ``cfg``.

    A relative ``path`` (the ``curve`` model's file) is looked up under ``base_dir`` first
    (the scenario's folder), then the working directory, then the project root.
    """
    cfg = require_mapping(cfg, source=source)
    if "model" not in cfg:
        raise SpecsimError("missing required key", source=source, field="model",
                           fix="add 'model: ...', one of: " + ", ".join(ACCEPTANCE_MODELS))
    name = as_str(cfg["model"], source=source, field="model", choices=list(ACCEPTANCE_MODELS))
    path = cfg.get("path")
    if base_dir is not None and isinstance(path, str) and not Path(path).is_absolute() \
            and (Path(base_dir) / path).exists():
        cfg = {**cfg, "path": str(Path(base_dir) / path)}
    return ACCEPTANCE_MODELS[name].from_config(cfg, source=source)


