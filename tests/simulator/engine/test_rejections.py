"""Requests that can never be served are rejected with a reason; hopeless setups are errors."""
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.simulate import simulate
from tests.helpers import scenario, workload


def test_prompt_longer_than_context_is_rejected_with_reason():
    # OPT-13B's max_context is 2048
    wl = workload([0.0, 0.1, 0.2], [100, 2100, 1900], [10, 10, 200])
    res = simulate(scenario("none"), workload=wl)
    req = res.requests
    assert req["status"].tolist() == ["finished", "rejected", "rejected"]
    assert "max_context 2048" in req["reject_reason"].iloc[1]
    assert res.summary()["rejected"] == 2


def test_every_request_rejected_is_an_error():
    wl = workload([0.0], [5000], [10])
    with pytest.raises(SpecsimError, match="no request can be served"):
        simulate(scenario("none"), workload=wl)


def test_batch_that_cannot_hold_one_verification_is_an_error():
    sc = scenario("chain:num_speculative_tokens=8", batching={"max_num_batched_tokens": 4})
    with pytest.raises(SpecsimError, match="max_num_batched_tokens"):
        simulate(sc, workload=workload([0.0], [10], [10]))


def test_no_chunked_prefill_rejects_prompts_over_the_token_budget():
    sc = scenario("none", batching={"max_num_batched_tokens": 256,
                                    "enable_chunked_prefill": False})
    res = simulate(sc, workload=workload([0.0, 0.0], [100, 400], [20, 20]))
    assert res.requests["status"].tolist() == ["finished", "rejected"]
    assert "max_num_batched_tokens" in res.requests["reject_reason"].iloc[1]


def test_model_that_does_not_fit_is_an_error():
    with pytest.raises(SpecsimError, match="does not fit"):
        simulate(scenario("none", target="llama-2-70b"), workload=workload([0.0], [10], [10]))


def test_chain_without_draft_is_an_error():
    with pytest.raises(SpecsimError, match="draft"):
        simulate(scenario("chain", draft=None), workload=workload([0.0], [10], [10]))
