"""Fitting: known curves and overheads are recovered from synthetic measurements, and the
fitted formula is the cost model's own."""
import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")

from calibrate.bench_attention import attention_counts  # noqa: E402
from calibrate.bench_gemm import gemm_counts  # noqa: E402
from calibrate.bench_overhead import TINY_CONTEXT, tiny_spec  # noqa: E402
from calibrate.benchmarks import COLUMNS  # noqa: E402
from calibrate.fit import SMOOTHINGS, charged_kernels, fit, fit_curves, fit_overheads, predict  # noqa: E402
from hardware.profile import HardwareProfile, Link, load_profile  # noqa: E402
from simulator.cost.cost_model import CostModel  # noqa: E402
from simulator.inputs.errors import SpecsimError  # noqa: E402
from simulator.models.spec import load_model  # noqa: E402

PEAK, BW, KO, STEP = 100e9, 20e9, 5e-6, 40e-6
# The generating curves: efficiency rises with size (log-linear between these points).
C_TRUE = ((1e6, 0.05), (1e8, 0.6), (1e10, 0.9))
M_TRUE = ((1e4, 0.3), (1e6, 0.8), (1e9, 0.7))


def _eff(curve, x):
    return np.interp(np.log10(x), np.log10([p[0] for p in curve]), [p[1] for p in curve])


def _row(**values):
    row = {c: np.nan for c in COLUMNS}
    row.update(dtype="fp32", arch="", status="ok", note="", count=1.0, reps=5)
    row.update(values)
    return row


def _synthetic(c_axis="flops"):
    """Measurements generated in closed form: count * max(F/(P eta_c), B/(BW eta_m)) + ko."""
    rows = []

    def t(flops, nbytes, count=1.0):
        x = flops if c_axis == "flops" else flops / nbytes
        c = flops / (PEAK * _eff(C_TRUE if c_axis == "flops" else
                                 ((0.3, 0.05), (10.0, 0.6), (300.0, 0.9)), x)) if flops else 0
        return count * max(c, nbytes / (BW * _eff(M_TRUE, nbytes))) + KO

    for k, n in ((512, 2048), (1024, 1024), (1024, 8192)):
        for m in (1, 4, 16, 64, 256):
            f, b = gemm_counts(m, n, k, 4)
            rows.append(_row(kind="gemm", m=m, n=n, k=k, flops=f, bytes=b, median_s=t(f, b)))
    for size in 2 ** np.arange(14, 30, 2):
        for kind, factor in (("read", 1), ("copy", 2)):
            b = float(size * factor)
            rows.append(_row(kind=kind, flops=0.0, bytes=b, median_s=t(0.0, b)))
    for batch in (1, 8):
        for ctx in (256, 2048):
            f, b = attention_counts(16, 16, 64, ctx, 1, 4)
            rows.append(_row(kind="attention", batch=batch, context=ctx, query_tokens=1,
                             flops=f, bytes=b, count=float(batch), median_s=t(f, b, batch)))
    per_layer, per_step = charged_kernels("fp32")
    for layers in (1, 4, 8):
        rows.append(_row(kind="tiny_forward", arch="opt", layers=layers, flops=0.0, bytes=0.0,
                         median_s=STEP + KO * (per_layer * layers + per_step)))
    rows.append(_row(kind="launch", flops=0.0, bytes=0.0, median_s=3e-6))
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["min_s"] = frame["median_s"]
    return frame


def test_overheads_recovered_exactly():
    kernel, step = fit_overheads(_synthetic())
    assert kernel == pytest.approx(KO, rel=1e-9)
    assert step == pytest.approx(STEP, rel=1e-6)


def test_charged_kernels_is_what_the_cost_model_charges():
    # With a free roofline, a tiny model's step is step + kernel * (per_layer L + per_step).
    per_layer, per_step = charged_kernels("fp32")
    hw = HardwareProfile(name="p", description="free roofline", memory_bytes=1e12,
                         memory_bandwidth_bytes_per_s=1e30, peak_flops_per_s={"fp32": 1e30},
                         interconnect=Link("l", 1e30, 0), host_link=Link("l", 1e30, 0),
                         compute_efficiency=1.0, memory_efficiency=1.0,
                         kernel_overhead_s=2e-6, step_overhead_s=7e-5)
    for layers in (1, 3, 6):
        got = CostModel(hw, tiny_spec("llama", layers, "fp32")).decode_time(1, TINY_CONTEXT)
        assert got == pytest.approx(7e-5 + 2e-6 * (per_layer * layers + per_step), rel=1e-9)


def _curve_rows(frame):
    return frame[frame["kind"].isin(["gemm", "read", "copy", "attention"])]


def _rates(frame):
    gemm, mem = frame[frame["kind"] == "gemm"], frame[frame["kind"].isin(["read", "copy"])]
    return (gemm["flops"] / gemm["median_s"]).max(), (mem["bytes"] / mem["median_s"]).max()


@pytest.mark.parametrize("axis", ["flops", "intensity"])
def test_curves_reproduce_noise_free_measurements(axis):
    frame = _synthetic(axis)
    peak, bw = _rates(frame)
    cc, mc, rms = fit_curves(frame, peak_flops_per_s=peak, bandwidth_bytes_per_s=bw,
                             kernel_overhead_s=KO, axis=axis, smoothing=1e-6)
    rows = _curve_rows(frame)
    pred = predict(rows, peak_flops_per_s=peak, bandwidth_bytes_per_s=bw, compute_curve=cc,
                   memory_curve=mc, kernel_overhead_s=KO, axis=axis)
    err = np.abs(pred / rows["median_s"].to_numpy() - 1)
    # The knots sit on the generating curves' bends, so the fit is all but exact; the worst
    # point is a small read whose best rate, measured with the kernel overhead in it, caps
    # the efficiency at 1 a few percent short of the generating curve.
    assert np.median(err) < 0.002 and err.max() < 0.05 and rms < 0.02
    assert all(0 < e <= 1 for _, e in cc + mc)


def test_cross_validated_smoothing_tracks_the_truth_through_noise():
    # 30% lognormal noise on every measurement: the smoothing chosen by cross-validation
    # must land nearer the noise-free times than a barely smoothed fit does.
    frame = _synthetic()
    truth = _curve_rows(frame)["median_s"].to_numpy()
    noisy = frame.copy()
    noisy["median_s"] = frame["median_s"] * np.exp(
        np.random.default_rng(3).normal(0.0, 0.3, len(frame)))
    f = fit(noisy, dtype="fp32")
    assert f.smoothing > min(SMOOTHINGS)
    common = dict(peak_flops_per_s=f.peak_flops_per_s,
                  bandwidth_bytes_per_s=f.bandwidth_bytes_per_s,
                  kernel_overhead_s=f.kernel_overhead_s)
    cv = predict(_curve_rows(noisy), compute_curve=f.compute_curve,
                 memory_curve=f.memory_curve, **common)
    cc, mc, _ = fit_curves(noisy, smoothing=1e-6, **common)
    rough = predict(_curve_rows(noisy), compute_curve=cc, memory_curve=mc, **common)

    def rms(p):
        return np.sqrt(np.mean(np.log(p / truth) ** 2))
    assert rms(cv) < rms(rough)


def test_datasheet_peak_is_kept_unless_beaten():
    frame = _synthetic()
    assert fit(frame, dtype="fp32", datasheet_peak_flops_per_s=1e12).peak_flops_per_s == 1e12
    low = fit(frame, dtype="fp32", datasheet_peak_flops_per_s=1e9)
    assert low.peak_flops_per_s == low.measured_peak_flops_per_s["fp32"]


def test_fit_formula_is_the_cost_models_for_a_linear_layer():
    # predict() on a GEMM row must price exactly what CostModel prices for that linear.
    f = fit(_synthetic(), dtype="fp32")
    hw = load_profile("cpu")
    import dataclasses
    hw = dataclasses.replace(hw, peak_flops_per_s={"fp32": f.peak_flops_per_s},
                             memory_bandwidth_bytes_per_s=f.bandwidth_bytes_per_s,
                             compute_efficiency_curve=f.compute_curve,
                             memory_efficiency_curve=f.memory_curve,
                             kernel_overhead_s=f.kernel_overhead_s, calibrated=True)
    spec = dataclasses.replace(load_model("opt-125m"), dtype="fp32", num_layers=1)
    for tokens in (1, 7, 300):
        ops = {op.name: op for op in CostModel(hw, spec).breakdown([tokens], [0]).ops}
        h = spec.hidden_size
        for name, (k, n) in {"qkv_proj": (h, 3 * h), "mlp_down": (spec.ffn_size, h)}.items():
            fl, by = gemm_counts(tokens, n, k, 4)
            row = pd.DataFrame([_row(kind="gemm", flops=fl, bytes=by)])
            want = predict(row, peak_flops_per_s=f.peak_flops_per_s,
                           bandwidth_bytes_per_s=f.bandwidth_bytes_per_s,
                           compute_curve=f.compute_curve, memory_curve=f.memory_curve,
                           kernel_overhead_s=f.kernel_overhead_s)[0]
            assert ops[name].time_s == pytest.approx(want, rel=1e-9)


def test_bad_input():
    frame = _synthetic()
    with pytest.raises(SpecsimError, match="statistic"):
        fit(frame, dtype="fp32", statistic="mean")
    with pytest.raises(SpecsimError, match="axis"):
        fit(frame, dtype="fp32", axis="bytes")
    with pytest.raises(SpecsimError, match="bf16"):
        fit(frame, dtype="bf16")
    with pytest.raises(SpecsimError, match="memory"):
        fit(frame[~frame["kind"].isin(["read", "copy"])], dtype="fp32")
    with pytest.raises(SpecsimError, match="layer counts"):
        fit_overheads(frame[frame["kind"] != "tiny_forward"])
