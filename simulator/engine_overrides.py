"""What a named engine overrides in the scenario's batching at start-up, as the engine does.

vLLM 0.7.x (engines.yaml ``vllm-v0.7``, ``mla_disables_chunked_prefill``) turns chunked
prefill and prefix caching off for a model that runs MLA (DeepSeek-V2/V3/R1, Kimi-K2),
whatever the user asked: vllm/config.py ``VllmConfig.__post_init__`` logs "MLA is enabled;
forcing chunked prefill and prefix caching to be disabled." and sets
``scheduler_config.chunked_prefill_enabled`` and ``cache_config.enable_prefix_caching`` to
False.  Its scheduler then runs ``Scheduler._schedule_default`` (core/scheduler.py): whole
prompts in a prefill-only step within ``max_num_batched_tokens`` and ``max_num_seqs``, the
decodes in steps of their own, prefills first.  Here the MLA rule sets
``enable_chunked_prefill`` off (a prompt is admitted whole or waits: engine/admission.py)
and the scheduler's rule below then sets ``mixed_chunk`` off (the prefill-first steps of
engine/prefill_first.py); ``max_num_batched_tokens`` is kept, as 0.7.x keeps it.

The same scheduler runs every model: with chunked prefill off (whatever the model) vLLM V0
runs ``_schedule_default``, prefill-only and decode-only steps, and has no flag that mixes
whole prompts with decodes (engines.yaml ``unchunked_prefill_apart``), so on such an engine
``enable_chunked_prefill`` false sets ``mixed_chunk`` false, a ``mixed_chunk: true`` written
in the scenario included.  vLLM V1 mixes either way (its entries leave it unset).  The run's
``info["engine_override"]`` says what was overridden, as vLLM's log line does; empty where
nothing was.
"""
from __future__ import annotations

import dataclasses

from simulator.cost.spec_work import SpecHost
from simulator.models.spec import load_model
from simulator.scenario import Scenario


def engine_batching(scenario: Scenario) -> tuple[Scenario, str]:
    """The scenario with the named engine's start-up overrides applied, and a note of them."""
    spec = scenario.execution.get("spec")
    if spec is None:
        return scenario, ""
    scenario, mla = _mla_batching(scenario, spec)
    scenario, apart = _unchunked_apart(scenario, spec)
    return scenario, "; ".join(note for note in (mla, apart) if note)


def _mla_batching(scenario: Scenario, spec: SpecHost) -> tuple[Scenario, str]:
    """vLLM 0.7.x's MLA rule (``mla_disables_chunked_prefill``), and its note; the steps
    apart then follow from ``_unchunked_apart``, V0's scheduler without chunked prefill."""
    if not spec.mla_disables_chunked_prefill:
        return scenario, ""
    b = scenario.batching
    asked = [name for name, on in (("enable_chunked_prefill", b.enable_chunked_prefill),
                                   ("enable_prefix_caching", b.enable_prefix_caching)) if on]
    if not asked or not load_model(scenario.target).is_mla:
        return scenario, ""
    batching = dataclasses.replace(b, enable_chunked_prefill=False, enable_prefix_caching=False)
    note = (f"engine {spec.name} runs the MLA model {scenario.target} without chunked prefill "
            f"or prefix caching (vLLM 0.7.x: 'MLA is enabled; forcing chunked prefill and "
            f"prefix caching to be disabled'): batching.{', batching.'.join(asked)} set to false")
    return dataclasses.replace(scenario, batching=batching), note


def _unchunked_apart(scenario: Scenario, spec: SpecHost) -> tuple[Scenario, str]:
    """vLLM V0's ``_schedule_default`` (``unchunked_prefill_apart``): without chunked prefill
    a step is prefills or decodes, never both; the note where ``mixed_chunk`` was not false."""
    b = scenario.batching
    if not spec.unchunked_prefill_apart or b.enable_chunked_prefill or b.mixed_chunk is False:
        return scenario, ""
    written = " (written true)" if b.mixed_chunk else ""
    note = (f"engine {spec.name} runs prompts whole in prefill-only steps and the decodes in "
            f"steps of their own when chunked prefill is off (vLLM V0 "
            f"Scheduler._schedule_default: 'Don't schedule decodes if prefills are "
            f"scheduled'): batching.mixed_chunk{written} set to false")
    batching = dataclasses.replace(b, mixed_chunk=False)
    return dataclasses.replace(scenario, batching=batching), note
