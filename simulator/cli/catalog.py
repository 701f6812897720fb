"""``specsim hardware list|show NAME`` and ``specsim models list|show NAME``."""
from __future__ import annotations

import argparse
import dataclasses

import pandas as pd

from hardware.profile import list_profiles, load_profile
from simulator.cli.output import FORMATS, render
from simulator.models.spec import list_models, load_model


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """``list`` or ``show NAME``."""
    p.add_argument("action", choices=("list", "show"))
    p.add_argument("name", nargs="?")
    p.add_argument("--format", choices=FORMATS, default="table")
    if name == "hardware":
        p.add_argument("--hardware-dir", default=None, help="extra folder of profile YAML files")


def _hardware_row(hw) -> dict:
    return {"name": hw.name, "memory_gib": hw.memory_bytes / 2**30,
            "bandwidth_gb_per_s": hw.memory_bandwidth_bytes_per_s / 1e9,
            "fp16_tflops": hw.peak_flops_per_s.get("fp16", float("nan")) / 1e12,
            "bf16_tflops": hw.peak_flops_per_s.get("bf16", float("nan")) / 1e12,
            "interconnect": hw.interconnect.name, "calibrated": hw.calibrated,
            "description": hw.description}


def _model_row(m) -> dict:
    """One catalog line; ``active_b`` (parameters one token computes with) for MoE only."""
    return {"name": m.name, "kind": m.kind, "params_b": m.param_count() / 1e9,
            "active_b": m.active_param_count() / 1e9 if m.is_moe else float("nan"),
            "layers": m.num_layers, "hidden": m.hidden_size, "heads": m.num_heads,
            "kv_heads": m.num_kv_heads, "vocab": m.vocab_size, "max_context": m.max_context}


# fields that describe one kind of model only: shown where the model is of that kind
_MOE_FIELDS = ("num_experts", "experts_per_token", "shared_experts", "expert_ffn_size",
               "dense_layers", "published_active_params", "published_active_params_source")
_MLA_FIELDS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim")


def _kind_fields(m) -> dict:
    """Which kind-specific fields ``m`` has (for other kinds they are zeros)."""
    eagle3, medusa = m.kind == "eagle3", m.kind == "medusa"
    return {**dict.fromkeys(_MOE_FIELDS, m.is_moe), **dict.fromkeys(_MLA_FIELDS, m.is_mla),
            "mtp_modules": m.mtp_modules > 0, "draft_vocab_size": eagle3,
            "feature_layers": eagle3, "medusa_num_heads": medusa, "medusa_num_layers": medusa,
            "kv_cache_dtype": False}  # a deployment's choice, never a file's


def _model_fields(m) -> dict:
    """A model's fields for ``show`` (its own kind's) and what its shapes give: parameters,
    active parameters and experts (MoE), MTP module size, the cached elements (MLA), KV."""
    has = _kind_fields(m)
    fields = {f.name: getattr(m, f.name) for f in dataclasses.fields(m)
              if has.get(f.name, True)}
    fields["param_count"] = m.param_count()
    if m.is_moe:
        fields["active_param_count"] = m.active_param_count()
        fields["moe_layers"] = m.moe_layers
        fields["expert_params"] = m.expert_params()
    if m.mtp_modules:
        fields["mtp_module_params"] = m.mtp_module_params()
    if m.is_mla:
        fields["kv_elements_per_token_layer"] = m.kv_elements_per_token_layer
    fields["kv_bytes_per_token"] = m.kv_bytes_per_token()
    return fields


def main(args: argparse.Namespace) -> int:
    """List or show one entry."""
    is_hw = args.command == "hardware"
    hw_dir = getattr(args, "hardware_dir", None)
    if args.action == "list":
        if is_hw:
            rows = [_hardware_row(load_profile(n, hw_dir)) for n in list_profiles(hw_dir)]
        else:
            rows = [_model_row(load_model(n)) for n in list_models()]
        print(render(pd.DataFrame(rows), args.format))
        return 0
    if not args.name:
        from simulator.inputs.errors import SpecsimError
        raise SpecsimError("show needs a name", field="name",
                           fix=f"specsim {args.command} show NAME "
                               f"(see 'specsim {args.command} list')")
    if is_hw:
        obj = load_profile(args.name, hw_dir)
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    else:
        fields = _model_fields(load_model(args.name))
    rows = [{"field": k, "value": str(dict(v) if isinstance(v, dict) else v)}
            for k, v in fields.items()]
    print(render(pd.DataFrame(rows), args.format))
    return 0
