"""vLLM's synthetic rejection sampler as the acceptance model (simulator/vllm_synthetic.py):
its length-to-rates resolution against vLLM's own test table, the conversion to conditional
rates, a simulation's mean acceptance length against the closed form, and vLLM's rules on
the keys."""
import pytest

from simulator.inputs.errors import SpecsimError
from simulator.scenario import load_scenario, scenario_from_dict
from simulator.simulate import simulate
from simulator.vllm_args import apply_vllm_args
from simulator.vllm_synthetic import length_to_rates


# vLLM's tests/v1/spec_decode (test_acceptance_length_to_rates): the least-variance schedule
@pytest.mark.parametrize("length, k, rates", [(2.6, 3, [1.0, 0.6, 0.0]), (1.0, 3, [0, 0, 0]),
                                              (4.0, 3, [1, 1, 1]), (2.0, 3, [1.0, 0.0, 0.0]),
                                              (3.5, 4, [1.0, 1.0, 0.5, 0.0])])
def test_length_resolves_as_vllm_does(length, k, rates):
    assert length_to_rates(length, k) == pytest.approx(rates)


def _scenario(**spec):
    """The built-in scenario with a speculative_config instead of its policy and draft."""
    block = {"method": "draft_model", "model": "opt-125m", "num_speculative_tokens": 3,
             "rejection_sample_method": "synthetic", **spec}
    base = load_scenario(None)
    data = apply_vllm_args(dict(base.raw), {"speculative_config": block})
    data.pop("acceptance", None)
    return scenario_from_dict(data, source="t", base_dir=base.base_dir)


def test_unconditional_rates_become_conditional_ones():
    sc = _scenario(synthetic_acceptance_rates=[0.8, 0.6, 0.4])
    assert sc.acceptance["model"] == "positional"
    assert sc.acceptance["rates"] == pytest.approx([0.8, 0.75, 0.4 / 0.6])
    assert "synthetic_acceptance_rates" in sc.acceptance["source"]


def test_a_run_accepts_what_the_rates_say():
    """Mean acceptance length = 1 + the sum of the unconditional rates (2.8 here), within 3%
    (sampling, and drafts cut at a request's last tokens)."""
    res = simulate(_scenario(synthetic_acceptance_rates=[0.8, 0.6, 0.4]))
    assert res.summary()["mean_acceptance_length"] == pytest.approx(2.8, rel=0.03)
    res = simulate(_scenario(synthetic_acceptance_length=2.0))  # rates [1, 0, 0]: exactly 2
    assert res.summary()["mean_acceptance_length"] == pytest.approx(2.0, rel=0.02)


@pytest.mark.parametrize("spec, field", [
    ({"synthetic_acceptance_rates": [0.5, 0.6, 0.4]}, "synthetic_acceptance_rates"),
    ({"synthetic_acceptance_rates": [0.5, 0.4]}, "synthetic_acceptance_rates"),
    ({"synthetic_acceptance_length": 4.5}, "synthetic_acceptance_length"),
    ({"synthetic_acceptance_length": 2.0, "synthetic_acceptance_rates": [1, 0, 0]},
     "rejection_sample_method"),
    ({}, "rejection_sample_method"),
    ({"rejection_sample_method": "standard", "synthetic_acceptance_length": 2.0},
     "synthetic_acceptance_length"),
    ({"rejection_sample_method": "block"}, "rejection_sample_method"),
])
def test_vllms_rules_on_the_keys(spec, field):
    with pytest.raises(SpecsimError) as err:
        _scenario(**spec)
    assert field in (err.value.field or "")


def test_an_acceptance_block_beside_a_synthetic_sampler_is_an_error():
    base = load_scenario(None)  # the built-in scenario has an acceptance block
    data = apply_vllm_args(dict(base.raw), {"speculative_config": {
        "method": "draft_model", "model": "opt-125m", "num_speculative_tokens": 3,
        "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5}})
    with pytest.raises(SpecsimError) as err:
        scenario_from_dict(data, source="t", base_dir=base.base_dir)
    assert err.value.field == "acceptance"
