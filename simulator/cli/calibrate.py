"""``specsim calibrate`` and ``specsim validate``: measure a device, then check predictions.

torch is imported inside ``main``, through ``calibrate/`` (the only package that imports
it), so that every other command starts without it.
"""
from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simulator.cli.args import MAX_GAMMA, bounded_int, positive_float, unit_float
from simulator.cli.output import FORMATS, render
from simulator.cli.progress import Progress
from simulator.inputs.errors import SpecsimError

if TYPE_CHECKING:  # pandas loads where a frame is built: `--help` starts fast
    import pandas as pd

MAX_THREADS = 1024   # torch CPU threads
MAX_REPS = 10_000    # timed repetitions of one micro-benchmark
VALIDATION_FILES = ("validation.csv", "spec_loop.csv", "summary.json")  # validate --out


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Arguments of ``calibrate`` or ``validate``."""
    p.add_argument("--device", default=None, help="cpu or cuda (the torch micro-benchmarks; "
                   "not needed with --from-measurements / --measurements)")
    p.add_argument("--quick", action="store_true", help="small grids (under a minute)")
    p.add_argument("--threads", type=bounded_int(MAX_THREADS), default=None,
                   help="torch CPU threads (default: torch's; validate: the profile's)")
    p.add_argument("--reps", type=bounded_int(MAX_REPS), default=None,
                   help=f"timed repetitions per case (at most {MAX_REPS:,})")
    p.add_argument("--seed", type=bounded_int(2**63 - 1, minimum=0), default=0,
                   help="seed of the random weights and draws (a whole number >= 0)")
    p.add_argument("--memory-limit-gib", type=positive_float, default=None,
                   help="skip cases needing more than this (default: the device's free memory)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--overwrite", action="store_true",
                   help="replace output files (or write into an --out folder) that specsim "
                        "did not write")
    if name == "calibrate":
        p.add_argument("--out", default=None,
                       help="profile YAML to write (default: <base>-calibrated.yaml); the raw "
                            "measurements go beside it as <name>.measurements.csv")
        p.add_argument("--dtype", default=None, help="dtype of the fitted curves "
                       "(default fp16 on a GPU, fp32 on a CPU)")
        p.add_argument("--base", default=None, help="shipped profile for the links and "
                       "datasheet peaks (default: detected from the device name)")
        p.add_argument("--statistic", choices=("median", "min"), default="median",
                       help="statistic of the repetitions that is fitted (default median)")
        p.add_argument("--from-measurements", default=None, metavar="DIR",
                       help="fit the kernels: block of --hardware to published kernel timings "
                            "(Vidur-format mlp.csv / attention*.csv under DIR); no torch")
        p.add_argument("--hardware", default=None, metavar="BASE",
                       help="with --from-measurements: the profile to calibrate (its links, "
                            "peaks, SM count and tiles are kept)")
        p.add_argument("--exclude-model", action="append", default=None, metavar="HF_ID",
                       help="with --from-measurements: leave this model out of the fit "
                            "(repeatable)")
        return
    p.add_argument("--profile", required=True, help="calibrated profile YAML (with "
                   "--measurements: a profile name or YAML file)")
    p.add_argument("--measurements", default=None, metavar="DIR",
                   help="predict the published kernel timings under DIR (Vidur-format CSVs) "
                        "and print the per-operator error table; no torch")
    p.add_argument("--before", default=None,
                   help="uncalibrated profile to compare with (default: the calibration's base)")
    p.add_argument("--models", default=None, nargs="+",
                   help="models as name[:layers], comma-separated (default: opt-125m and a "
                        "2-layer opt-1.3b on CPU); with --measurements, Hugging Face ids")
    p.add_argument("--alpha", type=unit_float, default=0.8, help="pinned acceptance rate")
    p.add_argument("--gammas", default="0,1,2,4", help="gammas of the speculative loop")
    p.add_argument("--spec-target", default=None, help="target name[:layers] of the loop")
    p.add_argument("--spec-draft", default=None, help="draft name[:layers] of the loop")
    p.add_argument("--no-spec-loop", action="store_true", help="skip the speculative loop")
    p.add_argument("--out", default=None, help="folder for validation.csv, spec_loop.csv "
                   "and summary.json")
    p.add_argument("--report", default=None, help="also write an HTML report to this path")
    p.add_argument("--format", choices=FORMATS, default="table")


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run."""
    parts = ["specsim", args.command]
    for key, value in sorted(vars(args).items()):
        if key in ("command", "_module") or value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, list):   # --models A B (nargs), --exclude-model A --exclude-model B
            parts += [flag, *map(str, value)] if key == "models" \
                else [x for v in value for x in (flag, str(v))]
            continue
        parts += [flag] if value is True else [flag, str(value)]
    return shlex.join(parts)


def _model_list(text: str, field: str) -> tuple[tuple[str, int | None], ...]:
    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, _, layers = item.partition(":")
        if layers and not layers.isdigit():
            raise SpecsimError(f"{item!r}: layers must be a whole number", field=field,
                               fix="write e.g. opt-1.3b:2")
        out.append((name, int(layers) if layers else None))
    if not out:
        raise SpecsimError("no model given", field=field, fix="write e.g. opt-125m,opt-1.3b:2")
    return tuple(out)


def main(args: argparse.Namespace) -> int:
    """Run ``calibrate`` or ``validate``."""
    from simulator.cli import calibrate_measured
    if args.command == "calibrate" and args.from_measurements is not None:
        return calibrate_measured.calibrate(args, _command(args), check_calibration_targets)
    if args.command == "validate" and args.measurements is not None:
        return calibrate_measured.validate(args)
    if args.device is None:
        raise SpecsimError("no device given", field="--device",
                           fix="add --device cpu or --device cuda (or --from-measurements DIR / "
                               "--measurements DIR for published kernel timings)")
    try:  # only these commands pay for torch
        from calibrate.timing import resolve_device, set_threads
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise SpecsimError("measuring a device needs torch, which is not installed",
                           field="--device",
                           fix="pip install 'specsim[calibrate]', or use --from-measurements "
                               "DIR / --measurements DIR (published kernel timings)") from None
    resolve_device(args.device)
    if args.threads is not None:
        set_threads(args.threads)
    limit = args.memory_limit_gib * 2**30 if args.memory_limit_gib else None
    if args.command == "calibrate":
        return _calibrate(args, limit)
    return _validate(args, limit)


def _calibrate(args: argparse.Namespace, limit: float | None) -> int:
    from calibrate.benchmarks import make_plan
    from calibrate.calibration import calibrate_device, detect_base
    from calibrate.timing import device_name, resolve_device
    from calibrate.writer import write_calibration

    plan = make_plan(args.device, quick=args.quick, dtype=args.dtype, reps=args.reps,
                     memory_limit_bytes=limit)
    base = args.base or detect_base(args.device, device_name(resolve_device(args.device)))
    out = Path(args.out or f"{base or 'gpu'}-calibrated.yaml")
    check_calibration_targets(out, overwrite=args.overwrite)  # before minutes of benchmarks
    from calibrate.writer import measurements_path
    from simulator.input_clash import check_outputs_not_inputs
    check_outputs_not_inputs([("--out", out), ("--out", measurements_path(out))], [args.base])
    with Progress("calibrate", unit="benchmarks", enabled=not args.no_progress) as bar:
        cal = calibrate_device(plan, rng=np.random.default_rng(args.seed), name=out.stem,
                               base=args.base, statistic=args.statistic,
                               command=_command(args), progress=bar.set)
    yaml_path, csv_path = write_calibration(cal.profile, cal.measurements, out)
    f = cal.fit
    skipped = cal.measurements[cal.measurements["status"] != "ok"]
    print(f"calibrated {cal.profile['description']}")
    print(f"  peak {f.dtype}: {f.peak_flops_per_s / 1e12:.4g} TFLOP/s "
          f"({'datasheet' if cal.datasheet_peaks else 'measured'}; best measured "
          f"{f.measured_peak_flops_per_s[f.dtype] / 1e12:.4g})")
    print(f"  memory bandwidth: {f.bandwidth_bytes_per_s / 1e9:.4g} GB/s "
          f"(best measured {f.measured_bandwidth_bytes_per_s / 1e9:.4g})")
    print(f"  kernel overhead {f.kernel_overhead_s * 1e6:.3g} us, step overhead "
          f"{f.step_overhead_s * 1e6:.4g} us, launch {f.launch_overhead_s * 1e6:.3g} us")
    axis = "FLOPs per byte" if f.axis == "intensity" else "FLOPs"
    print(f"  compute efficiency by {axis}: " + ", ".join(
        f"{s:.3g}:{e:.2f}" for s, e in f.compute_curve))
    print("  memory efficiency by bytes:  " + ", ".join(
        f"{s:.3g}:{e:.2f}" for s, e in f.memory_curve))
    print(f"  fit rms log error over {int((cal.measurements['status'] == 'ok').sum())} "
          f"micro-benchmarks: {f.rms_log_error:.3f}")
    for row in skipped.itertuples():
        print(f"  skipped {row.kind} {row.dtype}: {row.note}")
    print(f"wrote {yaml_path} and {csv_path}")
    return 0


def _validate(args: argparse.Namespace, limit: float | None) -> int:
    from calibrate.timing import set_threads
    from calibrate.validate import evaluate, make_validation_plan, run_validation
    from calibrate.writer import load_calibrated
    from hardware.profile import load_profile

    after = load_calibrated(args.profile)
    prov = after.provenance
    if prov.get("device_type") != args.device:
        raise SpecsimError(f"the profile was calibrated on {prov.get('device_type')!r}, not "
                           f"{args.device!r}", field="--device",
                           fix=f"use --device {prov.get('device_type')} or calibrate this device")
    if args.threads is None and args.device == "cpu" and prov.get("threads"):
        set_threads(int(prov["threads"]))
    before = load_profile(args.before or str(prov.get("base_profile", args.device)))
    dtype = str(prov["dtype"])
    statistic = str(prov.get("statistic", "median"))
    models = _model_list(",".join(args.models), "--models") if args.models is not None \
        else None
    plan = make_validation_plan(args.device, quick=args.quick, dtype=dtype, models=models,
                                reps=args.reps, memory_limit_bytes=limit)
    cfg = None if args.no_spec_loop else _loop_config(args, dtype)  # bad input fails early
    if args.out:  # output paths too, before minutes of measurements
        from simulator.output_paths import check_results_target
        check_results_target(args.out, "--out", overwrite=args.overwrite,
                             names=VALIDATION_FILES)
    if args.report:
        from reports.page import check_report_target
        check_report_target(args.report, overwrite=args.overwrite)
    from simulator.input_clash import check_outputs_not_inputs
    check_outputs_not_inputs([("--out", args.out), ("--report", args.report)],
                             [args.profile, after.path, args.before, before.path],
                             folders=("--out",))
    rng = np.random.default_rng(args.seed)
    with Progress("validate", unit="steps", enabled=not args.no_progress) as bar:
        measured = run_validation(plan, rng=rng, progress=bar.set)
    result = evaluate(measured, {"before": before, "after": after}, statistic=statistic,
                      loop=cfg, rng=rng)
    table = result.table
    summary = {"device": prov.get("device"), "profile": str(args.profile),
               "before_profile": before.name, "dtype": dtype,
               "threads": result.threads, "statistic": statistic,
               "command": _command(args),
               "mape_before": result.mape["before"], "mape_after": result.mape["after"]}
    if cfg is not None:
        summary["spec_loop"] = {"target": "%s:%s" % cfg.target, "draft": "%s:%s" % cfg.draft,
                                "alpha": cfg.alpha, "batch": cfg.batch}
    _report(args, table, result.loop, summary)
    if args.report:
        from reports import render_report  # only reports/ imports altair
        path = render_report([], args.report, validation=table, calibration=after,
                             overwrite=args.overwrite)
        print(f"report: {path}")
    return 0


def _loop_config(args: argparse.Namespace, dtype: str):
    from calibrate.spec_loop import SpecLoopConfig
    from simulator.cli.args import parse_number_list
    gammas = tuple(parse_number_list(args.gammas, field="--gammas", maximum=MAX_GAMMA))
    if args.device == "cuda":
        target, draft = ("llama-2-7b", None), ("llama-68m", None)
    else:
        target, draft = ("opt-1.3b", 2), ("opt-125m", 1)
    if args.spec_target:
        target = _model_list(args.spec_target, "--spec-target")[0]
    if args.spec_draft:
        draft = _model_list(args.spec_draft, "--spec-draft")[0]
    return SpecLoopConfig(device=args.device, dtype=dtype, target=target, draft=draft,
                          gammas=tuple(sorted(set(gammas) | {0})), alpha=args.alpha)


def check_calibration_targets(out: Path, overwrite: bool = False) -> None:
    """The profile YAML and its measurements CSV may be (re)written: checked before work."""
    from calibrate.writer import measurements_path
    from simulator.output_paths import check_file_target
    if out.suffix not in (".yaml", ".yml"):
        raise SpecsimError("a profile file must end in .yaml", field="--out",
                           source=str(out), fix="name it e.g. my-gpu.yaml")
    check_file_target(out, "--out", marks=(b"measurements_csv:",), overwrite=overwrite,
                      what="calibrated profile")
    check_file_target(measurements_path(out), "--out", marks=(b"kind,dtype,",),
                      overwrite=overwrite, what="measurements table")


def _report(args, table: pd.DataFrame, loop: pd.DataFrame | None, summary: dict) -> None:
    shown = table[["model", "layers", "step", "batch", "context", "new_tokens", "status"]].copy()
    shown["measured_ms"] = table["measured_s"] * 1e3
    for label in ("before", "after"):
        shown[f"{label}_ms"] = table[f"predicted_{label}_s"] * 1e3
        shown[f"{label}_err_%"] = table[f"error_{label}"] * 100
    if args.out:
        from simulator.output_paths import ResultsFolderWriter
        with ResultsFolderWriter(args.out, "--out", overwrite=args.overwrite,
                                 names=VALIDATION_FILES) as w:
            table.to_csv(w.path / "validation.csv", index=False)
            if loop is not None:
                loop.to_csv(w.path / "spec_loop.csv", index=False)
            (w.path / "summary.json").write_text(
                json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
            w.commit({"command": "validate"})
    if args.format != "table":
        print(render(shown, args.format))
        if loop is not None:
            print(render(loop, args.format))
        return
    print(f"{summary['device']}: measured steps against predictions ({summary['threads']} "
          f"threads, {summary['dtype']}, {summary['statistic']} of the repetitions)")
    print(render(shown, "table"))
    print(f"MAPE before calibration ({summary['before_profile']}): "
          f"{summary['mape_before'] * 100:.1f}%   after: {summary['mape_after'] * 100:.1f}%")
    if loop is not None:
        s = summary["spec_loop"]
        print(f"\nspeculative loop: target {s['target']}, draft {s['draft']}, alpha "
              f"{s['alpha']} pinned, batch {s['batch']}")
        cols = ["gamma", "tokens_per_iteration", "tokens_per_s", "measured_speedup",
                "predicted_before", "predicted_after"]
        print(render(loop[cols], "table"))
    if args.out:
        print(f"wrote {Path(args.out) / 'validation.csv'} and summary.json")
