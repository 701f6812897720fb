"""The command line: exit codes, one-line errors without tracebacks, JSON outputs, run."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from simulator.cli import main
from tests.helpers import REPO


def cli(*args):
    """Run the real console entry point in a subprocess (no traceback may leak)."""
    return subprocess.run([sys.executable, "-m", "simulator.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_estimate_json_rows_and_best_gamma():
    # batch 16: 16 x ceil(513 / 16) = 528 blocks of opt-13b's 16 x 819,200 bytes (2 x 40
    # layers x 5120 x fp16) fit beside its weights on 40 GB; batch 32 (1,056 blocks) does not
    out = cli("estimate", "--hardware", "a100-40gb", "--target", "opt-13b", "--draft",
              "opt-125m", "--batch", "16", "--context", "512", "--gamma", "0-8", "--format",
              "json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["gamma"] for r in rows] == list(range(9))
    for key in ("draft_s", "verify_s", "decode_s", "c", "expected_tokens", "speedup",
                "best_gamma"):
        assert key in rows[0]
    best = max(rows, key=lambda r: r["speedup"])
    assert all(r["fits"] for r in rows)
    assert all(r["best_gamma"] == best["gamma"] for r in rows)
    assert rows[0]["speedup"] == pytest.approx(1.0)  # gamma 0 is plain decoding


def test_gamma_json():
    out = cli("gamma", "--alpha", "0.8", "--c", "0.05", "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["best_gamma"] == 8  # lecture 003's table: alpha 0.8, c' = 20 -> K* = 8
    assert isinstance(data["speedup"], list) and data["speedup"][0]["speedup"] == 1.0


@pytest.mark.parametrize("args,needle", [
    (("estimate", "--hardware", "nope"), "unknown hardware"),
    (("estimate", "--target", "gpt-5"), "unknown model"),
    (("estimate", "--alpha", "nan"), "alpha"),
    (("estimate", "--batch", "-3"), "--batch"),
    (("estimate", "--gamma", "8-2"), "--gamma"),
    (("estimate", "--draft", "medusa-vicuna-7b", "--target", "vicuna-7b"), "--draft"),
    (("gamma", "--c", "-1"), "--c"),
    (("run", "does-not-exist.yaml"), "file not found"),
    (("run", "--set", "batching.max_num_seqs=-4"), "batching.max_num_seqs"),
    (("run", "--set", "target=llama-2-70b"), "does not fit"),
    (("run", "--compare", "none,bogus"), "policy.name"),
    (("hardware", "show", "tpu-v99"), "unknown hardware"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    out = cli(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert needle in out.stderr


def test_run_default_writes_results(tmp_path):
    out_dir = tmp_path / "out"
    assert main(["run", "--no-progress", "--out", str(out_dir),
                 "--set", "workload.max_requests=30"]) == 0
    summary = pd.read_csv(out_dir / "summary.csv")
    assert summary["policy"].tolist() == ["none", "chain"]
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert [p["label"] for p in manifest["policies"]] == ["none", "chain"]
    assert manifest["format"] == "parquet"  # the default: the big tables in Parquet
    req = pd.read_parquet(out_dir / f"{manifest['policies'][1]['stem']}.requests.parquet")
    assert len(req) == 30 and (req["status"] == "finished").all()


def test_run_offers_exactly_the_formats_a_results_folder_is_read_in():
    from simulator.cli.main import build_parser
    from simulator.results_dir import RESULTS_FORMATS

    parser = build_parser(["run"])
    assert parser.parse_args(["run"]).results_format == RESULTS_FORMATS[0] == "parquet"
    for fmt in RESULTS_FORMATS:
        assert parser.parse_args(["run", "--results-format", fmt]).results_format == fmt
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--results-format", "feather"])


def test_csv_on_request_reads_back_as_the_parquet_folder_does(tmp_path):
    """The same run written both ways loads into the same Results: the tables' values and
    the summary (CSV keeps no types: dtypes aside); summary.csv is CSV either way."""
    from simulator.results_dir import load_results_dir

    runs = {}
    for fmt in ("parquet", "csv"):
        out_dir = tmp_path / fmt
        assert main(["run", "--no-progress", "--out", str(out_dir), "--results-format", fmt,
                     "--set", "workload.max_requests=30", "--format", "json"]) == 0
        stems = [p["stem"] for p in json.loads((out_dir / "manifest.json").read_text())
                 ["policies"]]
        assert all((out_dir / f"{s}.{t}.{fmt}").is_file() for s in stems
                   for t in ("requests", "steps", "acceptance"))
        assert (out_dir / "summary.csv").is_file()
        runs[fmt] = load_results_dir(out_dir)[0]
    for a, b in zip(runs["parquet"], runs["csv"]):
        pd.testing.assert_frame_equal(a.requests, b.requests, check_dtype=False)
        pd.testing.assert_frame_equal(a.steps, b.steps, check_dtype=False)
        assert a.summary() == pytest.approx(b.summary(), nan_ok=True)


def test_failed_run_writes_nothing(tmp_path):
    out_dir = tmp_path / "out"
    assert main(["run", "--no-progress", "--out", str(out_dir),
                 "--set", "target=llama-2-70b"]) == 2
    assert not out_dir.exists()
    assert not [p for p in tmp_path.iterdir()]


def test_catalog_commands():
    out = cli("models", "list", "--format", "json")
    assert out.returncode == 0
    names = {row["name"] for row in json.loads(out.stdout)}
    assert {"opt-13b", "llama-2-70b", "llama-68m"} <= names
    assert cli("hardware", "show", "a100-40gb").returncode == 0


def test_bad_profile_in_hardware_dir_exits_2(tmp_path):
    (tmp_path / "mygpu.yaml").write_text("name: mygpu\ndescription: x\nmemory_gib: 40\n")
    out = cli("hardware", "list", "--hardware-dir", str(tmp_path))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "mygpu.yaml" in out.stderr and "missing required key" in out.stderr


def test_gamma_says_no_speculation_when_no_draft_length_pays():
    # with c = 1000, E(g) <= 1 / (1 - 0.8) = 5 < 1000 g + 1 for every g >= 1 (Theorem 3.8)
    out = cli("gamma", "--alpha", "0.8", "--c", "1000", "--format", "json")
    assert out.returncode == 0, out.stderr
    import json
    data = json.loads(out.stdout)
    assert data["best_gamma"] == 0 and data["best_speedup"] == 1.0
    assert max(s["speedup"] for s in data["speedup"] if s["gamma"] > 0) < 1.0


@pytest.mark.parametrize("argv,absent", [
    (["--help"], ("pandas", "numpy", "simpy", "torch", "altair", "simulator.simulate")),
    (["gamma", "--alpha", "0.8", "--c", "0.05"], ("simpy", "torch", "altair",
                                                 "simulator.simulate", "simulator.cli.run")),
    (["estimate", "--help"], ("simpy", "torch", "altair", "simulator.simulate")),
    (["run", "--help"], ("pandas", "simpy", "torch", "altair", "simulator.simulate",
                         "simulator.scenario")),
])
def test_a_command_imports_only_what_it_needs(argv, absent):
    # `specsim --help` and each command build only their own arguments (start-up time)
    code = ("import sys, contextlib, io\n"
            "from simulator.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    rc = main({argv!r})\n"
            f"print(rc, [m for m in {absent!r} if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.split(None, 1) == ["0", "[]\n"], out.stdout + out.stderr


def test_no_commands_help_imports_pandas():
    """Every ``specsim COMMAND --help`` starts without pandas, pyarrow, SimPy, torch or
    altair (they load where frames are built and runs happen): one interpreter asks each
    command for its help in turn and notes what each one added."""
    from simulator.cli.main import COMMANDS

    heavy = ("pandas", "pyarrow", "simpy", "torch", "altair")
    code = ("import sys, contextlib, io\n"
            "from simulator.cli import main\n"
            f"for name in {sorted(COMMANDS)!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        rc = main([name, '--help'])\n"
            f"    print(name, rc, [m for m in {heavy!r} if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    lines = out.stdout.splitlines()
    assert len(lines) == len(COMMANDS), out.stdout + out.stderr
    assert [line for line in lines if not line.endswith(" 0 []")] == [], out.stdout


def test_the_engine_imports_without_pandas():
    # the engine builds DataFrames only when a run ends (cold start, issue 14)
    code = "import sys, simulator.simulate; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_measuring_a_device_without_torch_says_how_to_get_it():
    """A core install (no ``calibrate`` extra): one line naming the extra, exit 2, no
    traceback.  torch is hidden from the child (``sys.modules['torch'] = None``)."""
    code = ("import sys; sys.modules['torch'] = None; from simulator.cli import main; "
            "sys.exit(main(['calibrate', '--device', 'cpu', '--quick']))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "specsim[calibrate]" in out.stderr and "--device" in out.stderr


def test_run_computes_each_policys_summary_once(tmp_path, monkeypatch):
    """The table, the vLLM-keyed metrics, summary.csv and the report all read one summary
    per policy (it was computed three times, five with --report)."""
    from simulator.results import Results

    calls = []
    real = Results._compute_summary
    monkeypatch.setattr(Results, "_compute_summary",
                        lambda self: calls.append(self.label) or real(self))
    out_dir = tmp_path / "out"
    assert main(["run", "--no-progress", "--out", str(out_dir), "--set",
                 "workload.max_requests=20", "--report", str(out_dir / "report.html")]) == 0
    assert sorted(calls) == ["chain", "none"]
    summary = pd.read_csv(out_dir / "summary.csv")
    assert summary["requests"].tolist() == [20, 20]


def test_a_summary_is_the_callers_to_change():
    from simulator.simulate import simulate
    from tests.helpers import scenario, workload

    res = simulate(scenario("none"), workload=workload([0.0, 1.0], [4, 4], [3, 2]))
    first = res.summary()
    first["requests"] = -1
    assert res.summary()["requests"] == 2 and res.summary() is not res.summary()
