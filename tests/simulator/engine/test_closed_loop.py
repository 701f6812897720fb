"""The closed-loop client (simulator/engine/closed_loop.py), as ``vllm bench serve
--max-concurrency N`` runs: at most N requests in flight, each sent at its arrival or when a
slot frees, its arrival the time it was sent."""
import dataclasses

import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.simulate import simulate
from tests.helpers import scenario
from workloads.workload import Workload


def _run(cap, arrivals=None, n=30, policy="none", replicas=1):
    rng = np.random.default_rng(7)
    wl = Workload(name="closed", arrival_s=np.zeros(n) if arrivals is None else arrivals,
                  prompt_tokens=rng.integers(20, 400, n), output_tokens=rng.integers(2, 60, n),
                  max_concurrency=cap)
    sc = scenario(policy, hardware="a10", target="opt-1.3b",
                  draft="opt-125m" if policy != "none" else None, replicas=replicas)
    return simulate(sc, workload=wl).requests


def _in_flight(req) -> int:
    """The most requests between their arrival and their finish at any instant."""
    t = np.concatenate([req["arrival_s"], req["finish_s"]])
    step = np.concatenate([np.ones(len(req)), -np.ones(len(req))])
    order = np.lexsort((step, t))  # at equal times a finish frees its slot first
    return int(np.cumsum(step[order]).max())


def test_one_slot_is_one_request_at_a_time():
    """N = 1 with every request due at 0: each request is sent when the one before it
    finishes, so it never queues and runs alone."""
    req = _run(1)
    assert (req["arrival_s"].to_numpy()[1:] == req["finish_s"].to_numpy()[:-1]).all()
    assert (req["queueing_s"] == 0).all()
    assert _in_flight(req) == 1


@pytest.mark.parametrize("cap, policy, replicas", [(3, "none", 1), (4, "chain", 1),
                                                   (5, "none", 2)])
def test_never_more_than_the_cap_in_flight(cap, policy, replicas):
    req = _run(cap, policy=policy, replicas=replicas)
    assert _in_flight(req) == cap
    late = req["arrival_s"].to_numpy() > 0  # each sent late was sent as a slot freed
    assert np.isin(req["arrival_s"].to_numpy()[late], req["finish_s"].to_numpy()).all()


def test_a_cap_above_the_load_changes_nothing():
    """Paced arrivals that never have 50 in flight: the open-loop run, frame for frame."""
    arrivals = np.arange(30) * 2.0
    closed, open_ = _run(50, arrivals), _run(None, arrivals)
    assert closed.equals(open_)


def test_a_bad_cap_names_the_field():
    with pytest.raises(SpecsimError, match="max_concurrency"):
        Workload(name="x", arrival_s=[0.0], prompt_tokens=[5], output_tokens=[5],
                 max_concurrency=0)
    wl = Workload(name="x", arrival_s=[0.0, 1.0], prompt_tokens=[5, 6], output_tokens=[5, 7])
    assert dataclasses.replace(wl, max_concurrency=3).truncate(max_requests=1) \
        .max_concurrency == 3
