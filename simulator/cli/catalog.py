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
    return {"name": m.name, "kind": m.kind, "params_b": m.param_count() / 1e9,
            "layers": m.num_layers, "hidden": m.hidden_size, "heads": m.num_heads,
            "kv_heads": m.num_kv_heads, "vocab": m.vocab_size, "max_context": m.max_context}


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
                           fix=f"specsim {args.command} show NAME (see 'specsim {args.command} list')")
    obj = load_profile(args.name, hw_dir) if is_hw else load_model(args.name)
    fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if not is_hw:
        fields["param_count"] = obj.param_count()
        fields["kv_bytes_per_token"] = obj.kv_bytes_per_token()
    rows = [{"field": k, "value": str(dict(v) if isinstance(v, dict) else v)}
            for k, v in fields.items()]
    print(render(pd.DataFrame(rows), args.format))
    return 0
