"""``specsim hardware list|show NAME`` and ``specsim models list|show NAME``.

``show`` prints a key/value block in a datasheet's units (GiB, GB/s, TFLOP/s, us), keyed by
the names the YAML file uses; ``--sources`` adds each number's source below it.  JSON and
CSV give the same fields as ``field``/``value`` rows.
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from hardware.profile import list_profiles, load_profile
from simulator.cli.output import FORMATS, render, render_fields, table_width
from simulator.models.spec import list_models, load_model

if TYPE_CHECKING:  # pandas loads where a frame is built: `--help` starts fast
    import pandas as pd


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """``list`` or ``show NAME`` (models: or ``from-hf config.json``)."""
    p.add_argument("action", choices=("list", "show") if name == "hardware" else
                   ("list", "show", "from-hf"),
                   help=None if name == "hardware" else "from-hf FILE: print the model file "
                   "(YAML) of a Hugging Face config.json of a dense Llama, Mistral, Qwen2 or "
                   "Qwen3 decoder; save it (--out my-model.yaml) and give it as target: or "
                   "--target")
    p.add_argument("name", nargs="?")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--sources", action="store_true",
                   help="with show: each number's source below it (JSON and CSV: a source "
                        "per row)" if name == "hardware" else
                        "with show: the sources of the shapes and parameter counts")
    if name == "hardware":
        p.add_argument("--hardware-dir", default=None, help="extra folder of profile YAML files")
    else:
        p.add_argument("--model-name", default=None,
                       help="with from-hf: the model's name (default: the config's folder, "
                            "or its file name without .json)")
        p.add_argument("-o", "--out", default=None,
                       help="with from-hf: write the model file there (atomically; an "
                            "existing file only if specsim wrote it) instead of printing it")
        p.add_argument("--overwrite", action="store_true",
                       help="with from-hf --out: replace a file specsim did not write")


HF_MARK = "# written by specsim models from-hf from"  # a file --out may replace starts so


def _from_hf(args: argparse.Namespace) -> int:
    """Print the model file of a Hugging Face config.json (simulator/models/hf_config.py)."""
    from pathlib import Path

    import yaml

    from simulator.inputs.errors import SpecsimError
    from simulator.models.hf_config import model_from_hf_config, read_config
    if not args.name:
        raise SpecsimError("from-hf needs a config.json", field="name",
                           fix="specsim models from-hf path/to/config.json --out my-model.yaml")
    path = Path(args.name)
    name = args.model_name or (path.resolve().parent.name if path.stem == "config"
                               else path.stem).lower()
    if args.out is not None:  # checked before the config is read: nothing written on error
        from simulator.output_paths import check_file_target, write_text_file
        check_file_target(args.out, "--out", marks=(HF_MARK.encode(),),
                          overwrite=args.overwrite, what="model file")
    data = model_from_hf_config(read_config(path), name=name, source=str(path))
    text = f"{HF_MARK} {path.name}\n" + yaml.safe_dump(data, sort_keys=False, width=1000)
    if args.out is None:
        print(text, end="")
    else:
        write_text_file(args.out, text, "--out", marks=(HF_MARK.encode(),),
                        overwrite=args.overwrite, what="model file")
    return 0


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


def _fitted_list(df: pd.DataFrame) -> str:
    """The list as a table whose last column (a description) is cut to fit the width:
    ``show NAME`` prints it whole."""
    width = table_width()
    if "description" not in df or width == float("inf"):
        return render(df, "table")
    rest = render(df.drop(columns=["description"]), "table").splitlines()
    room = max(int(width) - max(len(line) for line in rest) - 2, len("description"))
    df = df.assign(description=[d if len(d) <= room else d[: room - 3] + "..."
                                for d in df["description"]])
    return render(df, "table")


# fields that describe one kind of model only: shown where the model is of that kind
_MOE_FIELDS = ("num_experts", "experts_per_token", "shared_experts", "expert_ffn_size",
               "dense_layers", "published_active_params", "published_active_params_source")
_MLA_FIELDS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim")
# a model's source strings: the block prints them with --sources, under what they source
_MODEL_SOURCES = {"source": "shapes", "published_params_source": "published_params",
                  "published_active_params_source": "published_active_params"}


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


# zero is "none" or "the same as another field" here: the block leaves them out
_ZERO_MEANS_UNSET = ("learned_position_embeddings", "tokenizer_vocab_size", "medusa_num_heads",
                     "medusa_num_layers")
_COUNTS = ("published_params", "published_active_params", "param_count",
           "active_param_count", "expert_params", "mtp_module_params")


def _model_value(key: str, value) -> str:
    """A model field as a person reads it: counts with their billions, KV bytes in KiB."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if key in _COUNTS:
        scaled = f"{value / 1e9:.4g} B" if value >= 1e9 else f"{value / 1e6:.4g} M"
        return f"{scaled} ({int(value):,})"
    if key == "kv_bytes_per_token":
        return f"{value:,.0f} bytes ({value / 1024:.4g} KiB)"
    return str(value)


def _model_block(m, sources: bool) -> str:
    fields = _model_fields(m)
    title = f"{m.name}: {m.kind}, family {m.family}"
    skip = set(_MODEL_SOURCES) | {"name", "kind", "family", "path"}
    rows = [("source", fields["source"], "")] if sources else []
    rows += [(k, _model_value(k, v), fields.get(f"{k}_source", ""))
             for k, v in fields.items()
             if k not in skip and v != "" and not (k in _ZERO_MEANS_UNSET and v == 0)]
    rows.append(("file", m.path, ""))
    text = render_fields(title, rows, sources=sources)
    count = sum(1 for k in _MODEL_SOURCES if fields.get(k))
    return text if sources else text + f"\n{count} sources: add --sources to print them"


def _num(x: float) -> str:
    """Four significant digits; thousands whole, with separators (1,555 GB/s)."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _link(link) -> str:
    return (f"{link.name}: {_num(link.bandwidth_bytes_per_s / 1e9)} GB/s per direction, "
            f"{_num(link.latency_s * 1e6)} us a message")


def _kernels_value(k) -> str:
    parts = [f"{k.sm_count} SMs"]
    if k.l2_bytes:
        parts.append(f"L2 {_num(k.l2_bytes / 2**20)} MiB")
    parts += [f"latency {_num(k.latency_s * 1e6)} us",
              f"min kernel {_num(k.min_kernel_s * 1e6)} us",
              "GEMM tiles " + " ".join(f"{a}x{b}" for a, b in k.gemm_tiles)]
    for kind, rates in k.kinds.items():
        set_ = {f.name: getattr(rates, f.name) for f in dataclasses.fields(rates)
                if getattr(rates, f.name) is not None}
        parts.append(f"{kind}: " + ", ".join(f"{n} {_num(v)}" for n, v in set_.items()))
    return "; ".join(parts)


def _collectives_value(c) -> str:
    if c.from_interconnect:
        return "ring formulas on the interconnect (no measured curves)"
    parts = []
    for name in ("all_reduce", "custom_all_reduce", "all_gather", "all_to_all"):
        curves = getattr(c, name)
        if curves:
            extra = f", up to {_num(c.custom_max_bytes / 2**20)} MiB" \
                if name == "custom_all_reduce" else ""
            parts.append(f"{name} (worlds {', '.join(str(x.world) for x in curves)}{extra})")
    if c.send_recv is not None:
        parts.append("send_recv")
    return ", ".join(parts)


def _hardware_rows(hw) -> list[tuple[str, str, str]]:
    """``(key, value, source)`` rows of a profile, keyed as its YAML file is."""
    src = dict(hw.sources)

    def joined(prefix: str) -> str:
        return "; ".join(f"{k[len(prefix):]}: {v}" for k, v in src.items()
                         if k.startswith(prefix))
    peaks = ", ".join(f"{d} {_num(v / 1e12)}" for d, v in hw.peak_flops_per_s.items())
    graphs = f"{_num(hw.graph_launch_s * 1e6)} us a replay" \
        if hw.graph_launch_s is not None else "none (eager launches only)"
    rows = [("memory_gib", f"{_num(hw.memory_bytes / 2**30)} GiB", src.get("memory_gib", "")),
            ("memory_bandwidth_gb_per_s", f"{_num(hw.memory_bandwidth_bytes_per_s / 1e9)} GB/s",
             src.get("memory_bandwidth_gb_per_s", "")),
            ("peak_tflops", f"{peaks} (TFLOP/s, dense)", joined("peak_tflops.")),
            ("interconnect", _link(hw.interconnect), src.get("interconnect", "")),
            ("host_link", _link(hw.host_link), src.get("host_link", ""))]
    for key, value in (("compute_efficiency", _num(hw.compute_efficiency)),
                       ("memory_efficiency", _num(hw.memory_efficiency)),
                       ("kernel_overhead_us", f"{_num(hw.kernel_overhead_s * 1e6)} us"),
                       ("step_overhead_us", f"{_num(hw.step_overhead_s * 1e6)} us"),
                       ("graph_launch_us", graphs),
                       ("cpu_per_seq_us", f"{_num(hw.cpu_per_seq_s * 1e6)} us")):
        rows.append((key, value, src.get(f"defaults.{key}", "")))
    for name, curve in (("compute_efficiency_curve", hw.compute_efficiency_curve),
                        ("memory_efficiency_curve", hw.memory_efficiency_curve)):
        if curve:
            rows.append((name, f"{len(curve)} points, efficiency {_num(min(e for _, e in curve))}"
                               f" to {_num(max(e for _, e in curve))}", ""))
    if hw.kernels is not None:
        rows.append(("kernels", _kernels_value(hw.kernels), joined("kernels.")))
    rows.append(("collectives", _collectives_value(hw.collectives),
                 joined("collectives.") or src.get("collectives", "")))
    rows.append(("calibrated", "true" if hw.calibrated else "false", ""))
    rows += [(f"provenance.{k}", str(v), "") for k, v in hw.provenance.items()]
    rows.append(("file", hw.path, ""))
    return rows


def _hardware_block(hw, sources: bool) -> str:
    rows = _hardware_rows(hw)
    text = render_fields(f"{hw.name}: {hw.description}", rows, sources=sources)
    if sources:
        return text
    return text + f"\n{len(hw.sources)} sources: add --sources to print them"


def main(args: argparse.Namespace) -> int:
    """List or show one entry."""
    import pandas as pd
    is_hw = args.command == "hardware"
    if args.action == "from-hf":
        return _from_hf(args)
    hw_dir = args.hardware_dir if is_hw else None  # only `hardware` takes --hardware-dir
    if args.action == "list":
        if is_hw:
            rows = [_hardware_row(load_profile(n, hw_dir)) for n in list_profiles(hw_dir)]
        else:
            rows = [_model_row(load_model(n)) for n in list_models()]
        df = pd.DataFrame(rows)
        print(_fitted_list(df) if args.format == "table" else render(df, args.format))
        return 0
    if not args.name:
        from simulator.inputs.errors import SpecsimError
        raise SpecsimError("show needs a name", field="name",
                           fix=f"specsim {args.command} show NAME "
                               f"(see 'specsim {args.command} list')")
    if is_hw:
        hw = load_profile(args.name, hw_dir)
        if args.format == "table":
            print(_hardware_block(hw, args.sources))
            return 0
        rows = [{"field": k, "value": v, "source": s} for k, v, s in _hardware_rows(hw)]
    else:
        model = load_model(args.name)
        if args.format == "table":
            print(_model_block(model, args.sources))
            return 0
        rows = [{"field": k, "value": str(dict(v) if isinstance(v, dict) else v)}
                for k, v in _model_fields(model).items()]
    print(render(pd.DataFrame(rows), args.format))
    return 0
