"""Scenarios: YAML -> frozen dataclasses, validated in one place, overridable with --set.

The scenario holds *names and plain parameters*; nothing is loaded or generated here.
``simulate()`` resolves names (hardware, models, workload) when it runs.  Unknown keys are
errors that list the valid ones; vLLM's knob names are accepted where one exists
(``num_speculative_tokens`` for gamma, ``max_num_seqs``, ``max_num_batched_tokens``,
``enable_chunked_prefill``, ``block_size``, ``gpu_memory_utilization``).
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from simulator.cost.moe import MoeOptions, parse_moe_options
from simulator.cost.parallelism import Parallelism, parallelism_from_dict
from simulator.cost.precision import KV_CACHE_DTYPES, QUANTIZATIONS
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import (
    as_bool,
    as_number,
    as_str,
    check_keys,
    load_yaml_file,
    parse_yaml_text,
    require_mapping,
    short,
)
from simulator.policies.registry import POLICIES
from simulator.uncertainty.spec import Uncertainty, parse_uncertainty, split_acceptance

ROUTERS = ("round_robin", "least_outstanding_tokens")
DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "workloads" / "scenarios" / "default.yaml"


@dataclass(frozen=True)
class Batching:
    """Iteration-level scheduler limits, with vLLM's names."""

    max_num_seqs: int = 128
    max_num_batched_tokens: int = 2048
    enable_chunked_prefill: bool = True
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    # vLLM V1's default (on; V0's was off): cached prompt blocks are reused across requests
    # when the workload names them (Mooncake hash_ids, token ids); no effect otherwise
    enable_prefix_caching: bool = True
    max_model_len: int | None = None  # vLLM's --max-model-len; None: the model's max_context
    # a step may carry prefill chunks beside decodes (vLLM V1; SGLang --enable-mixed-chunk);
    # false: prefill steps and decode steps apart, prefill first (SGLang's default,
    # simulator/engine/prefill_first.py); None: the named engine's (execution.engine), else true
    mixed_chunk: bool | None = None
    # SGLang's --mem-fraction-static: the KV pool is capacity x this - weights (activations
    # and CUDA graphs live in the rest); None: the named engine's rule (memory_plan.py)
    mem_fraction_static: float | None = None


# ``engine.steps_table``: what the steps table keeps (the summary is exact either way)
STEPS_TABLE_CHOICES = ("auto", "all", "sampled", "off")


@dataclass(frozen=True)
class EngineOptions:
    """How the engine runs, not what it predicts: ``fast_forward`` advances the predictable
    stretches of a replica in one pass (identical results; ``false`` is the step-by-step
    reference), ``steps_table`` says which per-step rows are kept (``auto``: all of them up to
    the size docs/limits.md states, a deterministic sample beyond)."""

    fast_forward: bool = True
    steps_table: str = "auto"


@dataclass(frozen=True)
class SLO:
    """Latency targets of a request; goodput counts requests that meet all that are set."""

    ttft_s: float | None = None
    tpot_s: float | None = None


@dataclass(frozen=True)
class PolicyConfig:
    """A serving policy by name with its parameters, parsed once on construction.

    ``raw`` is what was written (the label is made of it); ``params`` is what the policy's
    ``parse_params`` made of it: canonical names, defaults filled in, nested mappings
    parsed.  A bad value is an error naming ``source`` and the field under ``prefix``
    (``parse_policy`` checks the name first).
    """

    name: str = "none"
    raw: Mapping[str, Any] = field(default_factory=dict)
    source: InitVar[str] = "policy"
    prefix: InitVar[str] = "policy."
    params: Mapping[str, Any] = field(init=False, compare=False)
    # the run's own acceptance (``--compare name:acceptance...``, simulator/compare_spec.py)
    acceptance: Any = None

    def __post_init__(self, source: str, prefix: str) -> None:
        cls = POLICIES.get(self.name)  # an unknown name: refused where the policy is resolved
        object.__setattr__(self, "params", dict(self.raw) if cls is None else
                           cls.parse_params(self.raw, source=source, prefix=prefix))

    @property
    def label(self) -> str:
        items = [f"{k}={v}" for k, v in sorted(self.raw.items())]
        items += list(self.acceptance.written) if self.acceptance is not None else []
        return self.name + ":" + ",".join(items) if items else self.name


@dataclass(frozen=True)
class Scenario:
    """Everything one simulation needs, by name; ``simulate(scenario)`` is a pure function."""

    name: str = "scenario"
    seed: int = 0
    hardware: str = "a100-40gb"         # a profile name or a profile YAML path
    hardware_dir: str | None = None
    hardware_inline: Mapping[str, Any] | None = None  # a whole profile written in the scenario
    target: str = "opt-13b"
    draft: str | None = None
    parallelism: Parallelism = Parallelism()
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    acceptance: Mapping[str, Any] = field(default_factory=lambda: {"model": "iid", "alpha": 0.8})
    batching: Batching = Batching()
    workload: Mapping[str, Any] = field(default_factory=lambda: {"trace": "default"})
    slo: SLO = SLO()
    replicas: int = 1
    router: str = "round_robin"
    overheads: bool = True
    execution: Mapping[str, Any] = field(default_factory=dict)  # parse_execution overrides
    engine: EngineOptions = EngineOptions()
    quantization: str | None = None   # the target's weights dtype; None: the model file's
    kv_cache_dtype: str = "auto"      # the target's KV cache: auto (16-bit) or fp8
    moe: MoeOptions = MoeOptions()
    disaggregation: Any = None  # a Disaggregation (disagg_config.py), None: aggregated
    uncertainty: Uncertainty = Uncertainty()  # declared input spreads (simulator/uncertainty)
    cost_factor: float = 1.0  # one draw's device-speed error: every step time times this
    # one draw's error of the speculative path relative to the target's (draft forwards and
    # the engine's speculative host work times this, on top of cost_factor): deployment.py
    spec_cost_factor: float = 1.0
    base_dir: str = "."
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def with_policy(self, policy: PolicyConfig) -> "Scenario":
        """A copy running another policy (same trace, same seed), with its acceptance where
        it carries one (checked now, before any simulation)."""
        if policy.acceptance is None:
            return dataclasses.replace(self, policy=policy)
        acc = policy.acceptance.apply(self.acceptance, where=policy.label)
        return dataclasses.replace(self, policy=policy, acceptance=acc,
                                   raw={**self.raw, "acceptance": acc})


_TOP = ("name", "seed", "hardware", "hardware_dir", "target", "draft", "parallelism", "policy",
        "acceptance", "batching", "workload", "slo", "replicas", "router", "overheads",
        "execution", "engine", "quantization", "kv_cache_dtype", "moe", "speculative_config",
        "disaggregation", "uncertainty")


def parse_policy(data: Any, source: str, field_name: str = "policy") -> PolicyConfig:
    """``chain`` or ``{name: chain, num_speculative_tokens: 4}`` -> PolicyConfig."""
    if isinstance(data, str):
        data = {"name": data}
    data = require_mapping(data, source=source, field=field_name)
    if "name" not in data:
        raise SpecsimError("missing the policy name", source=source, field=f"{field_name}.name",
                           fix="valid names are: " + ", ".join(POLICIES))
    name = as_str(data["name"], source=source, field=f"{field_name}.name", choices=POLICIES)
    params = {k: v for k, v in data.items() if k != "name"}
    return PolicyConfig(name, params, source, f"{field_name}.")


def parse_compare(text: str) -> list[PolicyConfig]:
    """``none,chain:gamma=4,eagle3:acceptance.alpha=0.7`` -> one PolicyConfig each, with its
    acceptance where the entry gives one (syntax: ``simulator.compare_spec``)."""
    from simulator.compare_spec import entries
    return [dataclasses.replace(parse_policy(data, "--compare", "policy"), acceptance=acc)
            for data, acc in entries(text)]


def _model_ref(name: str, base_dir: str | Path) -> str:
    """A catalog name as given, or the one a Hugging Face id is of (as --vllm-args'
    ``model``: simulator/models/ids/huggingface.yaml); a model file (``.yaml``) relative
    to the scenario's folder, as hardware profile paths are (an absolute one as it is)."""
    if name.endswith((".yaml", ".yml")):
        return str(Path(base_dir) / name)
    if "/" in name:  # no catalog name has one
        from simulator.vllm_config import catalog_name
        return catalog_name(name) or name
    return name


def _hardware(hw: Any, source: str, base_dir: str | Path) -> dict[str, Any]:
    """``hardware``: a profile written inline (validated now, like any profile file), a
    profile file relative to the scenario, or a name."""
    if isinstance(hw, Mapping):
        from hardware.profile import profile_from_dict
        return {"hardware": profile_from_dict(hw, source=f"{source}: hardware").name,
                "hardware_inline": copy.deepcopy(dict(hw))}
    hw = as_str(hw, source=source, field="hardware")
    if hw.endswith((".yaml", ".yml")):
        hw = str(Path(base_dir) / hw)
    return {"hardware": hw}


def _batching(data: Any, source: str) -> Batching:
    b = require_mapping(data, source=source, field="batching")
    names = [f.name for f in dataclasses.fields(Batching)]
    check_keys(b, allowed=names, source=source, prefix="batching.")
    bkw: dict[str, Any] = {}
    for k in ("max_num_seqs", "max_num_batched_tokens", "block_size", "max_model_len"):
        if k in b:
            bkw[k] = as_number(b[k], source=source, field=f"batching.{k}", integer=True,
                               minimum=1, maximum=10_000_000)
    for k in ("enable_chunked_prefill", "enable_prefix_caching", "mixed_chunk"):
        if k in b:
            bkw[k] = as_bool(b[k], source=source, field=f"batching.{k}")
    for k in ("gpu_memory_utilization", "mem_fraction_static"):
        if k in b:
            bkw[k] = float(as_number(b[k], source=source, field=f"batching.{k}",
                                     strictly_positive=True, maximum=1.0))
    return Batching(**bkw)


def scenario_from_dict(data: Any, *, source: str, base_dir: str | Path = ".") -> Scenario:
    """Validate a parsed scenario mapping."""
    data = require_mapping(data, source=source)
    check_keys(data, allowed=_TOP, source=source)
    kw: dict[str, Any] = {"raw": copy.deepcopy(dict(data)), "base_dir": str(base_dir)}
    if "name" in data:
        kw["name"] = as_str(data["name"], source=source, field="name")
    if "target" in data:
        kw["target"] = _model_ref(as_str(data["target"], source=source, field="target"),
                                  base_dir)
    if "hardware" in data:
        kw.update(_hardware(data["hardware"], source, base_dir))
    if "hardware_dir" in data and data["hardware_dir"] is not None:
        kw["hardware_dir"] = str(Path(base_dir) / as_str(data["hardware_dir"], source=source,
                                                         field="hardware_dir"))
    if data.get("draft") is not None:
        kw["draft"] = _model_ref(as_str(data["draft"], source=source, field="draft"), base_dir)
    if "seed" in data:
        kw["seed"] = as_number(data["seed"], source=source, field="seed", integer=True,
                               minimum=0, maximum=2**63 - 1)
    if "parallelism" in data:
        kw["parallelism"] = parallelism_from_dict(data["parallelism"], source)
    if "policy" in data:
        kw["policy"] = parse_policy(data["policy"], source)
    kw.update(_acceptance(data, source, base_dir))
    if "batching" in data:
        kw["batching"] = _batching(data["batching"], source)
    if "workload" in data:
        kw["workload"] = dict(require_mapping(data["workload"], source=source, field="workload"))
    if "slo" in data:
        s = require_mapping(data["slo"], source=source, field="slo")
        check_keys(s, allowed=("ttft_ms", "tpot_ms"), source=source, prefix="slo.")
        kw["slo"] = SLO(**{k.replace("_ms", "_s"): 1e-3 * as_number(
            s[k], source=source, field=f"slo.{k}", strictly_positive=True, maximum=1e9)
            for k in s if s[k] is not None})
    if "replicas" in data:
        kw["replicas"] = as_number(data["replicas"], source=source, field="replicas",
                                   integer=True, minimum=1, maximum=4096)
    if "router" in data:
        kw["router"] = as_str(data["router"], source=source, field="router", choices=ROUTERS)
    if "overheads" in data:
        kw["overheads"] = as_bool(data["overheads"], source=source, field="overheads")
    if "execution" in data:
        from simulator.cost.execution import parse_execution
        kw["execution"] = parse_execution(data["execution"], source=source)
    if "engine" in data:
        kw["engine"] = _engine(data["engine"], source)
    kw.update(_serving_keys(data, source))
    if data.get("disaggregation") is not None:
        from simulator.disagg_config import parse_disaggregation, refuse_top_level
        refuse_top_level(data, source)
        kw["disaggregation"] = parse_disaggregation(data["disaggregation"], source)
    if data.get("speculative_config") is not None:  # vLLM's block (vllm_config.py)
        from simulator.vllm_config import speculative_fields
        kw.update(speculative_fields(data, kw, source, base_dir, Scenario.target))
        kw["policy"] = parse_policy(kw["policy"], source, "speculative_config")
    return Scenario(**kw)


def _acceptance(data: Mapping[str, Any], source: str, base_dir: str | Path) -> dict[str, Any]:
    """``acceptance`` (validated now) and ``uncertainty``, which holds the acceptance block's
    own ``uncertainty`` key (simulator/uncertainty/spec.py)."""
    kw: dict[str, Any] = {}
    spread = None
    if "acceptance" in data:
        from simulator.acceptance import acceptance_from_config
        acc, spread = split_acceptance(require_mapping(data["acceptance"], source=source,
                                                       field="acceptance"), source)
        acceptance_from_config(acc, source=f"{source}: acceptance", base_dir=Path(base_dir))
        kw["acceptance"] = acc
    if data.get("uncertainty") is not None or spread is not None:
        kw["uncertainty"] = parse_uncertainty(data.get("uncertainty"), source, spread)
    return kw


def _serving_keys(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``quantization`` (the target's weights), ``kv_cache_dtype`` and ``moe``."""
    kw: dict[str, Any] = {}
    if data.get("quantization") is not None:
        kw["quantization"] = as_str(data["quantization"], source=source, field="quantization",
                                    choices=QUANTIZATIONS)
    if data.get("kv_cache_dtype") is not None:
        kw["kv_cache_dtype"] = as_str(data["kv_cache_dtype"], source=source,
                                      field="kv_cache_dtype", choices=KV_CACHE_DTYPES)
    if "moe" in data:
        kw["moe"] = parse_moe_options(data["moe"], source)
    return kw


def _engine(data: Any, source: str) -> EngineOptions:
    data = require_mapping(data or {}, source=source, field="engine")
    check_keys(data, allowed=("fast_forward", "steps_table"), source=source, prefix="engine.")
    kw: dict[str, Any] = {}
    if "fast_forward" in data:
        kw["fast_forward"] = as_bool(data["fast_forward"], source=source,
                                     field="engine.fast_forward")
    if "steps_table" in data:
        kw["steps_table"] = as_str(data["steps_table"], source=source,
                                   field="engine.steps_table", choices=STEPS_TABLE_CHOICES)
    return EngineOptions(**kw)


def resolve_hardware(scenario: Scenario):
    """The scenario's HardwareProfile: inline, a profile file, or a name (+ hardware_dir)."""
    from hardware.profile import load_profile, profile_from_dict
    if scenario.hardware_inline is not None:
        hw = profile_from_dict(scenario.hardware_inline, source=f"{scenario.name}: hardware")
    else:
        hw = load_profile(scenario.hardware, scenario.hardware_dir)
    if scenario.cost_factor == 1.0:  # the point estimate: the profile as written
        return hw
    from hardware.scaled import slower_by
    return slower_by(hw, scenario.cost_factor)


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``--set a.b=value`` overrides (values parsed as YAML) to a raw scenario dict."""
    data = copy.deepcopy(data)
    for item in overrides or []:
        if "=" not in item:
            raise SpecsimError(f"cannot read {short(item)}", field="--set",
                               fix="write --set key.subkey=value, e.g. --set batching.max_num_seqs=64")
        path, value = item.split("=", 1)
        keys = [k for k in path.strip().split(".") if k]
        if not keys:
            raise SpecsimError(f"empty key in {short(item)}", field="--set",
                               fix="write --set key.subkey=value")
        node = data
        for k in keys[:-1]:
            if isinstance(node.get(k), str) and k == "policy":
                node[k] = {"name": node[k]}
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise SpecsimError(f"{short(k)} is not a mapping in {short(item)}",
                                   field="--set", fix=f"set {short(k)} itself, or a key of "
                                                      "a mapping field")
        node[keys[-1]] = parse_yaml_text(value, source="--set")
    return data


def load_scenario(path: str | Path | None = None, overrides: list[str] | None = None,
                  vllm_args: str | Path | None = None) -> Scenario:
    """Load a scenario file (default: the built-in one), write a vLLM engine-arguments file
    over it (``run --vllm-args``) and apply ``--set`` overrides; a change of target or
    drafter drops the file's acceptance block (``without_borrowed_acceptance``).  Relative
    paths resolve against the file's folder; the built-in scenario's (it has none: those
    of --set and --vllm-args) against the current folder, where the user typed them."""
    built_in = path is None
    base_dir = Path.cwd() if built_in else Path(path).resolve().parent
    path = Path(path) if path is not None else DEFAULT_SCENARIO
    data = load_yaml_file(path)
    data = written = dict(require_mapping(data, source=str(path)))
    if vllm_args is not None:
        from simulator.vllm_args import apply_vllm_args, load_vllm_args
        data = apply_vllm_args(data, load_vllm_args(vllm_args))
    # a draft the user wrote (--set draft..., or the vLLM arguments' draft) is kept as written
    draft_given = data.get("draft") != written.get("draft") or any(
        item.split("=", 1)[0].strip().split(".")[0] == "draft" for item in overrides or [])
    from simulator.acceptance.provenance import without_borrowed_acceptance
    data = without_borrowed_acceptance(written, apply_overrides(data, overrides or []))
    if built_in and not draft_given:  # its draft is its target's: a new target gets its own
        from simulator.models.default_draft import follow_target
        data = follow_target(written, data, base_dir)
    return scenario_from_dict(data, source=str(path), base_dir=base_dir)
