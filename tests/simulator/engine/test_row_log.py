"""The lazy form's row log (simulator/engine/row_log.py) hands the recorder the rows
``fast_forward.stretch_rows`` builds and the one-at-a-time rows, in the replica's order, and
the ITL gaps of every decode; when it flushes does not change a run."""
import dataclasses
import types

import numpy as np
import pytest

from simulator.engine import row_log
from simulator.engine.fast_forward import stretch_rows
from simulator.engine.row_log import RowLog
from simulator.engine.step import STEP_FIELDS
from simulator.scenario import EngineOptions
from simulator.simulate import simulate
from tests.helpers import scenario
from tests.simulator.engine.test_fast_forward import assert_identical


class _Sink:
    def __init__(self) -> None:
        self.rows, self.itl = [], []

    def record_steps(self, rows) -> None:
        self.rows.append(np.array(rows, copy=True))

    def record_itl(self, values) -> None:
        self.itl.append(np.array(values, copy=True))

    def record_itl_counts(self, values, counts) -> None:  # the recorder's: each, counts times
        self.itl.append(np.repeat(values, counts))


def test_rows_and_gaps_in_order():
    sink, kv = _Sink(), 977
    log = RowLog(sink, 3, kv)
    replica = types.SimpleNamespace(index=3, limits=types.SimpleNamespace(kv_blocks=kv))
    single = tuple(float(i) + 0.5 for i in range(len(STEP_FIELDS)))
    # a stretch of 3 iterations of 5 decodes, a one-at-a-time row, a stretch of 2 of 4
    log.decodes(5, 1.0, [1.25, 1.75, 2.5], [0.25, 0.5, 0.75], [10, 12, 13], 100, 2)
    log.row(single)
    log.decodes(4, 2.5, [3.0, 3.125], [0.5, 0.125], [14, 9], 115, 2, last_queue=7)
    block = np.arange(2.0 * len(STEP_FIELDS)).reshape(2, -1)  # a vectorised stretch's rows
    log.block(block)
    log.row(single[::-1])
    assert not sink.rows  # nothing handed over before a flush
    log.flush()
    log.flush()  # an empty log hands nothing
    assert len(sink.rows) == 1 and len(sink.itl) == 1
    first = stretch_rows(replica, 5, np.array([0.25, 0.5, 0.75]),
                         np.array([1.0, 1.25, 1.75, 2.5]), np.array([10, 12, 13]),
                         100.0 + 5.0 * np.arange(3), 2)
    second = stretch_rows(replica, 4, np.array([0.5, 0.125]), np.array([2.5, 3.0, 3.125]),
                          np.array([14, 9]), 115.0 + 4.0 * np.arange(2), 2)
    second[-1, STEP_FIELDS.index("queue_len")] = 7
    expected = np.vstack([first, np.array([single]), second, block, np.array([single[::-1]])])
    assert np.array_equal(sink.rows[0], expected)
    # each decode's gaps: from the stretch's first start, then end to end
    assert sorted(sink.itl[0].tolist()) == sorted([0.25] * 5 + [0.5] * 5 + [0.75] * 5
                                                  + [0.5] * 4 + [0.125] * 4)


def test_a_chunk_row_is_the_plain_row_of_its_values():
    """``chunk_row`` takes a chunk step's varying values; the row it builds is the one
    ``_plain_row`` writes (one prefill, ``nd`` decodes, no drafts), in its place."""
    sink, kv = _Sink(), 977
    log = RowLog(sink, 2, kv)
    single = tuple(float(i) + 0.25 for i in range(len(STEP_FIELDS)))
    # start, duration, draft, verify, decodes, chunk, emitted, KV blocks, queue, read, pairs
    values = [(1.5, 0.125, 0.0, 0.125, 37, 475, 38, 613, 4, 51234.0, 987654.5),
              (1.625, 0.25, 0.0625, 0.1875, 1, 2, 1, 976, 0, 3.0, 4.5)]
    log.chunk_row(values[0])
    log.row(single)
    log.chunk_row(values[1])
    log.flush()
    expected = [(2, start, dur, draft, verify, nd + 1, 1, nd, chunk, nd, emitted, 0, 0, used,
                 used / kv, queue, read, pairs, 0)
                for start, dur, draft, verify, nd, chunk, emitted, used, queue, read, pairs
                in values]
    assert np.array_equal(sink.rows[0], np.array([expected[0], single, expected[1]]))


def test_a_full_log_flushes_itself():
    sink = _Sink()
    log = RowLog(sink, 0, 100)
    for i in range(row_log.FLUSH_ROWS // 2):
        log.decodes(1, float(i), [i + 1.0], [1.0], [1], i, 0)
        log.row((0.0,) * len(STEP_FIELDS))
    assert len(sink.rows) == 1 and len(sink.rows[0]) == row_log.FLUSH_ROWS
    assert log.size == 0


@pytest.mark.parametrize("steps_table", ["all", "sampled"])
def test_when_the_log_flushes_does_not_change_a_run(monkeypatch, steps_table):
    """Flushing every 5 rows gives the run of the usual flushes and of the step-by-step
    reference, with every row kept, or a sample of 64 rows and ITL sketched past 500."""
    from simulator import simulate as simulate_module
    if steps_table == "sampled":  # small caps: rows sampled, ITL samples sketched
        recorder = simulate_module.Recorder
        monkeypatch.setattr(simulate_module, "Recorder", lambda *args, **kwargs: recorder(
            *args, rows_cap=64, itl_exact_cap=500, **kwargs))
    sc = dataclasses.replace(scenario("none", replicas=2), engine=EngineOptions(
        fast_forward=True, steps_table=steps_table))
    sc = dataclasses.replace(sc, workload={**sc.workload, "max_requests": 200})
    usual = simulate(sc)
    reference = simulate(dataclasses.replace(sc, engine=dataclasses.replace(
        sc.engine, fast_forward=False)))
    monkeypatch.setattr(row_log, "FLUSH_ROWS", 5)
    often = simulate(sc)
    assert_identical(usual, often)
    assert_identical(usual, reference)
    assert usual.info["steps_table"]["rows_total"] == usual.info["engine"]["iterations"]
    if steps_table == "sampled":
        assert len(usual.steps) <= 64 < usual.info["steps_table"]["rows_total"]
        assert usual.itl_count() > 500
