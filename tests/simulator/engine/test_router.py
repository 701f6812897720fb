"""Several replicas behind a router: round-robin against least-outstanding-tokens."""
import numpy as np

from simulator.simulate import simulate
from tests.helpers import scenario, workload


def test_round_robin_alternates_replicas():
    wl = workload(np.arange(6) * 0.01, [50] * 6, [10] * 6)
    res = simulate(scenario("none", replicas=2, router="round_robin"), workload=wl)
    assert res.requests["replica"].tolist() == [0, 1, 0, 1, 0, 1]


def test_least_outstanding_tokens_balances_a_skewed_stream():
    # long and short requests alternate: round-robin sends every long one to replica 0,
    # least-outstanding-tokens sends each request where the fewest tokens are still owed.
    n = 20
    prompt = np.where(np.arange(n) % 2 == 0, 1500, 50)
    output = np.where(np.arange(n) % 2 == 0, 400, 10)
    wl = workload(np.arange(n) * 0.05, prompt, output)
    rr = simulate(scenario("none", replicas=2, router="round_robin"), workload=wl)
    lot = simulate(scenario("none", replicas=2, router="least_outstanding_tokens"), workload=wl)
    long_on = lambda res: res.requests.loc[prompt == 1500, "replica"].value_counts()  # noqa: E731
    assert long_on(rr).to_dict() == {0: 10}
    assert set(long_on(lot).index) == {0, 1}
    span = lambda res: res.requests["finish_s"].max()  # noqa: E731
    assert span(lot) < span(rr)
