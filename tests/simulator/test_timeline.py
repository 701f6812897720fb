"""``specsim run --timeline``: a Chrome trace-event file (the JSON object form of Google's
"Trace Event Format" document, which Perfetto's UI and chrome://tracing open), checked
against that format's rules, against the run's own steps table, and for file safety."""
from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from simulator.cli import main as cli_main
from simulator.scenario import load_scenario, parse_compare
from simulator.simulate import simulate
from simulator.timeline import MARK, timeline_document

# The format's phases used here: X complete events (ts, dur), C counters (args: series ->
# number), M metadata (process_name / thread_name with args.name).
PHASES = {"X", "C", "M"}


def _run(policy: str, replicas: int = 2, requests: int = 30):
    sc = load_scenario(None, [f"workload.max_requests={requests}", f"replicas={replicas}"])
    return simulate(sc.with_policy(parse_compare(policy)[0]))


@pytest.fixture(scope="module")
def results():
    return [_run("none"), _run("chain")]


def _check_format(doc: dict) -> None:
    assert set(doc) >= {"traceEvents", "displayTimeUnit"} and doc["displayTimeUnit"] == "ms"
    for e in doc["traceEvents"]:
        assert e["ph"] in PHASES and isinstance(e["name"], str) and isinstance(e["pid"], int)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name")
            assert isinstance(e["args"]["name"], str)
        if e["ph"] == "X":
            assert isinstance(e["tid"], int) and e["ts"] >= 0 and e["dur"] >= 0
        if e["ph"] == "C":
            assert e["ts"] >= 0 and e["args"]
            assert all(isinstance(v, (int, float)) for v in e["args"].values())


def test_the_document_follows_the_trace_event_format(results):
    doc = timeline_document(results)
    _check_format(doc)
    json.dumps(doc, allow_nan=False)  # no NaN or infinity: strict JSON


def test_one_slice_per_step_matching_the_steps_table(results):
    doc = timeline_document(results)
    ev = doc["traceEvents"]
    for pid, r in enumerate(results):
        steps = [e for e in ev if e["ph"] == "X" and e.get("cat") == "step" and e["pid"] == pid]
        assert len(steps) == len(r.steps) == int(r.totals()["steps"])
        got = sorted((e["tid"], e["ts"], e["dur"], e["args"]["batch_size"]) for e in steps)
        want = sorted(zip(r.steps["replica"].astype(int), r.steps["start_s"] * 1e6,
                          r.steps["duration_s"] * 1e6, r.steps["batch_size"].astype(int)))
        assert got == [tuple(w) for w in want]
        # a replica runs one step at a time: its slices do not overlap
        by_tid = defaultdict(list)
        for e in steps:
            by_tid[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
        assert len(by_tid) == 2
        for spans in by_tid.values():
            spans.sort()
            assert all(b[0] >= a[1] - 1e-6 for a, b in zip(spans, spans[1:]))
        # each replica has its queue and KV counters, one sample per step
        counters = [e for e in ev if e["ph"] == "C" and e["pid"] == pid]
        assert len(counters) == 2 * len(steps)


def test_draft_and_verify_nest_inside_their_step(results):
    ev = timeline_document(results)["traceEvents"]
    chain = [e for e in ev if e["pid"] == 1 and e["ph"] == "X"]
    steps = {(e["tid"], e["ts"]): e for e in chain if e["cat"] == "step"}
    drafts = [e for e in chain if e["name"] == "draft"]
    verifies = [e for e in chain if e["name"] == "verify"]
    assert drafts and len(drafts) == len(verifies)
    for d, v in zip(drafts, verifies):
        parent = steps[(d["tid"], d["ts"])]
        assert np.isclose(d["dur"], parent["args"]["draft_ms"] * 1e3)
        assert np.isclose(v["ts"], d["ts"] + d["dur"])
        assert np.isclose(d["dur"] + v["dur"], parent["dur"])
    assert not [e for e in ev if e["pid"] == 0 and e["name"] in ("draft", "verify")]


def test_a_long_run_is_cut_at_the_stated_limit(results):
    doc = timeline_document(results, max_steps=100)
    steps = [e for e in doc["traceEvents"] if e.get("cat") == "step"]
    assert len(steps) == 100
    assert "earliest 100 steps" in doc["otherData"]["contents"]
    first = [e["ts"] for e in steps]
    assert max(first) <= float(results[0].steps["start_s"].sort_values().iloc[99]) * 1e6


def test_cli_writes_checks_and_never_overwrites_a_foreign_file(tmp_path, capsys):
    out, tl = tmp_path / "out", tmp_path / "t.json"
    args = ["run", "--no-progress", "--set", "workload.max_requests=12", "--out", str(out)]
    assert cli_main(args + ["--timeline", str(tl)]) == 0
    assert tl.read_bytes().startswith(MARK)
    _check_format(json.loads(tl.read_text()))
    assert cli_main(args + ["--timeline", str(tl)]) == 0      # its own file: replaced
    foreign = tmp_path / "mine.json"
    foreign.write_text("{}")
    assert cli_main(args + ["--timeline", str(foreign)]) == 2
    assert foreign.read_text() == "{}"
    err = capsys.readouterr().err
    assert "--timeline" in err and "not written by specsim" in err and "Traceback" not in err
    # inside the results folder it is written with the folder (and listed in its manifest)
    assert cli_main(args + ["--timeline", str(out / "timeline.json")]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert "timeline.json" in manifest["files"]
    assert cli_main(args + ["--timeline", str(out / "timeline.txt")]) == 2


def test_cli_refuses_a_run_that_keeps_no_steps_before_simulating(tmp_path, capsys):
    out = tmp_path / "out"
    rc = cli_main(["run", "--no-progress", "--set", "engine.steps_table=off", "--out",
                   str(out), "--timeline", str(tmp_path / "t.json")])
    assert rc == 2 and not out.exists() and not (tmp_path / "t.json").exists()
    assert "steps_table" in capsys.readouterr().err
