"""Calibration and validation from published kernel measurements (Vidur's A100 CSVs).

The measurements are Vidur's (github.com/microsoft/vidur, commit 7d47513), read in place from
../shared/measured; every test here skips cleanly when that folder is absent.  Checked: the
reader against the raw CSVs, the shapes against hand arithmetic, that every prediction goes
through the Roofline kernel methods, leave-one-model-out accuracy of the fits, the shipped
a100-80gb profile (its memory-bound and attention kinds fitted to these files, its GEMMs not)
over every A100 kernel, and the two commands end to end.
"""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pandas as pd
import pytest

from calibrate.measured import (
    ATTENTION_OPS,
    attention_terms,
    compare,
    gemm_shape,
    load_measurements,
    predict,
    transfer_bytes,
)
from calibrate.measured_fit import fit_kernels, fit_kinds, fitted_profile, nelder_mead
from calibrate.writer import load_calibrated
from hardware.profile import load_profile
from simulator.cli import main
from simulator.inputs.errors import SpecsimError
from tests.helpers import REPO, SHARED

A100 = SHARED / "measured" / "vidur" / "compute" / "a100"
pytestmark = pytest.mark.skipif(not A100.is_dir(), reason="../shared/measured is absent")
PHI2 = "microsoft/phi-2"
# phi-2 runs kernels no other A100 model does (torch LayerNorm, GELU, a three-way residual
# add, biased linears): left out, its norm and activation are predicted from RMSNorm and
# SiLU-and-multiply fits.  Measured leave-one-out MAPE (this commit): input_layernorm 23.1%,
# mlp_act 29.4%, mlp_down_proj 11.2%, add 11.0%; bounded here so that they cannot get worse.
PHI2_KNOWN = {"input_layernorm": 0.26, "mlp_act": 0.32, "mlp_down_proj": 0.13, "add": 0.13}


@pytest.fixture(scope="module")
def measured():
    return load_measurements(A100)


@pytest.fixture(scope="module")
def a100():
    return load_profile("a100-80gb")


def test_one_row_per_measured_kernel(measured):
    k = measured.kernels
    for model, g in k[~k["op"].isin(ATTENTION_OPS)].groupby("model"):
        raw = pd.read_csv(A100 / model / "mlp.csv")
        medians = [c for c in raw.columns if c.startswith("time_stats.") and c.endswith(".median")]
        assert len(g) == int(raw[medians].notna().sum().sum()), model
        assert set(g["tp"]) == set(raw["num_tensor_parallel_workers"])
    raw = pd.read_csv(A100 / "meta-llama/Llama-2-70b-hf/attention_tp2.csv")
    att = k[k["op"].isin(ATTENTION_OPS)]
    assert (att["op"] == "attn_prefill").sum() == int(raw["is_prefill"].sum())
    assert (att["op"] == "attn_decode").sum() == int((~raw["is_prefill"]).sum())
    # milliseconds in the files, seconds here
    row = raw[~raw["is_prefill"]].iloc[0]
    assert att[att["op"] == "attn_decode"]["measured_s"].iloc[0] == \
        pytest.approx(row["time_stats.attn_decode.median"] * 1e-3)
    # phi-2 adds three tensors (two kernels) and runs torch's GELU
    phi = k[k["model"] == PHI2]
    assert set(phi.loc[phi["op"] == "add", "count"]) == {2}
    assert set(phi.loc[phi["op"] == "mlp_act", "kind"]) == {"elementwise"}
    assert set(k.loc[(k["model"] != PHI2) & (k["op"] == "add"), "count"]) == {1}


def _row(measured, model, op, tp, tokens):
    k = measured.kernels
    return k[(k["model"] == model) & (k["op"] == op) & (k["tp"] == tp)
             & (k["tokens"] == tokens)].iloc[:1]


@pytest.mark.parametrize("model, op, tp, mnk", [
    # Llama-2-7B: 32 heads of 128, hidden 4096, gated MLP of 11008
    ("meta-llama/Llama-2-7b-hf", "attn_pre_proj", 2, (4096, (32 + 2 * 32) * 128 // 2, 4096)),
    ("meta-llama/Llama-2-7b-hf", "attn_post_proj", 2, (4096, 4096, 32 * 128 // 2)),
    ("meta-llama/Llama-2-7b-hf", "mlp_up_proj", 2, (4096, 2 * 11008 // 2, 4096)),
    ("meta-llama/Llama-2-7b-hf", "mlp_down_proj", 2, (4096, 4096, 11008 // 2)),
    # Llama-2-70B: 64 query heads, 8 KV heads (GQA), tensor parallel 8
    ("meta-llama/Llama-2-70b-hf", "attn_pre_proj", 8, (4096, (64 + 16) * 128 // 8, 8192)),
    # phi-2: not gated, the up projection is one matrix
    (PHI2, "mlp_up_proj", 1, (4096, 10240, 2560)),
])
def test_gemm_shapes_from_the_columns(measured, model, op, tp, mnk):
    m, n, k = gemm_shape(_row(measured, model, op, tp, 4096))
    assert (m[0], n[0], k[0]) == mnk


def test_transfer_bytes_from_the_columns(measured):
    # Llama-2-70B, 1 token, tp 1: hidden 8192, 64 + 8 heads of 128, fp16
    b = {op: transfer_bytes(_row(measured, "meta-llama/Llama-2-70b-hf", op, 1, 1))[0]
         for op in ("emb", "input_layernorm", "attn_rope", "mlp_act", "add")}
    assert b == {"emb": 8192 * (2 * 2 + 8), "input_layernorm": (3 * 8192 + 8192) * 2,
                 "attn_rope": 3 * (64 + 8) * 128 * 2, "mlp_act": 3 * 28672 * 2,
                 "add": 3 * 8192 * 2}


def test_every_prediction_goes_through_the_roofline_methods(measured, a100):
    roof = a100.roofline("fp16")
    k = measured.kernels
    sample = k.groupby(["model", "op"], group_keys=False).head(3)
    got = predict(sample, roof)
    for i, row in enumerate(sample.itertuples(index=False)):
        one = sample.iloc[[i]]
        if row.kind == "gemm":
            want = roof.gemm_time(*(x[0] for x in gemm_shape(one)))
        elif row.kind.startswith("attention"):
            want = roof.attention_time(*attention_terms(row))
        else:
            rows = row.tokens if row.kind in ("norm", "activation", "rope") else None
            want = row.count * roof.transfer_time(transfer_bytes(one)[0], row.kind, rows=rows)
        assert got[i] == pytest.approx(float(want), rel=1e-12), (row.model, row.op)


def test_the_shipped_a100_profile_is_within_15_percent_over_the_a100_kernels(measured, a100):
    """Its GEMMs are not fitted to these files (datasheet SMs, CUTLASS tiles, cited latency and
    efficiencies), but its memory-bound kinds (embedding, norm, activation, rope, residual add)
    and its two attention kinds ARE: calibrate.measured_fit.fit_kinds fitted them to these very
    files (hardware/profiles/a100-80gb.yaml says so kind by kind), so for those operators this
    bound is in-sample; the leave-one-model-out test below and the half-KV attention test
    judge the same fit on rows it did not see.  Measured (this commit): 7.6% over 105,687
    kernels, every operator's mean signed error within +-4.4% (mlp_down_proj +4.4%); before
    the per-kind numbers 23.0%, with emb -43.1%, add +27.7%, mlp_act -33.8%, the norms -26.2%
    and -29.0%, attn_prefill -34.6%, attn_decode -27.7%; the flat roofline 29.9%."""
    k = measured.kernels
    table, mape = compare(k, predict(k, a100.roofline("fp16")))
    flat = dataclasses.replace(a100, kernels=None)
    _, flat_mape = compare(k, predict(k, flat.roofline("fp16")))
    assert mape <= 0.15
    assert table["bias_%"].abs().max() <= 20.0, table
    assert mape < flat_mape


def test_the_per_kind_fit_leave_one_model_out(measured, a100):
    """The shipped A100 memory-bound kinds are fit_kinds over the seven RMSNorm models: fitted
    on six, the seventh's small kernels are predicted.  Measured (this commit): every operator
    of every held-out model within 9.4% MAPE (Meta-Llama-3-8B attn_rope) and 6.8% mean signed
    error (Meta-Llama-3-70B attn_rope -6.8%)."""
    k = measured.kernels
    k = k[(k["model"] != PHI2) & ~k["op"].isin(ATTENTION_OPS)]
    bad = {}
    for model in sorted(set(k["model"])):
        fit = fit_kinds(k[k["model"] != model], a100)
        kinds = {**a100.kernels.kinds, **{kd: rates for kd, (rates, _, _) in fit.items()}}
        held = k[(k["model"] == model) & (k["kind"] != "gemm")]
        profile = dataclasses.replace(a100, kernels=dataclasses.replace(a100.kernels,
                                                                        kinds=kinds))
        table, _ = compare(held, predict(held, profile.roofline("fp16")))
        for row in table.itertuples(index=False):
            if row[2] >= 11.0 or abs(row[4]) >= 10.0:     # mape_%, bias_%
                bad[(model, row[0])] = (row[2], row[4])
    assert not bad, bad


def test_the_attention_kinds_fitted_on_half_the_kv_lengths(measured, a100):
    """The shipped A100 attention kinds are fit_kinds over the one attention file: fitted on
    every other KV length measured, the rest predicted.  Measured (this commit): prefill
    9.4% and decode 11.0% MAPE."""
    att = measured.kernels[measured.kernels["op"].isin(ATTENTION_OPS)]
    step = att["context"].isin(sorted(set(att["context"]))[::2])
    fit = fit_kinds(att[step], a100, ("attention_prefill", "attention_decode"))
    kinds = {**a100.kernels.kinds, **{kd: rates for kd, (rates, _, _) in fit.items()}}
    profile = dataclasses.replace(a100, kernels=dataclasses.replace(a100.kernels, kinds=kinds))
    per_op = _per_op_mape(att[~step], profile)
    assert per_op["attn_prefill"] < 0.11
    assert per_op["attn_decode"] < 0.12


def _per_op_mape(kernels, profile) -> dict[str, float]:
    table, _ = compare(kernels, predict(kernels, profile.roofline("fp16")))
    return dict(zip(table["op"], table["mape_%"] / 100))


def test_leave_one_model_out(measured, a100):
    """For each A100 model: fit on the others' mlp.csv kernels, validate on its own.
    Measured (this commit): every operator of the seven gated RMSNorm models under 10% (worst
    9.5%, Meta-Llama-3-8B attn_rope); phi-2 as PHI2_KNOWN says."""
    k = measured.kernels[~measured.kernels["op"].isin(ATTENTION_OPS)]
    worst = {}
    for model in measured.models:
        fit = fit_kernels(k[k["model"] != model], a100)
        per_op = _per_op_mape(k[k["model"] == model], fitted_profile(a100, fit))
        for op, err in per_op.items():
            bound = PHI2_KNOWN.get(op, 0.10) if model == PHI2 else 0.10
            worst[(model, op)] = (err, bound)
    bad = {key: v for key, v in worst.items() if v[0] >= v[1]}
    assert not bad, bad


def test_attention_fitted_on_half_the_kv_lengths_predicts_the_other_half(measured, a100):
    """Only Llama-2-70B (tp 2) has attention timings: fit on every other KV length measured,
    validate on the rest.  Measured (this commit): prefill 9.4%, decode 11.0%: decode misses
    10% (its small-batch rows follow FlashAttention's split heuristics, not modelled), so its
    bound is a guard against getting worse, not the target."""
    k = measured.kernels
    att = k[k["op"].isin(ATTENTION_OPS)]
    lengths = sorted(set(att["context"]))
    step = att["context"].isin(lengths[::2])      # every other KV length measured
    fit = fit_kernels(pd.concat([k[~k["op"].isin(ATTENTION_OPS)], att[step]]), a100)
    per_op = _per_op_mape(att[~step], fitted_profile(a100, fit))
    assert per_op["attn_prefill"] < 0.10
    assert per_op["attn_decode"] < 0.12


def test_nelder_mead_finds_a_known_minimum():
    x = nelder_mead(lambda v: (v[0] - 1.5) ** 2 + 10 * (v[1] + 0.5) ** 2, [0.0, 0.0], [0.5, 0.5])
    assert x == pytest.approx([1.5, -0.5], abs=1e-3)


# ------------------------------------------------------------------ the commands end to end
SMALL = A100 / "microsoft"     # one model, 262 rows: a quick fit


def test_calibrate_writes_a_profile_that_loads_and_validate_prints_the_mape(tmp_path, capsys):
    out = tmp_path / "a100-phi2.yaml"
    assert main(["calibrate", "--from-measurements", str(SMALL), "--hardware", "a100-80gb",
                 "--out", str(out)]) == 0
    hw = load_calibrated(out)
    assert hw.calibrated and hw.kernels is not None
    assert hw.provenance["base_profile"] == "a100-80gb"
    assert hw.provenance["models"] == [PHI2]
    assert "--from-measurements" in hw.provenance["command"]
    assert hw.kernels.sm_count == 108                     # a datasheet fact, kept
    assert "fit to" in hw.sources["kernels.norm"] and "median" in hw.sources["kernels.norm"]
    assert (tmp_path / "a100-phi2.measurements.csv").read_text().startswith("kind,dtype,")
    capsys.readouterr()
    assert main(["validate", "--measurements", str(SMALL), "--profile", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    raw = pd.read_csv(SMALL / "phi-2" / "mlp.csv")
    kernels = int(raw[[c for c in raw.columns if c.endswith(".median")]].notna().sum().sum())
    assert lines[-1].startswith("MAPE ") and lines[-1].endswith(f" over {kernels} kernels")
    assert any(line.split()[:1] == ["mlp_up_proj"] for line in lines)
    # a second run may replace what specsim wrote
    assert main(["calibrate", "--from-measurements", str(SMALL), "--hardware", "a100-80gb",
                 "--out", str(out)]) == 0


def test_validate_by_name_and_by_model(capsys):
    assert main(["validate", "--measurements", str(A100), "--profile", "a100-80gb",
                 "--models", "meta-llama/Llama-2-7b-hf"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.endswith(" over 10440 kernels")     # 261 rows x 4 tp x 10 operators


@pytest.mark.parametrize("argv, message", [
    (["validate", "--measurements", "/no/such/folder", "--profile", "a100-80gb"],
     "is not a folder"),
    (["validate", "--measurements", str(A100), "--profile", "a100-80gb", "--models", "gpt-9"],
     "unknown model 'gpt-9'"),
    (["calibrate", "--from-measurements", str(A100), "--hardware", "a100-80gb",
      "--exclude-model", "gpt-9"], "unknown model 'gpt-9'"),
    (["calibrate", "--from-measurements", str(REPO / "hardware"), "--hardware", "a100-80gb"],
     "no mlp.csv"),
    (["calibrate", "--from-measurements", str(SMALL), "--hardware", "cpu"], "no kernels: block"),
    (["calibrate", "--from-measurements", str(SMALL)], "no base profile"),
    (["calibrate"], "no device given"),
])
def test_bad_input_is_exit_2_with_one_line(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)      # a default --out lands here, never in the project
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_a_file_specsim_did_not_write_is_refused(tmp_path, capsys):
    out = tmp_path / "mine.yaml"
    out.write_text("my notes\n")
    assert main(["calibrate", "--from-measurements", str(SMALL), "--hardware", "a100-80gb",
                 "--out", str(out)]) == 2
    assert "not written by specsim" in capsys.readouterr().err
    assert out.read_text() == "my notes\n"


def test_the_measurement_path_never_imports_torch(tmp_path):
    code = (
        "import sys\n"
        "from simulator.cli import main\n"
        f"assert main(['calibrate', '--from-measurements', {str(SMALL)!r}, '--hardware',"
        f" 'a100-80gb', '--out', {str(tmp_path / 'p.yaml')!r}]) == 0\n"
        f"assert main(['validate', '--measurements', {str(SMALL)!r}, '--profile',"
        f" {str(tmp_path / 'p.yaml')!r}]) == 0\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_measurements_folder_without_timings_is_refused(tmp_path):
    model = tmp_path / "org" / "tiny"
    model.mkdir(parents=True)
    (model / "mlp.csv").write_text("n_head,n_kv_head\n1,1\n")
    with pytest.raises(SpecsimError, match="lacks column"):
        load_measurements(tmp_path)


def test_a_shape_that_is_not_a_whole_number_is_one_message(tmp_path):
    # a hand-edited CSV with a bad shape value: exit 2, the file and column named
    src = SHARED / "measured" / "vidur" / "compute" / "a100" / "meta-llama" / "Llama-2-7b-hf"
    if not (src / "mlp.csv").is_file():
        pytest.skip("../shared/measured is absent")
    lines = (src / "mlp.csv").read_text().splitlines()[:3]
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index("n_head")] = "abc"
    folder = tmp_path / "a100" / "org" / "model"
    folder.mkdir(parents=True)
    (folder / "mlp.csv").write_text("\n".join([lines[0], ",".join(row), lines[2]]) + "\n")
    from simulator.cli.main import main
    assert main(["validate", "--measurements", str(tmp_path / "a100"),
                 "--profile", "a100-80gb"]) == 2
