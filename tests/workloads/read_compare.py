"""A trace reader's result against pandas' reading alone (the fast paths declined), for
tests/workloads/test_traces.py and test_csv_fast.py."""
from __future__ import annotations

import numpy as np

from simulator.inputs.errors import SpecsimError
from workloads import traces


def read_both(monkeypatch, reader, path):
    """(the reader's arrays or its error text, and the same with every fast path declined:
    csv_fast.py's reader, the Azure timestamps' and the counts' fast parses)."""
    def run():
        try:
            w = reader(path)
            return w.arrival_s, w.prompt_tokens, w.output_tokens
        except SpecsimError as exc:
            return str(exc)
    fast = run()
    with monkeypatch.context() as m:
        m.setattr(traces, "_usual", lambda *args, **kwargs: None)
        m.setattr(traces, "_azure_ns_fast", lambda raw: None)
        m.setattr(traces, "_digit_counts", lambda raw: None)
        general = run()
    return fast, general


def same(fast, general) -> None:
    """The same arrays (dtype and values), or the same error text."""
    if isinstance(general, str):
        assert fast == general
        return
    assert not isinstance(fast, str), fast
    for a, b in zip(fast, general):
        assert a.dtype == b.dtype and np.array_equal(a, b)
