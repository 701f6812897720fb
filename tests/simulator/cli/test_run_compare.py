"""``run --compare``: an entry naming the scenario's own method without parameters runs the
scenario's policy with its options (issue 37: with --vllm-args configuring eagle3 with 3
tokens, `--compare none,eagle3` silently ran eagle3's default 5)."""
import argparse

import yaml

from simulator.cli.run import _policies
from simulator.scenario import load_scenario


def test_the_configured_method_keeps_the_files_options(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"policy": {"name": "chain", "num_speculative_tokens": 3}}))
    sc = load_scenario(str(path))
    args = argparse.Namespace(compare="none,chain,chain:num_speculative_tokens=6",
                              scenario=str(path))
    none, own, other = _policies(args, sc)
    assert none.name == "none"
    assert own is sc.policy and own.params["num_speculative_tokens"] == 3
    assert other.params["num_speculative_tokens"] == 6


def test_vllm_args_speculative_config_is_the_configured_method(tmp_path):
    args_file = tmp_path / "serve.yaml"
    args_file.write_text(yaml.safe_dump({"speculative_config": {
        "method": "ngram", "num_speculative_tokens": 3}}))
    sc = load_scenario(None, [], str(args_file))
    got = _policies(argparse.Namespace(compare=f"none,{sc.policy.name}", scenario=None), sc)
    assert got[1] is sc.policy and got[1].params["num_speculative_tokens"] == 3
