"""Terminal output: every command's table fits 120 columns, units in the headers, readable
``hardware show`` / ``models show`` blocks, sources on request (issue 16, item 8)."""
from __future__ import annotations

import re

import pandas as pd
import pytest
import yaml

from simulator.cli import main
from simulator.cli.output import TABLE_WIDTH, WIDTH_ENV, render_table
from simulator.inputs.errors import SpecsimError
from tests.helpers import REPO

SCENARIOS = REPO / "workloads" / "scenarios"
REPRS = ("Curve(", "Collectives(", "KernelShapes(", "Link(", "{'", "mappingproxy")


def _out(capsys, *argv) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _fits(text: str, width: int = TABLE_WIDTH) -> None:
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert not too_wide, f"{len(too_wide)} lines over {width}: {too_wide[0]!r}"


@pytest.fixture(autouse=True)
def _default_width(monkeypatch):
    monkeypatch.delenv(WIDTH_ENV, raising=False)


@pytest.mark.parametrize("argv", [
    ["run", "--set", "workload.max_requests=10"],
    ["run", str(SCENARIOS / "eagle3_moe.yaml"), "--set", "workload.max_requests=5"],
    ["run", str(SCENARIOS / "mtp_moe.yaml"), "--set", "workload.max_requests=5"],
    ["run", str(SCENARIOS / "eagle3_moe.yaml"), "--set", "workload.max_requests=5",
     "--compare", "none,eagle3:model=eagle3-kimi-k2,num_speculative_tokens=3"],
])
def test_run_tables_fit_and_name_their_units(argv, tmp_path, capsys):
    text = _out(capsys, *argv, "--no-progress", "--out", str(tmp_path / "out"))
    _fits(text)
    lines = text.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["policy", "finished"])
    assert {"p50_ttft_ms", "p99_tpot_ms", "speedup_vs_none*"} <= set(header.split())
    assert {"p99_e2e_ms", "output_tok/s", "goodput_req/s"} <= set(text.split())
    assert not re.search(r"\b(p\d\d_\w+_s|output_tokens_per_s)\b", text)  # one unit: ms
    assert "speedup_vs_none = mean TPOT of policy none / mean TPOT of the policy" in text
    # a label too long for the table is a numbered mark; the legend gives it whole
    for label in pd.read_csv(tmp_path / "out" / "summary.csv")["policy"]:
        if len(label) > 24:
            mark = re.search(r"\.\.\[(\d+)\]", text).group(1)
            assert f"[{mark}] {label}" in lines


def test_run_speedup_is_the_mean_tpot_ratio(tmp_path, capsys):
    text = _out(capsys, "run", "--no-progress", "--set", "workload.max_requests=10",
                "--out", str(tmp_path / "out"))
    summary = pd.read_csv(tmp_path / "out" / "summary.csv").set_index("policy")
    ratio = summary.loc["none", "mean_tpot_s"] / summary.loc["chain", "mean_tpot_s"]
    row = next(line.split() for line in text.splitlines() if line.startswith("chain "))
    assert float(row[-1]) == pytest.approx(ratio, abs=5e-4)  # printed to 3 decimals


def test_analytic_commands_fit(tmp_path, capsys):
    for argv in (["estimate"], ["gamma", "--c", "0.05"], ["gamma-map"], ["models", "list"],
                 ["hardware", "list"]):
        _fits(_out(capsys, *argv))
    for name in ("kstar", "gamma_batch"):
        text = _out(capsys, "sweep", str(SCENARIOS / f"sweep_{name}.yaml"), "--executor",
                    "serial", "--no-progress", "--out", str(tmp_path / f"{name}.csv"))
        _fits(text)
        assert "draft_ms" in text and "tok/s" in text and "draft_s " not in text
    # gamma_batch fixes hardware, target, draft and alpha: said once, not in every row
    assert "every row: hardware a100-40gb, target opt-13b, draft opt-125m, alpha 0.8" in text


def test_simulated_sweep_and_plan_fit(tmp_path, capsys):
    sweep = yaml.safe_load((SCENARIOS / "sweep_policies.yaml").read_text())
    sweep["fixed"] = {"workload.max_requests": 5}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sweep))
    text = _out(capsys, "sweep", str(tmp_path / "s.yaml"), "--executor", "serial",
                "--no-progress", "--out", str(tmp_path / "s.csv"))
    _fits(text)
    assert "[1] chain:num_speculative_tokens=2" in text.splitlines()
    plan = yaml.safe_load((SCENARIOS / "plan_default.yaml").read_text())
    plan.update(fixed={"workload.max_requests": 5}, prices=str(SCENARIOS / "prices_example.yaml"),
                search={"min_rate_per_s": 0.5, "max_rate_per_s": 16, "rel_tol": 1.0},
                candidates=plan["candidates"][:2])
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(plan))
    text = _out(capsys, "plan", str(tmp_path / "p.yaml"), "--executor", "serial",
                "--no-progress")
    _fits(_table_lines(text, "rank "))  # its table; the pre-flight and notes are prose
    assert "usd_per_Mtok" in text and "a100 chain gamma 4" in text


def _table_lines(text: str, head: str) -> str:
    """The blocks of a table: from each header line that starts with ``head`` to a blank."""
    out, inside = [], False
    for line in text.splitlines():
        inside = line.startswith(head) or (inside and bool(line.strip()))
        if inside:
            out.append(line)
    assert out, text
    return "\n".join(out)


def _block_rows(text: str) -> list[str]:
    """The key/value lines of a show block (two-space indent, a key, then its value)."""
    return [line for line in text.splitlines()[1:] if re.match(r"  \S", line)]


def test_hardware_show_is_a_readable_block(capsys):
    text = _out(capsys, "hardware", "show", "a100-40gb")
    _fits(text)
    assert text.splitlines()[0] == "a100-40gb: NVIDIA A100 40GB SXM4"
    assert not [r for r in REPRS if r in text]
    rows = {line.split()[0]: line for line in _block_rows(text)}
    # the A100 40GB datasheet: 40 GB HBM2, 1,555 GB/s, 312 TFLOPS bf16/fp16 dense
    assert rows["memory_gib"].split()[1:] == ["40", "GiB"]
    assert rows["memory_bandwidth_gb_per_s"].split()[1:] == ["1,555", "GB/s"]
    assert "bf16 312, fp16 312" in rows["peak_tflops"]
    # values start in one column and no row is padded out to the width of the sources
    starts = {len(line) - len(line.split(None, 1)[1]) for line in rows.values()}
    assert len(starts) == 1
    assert rows["calibrated"].rstrip() == rows["calibrated"] and len(rows["calibrated"]) < 50
    # 30 sourced entries in a100-40gb.yaml (7 kernel kinds and its L2 bandwidth among them)
    assert "datasheet" not in text and "30 sources: add --sources" in text


def test_hardware_show_sources_on_request(capsys):
    text = _out(capsys, "hardware", "show", "a100-40gb", "--sources")
    _fits(text)
    flat = " ".join(text.split())
    # hardware/profiles/a100-40gb.yaml: the memory line's source, under the memory row
    assert "source: NVIDIA A100 Tensor Core GPU datasheet (2021): 40 GB HBM2" in flat
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  memory_gib "))
    assert lines[at + 1].lstrip().startswith("source: NVIDIA A100 Tensor Core GPU datasheet")
    assert "fp16: NVIDIA A100 datasheet: FP16 Tensor Core 312 TFLOPS (dense)" in flat


def test_models_show_is_a_readable_block(capsys):
    text = _out(capsys, "models", "show", "deepseek-v3")
    _fits(text)
    rows = {line.split()[0]: line.split(None, 1)[1] for line in _block_rows(text)}
    # deepseek-ai/DeepSeek-V3 config.json: 61 layers, hidden 7168, 256 routed experts, top-8
    assert (rows["num_layers"], rows["hidden_size"], rows["num_experts"]) == ("61", "7168", "256")
    assert rows["experts_per_token"] == "8" and rows["gated_mlp"] == "true"
    # 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes = 70,272 bytes a token
    assert rows["kv_bytes_per_token"].startswith("70,272 bytes")
    assert rows["published_params"].startswith("671 B")
    assert "arXiv 2412.19437" not in text and "3 sources: add --sources" in text
    with_sources = " ".join(_out(capsys, "models", "show", "deepseek-v3", "--sources").split())
    assert "671B total parameters" in with_sources and "arXiv 2412.19437" in with_sources


def test_a_split_table_repeats_its_keys_and_explains_its_marks():
    long = "eagle3:model=eagle3-kimi-k2,num_speculative_tokens=3"
    df = pd.DataFrame({"policy": ["none", long], **{f"metric_{i}_ms": [1.5, 2.25]
                                                     for i in range(12)}})
    text = render_table(df, width=80)
    blocks = text.split("\n\n")
    # 12 columns of 11 characters + gaps: 5 fit beside the key in 80 columns, so 3 blocks
    assert len(blocks) == 3
    for block in blocks:
        assert block.splitlines()[0].startswith("policy ")
        assert all(len(line) <= 80 for line in block.splitlines())
    assert text.splitlines()[-1] == f"[1] {long}"
    assert "eagle3:model=eagle3..[1]" in text


def test_the_width_setting(monkeypatch):
    df = pd.DataFrame({"name": ["x" * 30], **{f"c{i}": [1] for i in range(60)}})
    monkeypatch.setenv(WIDTH_ENV, "0")  # printed whole: one header, one row, no marks
    lines = render_table(df).splitlines()
    assert len(lines) == 2 and len(lines[0]) == 30 + sum(2 + len(f"c{i}") for i in range(60))
    monkeypatch.setenv(WIDTH_ENV, "200")
    assert max(len(line) for line in render_table(df).splitlines()) <= 200
    monkeypatch.setenv(WIDTH_ENV, "wide")
    with pytest.raises(SpecsimError, match=WIDTH_ENV):
        render_table(df)


def test_the_width_setting_is_in_every_commands_help(capsys):
    for command in ("run", "plan", "sweep", "hardware", "gamma-map"):
        assert main([command, "--help"]) == 0
        assert f"{WIDTH_ENV}=0 prints" in " ".join(capsys.readouterr().out.split())
