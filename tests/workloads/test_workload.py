"""The Workload type: validation, immutability, to_frame, truncate, rescale_rate, shift_to_zero."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.inputs.errors import SpecsimError
from workloads.config import workload_from_config
from workloads.workload import Workload


def make(arrival=(0.0, 1.0, 3.0, 6.0), prompt=(10, 20, 30, 40), output=(1, 2, 3, 4), **kw):
    return Workload(name="w", arrival_s=np.asarray(arrival), prompt_tokens=np.asarray(prompt),
                    output_tokens=np.asarray(output), **kw)


def test_arrays_are_typed_copied_and_read_only():
    arrival = np.array([0.0, 1.0])
    w = Workload("w", arrival, [3, 4], np.array([1.0, 2.0]))
    assert w.arrival_s.dtype == np.float64
    assert w.prompt_tokens.dtype == np.int64 and w.output_tokens.dtype == np.int64
    assert w.output_tokens.tolist() == [1, 2]
    arrival[0] = 5.0  # the caller's array is not shared
    assert w.arrival_s[0] == 0.0
    with pytest.raises(ValueError):
        w.arrival_s[0] = 1.0
    assert len(w) == 2


@pytest.mark.parametrize("kwargs, field, where", [
    (dict(arrival=(), prompt=(), output=()), "arrival_s", "no requests"),
    (dict(arrival=(0.0, 2.0, 1.0, 3.0)), "arrival_s", "request 2"),
    (dict(arrival=(0.0, -1.0, 1.0, 3.0)), "arrival_s", "request 1"),
    (dict(arrival=(0.0, 1.0, np.nan, 3.0)), "arrival_s", "request 2"),
    (dict(arrival=(0.0, 1.0, 2.0, np.inf)), "arrival_s", "request 3"),
    (dict(prompt=(10, 20, 0, 40)), "prompt_tokens", "request 2"),
    (dict(output=(1, 2, 3, -4)), "output_tokens", "request 3"),
    (dict(output=(1, 2.5, 3, 4)), "output_tokens", "request 1"),
    (dict(output=(1, 2, np.nan, 4)), "output_tokens", "request 2"),
    (dict(prompt=(True, True, True, True)), "prompt_tokens", "booleans"),
    (dict(prompt=(10, 20, 30)), "prompt_tokens", "3 entries for 4"),
    (dict(task=("a", "b", "c")), "task", "3 labels"),
    (dict(task=("a", "b", "", "d")), "task", "request 2"),
])
def test_bad_fields_name_field_and_first_bad_row(kwargs, field, where):
    with pytest.raises(SpecsimError) as info:
        make(**kwargs)
    assert info.value.field == field
    assert where in str(info.value)


def test_token_ids_must_match_counts():
    ids = tuple(np.arange(n) for n in (10, 20, 30, 40))
    make(prompt_ids=ids)
    bad = ids[:2] + (np.arange(29),) + ids[3:]
    with pytest.raises(SpecsimError, match="request 2 has 29 token ids") as info:
        make(prompt_ids=bad)
    assert info.value.field == "prompt_ids"
    with pytest.raises(SpecsimError, match="negative token id"):
        make(output_ids=(np.array([0]), np.array([0, -1]), np.arange(3), np.arange(4)))
    with pytest.raises(SpecsimError, match="integer"):
        make(output_ids=(np.array([0.0]), np.arange(2), np.arange(3), np.arange(4)))
    with pytest.raises(SpecsimError, match="3 sequences for 4"):
        make(output_ids=(np.arange(1), np.arange(2), np.arange(3)))


def test_to_frame_columns_and_values():
    frame = make(task=("a", "b", "a", "c")).to_frame()
    assert list(frame.columns) == ["request_id", "arrival_s", "prompt_tokens", "output_tokens",
                                   "task"]
    assert frame["request_id"].tolist() == [0, 1, 2, 3]
    assert frame["arrival_s"].tolist() == [0.0, 1.0, 3.0, 6.0]
    assert frame["task"].tolist() == ["a", "b", "a", "c"]
    assert "task" not in make().to_frame().columns


def test_truncate_by_count_and_half_open_duration_window():
    w = make(arrival=(1.0, 2.0, 3.0, 4.0), task=("a", "b", "c", "d"),
             output_ids=tuple(np.arange(n) for n in (1, 2, 3, 4)))
    assert w.truncate(max_requests=3).prompt_tokens.tolist() == [10, 20, 30]
    # The window is [t0, t0 + 2) = [1, 3): the request at exactly 3 s is out.
    cut = w.truncate(max_duration_s=2.0)
    assert cut.arrival_s.tolist() == [1.0, 2.0]
    assert cut.task.tolist() == ["a", "b"] and len(cut.output_ids) == 2
    assert w.truncate(max_requests=3, max_duration_s=10.0).arrival_s.tolist() == [1.0, 2.0, 3.0]
    assert w.truncate(max_requests=99) is w
    for bad in ({"max_requests": 0}, {"max_requests": 1.5}, {"max_duration_s": 0.0},
                {"max_duration_s": float("nan")}):
        with pytest.raises(SpecsimError):
            w.truncate(**bad)


def test_rescale_rate_hits_the_rate_and_keeps_the_gap_shape():
    w = make()  # gaps 1, 2, 3 over 6 s: (4 - 1) / 6 = 0.5 req/s
    assert w.mean_rate_per_s == 0.5
    fast = w.rescale_rate(2.0)
    assert fast.arrival_s.tolist() == [0.0, 0.25, 0.75, 1.5]
    assert fast.mean_rate_per_s == 2.0
    assert fast.prompt_tokens.tolist() == w.prompt_tokens.tolist()
    # An offset first arrival scales with the gaps: (3 - 1) / 3 s = 2/3 req/s -> factor 2/3.
    offset = make(arrival=(2.0, 3.0, 5.0), prompt=(1, 1, 1), output=(1, 1, 1)).rescale_rate(1.0)
    np.testing.assert_allclose(offset.arrival_s, [4 / 3, 2.0, 10 / 3], rtol=1e-15)


gap_lists = st.lists(st.floats(0.0, 100.0), min_size=1, max_size=40).filter(
    lambda g: sum(g) > 1e-3)


@settings(max_examples=60, deadline=None, derandomize=True)  # same examples every run
@given(gaps=gap_lists, start=st.floats(0.0, 50.0), rate=st.floats(1e-3, 1e3),
       window=st.floats(1e-3, 500.0))
def test_shaping_invariants(gaps, start, rate, window):
    arrival = start + np.concatenate(([0.0], np.cumsum(gaps)))
    n = len(arrival)
    w = make(arrival=arrival, prompt=np.ones(n), output=np.ones(n))
    fast = w.rescale_rate(rate)
    assert fast.mean_rate_per_s == pytest.approx(rate, rel=1e-9)
    # The shape is kept: every time is scaled by one factor.
    np.testing.assert_allclose(fast.arrival_s * w.arrival_s[-1], w.arrival_s * fast.arrival_s[-1],
                               rtol=1e-12, atol=1e-250)  # atol: subnormal products
    kept = w.truncate(max_duration_s=window).arrival_s
    assert kept.tolist() == [t for t in w.arrival_s.tolist() if t < w.arrival_s[0] + window]
    assert w.shift_to_zero().arrival_s[0] == 0.0


def test_rescale_rate_rejects_bad_rates_and_degenerate_workloads():
    with pytest.raises(SpecsimError) as info:
        make().rescale_rate(0.0)
    assert info.value.field == "rate_per_s"
    with pytest.raises(SpecsimError, match="two or more distinct"):
        make(arrival=(1.0,), prompt=(1,), output=(1,)).rescale_rate(1.0)
    with pytest.raises(SpecsimError, match="two or more distinct"):
        make(arrival=(1.0, 1.0), prompt=(1, 1), output=(1, 1)).rescale_rate(1.0)


def test_shift_to_zero():
    w = make(arrival=(2.0, 3.0, 5.0), prompt=(1, 1, 1), output=(1, 1, 1))
    assert w.shift_to_zero().arrival_s.tolist() == [0.0, 1.0, 3.0]
    zero = make()
    assert zero.shift_to_zero() is zero


def test_workload_from_config_builds_the_shipped_default_trace(tmp_path):
    w = workload_from_config({"trace": "default"}, rng=np.random.default_rng(0),
                             base_dir=tmp_path)
    assert w.name == "default" and len(w) == 200
