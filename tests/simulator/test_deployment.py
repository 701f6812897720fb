"""The order in which a scenario's faults are reported: a deployment that cannot fit at all,
then a draft on another vocabulary, both before the trace is drawn or a policy is built
(a hopeless scenario fails in milliseconds, whatever the size of its trace)."""
import pytest

import workloads.config
from simulator.inputs.errors import SpecsimError
from simulator.scenario import load_scenario
from simulator.simulate import simulate

BAD_ACCEPTANCE = ["acceptance={model: iid, alpha: 0.8, bogus: 1}"]


def _scenario(*sets):
    return load_scenario(None, ["workload.max_requests=20", *sets])


@pytest.fixture
def no_trace(monkeypatch):
    """Drawing the trace is an error: the fault must be found before it."""
    def refuse(*args, **kwargs):
        raise AssertionError("the trace was drawn before the deployment was checked")
    monkeypatch.setattr(workloads.config, "workload_from_config", refuse)


def test_a_model_that_cannot_fit_is_reported_before_anything_else(no_trace):
    # OPT-66B (about 123 GiB of fp16 weights) on one A10 (24 GiB), with a draft of another
    # vocabulary (Llama 2) and a policy needing a tree acceptance model it is not given
    sc = _scenario("target=opt-66b", "hardware=a10", "draft=llama-68m",
                   "policy={name: specinfer}")
    with pytest.raises(SpecsimError, match="does not fit"):
        simulate(sc)


def test_a_draft_on_another_vocabulary_comes_next(no_trace):
    sc = _scenario("draft=llama-68m")  # OPT-13B's 50,272 tokens against Llama's 32,000
    with pytest.raises(SpecsimError, match="one shared vocabulary"):
        simulate(sc)


def test_the_policy_and_the_trace_are_checked_once_the_deployment_is_sound():
    with pytest.raises(SpecsimError, match="bogus"):
        simulate(_scenario(*BAD_ACCEPTANCE))
