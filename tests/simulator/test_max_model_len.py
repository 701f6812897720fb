"""``batching.max_model_len`` (vLLM's --max-model-len): requests longer than it are rejected
with the reason, and vLLM's two start-up checks are errors naming the field: above the
model's context (vllm/config/model.py) and a KV cache that cannot hold one request of it
(vllm/v1/core/kv_cache_utils.py)."""
import numpy as np
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.scenario import scenario_from_dict
from simulator.simulate import simulate
from tests.helpers import scenario
from tests.simulator.engine.test_invariants import _utilisation_for_blocks
from workloads.workload import Workload


def _run(mml, hardware="a100-80gb"):
    wl = Workload(name="m", arrival_s=np.arange(4.0), prompt_tokens=[100, 900, 300, 1500],
                  output_tokens=[10, 200, 10, 10])
    sc = scenario("none", hardware=hardware, target="opt-1.3b", draft=None,
                  batching={"max_model_len": mml})
    return simulate(sc, workload=wl).requests


def test_requests_over_max_model_len_are_rejected_with_the_reason():
    req = _run(1000)  # 1,100 and 1,510 tokens are over it; 110 and 310 are not
    assert req["status"].tolist() == ["finished", "rejected", "finished", "rejected"]
    assert set(req.loc[req["status"] == "rejected", "reject_reason"]) == \
        {"prompt + output tokens exceed max_model_len 1000"}
    assert (_run(None)["status"] == "finished").all()  # opt-1.3b's own 2,048


def test_max_model_len_errors_name_the_field():
    with pytest.raises(SpecsimError, match="above opt-1.3b's max_context 2048") as err:
        _run(4096)
    assert err.value.field == "batching.max_model_len"
    with pytest.raises(SpecsimError) as err:  # the YAML boundary: a whole number >= 1
        scenario_from_dict({"batching": {"max_model_len": 0}}, source="s.yaml")
    assert err.value.field == "batching.max_model_len"


def test_a_kv_cache_that_cannot_hold_one_request_of_it_is_an_error():
    with pytest.raises(SpecsimError, match="fewer than one request of max_model_len") as err:
        util = _utilisation_for_blocks(60, 16, 2048, False, 128)  # about 960 tokens of KV
        simulate(scenario("none", hardware="a10", target="opt-1.3b", draft=None,
                          batching={"max_model_len": 2048, "gpu_memory_utilization": util}))
    assert err.value.field == "batching.max_model_len"
