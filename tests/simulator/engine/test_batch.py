"""The packed running batch (simulator/engine/batch.py) against a plain list-of-rows model:
admissions past its capacity, in-place updates through the field views, compaction by a
mask, removing one request anywhere, popping the last request, and the table written back
(its packed rows) for every request that leaves; the lazy form's ``retire_one``."""
import numpy as np

from simulator.engine.batch import INT_FIELDS, RunningBatch
from simulator.engine.requests import RequestTable


def _table(n: int, rng) -> RequestTable:
    t = RequestTable(np.zeros(n), rng.integers(1, 500, n), rng.integers(1, 200, n))
    t.computed[:] = rng.integers(0, 100, n)
    t.generated[:] = rng.integers(0, 50, n)
    t.blocks[:] = rng.integers(0, 10, n)
    t.in_prefill[:] = rng.random(n) < 0.5
    t.last_emit_s[:] = rng.random(n)
    return t


def _row(t: RequestTable, rid: int) -> dict:
    return {**{f: int(getattr(t, f)[rid]) for f in INT_FIELDS},
            "in_prefill": bool(t.in_prefill[rid]), "last_emit": float(t.last_emit_s[rid])}


def _check(b: RunningBatch, model: list[tuple[int, dict]]) -> None:
    assert list(b.ids) == [rid for rid, _ in model] and len(b) == len(model)
    for f in INT_FIELDS:
        assert list(getattr(b, f)) == [row[f] for _, row in model], f
    assert list(b.in_prefill) == [row["in_prefill"] for _, row in model]
    assert list(b.last_emit) == [row["last_emit"] for _, row in model]
    assert b.decoding == sum(not row["in_prefill"] for _, row in model)


def test_the_packed_batch_matches_a_list_of_rows():
    rng = np.random.default_rng(11)
    t = _table(200, rng)
    b, model = RunningBatch(capacity=4), []
    order = rng.permutation(200)
    for step in range(60):
        for rid in order[2 * step:2 * step + 3].tolist():  # admissions, growing past 4
            if rid in [r for r, _ in model]:
                continue
            assert b.add(t, rid) == len(model)
            model.append((rid, _row(t, rid)))
        b.computed += 1  # in place, through the views
        b.blocks[: len(b) // 2] += 2
        for i, (_, row) in enumerate(model):
            row["computed"] += 1
            row["blocks"] += 2 if i < len(model) // 2 else 0
        _check(b, model)
        if step % 3 == 0 and model:  # a retirement: write back, then compact
            mask = rng.random(len(model)) < 0.7
            gone = np.flatnonzero(~mask)
            b.write_back(t, gone)
            for i in gone.tolist():
                rid, row = model[i]
                assert _row(t, rid) == row
            b.keep(mask)
            model = [m for m, k in zip(model, mask.tolist()) if k]
            _check(b, model)
        if step % 4 == 1 and model:  # one request finishing: written back, its column gone
            i = int(rng.integers(len(model)))
            b.write_back(t, i)
            b.remove(i)
            rid, row = model.pop(i)
            assert _row(t, rid) == row
            _check(b, model)
        if step % 5 == 4 and model:  # a preemption of the last admitted
            b.in_prefill[-1] = True  # as the replica marks it before popping
            model[-1][1]["in_prefill"] = True
            rid = b.pop_last(t)
            assert rid == model[-1][0] and _row(t, rid) == model[-1][1]
            model.pop()
            _check(b, model)
    assert b._ints.shape[1] > 4  # it grew


def test_retire_one_is_the_stores_write_back_and_remove_it_replaces():
    """``retire_one(t, p, grown, now)``: the lazy form's finished decode written back with
    ``grown`` more tokens, no blocks, last emitted at ``now``, and removed; the same table and
    batch as storing those values, ``write_back_one`` and ``remove``."""
    rng = np.random.default_rng(5)
    tables, batches = [_table(40, rng)], []
    tables.append(RequestTable(np.zeros(40), tables[0].prompt_len, tables[0].output_len))
    for name in ("packed", "in_prefill", "last_emit_s"):
        getattr(tables[1], name)[:] = getattr(tables[0], name)
    for t in tables:
        batches.append(RunningBatch(capacity=4))
        for rid in range(0, 40, 3):
            batches[-1].add(t, rid)
    for p, grown, now in ((4, 7, 1.5), (0, 1, 2.25), (9, 0, 3.0), (3, 12, 4.125)):
        b = batches[0]
        b.computed[p] += grown
        b.generated[p] += grown
        b.blocks[p] = 0
        b.last_emit[p] = now
        rid, computed = int(b.ids[p]), int(b.computed[p])
        b.write_back_one(tables[0], p)
        b.remove(p)
        assert batches[1].retire_one(tables[1], p, grown, now) == (rid, computed)
        assert np.array_equal(tables[0].packed, tables[1].packed)
        assert np.array_equal(tables[0].last_emit_s, tables[1].last_emit_s)
        assert np.array_equal(tables[0].in_prefill, tables[1].in_prefill)
        for f in ("ids", *INT_FIELDS, "in_prefill", "last_emit", "decoding"):
            assert np.array_equal(getattr(batches[0], f), getattr(batches[1], f)), f
