"""The assembled report: one offline HTML file, escaped, small, reproducible; and its CLI."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hardware.profile import load_profile
from reports import build_report_html, load_results_dir, render_report, render_report_from_dir
from reports.frames import summary_frame
from simulator.cli import main as cli_main
from simulator.engine.recorder import MAX_POSITIONS, Recorder
from simulator.inputs.errors import SpecsimError
from simulator.results import Results
from simulator.scenario import SLO, PolicyConfig, Scenario

AZURE_CONV_REQUESTS = 19_366  # AzureLLMInferenceTrace_conv.csv (Azure public dataset, 2023)
VERSIONS = {"specsim": "test"}  # fixed, so that two builds can be compared byte for byte
# URLs that the inlined Vega/Vega-Embed code carries as inert strings (XML namespaces, the
# editor link of the disabled actions menu, vega's own schema id and a comment).
INERT_URLS = {"http://www.w3.org/1999/xlink", "http://www.w3.org/2000/svg",
              "http://www.w3.org/2000/xmlns/", "https://vega.github.io/editor/",
              "https://vega.github.io/schema/vega/v6.json",
              "https://vega.github.io/schema/vega/v5.json",
              "https://github.com/vega/vega-lite/issues/2415"}
EVIL = '<script>alert("x")</script>'


def synthetic_results(n: int, label: str, scenario: Scenario, rng: np.random.Generator,
                      gamma: int = 0) -> Results:
    """A Results of ``n`` requests shaped like a long trace run, built without the engine."""
    out = rng.integers(2, 400, n)
    ttft = rng.lognormal(-1.5, 1.0, n)
    tpot = rng.lognormal(-3.5, 0.3, n) / (1 + gamma / 3)
    arrival = np.sort(rng.uniform(0, 3600, n))
    e2e = ttft + tpot * (out - 1)
    drafts = (out // (gamma + 1)) if gamma else np.zeros(n, int)
    req = pd.DataFrame({
        "request_id": np.arange(n), "replica": 0,
        "status": pd.Categorical(["finished"] * n, categories=["pending", "waiting", "running",
                                                               "finished", "rejected"]),
        "reject_reason": "", "arrival_s": arrival, "first_scheduled_s": arrival,
        "first_token_s": arrival + ttft, "finish_s": arrival + e2e,
        "prompt_tokens": rng.integers(10, 2000, n), "output_tokens": out,
        "emitted_tokens": out, "preemptions": 0, "num_drafts": drafts,
        "num_draft_tokens": drafts * gamma, "num_accepted_tokens": drafts * gamma // 2,
        "queueing_s": 0.0, "ttft_s": ttft, "e2e_s": e2e, "tpot_s": tpot})
    m = 10 * n  # engine steps
    dur = rng.uniform(0.01, 0.05, m)
    steps = pd.DataFrame({f: np.zeros(m) for f in Recorder.STEP_FIELDS})
    steps["start_s"] = np.cumsum(dur) - dur
    steps["duration_s"] = dur
    steps["batch_size"] = steps["num_decode"] = rng.integers(1, 64, m)
    steps["kv_occupancy"] = rng.uniform(0, 1, m)
    steps["queue_len"] = rng.integers(0, 100, m)
    acc = np.zeros(MAX_POSITIONS + 1, np.int64)
    dr = np.zeros(MAX_POSITIONS + 1, np.int64)
    if gamma:
        acc[:gamma + 1] = rng.integers(100, 1000, gamma + 1)
        dr[gamma] = acc.sum()
    info = {"flops_per_token": 2.6e10, "attn_flops_per_pair": 8.2e5,
            "peak_flops_per_s": 3.12e14, "peak_bandwidth_bytes_per_s": 1.555e12,
            "weight_bytes_per_step": 2.6e10, "kv_bytes_per_token": 8.2e5}
    return Results(label=label, requests=req, steps=steps,
                   itl_s=rng.lognormal(-3.5, 0.5, int(out.sum())).astype(np.float32),
                   accepted_hist=acc, drafted_hist=dr, scenario=scenario, info=info)


def make_scenario(name: str = "synthetic") -> Scenario:
    raw = {"name": name, "seed": 7, "hardware": "a100-40gb", "target": "opt-13b",
           "draft": "opt-125m"}
    return Scenario(name=name, seed=7, draft="opt-125m", slo=SLO(ttft_s=1.0, tpot_s=0.06),
                    policy=PolicyConfig("chain", {"num_speculative_tokens": 4}), raw=raw)


def pair(n: int, scenario: Scenario, labels=("none", "chain:num_speculative_tokens=4")):
    rng = np.random.default_rng(0)
    return [synthetic_results(n, labels[0], scenario, rng),
            synthetic_results(n, labels[1], scenario, rng, gamma=4)]


@pytest.fixture(scope="module")
def small_html() -> str:
    sc = make_scenario()
    return build_report_html(pair(300, sc), sc, versions=VERSIONS)


def specs_of(html: str) -> dict:
    m = re.search(r'<script id="specsim-specs" type="application/json">(.*?)</script>', html,
                  re.S)
    return json.loads(m.group(1))


# ------------------------------------------------------------------ size
def test_report_of_a_full_azure_conversation_trace_stays_under_5_mb():
    sc = make_scenario()
    big = build_report_html(pair(AZURE_CONV_REQUESTS, sc), sc, versions=VERSIONS)
    small = build_report_html(pair(500, sc), sc, versions=VERSIONS)
    assert len(big.encode()) < 5_000_000
    # aggregated before charting: 39x the requests add almost nothing
    assert abs(len(big) - len(small)) < 100_000


# ------------------------------------------------------------------ offline
def test_no_request_can_leave_the_page(small_html):
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", small_html, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", small_html)
    urls = set(re.findall(r"https?://[^\s\"'`)<>\\]+", small_html))
    assert urls <= INERT_URLS, urls - INERT_URLS
    assert "vegaEmbed" in small_html and "$schema" not in json.dumps(specs_of(small_html))


def test_every_chart_container_has_a_spec(small_html):
    ids = re.findall(r'<div class="chart" id="([^"]+)"', small_html)
    names = re.findall(r'<div class="chart" id="[^"]+" data-chart="([^"]+)"', small_html)
    assert ids == list(specs_of(small_html))
    # policy comparison, latency x4, gamma heatmap + speedup, acceptance x2, roofline,
    # verify/decode ratio, timelines x3
    assert len(ids) == 14
    assert {"policy-comparison", "cdf-ttft", "gamma-heatmap", "speedup-surface",
            "acceptance-length", "position-rate", "roofline",
            "timeline-kv_occupancy"} <= set(names)


def test_same_results_same_report(small_html):
    sc = make_scenario()
    assert build_report_html(pair(300, sc), sc, versions=VERSIONS) == small_html


# ------------------------------------------------------------------ escaping
def test_scenario_names_and_policy_labels_are_escaped():
    sc = make_scenario(EVIL)
    html = build_report_html(pair(50, sc, labels=("none", '<img src=x onerror="alert(1)">')),
                             sc, versions=VERSIONS)
    assert EVIL not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    # the only script elements are the report's own three (bundle, specs, embed)
    assert len(re.findall(r"<script\b", html)) == 3
    specs = html[html.index('id="specsim-specs"'):]
    specs = specs[:specs.index("</script>")]
    assert "<img" not in specs and "\\u003cimg" in specs


def test_reproduce_section_has_seed_yaml_and_versions(small_html):
    assert "Seed 7." in small_html
    assert "target: opt-13b" in small_html and "specsim run scenario.yaml" in small_html
    assert "<td>specsim</td><td>test</td>" in small_html


# ------------------------------------------------------------------ optional sections
def test_sweep_plan_validation_calibration_sections(tmp_path):
    sc = make_scenario()
    sweep = pd.DataFrame({"policy_label": ["none", "none", "chain", "chain"],
                          "workload.rate_per_s": [1.0, 2.0, 1.0, 2.0],
                          "p99_tpot_s": [0.03, 0.05, 0.01, 0.02],
                          "output_tokens_per_s": [100, 190, 120, 230]})
    calib = pd.DataFrame({"kind": ["decode", "prefill"], "measured_s": [0.01, 0.2],
                          "predicted_s": [0.011, 0.19]})
    validation = pd.DataFrame({"step": ["decode", "decode"], "measured_s": [0.01, 0.02],
                               "predicted_base_s": [0.011, 0.018],
                               "error_base": [0.1, -0.1]})
    plan = pd.DataFrame({"rank": [1, 2], "candidate": ["a100-40gb x1", "h100-sxm x1"],
                         "devices": [1, 1], "max_rate_per_s": [2.5, 6.0],
                         "cost_per_million_tokens": [1.2, 0.9]})
    (tmp_path / "sub").mkdir()  # a missing parent is an error (test_output_safety)
    path = render_report(pair(50, sc), tmp_path / "sub" / "r.html", scenario=sc, sweep=sweep,
                         plan=plan,
                         validation=validation, calibration=calib, versions=VERSIONS)
    html = path.read_text()
    for title in ("Sweep", "Capacity plan", "Calibration", "Validation"):
        assert f">{title}</h2>" in html
    names = re.findall(r'data-chart="([^"]+)"', html)
    assert {"sweep-0", "sweep-1", "plan", "calibration", "validation"} <= set(names)
    assert "<td>h100-sxm x1</td>" in html
    assert "<td>base</td><td>decode</td><td>2</td><td>10.0%</td>" in html  # MAPE of +-10%
    # without those arguments and on an uncalibrated profile, none of the sections appear
    plain = build_report_html(pair(50, sc), sc, versions=VERSIONS)
    for title in ("Sweep", "Capacity plan", "Calibration", "Validation"):
        assert f">{title}</h2>" not in plain


def test_a_sweep_alone_makes_a_report():
    sweep = pd.DataFrame({"policy_label": ["none", "none"], "rate": [1.0, 2.0],
                          "p50_tpot_s": [0.03, 0.05]})
    html = build_report_html([], None, sweep=sweep, plan={"replicas": 3},
                             versions=VERSIONS)
    assert ">Sweep</h2>" in html and ">Summary</h2>" not in html
    assert "<td>replicas</td><td>3</td>" in html
    assert re.findall(r'data-chart="([^"]+)"', html) == ["sweep-0"]


def test_a_calibrated_profile_shows_its_efficiency_curves(tmp_path):
    hw_dir = tmp_path / "hw"
    hw_dir.mkdir()
    text = (Path(load_profile("a100-40gb").path).read_text()
            .replace("name: a100-40gb", "name: my-a100"))
    text += ("calibration:\n  provenance: {device: test}\n"
             "  compute_efficiency_curve: [[1.0e+9, 0.3], [1.0e+12, 0.75]]\n"
             "  memory_efficiency_curve: [[1.0e+6, 0.4], [1.0e+9, 0.9]]\n")
    (hw_dir / "my-a100.yaml").write_text(text)
    sc = dataclasses.replace(make_scenario(), hardware="my-a100", hardware_dir=str(hw_dir))
    html = build_report_html(pair(50, sc), sc, versions=VERSIONS)
    assert ">Calibration</h2>" in html
    assert "efficiency-curves" in re.findall(r'data-chart="([^"]+)"', html)


def test_bad_arguments_raise_specsim_error(tmp_path):
    with pytest.raises(SpecsimError, match="nothing to report"):
        render_report([], tmp_path / "r.html")
    sc = make_scenario()
    with pytest.raises(SpecsimError, match="folder"):
        render_report(pair(10, sc), tmp_path)


# ------------------------------------------------------------------ results folders and CLI
@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The README's main command on the built-in scenario, cut to 40 requests for speed."""
    d = tmp_path_factory.mktemp("run")
    rc = cli_main(["run", "--no-progress", "--out", str(d / "out"), "--report",
                   str(d / "report.html"), "--set", "workload.max_requests=40"])
    assert rc == 0
    return d


def test_run_report_writes_a_complete_report(default_run):
    html = (default_run / "report.html").read_text()
    assert "specsim report: default" in html
    assert len(specs_of(html)) == 14  # with the verify/decode ratio and policy comparison


def test_report_command_round_trips_a_results_folder(default_run, capsys):
    out = default_run / "again.html"
    assert cli_main(["report", str(default_run / "out"), "-o", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    results, scenario, manifest = load_results_dir(default_run / "out")
    assert [r.label for r in results] == [p["label"] for p in manifest["policies"]]
    saved = pd.read_csv(default_run / "out" / "summary.csv")
    loaded = summary_frame(results)
    for col in ("p50_ttft_s", "p99_tpot_s", "output_tokens_per_s", "mean_acceptance_length"):
        np.testing.assert_allclose(loaded[col], saved[col], rtol=1e-9)
    assert specs_of(out.read_text()).keys() == specs_of(
        (default_run / "report.html").read_text()).keys()


def test_report_command_names_a_bad_folder(tmp_path, capsys):
    assert cli_main(["report", str(tmp_path / "missing"), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "RESULTS_DIR" in err and "specsim run --out" in err and err.count("\n") == 1
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecsimError, match="manifest.json"):
        render_report_from_dir(tmp_path / "empty", tmp_path / "r.html")
    assert not Path(tmp_path / "r.html").exists()
