"""compare-measured and a result's speculative-decoding fields (vLLM's bench: acceptance
length, rate, per-position rates): compared with the simulation's, and usable as the
acceptance model (issue 37: neither compared nor usable)."""
import json

import pytest

from simulator.cli import main as cli_main
from simulator.inputs.errors import SpecsimError
from simulator.scenario import load_scenario
from simulator.sim2real.bench_acceptance import measured_acceptance, predicted_spec_metrics
from simulator.simulate import simulate
from tests.simulator.test_vllm_metrics import DEFAULT, _write


def test_per_position_rates_are_unconditional():
    block = measured_acceptance(
        {"spec_decode_per_position_acceptance_rates": [0.8, 0.6, 0.3]}, 3)
    assert block["rates"] == pytest.approx([0.8, 0.75, 0.5])
    length = measured_acceptance({"spec_decode_acceptance_length": 2.5}, 4)
    assert length["rates"] == pytest.approx([1.0, 0.5, 0.0, 0.0])  # vLLM's resolution
    with pytest.raises(SpecsimError, match="no speculative-decoding acceptance"):
        measured_acceptance({"mean_ttft_ms": 10.0}, 4)
    with pytest.raises(SpecsimError, match="non-increasing"):
        measured_acceptance({"spec_decode_per_position_acceptance_rates": [0.5, 0.7]}, 2)


def test_the_measured_acceptance_drives_the_replay(tmp_path, capsys):
    """A result whose per-position rates say 0.9, 0.7, 0.5, 0.3 (mean length 3.4): replayed
    with --acceptance-from-result, the predicted acceptance length is 3.4 within 3%
    (sampling, drafts cut at a request's end), and it is compared as a metric."""
    rates = [0.9, 0.7, 0.5, 0.3]
    result = _write(tmp_path / "r.json", {
        "request_rate": "inf", "input_lens": [200] * 40, "output_lens": [120] * 40,
        "spec_decode_acceptance_length": 1 + sum(rates),
        "spec_decode_per_position_acceptance_rates": rates})
    assert cli_main(["compare-measured", result, "--scenario", DEFAULT, "--format", "json",
                     "--acceptance-from-result"]) == 0
    rows = {r["metric"]: r for r in json.loads(capsys.readouterr().out)}
    row = rows["spec_decode_acceptance_length"]
    assert row["measured"] == pytest.approx(3.4)
    assert row["predicted"] == pytest.approx(3.4, rel=0.03)


def test_no_acceptance_metrics_without_speculation():
    sc = load_scenario(None, ["workload.max_requests=5"])
    assert predicted_spec_metrics(simulate(sc.with_policy(
        type(sc.policy)("none"))).summary()) == {}
