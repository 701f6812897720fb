"""The ``workload:`` YAML section: every source, the shaping order, and error messages."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import parse_yaml_text
from workloads.arrivals import GammaArrivals
from workloads.config import synthetic_workload, workload_from_config
from workloads.lengths import LognormalLength, UniformLength
from workloads.traces import DEFAULT_TRACE_PATH, read_trace


def build(cfg, tmp_path: Path, seed: int = 0, source: str = "scenario.yaml"):
    if isinstance(cfg, str):
        cfg = parse_yaml_text(cfg, source="test")["workload"]
    return workload_from_config(cfg, rng=np.random.default_rng(seed), base_dir=tmp_path,
                                source=source)


def error(cfg, tmp_path: Path) -> SpecsimError:
    with pytest.raises(SpecsimError) as info:
        build(cfg, tmp_path)
    return info.value


def test_default_trace(tmp_path):
    w = build("workload: {trace: default}", tmp_path)
    shipped = read_trace(DEFAULT_TRACE_PATH)
    assert w.name == "default" and len(w) == 200
    assert np.array_equal(w.arrival_s, shipped.arrival_s)
    assert np.array_equal(w.output_tokens, shipped.output_tokens)


def test_trace_paths_resolve_against_base_dir_and_formats_are_detected(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "v.csv").write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,1\n1,20,2\n")
    (tmp_path / "sub" / "m.jsonl").write_text(
        '{"timestamp": 0, "input_length": 7, "output_length": 3, "hash_ids": [1]}\n')
    assert build({"trace": "sub/v.csv"}, tmp_path).prompt_tokens.tolist() == [10, 20]
    assert build({"trace": "sub/v.csv", "format": "vidur"}, tmp_path).name == "v"
    assert build({"trace": "sub/m.jsonl"}, tmp_path).output_tokens.tolist() == [3]
    assert build({"trace": str(tmp_path / "sub" / "v.csv")}, Path("/nowhere")).name == "v"
    with pytest.raises(SpecsimError, match="missing column"):
        build({"trace": "sub/v.csv", "format": "azure"}, tmp_path)


def test_shaping_applies_max_requests_then_rate_then_duration(tmp_path):
    times = [0, 1, 2, 3, 4, 100, 200]
    rows = "".join(f"{t},1,1\n" for t in times)
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n" + rows)
    w = build({"trace": "t.csv", "max_requests": 5, "rate_per_s": 2}, tmp_path)
    # The first 5 requests arrive at 1 req/s; rescaled to 2 req/s, the gaps halve.
    assert w.arrival_s.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]
    w = build({"trace": "t.csv", "max_requests": 5, "rate_per_s": 2, "max_duration_s": 1.0},
              tmp_path)
    assert w.arrival_s.tolist() == [0.0, 0.5]


SYNTHETIC = """
workload:
  synthetic:
    num_requests: 300
    arrival: {process: gamma, rate_per_s: 4, cv: 2.0}
    prompt: {dist: lognormal, mean_tokens: 600, median_tokens: 400, max_tokens: 1800}
    output: {dist: uniform, min_tokens: 10, max_tokens: 20}
"""


def test_synthetic_matches_the_python_api_and_is_deterministic(tmp_path):
    w = build(SYNTHETIC, tmp_path, seed=3)
    direct = synthetic_workload(300, GammaArrivals(4, 2.0), LognormalLength(600, 400, 1800),
                                UniformLength(10, 20), np.random.default_rng(3))
    for field in ("arrival_s", "prompt_tokens", "output_tokens"):
        assert np.array_equal(getattr(w, field), getattr(direct, field))
    assert np.array_equal(build(SYNTHETIC, tmp_path, seed=3).arrival_s, w.arrival_s)
    assert not np.array_equal(build(SYNTHETIC, tmp_path, seed=4).arrival_s, w.arrival_s)


def test_empirical_lengths_from_the_default_trace_and_from_values(tmp_path):
    cfg = {"synthetic": {"num_requests": 500, "arrival": {"process": "constant", "rate_per_s": 1},
                         "prompt": {"dist": "empirical", "trace": "default"},
                         "output": {"dist": "empirical", "values": [3, 5], "max_tokens": 4}}}
    w = build(cfg, tmp_path)
    shipped = read_trace(DEFAULT_TRACE_PATH)
    assert set(w.prompt_tokens.tolist()) <= set(shipped.prompt_tokens.tolist())
    assert set(w.output_tokens.tolist()) == {3, 4}
    cfg["synthetic"]["prompt"]["column"] = "output_tokens"
    assert set(build(cfg, tmp_path).prompt_tokens.tolist()) <= set(shipped.output_tokens.tolist())


def test_token_workloads_take_their_fields_and_nested_lengths(tmp_path):
    cfg = {"tokens": {"kind": "code_edit", "num_requests": 4, "renamed_identifiers": 0,
                      "code": {"dist": "fixed", "tokens": 50},
                      "arrival": {"process": "constant", "rate_per_s": 2}}}
    w = build(cfg, tmp_path)
    assert w.name == "code_edit" and w.output_tokens.tolist() == [50] * 4
    assert all(np.array_equal(p[-50:], o) for p, o in zip(w.prompt_ids, w.output_ids))
    assert w.arrival_s.tolist() == [0.0, 0.5, 1.0, 1.5]
    chat = build({"tokens": {"kind": "free_chat", "num_requests": 3,
                             "output": {"dist": "fixed", "tokens": 7},
                             "arrival": {"process": "poisson", "rate_per_s": 1}},
                  "max_requests": 2}, tmp_path)
    assert chat.output_tokens.tolist() == [7, 7] and len(chat.output_ids) == 2


@pytest.mark.parametrize("cfg, field, phrase", [
    ({"trace": "default", "rate": 5}, "workload.rate", "valid keys are: format, max_concurrency, max_duration_s"),
    ({}, "workload", "exactly one workload source, got 0"),
    ({"trace": "default", "synthetic": {}}, "workload", "got 2 (trace, synthetic)"),
    ({"tokens": {}, "format": "azure"}, "workload.format", "only applies to a trace"),
    ({"trace": "default", "format": "csv"}, "workload.format", "choose one of: auto, azure"),
    ({"trace": "default", "rate_per_s": -1}, "workload.rate_per_s", "greater than zero"),
    ({"trace": "default", "max_requests": 2.5}, "workload.max_requests", "whole number"),
    ({"synthetic": {"num_requests": 5}}, "workload.synthetic.arrival", "missing"),
    ({"synthetic": {"num_requests": 5, "arrival": {"process": "poisson", "rate_per_s": -2},
                    "prompt": {"dist": "fixed", "tokens": 1},
                    "output": {"dist": "fixed", "tokens": 1}}},
     "workload.synthetic.arrival.rate_per_s", "> 0"),
    ({"synthetic": {"num_requests": 5, "arrival": {"process": "poisson", "rate_per_s": 2},
                    "prompt": {"dist": "lognormal", "mean": 600, "median_tokens": 400},
                    "output": {"dist": "fixed", "tokens": 1}}},
     "workload.synthetic.prompt.mean", "max_tokens, mean_tokens, median_tokens"),
    ({"synthetic": {"num_requests": 5, "arrival": {"process": "poisson", "rate_per_s": 2},
                    "prompt": {"tokens": 3}, "output": {"dist": "fixed", "tokens": 1}}},
     "workload.synthetic.prompt.dist", "fixed, uniform, lognormal, empirical"),
    ({"synthetic": {"num_requests": 0, "arrival": {"process": "poisson", "rate_per_s": 2},
                    "prompt": {"dist": "fixed", "tokens": 3},
                    "output": {"dist": "fixed", "tokens": 1}}},
     "workload.synthetic.num_requests", "at least 1"),
    ({"synthetic": {"num_requests": 5, "arrival": {"process": "bursty", "rate_per_s": 2},
                    "prompt": {"dist": "fixed", "tokens": 3},
                    "output": {"dist": "fixed", "tokens": 1}}},
     "workload.synthetic.arrival.process", "poisson, gamma, constant"),
    ({"synthetic": {"num_requests": 5, "arrival": {"process": "poisson", "rate_per_s": 2},
                    "prompt": {"dist": "empirical", "trace": "default", "values": [1]},
                    "output": {"dist": "fixed", "tokens": 1}}},
     "workload.synthetic.prompt.dist", "exactly one of 'trace' or 'values'"),
    ({"tokens": {"kind": "code_edit", "num_requests": 2, "renamed_identifiers": -1,
                 "arrival": {"process": "constant", "rate_per_s": 1}}},
     "workload.tokens.renamed_identifiers", "whole number >= 0"),
    ({"tokens": {"kind": "code_edit", "num_requests": 2, "zipf_exponent": 1,
                 "arrival": {"process": "constant", "rate_per_s": 1}}},
     "workload.tokens.zipf_exponent", "renamed_identifiers"),
    ({"tokens": {"kind": "chat", "num_requests": 2}}, "workload.tokens.kind", "code_edit"),
])
def test_errors_name_the_yaml_field(tmp_path, cfg, field, phrase):
    exc = error(cfg, tmp_path)
    assert exc.field == field and exc.source == "scenario.yaml"
    assert phrase in str(exc)


def test_rate_on_a_single_request_is_an_error(tmp_path):
    (tmp_path / "one.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,1,1\n")
    exc = error({"trace": "one.csv", "rate_per_s": 3}, tmp_path)
    assert exc.field == "workload.rate_per_s" and "two or more" in str(exc)


def test_trace_errors_name_the_trace_file(tmp_path):
    exc = error({"trace": "missing.csv"}, tmp_path)
    assert exc.source == str(tmp_path / "missing.csv") and "not found" in str(exc)
