"""Token-id traces: the reader's round trip and every bad-input error, shaping keeps the ids,
the model-free policies run on a trace (prompt lookup's closed form on a copied span), and
the shipped sample regenerates byte for byte."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.scenario import load_scenario, scenario_from_dict
from simulator.simulate import simulate
from tests.helpers import REPO
from workloads import make_token_sample, token_trace
from workloads.config import workload_from_config
from workloads.token_trace import (
    MAX_TOKEN_ID,
    TOKEN_TRACE_MARK,
    read_token_trace,
    write_token_trace,
)
from workloads.traces import TRACE_READERS, detect_format, read_trace
from workloads.workload import Workload

SAMPLE = REPO / "workloads" / "data" / "token_sample.jsonl"
SCENARIO = REPO / "workloads" / "scenarios" / "token_trace.yaml"


def _lines(path, *records) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                            for r in records), encoding="utf-8")
    return str(path)


def _req(t=0.0, p=(1, 2, 3), o=(2, 3), **extra):
    return {"arrival_s": t, "prompt_ids": list(p), "output_ids": list(o), **extra}


def _workload(prompts, outputs, arrival=None, task=None, name="hand"):
    return Workload(name=name, arrival_s=np.arange(len(prompts), dtype=float)
                    if arrival is None else arrival,
                    prompt_tokens=[len(p) for p in prompts],
                    output_tokens=[len(o) for o in outputs], task=task,
                    prompt_ids=[np.asarray(p) for p in prompts],
                    output_ids=[np.asarray(o) for o in outputs])


# ---------------------------------------------------------------- reading and writing
def test_round_trip_keeps_every_field(tmp_path):
    wl = _workload([[5, 6, 7, 5], [9]], [[6, 7], [9, 9, 0]], arrival=[0.25, 1.5],
                   task=["code_edit", "summary"])
    path = tmp_path / "trace.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        write_token_trace(wl, handle, tokenizer="words", source="hand")
    assert path.read_bytes().startswith(TOKEN_TRACE_MARK)
    back = read_token_trace(path)
    assert back.name == "trace" and back.arrival_s.tolist() == [0.25, 1.5]
    assert back.prompt_tokens.tolist() == [4, 1] and back.output_tokens.tolist() == [2, 3]
    assert [ids.tolist() for ids in back.prompt_ids] == [[5, 6, 7, 5], [9]]
    assert [ids.tolist() for ids in back.output_ids] == [[6, 7], [9, 9, 0]]
    assert back.task.tolist() == ["code_edit", "summary"]
    # the same workload, the same bytes
    again = io.StringIO()
    write_token_trace(back, again, tokenizer="words", source="hand")
    assert again.getvalue() == path.read_text(encoding="utf-8")


def test_headerless_file_blank_lines_and_auto_detection(tmp_path):
    path = _lines(tmp_path / "plain.jsonl", _req(0), "", _req(2.0, p=[4], o=[4, 4]))
    assert "token_ids" in TRACE_READERS and detect_format(path) == "token_ids"
    wl = read_trace(path)  # format auto
    assert len(wl) == 2 and wl.task is None and wl.output_ids[1].tolist() == [4, 4]
    assert detect_format(SAMPLE) == "token_ids"  # the header line alone tells


def test_a_mooncake_line_is_still_mooncake(tmp_path):
    path = _lines(tmp_path / "m.jsonl", {"timestamp": 0, "input_length": 3,
                                        "output_length": 2})
    assert detect_format(path) == "mooncake"


BAD = [
    # (lines, line number named, field, words of the message)
    (["{not json"], 1, None, "not valid JSON"),
    (["[1, 2]"], 1, None, "not a JSON object"),
    ([_req(), {"arrival_s": 1, "prompt_ids": [1]}], 2, "output_ids", "missing"),
    ([_req(), {"prompt_ids": [1], "output_ids": [1]}], 2, "arrival_s", "missing"),
    ([_req(output_id=[1])], 1, "'output_id'", "unknown key"),
    ([_req(p=[])], 1, "prompt_ids", "empty"),
    ([_req(o=[])], 1, "output_ids", "empty"),
    ([_req(p=[1, 2.5])], 1, "prompt_ids", "2.5"),
    ([_req(o=[1, -3])], 1, "output_ids", "-3"),
    ([_req(o=[1, True])], 1, "output_ids", "True"),
    ([_req(p=["7"])], 1, "prompt_ids", "'7'"),
    ([_req(p=[MAX_TOKEN_ID + 1])], 1, "prompt_ids", "whole numbers"),
    ([_req(p=[2**70])], 1, "prompt_ids", "whole numbers"),
    ([{**_req(), "prompt_ids": "1 2 3"}], 1, "prompt_ids", "not a list"),
    ([_req(p=[[1, 2]])], 1, "prompt_ids", "whole numbers"),
    ([_req(t=-1)], 1, "arrival_s", "finite"),
    ([_req(t="0")], 1, "arrival_s", "finite"),
    ([_req(t=2e9)], 1, "arrival_s", "31.7 years"),
    ([_req(1.0), _req(2.0), _req(0.5)], 3, "arrival_s", "arrival order"),
    ([_req(task="")], 1, "task", "non-empty"),
    ([{"specsim": "mooncake"}, _req()], 1, "specsim", "header"),
]


@pytest.mark.parametrize("lines, number, field, words", BAD,
                         ids=[b[3] + f"-{i}" for i, b in enumerate(BAD)])
def test_every_bad_line_is_named_with_its_field_and_a_fix(tmp_path, lines, number, field,
                                                          words):
    path = _lines(tmp_path / "bad.jsonl", *lines)
    with pytest.raises(SpecsimError) as err:
        read_token_trace(path)
    assert err.value.message.startswith(f"line {number}:"), str(err.value)
    assert words in err.value.message and err.value.field == field
    assert err.value.source == path and err.value.fix


def test_whole_file_errors(tmp_path):
    for lines, words in (([], "no requests"), ([{"specsim": "token_ids"}], "no requests"),
                         ([_req(), _req(1, task="a")], "task given on some")):
        with pytest.raises(SpecsimError, match=words):
            read_token_trace(_lines(tmp_path / "f.jsonl", *lines))
    with pytest.raises(SpecsimError, match="file not found"):
        read_token_trace(tmp_path / "missing.jsonl")


def test_the_id_total_is_checked_while_reading(tmp_path, monkeypatch):
    # 5 ids a line and a limit of 12: the third line crosses it, before a fourth is read
    monkeypatch.setattr(token_trace, "MAX_TOKEN_IDS", 12)
    path = _lines(tmp_path / "big.jsonl", _req(0), _req(1), _req(2), "{broken")
    with pytest.raises(SpecsimError) as err:
        read_token_trace(path)
    assert err.value.message.startswith("line 3: the trace holds more than 12 token ids")


def test_the_request_count_is_checked_while_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(token_trace, "MAX_REQUESTS", 2)
    path = _lines(tmp_path / "many.jsonl", _req(0), _req(1), _req(2), "{broken")
    with pytest.raises(SpecsimError, match="line 3: more than 2 requests"):
        read_token_trace(path)


def test_shaping_keeps_the_ids():
    full = read_token_trace(SAMPLE)
    cfg = {"trace": str(SAMPLE), "format": "token_ids", "max_requests": 10,
           "rate_per_s": 2.0, "max_duration_s": 3.0}
    wl = workload_from_config(cfg, rng=np.random.default_rng(0), base_dir=REPO)
    n = len(wl)
    assert 1 <= n < 10 and wl.mean_rate_per_s == pytest.approx(2.0, rel=0.5)
    for ids, want in ((wl.prompt_ids, full.prompt_ids), (wl.output_ids, full.output_ids)):
        assert len(ids) == n and all((a == b).all() for a, b in zip(ids, want))
    assert wl.task.tolist() == full.task[:n].tolist()


# ---------------------------------------------------------------- the model-free policies
def _run(policy: dict, workload: dict):
    sc = scenario_from_dict({"name": "tt", "seed": 0, "hardware": "a100-40gb",
                             "target": "opt-13b", "policy": policy,
                             "batching": {"max_num_seqs": 16}, "workload": workload},
                            source="test", base_dir=REPO)
    return simulate(sc)


@pytest.mark.parametrize("policy", [{"name": "prompt_lookup"}, {"name": "suffix"},
                                    {"name": "lookahead"}], ids=lambda p: p["name"])
def test_each_model_free_policy_runs_on_the_sample(policy):
    res = _run(policy, {"trace": str(SAMPLE), "max_requests": 12})
    req = res.requests
    assert (req.status == "finished").all() and len(req) == 12
    assert (req.num_accepted_tokens <= req.num_draft_tokens).all()
    summary = res.summary()
    assert summary["num_accepted_tokens"] > 0 and summary["mean_acceptance_length"] >= 1.0
    # every output token is emitted exactly once: prefill's first, then accepted + 1 a step
    read = read_token_trace(SAMPLE)
    assert req.output_tokens.sum() == read.output_tokens[:12].sum()


def _copy_trace(tmp_path, output_len: int) -> str:
    # 40 distinct prompt ids; the output copies prompt[10:10 + output_len]
    prompt = list(range(100, 140))
    return _lines(tmp_path / f"copy{output_len}.jsonl",
                  _req(0.0, p=prompt, o=prompt[10:10 + output_len]))


@pytest.mark.parametrize("output_len, steps, drafted, accepted", [
    # prefill emits token 1; each decode step drafts k = 4 and the copy accepts them all,
    # except the drafts past the output's end; steps = ceil((L - 1) / (k + 1)).
    (21, 4, 16, 16),   # 1 + 4 * 5 = 21: every step ends on its bonus token
    (20, 4, 16, 16),   # the last step accepts the 4 it needs and emits no bonus
    (22, 5, 20, 17),   # the last step needs 1: 3 drafts run past the end
])
def test_prompt_lookup_accepts_a_copied_span_except_past_the_end(tmp_path, output_len, steps,
                                                                 drafted, accepted):
    res = _run({"name": "prompt_lookup", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
                "prompt_lookup_max": 4}, {"trace": _copy_trace(tmp_path, output_len)})
    req = res.requests.iloc[0]
    assert req.status == "finished" and req.output_tokens == output_len
    assert (int(req.num_draft_tokens), int(req.num_accepted_tokens)) == (drafted, accepted)
    assert int(res.steps.num_decode.sum()) == steps


# ---------------------------------------------------------------- the shipped sample
def test_the_sample_regenerates_byte_for_byte(tmp_path):
    shipped = SAMPLE.read_bytes()
    header = json.loads(shipped.split(b"\n", 1)[0])
    changed = [p for p, digest in header["sha256"].items()
               if make_token_sample.hashlib.sha256((REPO / p).read_bytes()).hexdigest()
               != digest]
    out = make_token_sample.write_token_sample(tmp_path / "sample.jsonl")
    if not changed:
        assert out.read_bytes() == shipped
        return
    # a source file was edited since the sample was made (the shipped sample stays valid
    # data, its header says from what): the generator must still be deterministic
    again = make_token_sample.write_token_sample(tmp_path / "again.jsonl")
    assert out.read_bytes() == again.read_bytes()
    assert set(read_token_trace(out).task) == {"code_edit", "summary"}


def test_the_sample_is_small_self_made_and_names_its_tokenizer():
    data = SAMPLE.read_bytes()
    assert len(data) < 1_000_000
    header = json.loads(data.split(b"\n", 1)[0])
    assert header["tokenizer"] == "words"
    assert set(header["sha256"]) == set(make_token_sample.SOURCES)
    assert all(not p.startswith(("/", "..")) for p in make_token_sample.SOURCES)
    wl = read_token_trace(SAMPLE)
    assert set(wl.task) == {"code_edit", "summary"}
    assert (wl.prompt_tokens + wl.output_tokens).max() <= make_token_sample.MAX_CONTEXT


def test_code_edit_outputs_rename_every_use():
    edits = make_token_sample.code_edits("x.py", "def f(a, b):\n    c = a + b\n    d = a * c\n"
                                                 "    e = [a for _ in range(b)]\n"
                                                 "    g = {'a': a}\n    return d, e, g\n")
    (where, prompt, output), = edits
    assert where == "x.py:1" and "`a` to `a_value`" in prompt and "`b` to `b_value`" in prompt
    assert output == ("```python\ndef f(a_value, b_value):\n    c = a_value + b_value\n"
                      "    d = a_value * c\n    e = [a_value for _ in range(b_value)]\n"
                      "    g = {'a': a_value}\n    return d, e, g\n```\n")


def test_the_shipped_scenario_lifts_acceptance_above_free_chat():
    res = simulate(load_scenario(SCENARIO, ["workload.max_requests=20"]))
    # free_chat gives 1.01 by construction; the code edits copy long runs of the prompt
    assert res.summary()["mean_acceptance_length"] > 3.0
