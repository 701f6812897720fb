"""Acceptance models: how many draft tokens survive verification, per request and iteration."""
from simulator.acceptance.base import ACCEPTANCE_MODELS, AcceptanceModel, acceptance_from_config
from simulator.acceptance.metrics import expected_metrics, summarise_acceptance

__all__ = ["ACCEPTANCE_MODELS", "AcceptanceModel", "acceptance_from_config",
           "expected_metrics", "summarise_acceptance"]
