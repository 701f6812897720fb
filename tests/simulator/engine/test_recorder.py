"""The recorder: order independence across replicas, the steps policies (closed-form samples,
exact totals), acceptance histograms, and what Results, the results folder and the report's
CDF make of it (its ITL samples: test_itl_samples.py)."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest

from reports import frames
from simulator.engine import steps_store
from simulator.engine.buffers import RowBlocks
from simulator.engine.recorder import MAX_POSITIONS, Recorder
from simulator.engine.sketch import QuantileSketch
from simulator.engine.step import FLOAT_FIELDS, STEP_FIELDS, StepRow
from simulator.engine.steps_store import (
    ALL_ROWS_MAX_REQUESTS,
    COUNTED,
    SUMMED,
    steps_policy,
    totals_of,
)
from simulator.results_dir import load_results_dir, write_results_tables
from simulator.simulate import simulate
from tests.helpers import ConstantCost, scenario, workload

COL = {name: i for i, name in enumerate(STEP_FIELDS)}
STEPS_PER_REPLICA = (500, 777, 1203)


def replica_streams(seed: int = 0):
    """Per replica: its steps (rows in column order, time order), its ITL samples and its
    acceptance (num_draft, accepted) arrays per step.  Start times sit on a 10 ms grid so
    that replicas often start a step at the same instant (the tie the sort breaks)."""
    rng = np.random.default_rng(seed)
    out = []
    for r, n in enumerate(STEPS_PER_REPLICA):
        rows = np.zeros((n, len(STEP_FIELDS)))
        dur = rng.integers(1, 4, n) * 0.01
        rows[:, COL["replica"]] = r
        rows[:, COL["start_s"]] = np.round(np.cumsum(dur) - dur, 2)
        rows[:, COL["duration_s"]] = dur
        rows[:, COL["draft_s"]] = dur * rng.uniform(0, 0.3, n)
        rows[:, COL["verify_s"]] = dur - rows[:, COL["draft_s"]]
        for name in ("batch_size", "num_decode", "decode_tokens", "emitted_tokens",
                     "kv_blocks_used", "queue_len", "draft_tokens", "accepted_tokens"):
            rows[:, COL[name]] = rng.integers(0, 64, n)
        rows[:, COL["kv_occupancy"]] = rng.uniform(0, 1, n)
        rows[:, COL["kv_read_tokens"]] = rng.uniform(0, 1e5, n)
        rows[:, COL["attn_pairs"]] = rng.lognormal(15, 2, n)
        itl = [rng.lognormal(-3.5, 0.5, rng.integers(0, 6)) for _ in range(n)]
        k = [rng.integers(0, 5, rng.integers(1, 4)) * (rng.random() < 0.6) for _ in range(n)]
        acc = [rng.integers(0, kk + 1) for kk in k]
        out.append((rows, itl, k, acc))
    return out


def feed_blocks(rec: Recorder, streams, rng: np.random.Generator) -> None:
    """Replica after replica, steps in blocks of random size (the vectorised engine)."""
    for rows, itl, k, acc in streams:
        i = 0
        while i < len(rows):
            j = min(len(rows), i + int(rng.integers(1, 40)))
            rec.record_steps(rows[i:j])
            rec.record_itl(np.concatenate(itl[i:j]))
            for s in range(i, j):
                rec.record_acceptance(k[s], acc[s])
            i = j


def feed_interleaved(rec: Recorder, streams, rng: np.random.Generator) -> None:
    """One step at a time, the replicas interleaved at random (the step-by-step engine)."""
    pos = [0] * len(streams)
    while True:
        live = [r for r, (rows, *_rest) in enumerate(streams) if pos[r] < len(rows)]
        if not live:
            return
        r = live[int(rng.integers(len(live)))]
        rows, itl, k, acc = streams[r]
        s = pos[r]
        rec.record_step(StepRow(*(int(v) if f not in FLOAT_FIELDS else float(v)
                                  for f, v in zip(STEP_FIELDS, rows[s]))))
        rec.record_itl(np.asarray(itl[s], np.float64))
        rec.record_acceptance(k[s], acc[s])
        pos[r] += 1


def recorded(rec: Recorder):
    itl, sketch = rec.itl_samples()
    return rec.steps_frame(), rec.step_totals(), rec.steps_info(), itl, sketch, \
        rec.histograms()


@pytest.mark.parametrize("policy,kw", [("all", {}), ("sampled", {"rows_cap": 300}),
                                       ("off", {}), ("auto", {"num_requests": 10**6})])
@pytest.mark.parametrize("itl_cap", [10**6, 1000])
def test_interleaving_of_replicas_changes_nothing(policy, kw, itl_cap):
    streams = replica_streams()
    one = Recorder(steps_table=policy, replicas=3, itl_exact_cap=itl_cap, **kw)
    other = Recorder(steps_table=policy, replicas=3, itl_exact_cap=itl_cap, **kw)
    feed_blocks(one, streams, np.random.default_rng(1))
    feed_interleaved(other, streams, np.random.default_rng(2))
    a, b = recorded(one), recorded(other)
    pd.testing.assert_frame_equal(a[0], b[0], check_exact=True)
    assert a[1] == b[1] and a[2] == b[2]
    np.testing.assert_array_equal(a[3], b[3])
    if itl_cap == 1000:   # fewer than the samples: sketched
        assert a[4] is not None and a[3].size == 0
        assert (a[4].offset, a[4].zero_count, a[4].count, a[4].total) == \
            (b[4].offset, b[4].zero_count, b[4].count, b[4].total)
        np.testing.assert_array_equal(a[4].counts, b[4].counts)
    else:
        assert a[4] is None and b[4] is None
    for x, y in zip(a[5], b[5]):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("block_rows", [1 << 15, 64, 1])  # one block; many; a row each
def test_table_is_sorted_by_start_then_replica_and_keeps_every_row(block_rows, monkeypatch):
    monkeypatch.setattr(steps_store, "_BLOCK_ROWS", block_rows)
    streams = replica_streams()
    rec = Recorder(steps_table="all", replicas=3)
    feed_interleaved(rec, streams, np.random.default_rng(3))
    df = rec.steps_frame()
    rows = np.concatenate([s[0] for s in streams])
    order = np.lexsort((rows[:, COL["replica"]], rows[:, COL["start_s"]]))
    np.testing.assert_array_equal(df.to_numpy(float), rows[order])
    assert (df.groupby("start_s")["replica"].apply(lambda s: s.is_monotonic_increasing)).all()
    assert df["batch_size"].dtype == np.int64 and df["duration_s"].dtype == np.float64
    assert rec.steps_info() == {"option": "all", "policy": "all", "rows_kept": rows.shape[0],
                                "rows_total": rows.shape[0]}


@pytest.mark.parametrize("block_rows", [1, 7, 1000])
def test_row_blocks_hold_the_rows_appended_in_order(block_rows):
    """Single rows and runs of rows (empty, shorter and longer than a block), in order."""
    rng = np.random.default_rng(11)
    store, every = RowBlocks(3, block_rows), []
    for _ in range(300):
        if rng.random() < 0.5:
            row = rng.random(3)
            store.append(row)
            every.append(row[None, :])
        else:
            rows = rng.random((int(rng.integers(0, 20)), 3))
            store.extend(rows)
            every.append(rows)
    expected = np.concatenate(every)
    assert store.size == len(expected)
    np.testing.assert_array_equal(np.concatenate(store.blocks()), expected)
    assert all(len(b) <= block_rows for b in store.blocks())
    # stored column by column: the table is read a column at a time (_sorted_columns)
    assert all(b[:, j].flags.c_contiguous for b in store.blocks() for j in range(3))


def test_sampled_rows_are_the_multiples_of_the_smallest_fitting_stride():
    streams = replica_streams()
    cap = 300                       # 100 rows per replica
    rec = Recorder(steps_table="sampled", replicas=3, rows_cap=cap)
    feed_blocks(rec, streams, np.random.default_rng(4))
    df = rec.steps_frame()
    strides = {}
    for r, (rows, *_rest) in enumerate(streams):
        n = len(rows)
        stride = 1
        while math.ceil(n / stride) > cap // 3:
            stride *= 2
        strides[str(r)] = stride
        kept = df[df["replica"] == r].to_numpy(float)
        np.testing.assert_array_equal(kept, rows[::stride])
    info = rec.steps_info()
    assert strides == {"0": 8, "1": 8, "2": 16} == info["stride_by_replica"]
    assert info["rows_kept"] == len(df) == 63 + 98 + 76
    assert info["rows_total"] == sum(STEPS_PER_REPLICA)


def test_totals_are_exact_over_every_step_whatever_the_policy():
    streams = replica_streams()
    rows = np.concatenate([s[0] for s in streams])
    want = {"steps": len(rows)}
    want.update({f: math.fsum(rows[:, COL[f]]) for f in SUMMED})
    want["duration_weighted_kv_occupancy"] = math.fsum(
        rows[:, COL["kv_occupancy"]] * rows[:, COL["duration_s"]])
    want.update({f: int(rows[:, COL[f]].astype(np.int64).sum()) for f in COUNTED})
    want["first_start_s"] = 0.0
    want["last_end_s"] = float((rows[:, COL["start_s"]] + rows[:, COL["duration_s"]]).max())
    for policy in ("all", "sampled", "off"):
        rec = Recorder(steps_table=policy, replicas=3, rows_cap=30)
        feed_interleaved(rec, streams, np.random.default_rng(5))
        assert rec.step_totals() == want, policy
    assert totals_of(rows) == want
    assert Recorder(steps_table="off").steps_frame().columns.tolist() == list(STEP_FIELDS)


@pytest.mark.parametrize("block_rows", [1 << 15, 16])  # the all-rows table in one block; many
@pytest.mark.parametrize("feed", [feed_blocks, feed_interleaved])
def test_auto_turns_sampled_past_its_row_cap_as_if_sampled_from_the_start(feed, block_rows,
                                                                          monkeypatch):
    """``auto`` keeps every row until it holds more than ``all_rows_cap``, then keeps what
    ``sampled`` would have kept from the start, whenever the switch happened."""
    monkeypatch.setattr(steps_store, "_BLOCK_ROWS", block_rows)
    streams = replica_streams()
    auto = Recorder(steps_table="auto", replicas=3, rows_cap=300, all_rows_cap=150)
    sampled = Recorder(steps_table="sampled", replicas=3, rows_cap=300)
    feed(auto, streams, np.random.default_rng(8))
    feed_blocks(sampled, streams, np.random.default_rng(9))
    a, b = recorded(auto), recorded(sampled)
    pd.testing.assert_frame_equal(a[0], b[0], check_exact=True)
    assert a[1] == b[1] and a[2]["policy"] == "sampled" and a[2]["option"] == "auto"
    assert {k: v for k, v in a[2].items() if k != "option"} == \
        {k: v for k, v in b[2].items() if k != "option"}
    kept = Recorder(steps_table="auto", replicas=3, all_rows_cap=10**6)  # under its cap
    feed(kept, streams, np.random.default_rng(8))
    assert recorded(kept)[2]["rows_kept"] == sum(STEPS_PER_REPLICA)


def test_auto_policy_threshold():
    assert steps_policy("auto", ALL_ROWS_MAX_REQUESTS) == "all"
    assert steps_policy("auto", ALL_ROWS_MAX_REQUESTS + 1) == "sampled"
    assert steps_policy("off", 10) == "off"
    with pytest.raises(ValueError):
        steps_policy("some", 10)


def test_acceptance_histograms_count_drafting_request_steps():
    rec = Recorder()
    rec.record_acceptance(np.zeros(4, np.int64), np.zeros(4, np.int64))  # nothing drafted
    rec.record_acceptance(np.array([3, 0, 3]), np.array([1, 0, 3]))
    rec.record_acceptance(np.array([300]), np.array([299]))  # clipped at MAX_POSITIONS
    accepted, drafted = rec.histograms()
    assert accepted.size == drafted.size == MAX_POSITIONS + 1
    assert {i: int(c) for i, c in enumerate(accepted) if c} == {1: 1, 3: 1, MAX_POSITIONS: 1}
    assert {i: int(c) for i, c in enumerate(drafted) if c} == {3: 2, MAX_POSITIONS: 1}


# ------------------------------------------------------------------ Results and its readers
@pytest.fixture(scope="module")
def two_replica_run():
    rng = np.random.default_rng(7)
    n = 40
    wl = workload(np.sort(rng.uniform(0, 5, n)), rng.integers(4, 40, n),
                  rng.integers(2, 30, n))
    return simulate(scenario("chain:num_speculative_tokens=3", replicas=2), workload=wl,
                    target_cost=ConstantCost(0.01), draft_cost=ConstantCost(0.002))


def rerecord(res, policy: str, rows_cap: int = 20) -> Recorder:
    rec = Recorder(steps_table=policy, replicas=2, rows_cap=rows_cap)
    for _, steps in res.steps.groupby("replica", sort=True):
        rec.record_steps(steps[list(STEP_FIELDS)].to_numpy(float))
    return rec


def assert_same_summary(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    pd.testing.assert_series_equal(pd.Series(a, dtype=object), pd.Series(b, dtype=object))


def test_summary_is_identical_whichever_steps_were_kept(two_replica_run):
    res = two_replica_run
    base = res.summary()
    assert base["mfu"] > 0 and base["draft_overhead_fraction"] > 0
    assert_same_summary(dataclasses.replace(res, step_totals=None).summary(), base)
    for policy in ("all", "sampled", "off"):
        rec = rerecord(res, policy)
        kept = dataclasses.replace(res, steps=rec.steps_frame(), step_totals=rec.step_totals())
        assert_same_summary(kept.summary(), base)
    assert len(rerecord(res, "sampled").steps_frame()) <= 20 < len(res.steps)
    assert res.info["steps_table"]["rows_total"] == len(res.steps)
    assert res.info["itl"] == {"samples": res.itl_s.size, "kept": "exact", "relative_error": 0.0}


def sketched(res):
    sk = QuantileSketch()
    sk.add(res.itl_s)
    return dataclasses.replace(res, itl_s=np.zeros(0), itl_sketch=sk)


def test_itl_summary_and_cdf_from_the_sketch(two_replica_run):
    res = two_replica_run
    exact, sk = res.summary(), sketched(res).summary()
    assert sk["mean_itl_s"] == exact["mean_itl_s"] == math.fsum(res.itl_s) / res.itl_s.size
    for p in (50, 90, 99):
        assert sk[f"p{p}_itl_s"] == pytest.approx(exact[f"p{p}_itl_s"], rel=0.005 * 1.000001)
    assert (exact["itl_relative_error"], sk["itl_relative_error"]) == (0.0, 0.005)
    want = frames.cdf_frame([res], "itl")
    got = frames.cdf_frame([sketched(res)], "itl")
    assert got["quantile"].tolist() == want["quantile"].tolist()
    assert (np.abs(got["value_ms"] - want["value_ms"]) <= 0.005 * want["value_ms"] + 1e-12).all()
    _lower, _upper, counts = sketched(res).itl_histogram()
    assert counts.sum() == res.itl_s.size == res.itl_count()


def test_results_folder_keeps_the_sketch_and_the_totals(two_replica_run, tmp_path):
    rec = rerecord(two_replica_run, "sampled")
    res = dataclasses.replace(sketched(two_replica_run), steps=rec.steps_frame(),
                              step_totals=rec.step_totals())
    summary = pd.DataFrame([res.summary()])
    manifest = write_results_tables(tmp_path, [res], summary, res.scenario, "csv")
    (tmp_path / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
    (loaded,), _, _ = load_results_dir(tmp_path)
    assert loaded.itl_s.size == 0 and loaded.itl_sketch.count == res.itl_sketch.count
    assert loaded.step_totals == res.step_totals
    assert_same_summary(loaded.summary(), res.summary())
    # a folder from before the sketch and the totals: ITL samples only, a full steps table
    old = dataclasses.replace(two_replica_run, step_totals=None)
    old_dir = tmp_path / "old"
    old_dir.mkdir()
    manifest = write_results_tables(old_dir, [old], summary, old.scenario, "csv")
    (old_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
    (loaded,), _, _ = load_results_dir(old_dir)
    assert loaded.itl_sketch is None and loaded.step_totals is None
    np.testing.assert_array_equal(loaded.itl_s, two_replica_run.itl_s)
    for key in ("mean_itl_s", "p99_itl_s", "mfu", "mbu", "mean_kv_occupancy"):
        assert loaded.summary()[key] == pytest.approx(two_replica_run.summary()[key],
                                                      rel=1e-12)


def test_acceptance_of_one_gamma_counts_as_the_general_record():
    # a chain's request-steps all drafted gamma: counted without a drafted-length array, the
    # histograms are those of record_acceptance, across the binning chunk (65,536) and with
    # lengths past the last position counter clipped as it clips them
    rng = np.random.default_rng(8)
    general, one = Recorder(), Recorder()
    for gamma in (4, 4, 9, 300):
        for size in (1, 40_000, 70_000, 3):
            accepted = rng.integers(0, gamma + 1, size)
            general.record_acceptance(np.full(size, gamma, np.int64), accepted)
            one.record_acceptance_of(gamma, accepted)
    got, want = one.histograms(), general.histograms()
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert want[1][MAX_POSITIONS] == 110_004  # gamma 300, clipped
    # mixed with the general record in one recorder: still the sum of both
    both = Recorder()
    both.record_acceptance(np.array([0, 2, 3]), np.array([0, 1, 3]))
    both.record_acceptance_of(2, np.array([2, 0]))
    accepted_hist, drafted_hist = both.histograms()
    assert accepted_hist[:4].tolist() == [1, 1, 1, 1] and accepted_hist.sum() == 4
    assert drafted_hist[:4].tolist() == [0, 0, 3, 1] and drafted_hist.sum() == 4
