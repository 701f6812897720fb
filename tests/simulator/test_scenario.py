"""Scenario loading: defaults, vLLM names, --set overrides, and bad input naming the field."""
import math

import pytest

from simulator.inputs.errors import SpecsimError
from simulator.scenario import apply_overrides, load_scenario, parse_compare, scenario_from_dict


def test_builtin_default_scenario():
    sc = load_scenario()
    assert (sc.hardware, sc.target, sc.draft) == ("a100-40gb", "opt-13b", "opt-125m")
    assert sc.policy.name == "chain" and sc.policy.params["num_speculative_tokens"] == 4
    assert sc.slo.ttft_s == pytest.approx(1.0) and sc.slo.tpot_s == pytest.approx(0.06)


def test_set_overrides_nested_fields_and_parses_yaml_values():
    sc = load_scenario(None, ["batching.max_num_seqs=8", "seed=7", "policy.num_speculative_tokens=2",
                              "slo.ttft_ms=250", "parallelism.offload_fraction=0.5"])
    assert sc.batching.max_num_seqs == 8 and sc.seed == 7
    assert sc.policy.params["num_speculative_tokens"] == 2
    assert sc.slo.ttft_s == pytest.approx(0.25)
    assert sc.parallelism.offload_fraction == 0.5


def test_compare_parses_several_policies_with_params():
    pols = parse_compare("none,chain:gamma=4,chain:num_speculative_tokens=2")
    assert [p.name for p in pols] == ["none", "chain", "chain"]
    assert pols[1].raw == {"gamma": 4} and pols[1].params == {"num_speculative_tokens": 4}
    assert pols[1].label == "chain:gamma=4"  # as written, the way results folders name it
    trees = parse_compare("specinfer:expansion=[2,2,1],verification=mss,chain")
    assert trees[0].raw == {"expansion": [2, 2, 1], "verification": "mss"}
    assert trees[0].params["expansion"] == (2, 2, 1)
    assert trees[1].name == "chain"
    with pytest.raises(SpecsimError, match="--compare"):
        parse_compare("")
    with pytest.raises(SpecsimError, match="policy.name"):
        parse_compare("nonesuch")


@pytest.mark.parametrize("data,field", [
    ({"nonsense": 1}, "nonsense"),
    ({"seed": -1}, "seed"),
    ({"seed": "abc"}, "seed"),
    ({"replicas": 0}, "replicas"),
    ({"batching": {"max_num_seqs": 0}}, "batching.max_num_seqs"),
    ({"batching": {"gpu_memory_utilization": 1.5}}, "batching.gpu_memory_utilization"),
    ({"batching": {"gpu_memory_utilization": math.nan}}, "batching.gpu_memory_utilization"),
    ({"batching": {"max_num_seq": 4}}, "batching.max_num_seq"),
    ({"slo": {"ttft_ms": -5}}, "slo.ttft_ms"),
    ({"policy": {"name": "chain", "num_speculative_tokens": -1}},
     "policy.num_speculative_tokens"),
    ({"policy": {"name": "chain", "gamma": 2, "num_speculative_tokens": 3}}, "policy."),
    ({"policy": {"name": "warp-drive"}}, "policy.name"),
    ({"router": "random"}, "router"),
    ({"parallelism": {"tensor_parallel": 1.5}}, "parallelism.tensor_parallel"),
    ({"overheads": "yes"}, "overheads"),
])
def test_bad_scenarios_name_the_field(data, field):
    with pytest.raises(SpecsimError) as exc:
        scenario_from_dict(data, source="bad.yaml")
    assert field in str(exc.value) and "bad.yaml" in str(exc.value)


def test_unknown_key_lists_valid_ones():
    with pytest.raises(SpecsimError) as exc:
        scenario_from_dict({"targte": "opt-13b"}, source="s.yaml")
    assert "target" in str(exc.value) and "valid keys" in str(exc.value)


def test_malformed_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SpecsimError, match="malformed YAML"):
        load_scenario(bad)
    with pytest.raises(SpecsimError, match="file not found"):
        load_scenario(tmp_path / "missing.yaml")
    with pytest.raises(SpecsimError, match="--set"):
        apply_overrides({}, ["no_equals_sign"])


def test_yaml_is_loaded_safely(tmp_path):
    evil = tmp_path / "evil.yaml"
    evil.write_text("name: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(SpecsimError, match="malformed YAML"):
        load_scenario(evil)


def test_hardware_inline_or_as_a_file_beside_the_scenario(tmp_path):
    import yaml

    from hardware.profile import PROFILE_DIR
    from simulator.scenario import resolve_hardware

    profile = yaml.safe_load((PROFILE_DIR / "a100-40gb.yaml").read_text())
    profile["name"] = "my-a100"
    profile["memory_gib"]["value"] = 80
    inline = scenario_from_dict({"hardware": profile}, source="s.yaml", base_dir=tmp_path)
    hw = resolve_hardware(inline)
    assert hw.name == "my-a100" and hw.memory_bytes == 80 * 2**30
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(profile))
    by_file = scenario_from_dict({"hardware": "mine.yaml"}, source="s.yaml", base_dir=tmp_path)
    assert resolve_hardware(by_file).memory_bytes == 80 * 2**30
    del profile["memory_bandwidth_gb_per_s"]
    with pytest.raises(SpecsimError, match="hardware.*memory_bandwidth_gb_per_s"):
        scenario_from_dict({"hardware": profile}, source="s.yaml")
