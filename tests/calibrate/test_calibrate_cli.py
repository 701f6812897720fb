"""``specsim calibrate`` on this machine's CPU (quick grids), its bad input, and the GPU path."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from calibrate.benchmarks import KINDS, Plan, run_suite  # noqa: E402
from calibrate.timing import measure, resolve_device  # noqa: E402
from calibrate.writer import load_calibrated, save_profile  # noqa: E402
from hardware.profile import load_profile, load_profile_file  # noqa: E402
from simulator.cli import main  # noqa: E402
from simulator.cost.cost_model import CostModel  # noqa: E402
from simulator.inputs.errors import SpecsimError  # noqa: E402
from simulator.models.spec import load_model  # noqa: E402

NO_CUDA = not torch.cuda.is_available()


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """One quick CPU calibration through the CLI (single-threaded: steadier on shared CI)."""
    out = tmp_path_factory.mktemp("cal") / "this-cpu.yaml"
    threads = torch.get_num_threads()
    try:
        rc = main(["calibrate", "--device", "cpu", "--quick", "--threads", "1", "--reps", "3",
                   "--no-progress", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    assert rc == 0
    frame = pd.read_csv(out.with_name("this-cpu.measurements.csv"), keep_default_na=False,
                        na_values=[""])
    return out, frame


def test_every_kind_of_micro_benchmark_is_measured(calibrated):
    _, frame = calibrated
    assert set(frame["kind"]) == set(KINDS)
    ok = frame[frame["status"] == "ok"]
    assert len(ok) == len(frame)
    assert (ok["median_s"] > 0).all() and (ok["min_s"] <= ok["median_s"]).all()
    assert set(ok.loc[ok["kind"] == "gemm", "dtype"]) == {"fp32", "bf16"}


def test_measurements_obey_the_physics(calibrated):
    _, frame = calibrated
    gemm = frame[(frame["kind"] == "gemm") & (frame["dtype"] == "fp32")]
    for (k, n), g in gemm.groupby(["k", "n"]):
        by_m = g.set_index("m")["min_s"]
        # 64x the FLOPs of the same weights cannot be faster
        assert by_m[256] > by_m[4], (k, n)
    mem = frame[frame["kind"].isin(["read", "copy"])]
    gbps = mem["bytes"] / mem["min_s"] / 1e9
    assert (gbps > 0.05).all() and (gbps < 5000).all()
    big = mem[mem["bytes"] >= 2**26]
    # streaming a buffer 4x larger takes longer
    for kind, g in big.groupby("kind"):
        g = g.sort_values("bytes")
        assert g["min_s"].iloc[-1] > g["min_s"].iloc[0], kind
    tiny = frame[frame["kind"] == "tiny_forward"]
    for arch, g in tiny.groupby("arch"):
        g = g.set_index("layers")["min_s"]
        assert g[8] > g[1], arch                 # more layers, more kernels


def test_calibrated_profile_loads_with_provenance_and_round_trips(calibrated, tmp_path):
    path, _ = calibrated
    hw = load_calibrated(path)
    prov = hw.provenance
    assert prov["device_type"] == "cpu" and prov["threads"] == 1 and prov["dtype"] == "fp32"
    assert prov["torch"] == str(torch.__version__)
    assert prov["cuda"] == (torch.version.cuda or "none")  # the build, not the device
    assert prov["command"].startswith("specsim calibrate") and "--quick" in prov["command"]
    assert prov["measurements_csv"] == "this-cpu.measurements.csv"
    assert len(hw.compute_efficiency_curve) >= 3 and len(hw.memory_efficiency_curve) >= 3
    assert all(0 < e <= 1 for _, e in hw.compute_efficiency_curve + hw.memory_efficiency_curve)
    assert 0 < hw.kernel_overhead_s < 1e-3 and 0 <= hw.step_overhead_s < 1e-2
    # measured peaks: the fitted fp32 peak is at least the best GEMM measured
    # (provenance rounds TFLOP/s to 9 decimals: a few parts in 1e8 at a CPU's ~0.1 TFLOP/s)
    assert hw.peak_flops("fp32") >= prov["measured_peak_tflops"]["fp32"] * 1e12 * (1 - 1e-6)
    back = load_profile_file(save_profile(hw, tmp_path / "again.yaml"))
    assert back.compute_efficiency_curve == hw.compute_efficiency_curve
    assert back.provenance == hw.provenance


def test_calibration_changes_predictions(calibrated):
    path, _ = calibrated
    spec = dataclasses.replace(load_model("opt-125m"), dtype="fp32")
    before = CostModel(load_profile("cpu"), spec).decode_time(4, 512)
    after = CostModel(load_calibrated(path), spec).decode_time(4, 512)
    assert after != pytest.approx(before, rel=0.05)


def test_shape_too_large_for_memory_is_skipped_with_a_note():
    plan = Plan(device="cpu", dtype="fp32", gemm_m=(1, 64), gemm_kn=((256, 256), (8192, 8192)),
                memory_bytes=(2**16, 2**28), attention_batches=(1,),
                attention_contexts=(128,), attention_query_tokens=(1,), tiny_layers=(1, 2),
                sampling_vocab=(512,), warmup=1, reps=2, overhead_reps=3,
                memory_limit_bytes=128 * 2**20)
    frame = run_suite(plan, rng=np.random.default_rng(0))
    skipped = frame[frame["status"] == "skipped"]
    assert set(skipped["kind"]) >= {"gemm", "read", "copy"}
    assert skipped["note"].str.contains("GiB available").all()
    assert skipped["median_s"].isna().all()
    assert (frame.loc[frame["status"] == "ok", "median_s"] > 0).all()
    assert len(frame) - len(skipped) >= 8      # the small cases ran


def test_measure_reports_median_and_min():
    calls = []
    t = measure(lambda i: calls.append(i), torch.device("cpu"), warmup=2, reps=5)
    assert calls == list(range(7)) and t.reps == 5 and 0 <= t.min_s <= t.median_s
    with pytest.raises(SpecsimError, match="reps"):
        measure(lambda i: None, torch.device("cpu"), reps=0)


@pytest.mark.parametrize("argv, message", [
    (["calibrate", "--device", "tpu"], "unknown device 'tpu'"),
    (["calibrate", "--device", "cpu", "--dtype", "int8"], "dtype 'int8'"),
    (["calibrate", "--device", "cpu", "--base", "nope", "--quick"], "unknown hardware 'nope'"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_cuda_without_cuda_is_a_clear_error(capsys):
    assert main(["calibrate", "--device", "cuda", "--quick"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    with pytest.raises(SpecsimError, match="--device cpu"):
        resolve_device("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(NO_CUDA, reason="needs a CUDA device")
def test_gpu_quick_calibration(tmp_path):
    out = tmp_path / "gpu.yaml"
    assert main(["calibrate", "--device", "cuda", "--quick", "--no-progress",
                 "--out", str(out)]) == 0
    hw = load_calibrated(out)
    assert hw.provenance["device_type"] == "cuda" and hw.provenance["cuda"] != "none"
    assert hw.provenance["device"] == torch.cuda.get_device_name()
    assert hw.peak_flops("fp16") >= hw.provenance["measured_peak_tflops"]["fp16"] * 1e12 * 0.999
