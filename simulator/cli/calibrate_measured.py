"""``specsim calibrate --from-measurements`` and ``specsim validate --measurements``: fit and
check a profile's kernel parameters against published kernel timings (Vidur's CSVs).

No torch on this path: calibrate/measured.py and calibrate/measured_fit.py use numpy and
pandas only, so these run on any machine.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from simulator.cli.output import render
from simulator.inputs.errors import SpecsimError

if TYPE_CHECKING:  # pandas loads where a frame is built: `--help` starts fast
    import pandas as pd


def calibrate(args: argparse.Namespace, command: str, check_targets) -> int:
    """Fit ``--hardware`` to the kernels under ``--from-measurements``; write ``--out``
    (``check_targets(out, overwrite)`` refuses a file specsim did not write, before work)."""
    from calibrate.measured import load_measurements
    from calibrate.measured_fit import (
        calibrated_dict,
        fit_kernels,
        fitted_profile,
        measurement_table,
    )
    from calibrate.writer import write_calibration
    from hardware.profile import load_profile

    base_name = args.hardware or args.base
    if not base_name:
        raise SpecsimError("no base profile given", field="--hardware",
                           fix="add --hardware a100-80gb (the profile whose links, peaks, SM "
                               "count and tiles the calibration keeps)")
    base = load_profile(base_name)
    out = Path(args.out or f"{base.name}-calibrated.yaml")
    check_targets(out, overwrite=args.overwrite)
    from calibrate.writer import measurements_path
    from simulator.input_clash import check_outputs_not_inputs
    check_outputs_not_inputs([("--out", out), ("--out", measurements_path(out))],
                             [base.path, args.from_measurements], folders=())
    ms = load_measurements(args.from_measurements, statistic=args.statistic,
                           exclude=tuple(args.exclude_model or ()), field="--from-measurements")
    fit = fit_kernels(ms.kernels, base)
    data = calibrated_dict(base, fit, ms, name=out.stem, command=command,
                           excluded=tuple(args.exclude_model or ()))
    table, mape = measurement_table(ms, fitted_profile(base, fit))
    yaml_path, csv_path = write_calibration(data, table, out)
    print(f"calibrated {base.name} from {len(ms.kernels):,} published kernel timings "
          f"({ms.statistic} of each row) under {ms.root}")
    print(f"  models: {', '.join(ms.models)}")
    print(f"  GEMM: compute efficiency {fit.compute_efficiency:.3f} of a full wave of full "
          f"tiles, weight stream {fit.memory_efficiency:.3f} of bandwidth, latency "
          f"{fit.latency_s * 1e6:.2f} us (fit MAPE {fit.mape['gemm'] * 100:.1f}%)")
    for kind, r in fit.kinds.items():
        eff = r.compute_efficiency if r.compute_efficiency is not None else r.memory_efficiency
        what = "compute" if r.compute_efficiency is not None else "memory"
        l2 = "" if r.l2_memory_efficiency is None else \
            f" ({r.l2_memory_efficiency:.2f} when it fits in L2)"
        row = "" if r.row_bandwidth_bytes_per_s is None else \
            f", one block per row at {r.row_bandwidth_bytes_per_s / 1e9:.1f} GB/s"
        print(f"  {kind}: {what} efficiency {eff:.3f}{l2}, latency {r.latency_s * 1e6:.2f} us, "
              f"floor {r.min_kernel_s * 1e6:.2f} us{row} (fit MAPE {fit.mape[kind] * 100:.1f}%)")
    print(f"  shortest kernel {fit.min_kernel_s * 1e6:.2f} us")
    print(f"MAPE {mape * 100:.1f}% over {len(table):,} kernels (in-sample)")
    print(f"wrote {yaml_path} and {csv_path}")
    return 0


def _profile(name: str):
    from calibrate.writer import load_calibrated
    from hardware.profile import load_profile
    profile = load_profile(name)
    if profile.calibrated and profile.path:
        profile = load_calibrated(profile.path)   # a hand-edited calibration is refused
    return profile


def validate(args: argparse.Namespace) -> int:
    """Predict every kernel under ``--measurements`` with ``--profile``; print the table."""
    import pandas as pd
    from calibrate.measured import DTYPE, compare, load_measurements, predict
    for flag, value in (("--out", args.out), ("--report", args.report)):
        if value:
            raise SpecsimError("not used with --measurements", field=flag,
                               fix="leave it out; the table is printed (--format csv|json "
                                   "for a machine-readable one)")
    profile = _profile(args.profile)
    models = tuple(m for item in (args.models or ()) for m in item.split(",") if m)
    ms = load_measurements(args.measurements, models=models or None)
    predicted = predict(ms.kernels, profile.roofline(DTYPE))
    table, mape = compare(ms.kernels, predicted)
    shown = table.rename(columns={"mape_%": "MAPE_%"}).round(1)
    if args.format != "table":
        print(render(shown, args.format))
        return 0
    flat = "" if profile.kernels is not None else " (no kernels: block, the flat roofline)"
    print(f"{profile.name}{flat}: predicted against {len(ms.kernels):,} measured kernels "
          f"({ms.statistic} of each row) under {ms.root}")
    print(f"models: {', '.join(ms.models)}")
    print(render(pd.DataFrame(shown), "table"))
    print(f"MAPE {mape * 100:.1f}% over {len(ms.kernels)} kernels")
    return 0
