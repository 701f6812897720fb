"""``acceptance.source``: validated, carried into Results.info, the run output and the report."""
import dataclasses
import html

import pytest

from simulator.acceptance import acceptance_from_config
from simulator.acceptance.provenance import describe_config
from simulator.cli.run import acceptance_line
from simulator.inputs.errors import SpecsimError
from simulator.scenario import PolicyConfig, load_scenario, scenario_from_dict
from simulator.simulate import simulate
from tests.helpers import REPO

SOURCE = 'Leviathan et al. 2023 Table 3 <T5-small> & "EnDe"'


def small(policy="chain", acceptance=None, **fields):
    """The built-in scenario, 4 requests, with a policy and an acceptance mapping."""
    sc = load_scenario(None, ["workload.max_requests=4"])
    sc = dataclasses.replace(sc, policy=PolicyConfig(policy, {}), **fields)
    if acceptance is not None:
        sc = dataclasses.replace(sc, acceptance=acceptance)
    return sc


def test_source_reaches_results_info():
    res = simulate(small(acceptance={"model": "iid", "alpha": 0.7, "source": SOURCE}))
    assert res.info["acceptance_source"] == SOURCE


def test_the_shipped_default_cites_its_table():
    res = simulate(load_scenario(None, ["workload.max_requests=4"]))
    assert "Leviathan" in res.info["acceptance_source"]
    assert "Table 3" in res.info["acceptance_source"]


def test_no_source_says_so_and_never_passes_for_a_measurement():
    res = simulate(small(acceptance={"model": "iid", "alpha": 0.7}))
    assert res.info["acceptance_source"].startswith("no source given")
    assert "not a measurement" in res.info["acceptance_source"]
    assert describe_config({"model": "token_level"}).startswith("no published measurement")


def test_model_free_and_no_speculation_are_explicit():
    path = REPO / "workloads" / "scenarios" / "prompt_lookup.yaml"
    sc = load_scenario(path, ["workload.tokens.num_requests=2"])
    assert "token ids" in simulate(sc).info["acceptance_source"]
    none = simulate(small("none"))
    assert none.info["acceptance_source"] == "none (no speculation)"


@pytest.mark.parametrize("bad", [3, ["a"], {"t": 1}, "", "   ", "x" * 1001])
def test_a_bad_source_names_acceptance_source(bad):
    data = {"name": "s", "acceptance": {"model": "iid", "alpha": 0.7, "source": bad}}
    with pytest.raises(SpecsimError) as err:
        scenario_from_dict(data, source="s.yaml")
    assert err.value.field == "source"
    assert "s.yaml: acceptance: source:" in str(err.value)
    assert err.value.fix


def test_source_is_valid_for_every_model_and_unknown_keys_still_fail():
    for cfg in ({"model": "positional", "rates": [0.8]}, {"model": "medusa"},
                {"model": "tree_topk", "coverage": [[0.5, 0.7]]}, {"model": "token_level"}):
        acceptance_from_config({**cfg, "source": "x"})
    with pytest.raises(SpecsimError) as err:
        acceptance_from_config({"model": "iid", "alpha": 0.7, "sorce": "typo"})
    assert err.value.field == "sorce" and "source" in err.value.fix


def test_run_output_is_one_line_and_groups_policies():
    a = simulate(small(acceptance={"model": "iid", "alpha": 0.7, "source": SOURCE}))
    b = simulate(small("none"))
    line = acceptance_line([b, a])
    assert line == "acceptance: " + SOURCE and "\n" not in line
    assert acceptance_line([b]) == "acceptance: none (no speculation)"


def test_report_shows_the_source_escaped():
    from reports.page import build_report_html
    res = simulate(small(acceptance={"model": "iid", "alpha": 0.7, "source": SOURCE}))
    page = build_report_html([res], versions={})
    assert html.escape(SOURCE, quote=True) in page
    assert SOURCE not in page                     # the raw '<T5-small>' never reaches the page
