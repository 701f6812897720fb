"""calibrate/frontend_gap.py on a client file and a span file written here: the gaps, the
split before/after the span and the running count are exact differences of the written
timestamps, and the idle line recovers the one it was written from."""
import json

import numpy as np
import pytest

import pandas as pd

from calibrate.frontend_gap import by_load, gap_table, idle_fit, load_slope
from simulator.cli.frontend_gap import main


def _span(rid: str, start: float, ttft: float, e2e: float, prompt: int) -> str:
    attrs = [{"key": "gen_ai.request.id", "value": {"stringValue": rid + "-0"}},
             {"key": "gen_ai.latency.time_to_first_token", "value": {"doubleValue": ttft}},
             {"key": "gen_ai.latency.e2e", "value": {"doubleValue": e2e}},
             {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": str(prompt)}}]
    span = {"name": "llm_request", "startTimeUnixNano": str(int(round(start * 1e9))),
            "attributes": attrs}
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})


def _client(rid: str, sent: float, first: float, last: float) -> dict:
    return {"response_id": rid, "info": {"timings": {
        "request_start": sent, "first_token_iteration": first, "last_token_iteration": last}}}


@pytest.fixture()
def files(tmp_path):
    """Four synchronous requests (prompt p: 3 ms before the span + 2 us per token, 1.5 ms
    after it), then two overlapping ones of a constant-rate benchmark."""
    spans, sync, rate = [], [], []
    for i, p in enumerate((1000, 2000, 3000, 4000)):
        sent = 100.0 + i
        start, ttft, e2e = sent + 3e-3 + 2e-6 * p, 0.2, 0.9
        spans.append(_span(f"cmpl-{i}", start, ttft, e2e, p))
        sync.append(_client(f"cmpl-{i}", sent, start + ttft + 1.5e-3, start + e2e + 1.5e-3))
    for i, sent in ((4, 200.0), (5, 200.1)):
        start = sent + 0.004
        spans.append(_span(f"cmpl-{i}", start, 0.1, 0.5, 500))
        rate.append(_client(f"cmpl-{i}", sent, start + 0.1 + 0.002, start + 0.5 + 0.003))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "traces.json").write_text("\n".join(spans) + "\n")
    bench = [{"config": {"strategy": {"type_": kind}}, "requests": {"successful": reqs}}
             for kind, reqs in (("synchronous", sync), ("constant", rate))]
    (tmp_path / "g.json").write_text(json.dumps({"benchmarks": bench}))
    return tmp_path / "g.json", tmp_path / "run"


def test_gaps_are_the_differences_of_the_timestamps(files):
    gaps = gap_table(*files)
    assert gaps["strategy"].tolist() == ["synchronous"] * 4 + ["constant"] * 2
    sync = gaps[gaps["strategy"] == "synchronous"]
    expect = 3.0 + 2e-3 * sync["prompt"].to_numpy() + 1.5
    assert np.allclose(sync["d_ttft_ms"], expect, atol=1e-5)
    assert np.allclose(sync["d_e2e_ms"], expect, atol=1e-5)
    assert np.allclose(sync["post_ms"], 1.5, atol=1e-5)
    assert gaps["running"].tolist() == [0, 0, 0, 0, 0, 1]  # the sixth arrives during the fifth
    last = gaps.iloc[-1]
    assert last["d_ttft_ms"] == pytest.approx(6.0, abs=1e-5)
    assert last["d_e2e_ms"] == pytest.approx(7.0, abs=1e-5)


def test_the_idle_line_is_recovered_and_the_bins_count_every_request(files):
    gaps = gap_table(*files)
    icpt, slope = idle_fit(gaps)
    assert icpt == pytest.approx(4.5, abs=1e-6)
    assert slope == pytest.approx(2e-3, abs=1e-9)
    table = by_load(gaps)
    assert table["requests"].sum() == len(gaps) == 6
    assert table["running"].tolist() == ["0-0", "1-4"]


def test_a_duplicated_id_is_left_out_and_a_response_counted_once(files):
    guidellm, run = files
    spans = (run / "traces.json").read_text()
    (run / "traces.json").write_text(spans + _span("cmpl-0", 300.0, 0.1, 0.2, 900) + "\n")
    data = json.loads(guidellm.read_text())
    data["benchmarks"][0]["requests"]["successful"].append(
        data["benchmarks"][0]["requests"]["successful"][1])
    guidellm.write_text(json.dumps(data))
    gaps = gap_table(guidellm, run)
    assert gaps["prompt"].tolist() == [2000, 3000, 4000, 500, 500]  # cmpl-0 ambiguous


def test_bad_inputs_exit_2_with_a_message(files, tmp_path, capsys):
    guidellm, run = files
    with pytest.raises(ValueError, match="0 synchronous requests"):
        idle_fit(gap_table(*files)[lambda g: g["strategy"] != "synchronous"])
    assert main([str(tmp_path / "nope.json"), str(run)]) == 2
    assert "nope.json" in capsys.readouterr().err
    guidellm.write_text(json.dumps({"benchmarks": [{"config": {}}]}))
    assert main([str(guidellm), str(run)]) == 2
    assert "missing key 'strategy'" in capsys.readouterr().err


def test_the_command_prints_the_report_of_the_pairs(files, capsys):
    assert main([str(p) for p in files]) == 0
    out = capsys.readouterr().out
    icpt, slope = idle_fit(gap_table(*files))
    runs = gap_table(*files)["run"].unique()
    assert out.startswith(f"{runs[0]}:") and "\nall runs:\n" in out
    assert f"gap = {icpt:.2f} ms + {slope * 1e3:.3f} ms per 1,000 prompt tokens\n" in out
    load = load_slope(gap_table(*files))
    assert out.rstrip().endswith(f"+ {load * 1e3:.1f} us per running request")
    assert main([str(files[0])]) == 2  # an unpaired argument: the usage, exit 2


def test_one_running_count_prints_the_idle_line_and_no_load_line(files, capsys):
    """A synchronous run alone (one request at a time: every running count 0) has no load
    slope to fit: the report ends with the idle line, exit 0."""
    guidellm, run = files
    data = json.loads(guidellm.read_text())
    data["benchmarks"] = data["benchmarks"][:1]
    guidellm.write_text(json.dumps(data))
    assert gap_table(guidellm, run)["running"].nunique() == 1
    assert main([str(guidellm), str(run)]) == 0
    out = capsys.readouterr().out
    icpt, slope = idle_fit(gap_table(guidellm, run))
    assert out.rstrip().endswith(f"gap = {icpt:.2f} ms + {slope * 1e3:.3f} ms per 1,000 "
                                 "prompt tokens")
    assert "running request" not in out


def test_the_load_slope_is_recovered_past_run_offsets_and_bursts():
    """Gaps written as a run's own offset + 2 us a prompt token + 0.05 ms a running request:
    the slope comes back exactly; a burst's requests (their tokenising queued) and a second
    run's other offset do not move it; one running count is refused."""
    rows = [{"run": run, "strategy": "constant", "prompt": p, "running": r,
             "d_ttft_ms": off + 2e-3 * p + 0.05 * r}
            for run, off in (("a", 4.0), ("b", 9.0)) for p in (500, 3000) for r in (0, 3, 20)]
    rows += [{"run": "a", "strategy": "throughput", "prompt": 3000, "running": 39,
              "d_ttft_ms": 40.0}]
    gaps = pd.DataFrame(rows)
    assert load_slope(gaps) == pytest.approx(0.05, abs=1e-9)
    with pytest.raises(ValueError, match="two counts"):
        load_slope(gaps[gaps["running"] == 3])
