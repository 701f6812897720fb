"""The ``disaggregation:`` section (simulator/disagg_config.py): parsed into pools and a link,
and every bad value one clear error naming the field (exit 2 from the CLI, no traceback)."""
import copy
import subprocess

import pytest

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import load_yaml_file
from simulator.scenario import load_scenario, scenario_from_dict
from simulator.simulate import check_runnable
from tests.helpers import REPO, specsim_command

PATH = REPO / "workloads" / "scenarios" / "deepseek_disagg.yaml"


def test_the_shipped_section_parses_into_pools_and_a_link():
    d = load_scenario(PATH).disaggregation
    assert (d.prefill.replicas, d.decode.replicas) == (1, 1)
    assert d.prefill.parallelism.tensor_parallel == d.decode.parallelism.tensor_parallel == 8
    # 8 ConnectX-7 NICs at 400 Gb/s = 50 GB/s each: 400 GB/s; 5 us
    assert d.link.bandwidth_bytes_per_s == 400e9
    assert d.link.latency_s == pytest.approx(5e-6)
    assert (d.transfer, d.draft_kv) == ("layerwise", "transferred")


def _with(change):
    data = copy.deepcopy(load_yaml_file(PATH))
    change(data)
    return data


def _set(path, value):
    def change(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return change


@pytest.mark.parametrize("change, field", [
    (_set(("disaggregation", "prefill", "replicas"), 0), "disaggregation.prefill.replicas"),
    (_set(("disaggregation", "decode", "replicas"), -2), "disaggregation.decode.replicas"),
    (_set(("disaggregation", "link", "bandwidth_gb_per_s"), -1.0),
     "disaggregation.link.bandwidth_gb_per_s"),
    (_set(("disaggregation", "link", "bandwidth_gb_per_s"), 0),
     "disaggregation.link.bandwidth_gb_per_s"),
    (_set(("disaggregation", "link", "latency_us"), -5), "disaggregation.link.latency_us"),
    (_set(("disaggregation", "transfer"), "eager"), "disaggregation.transfer"),
    (_set(("disaggregation", "draft_kv"), "dropped"), "disaggregation.draft_kv"),
    (_set(("disaggregation", "decode", "parallelism", "tensor_parallel"), 0),
     "disaggregation.decode.parallelism.tensor_parallel"),
    (_set(("disaggregation", "prefill", "gpu"), "h100"), "disaggregation.prefill.gpu"),
    (lambda d: d["disaggregation"]["link"].pop("source"), "disaggregation.link.source"),
    (lambda d: d["disaggregation"].pop("decode"), "disaggregation.decode"),
])
def test_a_bad_section_is_one_error_naming_its_field(change, field):
    with pytest.raises(SpecsimError) as err:
        scenario_from_dict(_with(change), source="s.yaml")
    assert err.value.field == field


def test_a_pool_that_does_not_fit_is_named():
    """DeepSeek-V3's ~640 GiB of FP8 weights do not fit one 141 GB H200."""
    data = _with(_set(("disaggregation", "decode", "parallelism"), {"tensor_parallel": 1}))
    with pytest.raises(SpecsimError) as err:
        check_runnable(scenario_from_dict(data, source="s.yaml"))
    assert err.value.field == "disaggregation.decode.parallelism"


def test_the_cli_exits_2_without_a_traceback():
    out = subprocess.run(specsim_command() + [
        "run", str(PATH), "--set", "disaggregation.link.bandwidth_gb_per_s=-1"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=REPO)
    assert out.returncode == 2, out.stderr
    assert "disaggregation.link.bandwidth_gb_per_s" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("key, value", [("parallelism", {"tensor_parallel": 8}),
                                        ("replicas", 2)])
def test_top_level_parallelism_and_replicas_are_refused(key, value):
    """The pools set their own; a top-level value (a plan's or sweep's override included)
    would be silently ignored."""
    data = {**load_yaml_file(REPO / "workloads/scenarios/deepseek_disagg.yaml"), key: value}
    with pytest.raises(SpecsimError) as err:
        scenario_from_dict(data, source="t")
    assert err.value.field == key and "disaggregation.prefill" in err.value.fix
