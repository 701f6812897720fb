"""The workloads of benchmarks/bench_engine.py as scenario overrides, and the clipped vidur
trace its vidur cases replay (see that file's docstring)."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AZURE = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
# AzureLLMInferenceTrace_conv.csv (19,366 rows): ContextTokens mean 1154.7, median 1020, max
# 14,050; GeneratedTokens mean 211.1, median 129, max 1,000.  The stand-in when it is absent.
LOGNORMAL_PROMPT = "{dist: lognormal, mean_tokens: 1154.7, median_tokens: 1020, max_tokens: 14050}"
LOGNORMAL_OUTPUT = "{dist: lognormal, mean_tokens: 211.1, median_tokens: 129, max_tokens: 1000}"
AZURE_REQUESTS = 19_366
VIDUR = ["target=llama-2-70b", "hardware=a100-80gb", "parallelism.tensor_parallel=2",
         "batching.max_num_seqs=128", "batching.max_num_batched_tokens=512",
         "batching.enable_chunked_prefill=true", "replicas=4", "router=round_robin",
         "draft=null", "policy={name: none}", "seed=0"]
CHAIN = ["target=llama-3.1-8b", "draft=llama-3.2-1b", "hardware=a100-80gb",
         "batching.max_num_seqs=256", "batching.max_num_batched_tokens=8192",
         "policy={name: chain, num_speculative_tokens: 4}", "seed=0"]


def synthetic_overrides(n: int, trace: Path | None) -> list[str]:
    """The vidur workload with ``n`` requests as drawn (lengths not yet clipped)."""
    if trace is None:
        prompt, output = LOGNORMAL_PROMPT, LOGNORMAL_OUTPUT
    else:  # json.dumps: a YAML double-quoted string, whatever the path holds
        prompt = output = f"{{dist: empirical, trace: {json.dumps(str(trace))}, format: azure}}"
    return [f"workload={{synthetic: {{num_requests: {n}, arrival: {{process: poisson, "
            f"rate_per_s: 4}}, prompt: {prompt}, output: {output}}}}}", *VIDUR]


def clip_to_context(prompt, output, max_tokens: int):
    """Vidur's clipping (trace_request_length_generator.py): the tokens over ``max_tokens``
    come off the prompt and the output in proportion to their lengths, each share rounded
    up, and each length stays at least 1."""
    import numpy as np

    total = prompt + output
    excess = np.maximum(total - max_tokens, 0)
    prompt = np.maximum(prompt - np.ceil(excess * prompt / total).astype(np.int64), 1)
    output = np.maximum(output - np.ceil(excess * output / total).astype(np.int64), 1)
    assert (prompt + output <= max_tokens).all()
    return prompt, output


def write_vidur_trace(n: int, trace: Path | None, folder: Path) -> Path:
    """Draw the vidur workload of ``n`` requests, clip it to the target's context and write
    it as a specsim CSV trace in ``folder``; the path."""
    import dataclasses

    from simulator.models.spec import load_model
    from simulator.scenario import load_scenario
    from simulator.simulate import scenario_workload
    from workloads.traces import write_specsim_csv

    sc = load_scenario(None, synthetic_overrides(n, trace))
    wl = scenario_workload(sc)
    prompt, output = clip_to_context(wl.prompt_tokens, wl.output_tokens,
                                     load_model(sc.target).max_context)
    path = folder / f"vidur-{n}.csv"
    write_specsim_csv(dataclasses.replace(wl, prompt_tokens=prompt, output_tokens=output), path)
    return path


def vidur_overrides(trace_csv: Path, fast_forward: bool) -> list[str]:
    """Scenario overrides of the vidur workload replayed from its clipped trace file."""
    return [f"workload={{trace: {json.dumps(str(trace_csv))}, format: specsim}}", *VIDUR,
            f"engine={{fast_forward: {str(fast_forward).lower()}}}"]


def azure_overrides(max_requests: int | None, fast_forward: bool) -> list[str]:
    """Scenario overrides of the full Azure conversation trace with chain speculation."""
    cap = "" if max_requests is None else f", max_requests: {max_requests}"
    return [f"workload={{trace: {json.dumps(str(AZURE))}, format: azure{cap}}}", *CHAIN,
            f"engine={{fast_forward: {str(fast_forward).lower()}}}"]


def write_scenario(overrides: list[str], path: Path) -> Path:
    """The built-in scenario with ``overrides`` as a scenario file of its own: what a user
    hands ``specsim run`` (which then runs its one policy, not the built-in comparison)."""
    import yaml

    from simulator.scenario import load_scenario

    raw = dict(load_scenario(None, overrides).raw)
    raw["name"] = path.stem
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path
